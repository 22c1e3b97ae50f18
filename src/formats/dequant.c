/* Scalar reference dequantisation (exact ggml semantics). Blocks are read byte-wise
 * (not through the block_* structs) because tensor data in a caller buffer may be
 * unaligned; the float operation order is fixed so every path can reproduce it. */
#include "formats/quant.h"

#include "formats/dequant.h"

#include <math.h>
#include <string.h>

static uint16_t rd_u16le(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static float rd_f16(const uint8_t *p) { return fp16_to_f32(rd_u16le(p)); }

/* Element types: a block is one element. */
void dequant_f32(const uint8_t *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

void dequant_f16(const uint8_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fp16_to_f32(rd_u16le(x + 2 * i));
}

void dequant_bf16(const uint8_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = bf16_to_f32(rd_u16le(x + 2 * i));
}

/* Q8_0: 32 int8 q with one f16 scale d: y = q*d. */
void dequant_q8_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 34, y += 32) {
        float d = rd_f16(x);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)x[2 + j] * d;
    }
}

/* Q4_0: 16 bytes of nibbles; low nibble of byte j is element j, high nibble j+16. y = (q-8)*d. */
void dequant_q4_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 18, y += 32) {
        float d = rd_f16(x);
        const uint8_t *qs = x + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: like Q4_0 but unsigned nibbles with a min: y = q*d + m. */
void dequant_q4_1(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 20, y += 32) {
        float d = rd_f16(x), m = rd_f16(x + 2);
        const uint8_t *qs = x + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* Q4_K sub-block j (0..7): 6-bit scale and min packed into 12 bytes. Sub-blocks 0..3 use
 * the low 6 bits of bytes j / j+4; 4..7 take 4 bits from byte j+4 and the top 2 bits of
 * bytes j-4 (scale) / j (min). */
void quant_q4_K_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
        *mn = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/* Q4_K: 256 elements = 4 chunks of 64; each chunk's 32 bytes give its first 32
 * elements (low nibbles, sub-block 2c) and next 32 (high nibbles, sub-block 2c+1).
 * y = (d*sc)*q - (dmin*mn). */
void dequant_q4_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 144) {
        float d = rd_f16(x), dmin = rd_f16(x + 2);
        const uint8_t *scales = x + 4, *q = x + 16;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, mn;
            quant_q4_K_scale_min(scales, 2 * c, &sc, &mn);
            float d1 = d * (float)sc, m1 = dmin * (float)mn;
            quant_q4_K_scale_min(scales, 2 * c + 1, &sc, &mn);
            float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q6_K: 6-bit q = 4 low bits (ql) + 2 high bits (qh), minus 32; int8 scale per 16
 * elements; y = (d*sc)*q. Two halves of 128; within a half, element l+32*k takes
 * ql[l] (k=0,2: low/high nibble) or ql[l+32] (k=1,3) and bits 2k..2k+1 of qh[l]. */
void dequant_q6_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 210) {
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        float d = rd_f16(x + 208);
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    if (n <= 0) return;
    const quant_traits *t = quant_traits_of(type);
    if (!t || !t->dequant) { /* unsupported: callers check quant_type_supported first */
        for (int64_t i = 0; i < n; i++) dst[i] = NAN;
        return;
    }
    t->dequant(src, dst, n / t->block_elems);
}
