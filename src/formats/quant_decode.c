/* Integer form (quant_iblock) of the block types that are read through it: Q5_0, Q5_1,
 * Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS, MXFP4. Each function is the ggml block layout of its
 * type, read byte-wise (little-endian; the data may be unaligned), and nothing else. */
#include "formats/quant_decode.h"

#include <string.h>

#include "formats/quant.h"

static uint16_t rd_u16le(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static float rd_f16(const uint8_t *p) { return fp16_to_f32(rd_u16le(p)); }

/* The non-linear 4-bit codebook of IQ4_NL / IQ4_XS. */
const int8_t quant_codes_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* FP4 (E2M1) values doubled, so they are integers; the block scale carries the 1/2. */
const int8_t quant_codes_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/* Q2_K's q (0..3) and Q3_K's (-4..3), as codes for the matmul's nibble form. */
const int8_t quant_codes_q2_K[16] = {0, 1, 2, 3};
const int8_t quant_codes_q3_K[16] = {-4, -3, -2, -1, 0, 1, 2, 3};

/* One scale for each 32 elements (j = 0..n32-1), no minimum. */
static void scales32(quant_iblock *o, int n32, const int *sc) {
    for (int j = 0; j < n32; j++) o->s[2 * j] = o->s[2 * j + 1] = (int8_t)sc[j];
}

static void start(quant_iblock *o, float d, float dmin) {
    memset(o, 0, sizeof *o);
    o->d = d;
    o->dmin = dmin;
}

/* 32-element nibble block: low nibble of byte j is element j, high nibble element j+16. */
static int nibble32(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 0x0F : qs[e - 16] >> 4; }

/* Q5_0 (22 B): fp16 d, 32 high bits qh, 16 bytes of nibbles; y = d * (q5 - 16). */
void quant_decode_q5_0(const uint8_t *x, quant_iblock *o) {
    start(o, rd_f16(x), 0.0f);
    const uint32_t qh = rd_u32le(x + 2);
    for (int e = 0; e < 32; e++) o->q[e] = (int8_t)((nibble32(x + 6, e) | (int)((qh >> e) & 1) << 4) - 16);
    scales32(o, 1, (const int[]){1});
}

/* Q5_1 (24 B): fp16 d, fp16 m, qh, nibbles; y = d * q5 + m (so dmin = -m, m[] = 1). */
void quant_decode_q5_1(const uint8_t *x, quant_iblock *o) {
    start(o, rd_f16(x), -rd_f16(x + 2));
    const uint32_t qh = rd_u32le(x + 4);
    for (int e = 0; e < 32; e++) o->q[e] = (int8_t)(nibble32(x + 8, e) | (int)((qh >> e) & 1) << 4);
    scales32(o, 1, (const int[]){1});
    o->m[0] = o->m[1] = 1;
}

/* IQ4_NL (18 B): fp16 d, nibbles indexing the codebook; y = d * value. */
void quant_decode_iq4_nl(const uint8_t *x, quant_iblock *o) {
    start(o, rd_f16(x), 0.0f);
    for (int e = 0; e < 32; e++) o->q[e] = quant_codes_iq4[nibble32(x + 2, e)];
    scales32(o, 1, (const int[]){1});
}

/* MXFP4 (17 B): E8M0 exponent byte e, nibbles of FP4 values; y = fp4 * 2^(e-127),
 * here (2 * fp4) * 2^(e-128). 2^(e-128) is a float for every e (subnormal for e < 2). */
void quant_decode_mxfp4(const uint8_t *x, quant_iblock *o) {
    const int e8 = x[0];
    const uint32_t bits = e8 < 2 ? (uint32_t)0x00200000 << e8 : (uint32_t)(e8 - 1) << 23;
    float d;
    memcpy(&d, &bits, 4);
    start(o, d, 0.0f);
    for (int e = 0; e < 32; e++) o->q[e] = quant_codes_mxfp4[nibble32(x + 1, e)];
    scales32(o, 1, (const int[]){1});
}

/* Q2_K (84 B): scales[16] (low nibble scale, high nibble min, per 16 elements), qs[64]
 * (2 bits), fp16 d, fp16 dmin. Element e = 128h + 32k + l is bits 2k..2k+1 of qs[32h + l]. */
void quant_decode_q2_K(const uint8_t *x, quant_iblock *o) {
    start(o, rd_f16(x + 80), rd_f16(x + 82));
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        o->q[e] = (int8_t)((x[16 + 32 * h + l] >> (2 * k)) & 3);
    }
    for (int i = 0; i < 16; i++) {
        o->s[i] = (int8_t)(x[i] & 0x0F);
        o->m[i] = (int8_t)(x[i] >> 4);
    }
}

/* Q3_K (110 B): hmask[32], qs[64] (2 low bits, placed as in Q2_K), scales[12] (16 six-bit
 * scales, offset 32), fp16 d. q = low - 4 unless the element's hmask bit is set; element
 * e's hmask bit is bit e/32 of hmask[e%32]. Scale i: low 4 bits from nibble i/8 of byte
 * i%8, high 2 bits from bits 2(i/4).. of byte 8 + i%4. */
void quant_decode_q3_K(const uint8_t *x, quant_iblock *o) {
    start(o, rd_f16(x + 108), 0.0f);
    const uint8_t *hm = x, *qs = x + 32, *sc = x + 96;
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        const int low = (qs[32 * h + l] >> (2 * k)) & 3;
        o->q[e] = (int8_t)(low - (((hm[l] >> (e / 32)) & 1) ? 0 : 4));
    }
    for (int i = 0; i < 16; i++) {
        const int lo = (sc[i % 8] >> (4 * (i / 8))) & 0x0F, hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
        o->s[i] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* Q5_K (176 B): fp16 d, fp16 dmin, scales[12] (as Q4_K), qh[32], qs[128]. Element
 * e = 64c + 32h + l: nibble h of qs[32c + l], fifth bit = bit e/32 of qh[l]. */
void quant_decode_q5_K(const uint8_t *x, quant_iblock *o) {
    start(o, rd_f16(x), rd_f16(x + 2));
    const uint8_t *qh = x + 16, *qs = x + 48;
    for (int e = 0; e < 256; e++) {
        const int c = e / 64, h = (e / 32) & 1, l = e % 32;
        o->q[e] = (int8_t)(((qs[32 * c + l] >> (4 * h)) & 0x0F) | ((qh[l] >> (e / 32)) & 1) << 4);
    }
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        quant_q4_K_scale_min(x + 4, j, &sc, &mn);
        o->s[2 * j] = o->s[2 * j + 1] = (int8_t)sc;
        o->m[2 * j] = o->m[2 * j + 1] = (int8_t)mn;
    }
}

/* IQ4_XS (136 B): fp16 d, u16 scales_h (2 high bits per sub-block), scales_l[4] (a nibble
 * per sub-block), qs[128]: sub-block j (32 elements) is an IQ4_NL nibble block at qs + 16j
 * with the six-bit scale (l | h << 4) - 32. */
void quant_decode_iq4_xs(const uint8_t *x, quant_iblock *o) {
    start(o, rd_f16(x), 0.0f);
    const uint16_t sh = rd_u16le(x + 2);
    int sc[8];
    for (int j = 0; j < 8; j++) {
        const int lo = (x[4 + j / 2] >> (4 * (j & 1))) & 0x0F, hi = (sh >> (2 * j)) & 3;
        sc[j] = (lo | hi << 4) - 32;
        for (int e = 0; e < 32; e++) o->q[32 * j + e] = quant_codes_iq4[nibble32(x + 8 + 16 * j, e)];
    }
    scales32(o, 8, sc);
}

/* Reference dequantisation through the integer form: gguf's expression of every one of
 * these types is (d * s) * q - (dmin * m) in float32, or a special case of it that this
 * gives bit for bit (s = 1 multiplies exactly; with dmin = m = 0 the subtracted +0 keeps
 * every value, -0 included; Q5_1's + m is - (-m)). */
static void dequant_decoded(const uint8_t *x, float *y, int64_t nb, quant_decode_fn decode, int elems,
                            int bytes) {
    quant_iblock B;
    for (int64_t b = 0; b < nb; b++, x += bytes, y += elems) {
        decode(x, &B);
        for (int e = 0; e < elems; e++)
            y[e] = (B.d * (float)B.s[e / 16]) * (float)B.q[e] - B.dmin * (float)B.m[e / 16];
    }
}

#define DEQUANT(t, elems, bytes) \
    void dequant_##t(const uint8_t *x, float *y, int64_t nb) { dequant_decoded(x, y, nb, quant_decode_##t, elems, bytes); }
DEQUANT(q5_0, 32, 22)
DEQUANT(q5_1, 32, 24)
DEQUANT(iq4_nl, 32, 18)
DEQUANT(mxfp4, 32, 17)
DEQUANT(q2_K, 256, 84)
DEQUANT(q3_K, 256, 110)
DEQUANT(q5_K, 256, 176)
DEQUANT(iq4_xs, 256, 136)
