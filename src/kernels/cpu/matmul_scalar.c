/* Scalar matmul: the reference operation sequence of every kernel.
 *
 * Invariance argument (all ISAs). y[i][j] depends only on x row i and W row j:
 *  - activations are quantised row by row (mm_quantize_row_*), the same bits on
 *    every ISA: max is exact, d and 1/d are computed by one shared scalar function,
 *    and x*id is rounded half-to-even both by the magic-number add below and by
 *    cvtps2dq under the default rounding mode;
 *  - per activation block the weight x activation dot product is an integer sum,
 *    exact whatever the order or grouping (no overflow: |sum| < 2^24 by the bounds
 *    noted per type), so scalar, AVX2 (maddubs/madd) and AVX-512 (VNNI) agree;
 *  - the float part is the per-block factor f and `acc = fmaf(dx, f, acc)` in block
 *    order, written out below; the SIMD kernels do the same operations per lane
 *    (lane c = column c, fused where fmaf is written: one rounding, as vfmadd), never
 *    a horizontal float sum, for any number of rows in a block;
 *  - float weight types: one fused multiply-add chain over k per output, in k order
 *    (lane c = column c in the SIMD kernels, as for the quantised types).
 * The build uses -ffp-contract=off and no fast-math, so the compiler keeps these
 * operations as written (fmaf is IEEE fused multiply-add on every ISA, hardware or
 * libm, so it rounds once exactly like vfmadd). Hence all three ISAs give the same bits, for every m. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul_internal.h"

int mm_block_scale(float amax, int bad, float *d, float *id) {
    *id = 0.0f;
    if (bad) { *d = NAN; return 0; }
    if (amax == 0.0f) { *d = 0.0f; return 0; }
    float inv = 127.0f / amax;
    if (!(inv <= FLT_MAX)) { *d = 0.0f; return 0; } /* tiny subnormal block: treat as 0 */
    *d = amax / 127.0f;
    *id = inv;
    return 1;
}

/* Round half to even for |v| < 2^22 under the default rounding mode: adding 1.5*2^23
 * leaves no fraction bits, so the FPU rounds exactly like cvtps2dq does. */
static inline int round_even(float v) {
    const float magic = 12582912.0f;
    float r = (v + magic) - magic;
    return (int)r;
}

void mm_quantize_row_scalar(const float *x, int64_t k, int8_t *q, float *d, int16_t *s) {
    for (int64_t b = 0; b < k / MM_QK; b++) {
        const float *xb = x + b * MM_QK;
        int8_t *qb = q + b * MM_QK;
        float amax = 0.0f;
        int bad = 0;
        for (int i = 0; i < MM_QK; i++) {
            float a = fabsf(xb[i]);
            if (!(a <= FLT_MAX)) bad = 1;
            amax = a > amax ? a : amax;
        }
        float id;
        if (!mm_block_scale(amax, bad, &d[b], &id)) {
            memset(qb, 0, MM_QK);
            s[2 * b] = s[2 * b + 1] = 0;
            continue;
        }
        int s0 = 0, s1 = 0;
        for (int i = 0; i < MM_QK; i++) {
            int v = round_even(xb[i] * id);
            qb[i] = (int8_t)v;
            if (i < 16) s0 += v; else s1 += v;
        }
        s[2 * b] = (int16_t)s0;
        s[2 * b + 1] = (int16_t)s1;
    }
}

/* Six-bit quant (0..63, offset 32 not applied) of element e of a Q6_K block. */
static inline int q6_k_quant(const block_q6_K *B, int e) {
    int n = e / 128, r = e % 128, qtr = r / 32, l = r % 32;
    int ql = B->ql[64 * n + l + 32 * (qtr & 1)];
    ql = (qtr >> 1) ? ql >> 4 : ql & 0xF;
    int qh = (B->qh[32 * n + l] >> (2 * qtr)) & 3;
    return ql | (qh << 4);
}

/* acc after the activation blocks of weight unit u, each `acc = fmaf(dx, f, acc)`
 * with the block factor f below. These expressions ARE the contract the SIMD kernels
 * follow (same operations, same order, fused where fmaf is written). */
float mm_unit_q4_0(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, float acc) {
    const block_q4_0 *B = (const block_q4_0 *)wrow + u;
    const int8_t *x = xq + u * 32;
    int dp = 0;
    for (int i = 0; i < 16; i++) dp += (B->qs[i] & 0xF) * x[i] + (B->qs[i] >> 4) * x[i + 16];
    int isum = dp - 8 * (xs[2 * u] + xs[2 * u + 1]);
    float f = fp16_to_f32(B->d) * (float)isum;
    return fmaf(xd[u], f, acc);
}

float mm_unit_q4_1(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, float acc) {
    const block_q4_1 *B = (const block_q4_1 *)wrow + u;
    const int8_t *x = xq + u * 32;
    int dp = 0;
    for (int i = 0; i < 16; i++) dp += (B->qs[i] & 0xF) * x[i] + (B->qs[i] >> 4) * x[i + 16];
    int sx = xs[2 * u] + xs[2 * u + 1];
    float f = fmaf(fp16_to_f32(B->m), (float)sx, fp16_to_f32(B->d) * (float)dp);
    return fmaf(xd[u], f, acc);
}

float mm_unit_q8_0(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, float acc) {
    (void)xs;
    const block_q8_0 *B = (const block_q8_0 *)wrow + u;
    const int8_t *x = xq + u * 32;
    int isum = 0; /* |isum| <= 32*128*127 */
    for (int i = 0; i < 32; i++) isum += B->qs[i] * x[i];
    float f = fp16_to_f32(B->d) * (float)isum;
    return fmaf(xd[u], f, acc);
}

float mm_unit_q4_K(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, float acc) {
    const block_q4_K *B = (const block_q4_K *)wrow + u;
    const float d = fp16_to_f32(B->d), dmin = fp16_to_f32(B->dmin);
    for (int j = 0; j < 8; j++) {
        const int64_t b = u * 8 + j;
        const int8_t *x = xq + b * 32;
        const uint8_t *qs = B->qs + 32 * (j / 2);
        const int shift = 4 * (j & 1);
        int dp = 0; /* <= 32*15*127 */
        for (int i = 0; i < 32; i++) dp += ((qs[i] >> shift) & 0xF) * x[i];
        uint8_t sc, mn;
        quant_q4_K_scale_min(B->scales, j, &sc, &mn);
        int isum = sc * dp;                         /* < 63*60960 < 2^22 */
        int imin = mn * (xs[2 * b] + xs[2 * b + 1]); /* < 63*4064 */
        /* d*isum - dmin*imin with the second product fused (vfnmadd). */
        float f = fmaf(-dmin, (float)imin, d * (float)isum);
        acc = fmaf(xd[b], f, acc);
    }
    return acc;
}

/* Q5_K: Q4_K's sequence with five-bit quants. It is also the decoded types' factor
 * (unit_decoded) for Q5_K's integer form, whose two halves share one scale and min:
 * s*dlo + s*dhi = s*(dlo + dhi) exactly, so both give the same bits. */
float mm_unit_q5_K(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, float acc) {
    const block_q5_K *B = (const block_q5_K *)wrow + u;
    const float d = fp16_to_f32(B->d), dmin = fp16_to_f32(B->dmin);
    for (int j = 0; j < 8; j++) {
        const int64_t b = u * 8 + j;
        const int8_t *x = xq + b * 32;
        const uint8_t *qs = B->qs + 32 * (j / 2);
        const int shift = 4 * (j & 1);
        int dp = 0; /* <= 32*31*127 */
        for (int i = 0; i < 32; i++) dp += (((qs[i] >> shift) & 0xF) | ((B->qh[i] >> j) & 1) << 4) * x[i];
        uint8_t sc, mn;
        quant_q4_K_scale_min(B->scales, j, &sc, &mn);
        int isum = sc * dp;                          /* < 63*126016 < 2^23 */
        int imin = mn * (xs[2 * b] + xs[2 * b + 1]);
        float f = fmaf(-dmin, (float)imin, d * (float)isum);
        acc = fmaf(xd[b], f, acc);
    }
    return acc;
}

float mm_unit_q6_K(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, float acc) {
    const block_q6_K *B = (const block_q6_K *)wrow + u;
    const float d = fp16_to_f32(B->d);
    for (int a = 0; a < 8; a++) {
        const int64_t b = u * 8 + a;
        const int8_t *x = xq + b * 32;
        int dlo = 0, dhi = 0;
        for (int i = 0; i < 16; i++) {
            dlo += q6_k_quant(B, 32 * a + i) * x[i];
            dhi += q6_k_quant(B, 32 * a + 16 + i) * x[16 + i];
        }
        /* |each half| <= 16*32*127 = 65024, times |scale| <= 128: |isum| < 2^24 */
        int isum = B->scales[2 * a] * (dlo - 32 * xs[2 * b]) +
                   B->scales[2 * a + 1] * (dhi - 32 * xs[2 * b + 1]);
        float f = d * (float)isum;
        acc = fmaf(xd[b], f, acc);
    }
    return acc;
}

/* Decoded types (matmul_internal.h, MM_REC_DEC): the unit's integer form, then per
 * activation block the factor f written there. |dlo|, |dhi| <= 16*127*127 and |s| <= 63,
 * so |isum| < 2^25 (its float conversion rounds the same way on every ISA). */
static inline __attribute__((always_inline)) float unit_decoded(const void *wrow, int64_t u, const int8_t *xq,
                                                                const float *xd, const int16_t *xs, float acc,
                                                                uint32_t type) {
    const quant_traits *qt = &quant_type_table[type];
    quant_iblock B;
    qt->decode((const uint8_t *)wrow + (size_t)u * qt->block_bytes, &B);
    const int n32 = qt->block_elems / 32;
    for (int j = 0; j < n32; j++) {
        const int64_t b = u * n32 + j;
        const int8_t *x = xq + b * 32;
        int dlo = 0, dhi = 0;
        for (int i = 0; i < 16; i++) {
            dlo += B.q[32 * j + i] * x[i];
            dhi += B.q[32 * j + 16 + i] * x[16 + i];
        }
        int isum = B.s[2 * j] * dlo + B.s[2 * j + 1] * dhi;
        int imin = B.m[2 * j] * xs[2 * b] + B.m[2 * j + 1] * xs[2 * b + 1];
        float f = fmaf(-B.dmin, (float)imin, B.d * (float)isum);
        acc = fmaf(xd[b], f, acc);
    }
    return acc;
}

#define UNIT_DECODED(t, T, ...)                                                                            \
    float mm_unit_##t(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, \
                      float acc) {                                                                        \
        return unit_decoded(wrow, u, xq, xd, xs, acc, INVAR_T_##T);                                       \
    }
MM_DECODED(UNIT_DECODED)

/* Groups [g0, g1) of a quantised weight: each output is its unit sequence in K order.
 * Always inlined with a constant `unit`, so each type's loop calls its unit directly. */
static inline __attribute__((always_inline)) void quant_groups(const mm_args *a, int64_t g0, int64_t g1,
                                                               mm_unit_fn unit) {
    const cpu_weight *w = a->w;
    const int64_t j0 = g0 * MM_NC, j1 = g1 * MM_NC < w->n ? g1 * MM_NC : w->n;
    const int64_t nu = w->k / a->kt->q->block_elems;
    const int64_t nb = a->xq.nb, k = w->k;
    for (int64_t j = j0; j < j1; j++) {
        const void *wrow = (const uint8_t *)w->data + j * w->row_bytes;
        for (int64_t i = 0; i < a->m; i++) {
            float acc = 0.0f;
            for (int64_t u = 0; u < nu; u++)
                acc = unit(wrow, u, a->xq.q + i * k, a->xq.d + i * nb, a->xq.s + i * 2 * nb, acc);
            a->y[i * a->ldy + j] = acc;
        }
    }
}

#define QUANT_GROUPS(t) \
    void mm_scalar_##t(const mm_args *a, int64_t g0, int64_t g1) { quant_groups(a, g0, g1, mm_unit_##t); }
QUANT_GROUPS(q8_0)
QUANT_GROUPS(q4_0)
QUANT_GROUPS(q4_1)
QUANT_GROUPS(q4_K)
QUANT_GROUPS(q5_K)
QUANT_GROUPS(q6_K)

/* Decoded types: unit_decoded's operations, reading the integer form from the packed
 * records (decoded once at load) rather than decoding every block again for each row.
 * Byte form (NIB = 0, MM_REC_DEC): the packed bytes are q + 128; nibble form (NIB = 1,
 * MM_REC_NIB): codes of q; plane form (NIB = 2, MM_REC_PL, Q3_K only): the code's two low
 * bits and its high bit in two planes. The scales are int8, the block scales floats. */
static inline __attribute__((always_inline)) int packed_q(const uint8_t *rec, int c, int e, const int NIB,
                                                          const int8_t *codes) {
    if (!NIB) return rec[64 * (e / 4) + 4 * c + e % 4] - 128;
    if (NIB == MM_FORM_PL) { /* Q3_K's planes: the code n = low + 4 * high */
        const int j = e / 32, t = (e % 32) / 4, i = e % 4;
        const int low = (rec[64 * (2 * j + t / 4) + 4 * c + i] >> (2 * (t % 4))) & 3;
        const int high = (rec[MM_PL_H(256) + 64 * j + 4 * c + i] >> t) & 1;
        return codes[low | high << 2];
    }
    const int j = e / 32, i = e % 32;
    const uint8_t byte = rec[64 * (4 * j + (i % 16) / 4) + 4 * c + i % 4];
    return codes[i < 16 ? byte & 0x0F : byte >> 4];
}

static inline __attribute__((always_inline)) void decoded_groups(const mm_args *a, int64_t g0, int64_t g1,
                                                                 const int UE, const int NIB, const int ONE,
                                                                 const int NOMIN) {
    const cpu_weight *w = a->w;
    const int8_t *codes = a->kt->q->codes;
    const mm_dec_layout L = mm_dec_layout_of(NIB, UE, ONE, NOMIN);
    const size_t rb = (size_t)L.rec;
    const int stored_min = !(NIB && NOMIN); /* else dmin and m are 0 */
    const int64_t nu = w->k / UE, nb = a->xq.nb, k = w->k;
    const int n32 = UE / 32;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *grp = (const uint8_t *)w->packed + (size_t)(g * nu) * rb;
        for (int c = 0; c < MM_NC && g * MM_NC + c < w->n; c++)
            for (int64_t i = 0; i < a->m; i++) {
                const int8_t *xq = a->xq.q + i * k;
                const float *xd = a->xq.d + i * nb;
                const int16_t *xs = a->xq.s + i * 2 * nb;
                float acc = 0.0f;
                for (int64_t u = 0; u < nu; u++) {
                    const uint8_t *rec = grp + (size_t)u * rb;
                    float d, dmin = 0.0f;
                    memcpy(&d, rec + L.d + 4 * c, 4);
                    if (stored_min) memcpy(&dmin, rec + L.dmin + 4 * c, 4);
                    for (int j = 0; j < n32; j++) {
                        const int64_t b = u * n32 + j;
                        const int8_t *x = xq + b * 32;
                        int dlo = 0, dhi = 0;
                        for (int e = 0; e < 16; e++) {
                            dlo += packed_q(rec, c, 32 * j + e, NIB, codes) * x[e];
                            dhi += packed_q(rec, c, 32 * j + 16 + e, NIB, codes) * x[16 + e];
                        }
                        const int s0 = mm_dec_soff(&L, j, 0, c), s1 = mm_dec_soff(&L, j, 1, c), mo = L.m - L.s;
                        int isum = (int8_t)rec[s0] * dlo + (int8_t)rec[s1] * dhi;
                        int imin = stored_min ? (int8_t)rec[mo + s0] * xs[2 * b] + (int8_t)rec[mo + s1] * xs[2 * b + 1] : 0;
                        float f = fmaf(-dmin, (float)imin, d * (float)isum);
                        acc = fmaf(xd[b], f, acc);
                    }
                }
                a->y[i * a->ldy + g * MM_NC + c] = acc;
            }
    }
}

#define DECODED_GROUPS(t, T, UE, NIB, ONE, NOMIN) \
    void mm_scalar_##t(const mm_args *a, int64_t g0, int64_t g1) { decoded_groups(a, g0, g1, UE, NIB, ONE, NOMIN); }
MM_DECODED(DECODED_GROUPS)

/* Float weights: element kk of a row, per type. */
static inline float weight_f32(const void *wrow, int64_t kk) { return ((const float *)wrow)[kk]; }
static inline float weight_f16(const void *wrow, int64_t kk) { return fp16_to_f32(((const uint16_t *)wrow)[kk]); }
static inline float weight_bf16(const void *wrow, int64_t kk) {
    uint32_t u = (uint32_t)((const uint16_t *)wrow)[kk] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Groups [g0, g1) of a float weight: one fmaf chain over k per output. */
static inline __attribute__((always_inline)) void float_groups(const mm_args *a, int64_t g0, int64_t g1,
                                                               float (*weight_at)(const void *, int64_t)) {
    const cpu_weight *w = a->w;
    const int64_t j0 = g0 * MM_NC, j1 = g1 * MM_NC < w->n ? g1 * MM_NC : w->n;
    for (int64_t j = j0; j < j1; j++) {
        const void *wrow = (const uint8_t *)w->data + j * w->row_bytes;
        for (int64_t i = 0; i < a->m; i++) {
            const float *x = a->x + i * a->ldx;
            float acc = 0.0f;
            for (int64_t kk = 0; kk < w->k; kk++) acc = fmaf(x[kk], weight_at(wrow, kk), acc);
            a->y[i * a->ldy + j] = acc;
        }
    }
}

#define FLOAT_GROUPS(t) \
    void mm_scalar_##t(const mm_args *a, int64_t g0, int64_t g1) { float_groups(a, g0, g1, weight_##t); }
FLOAT_GROUPS(f32)
FLOAT_GROUPS(f16)
FLOAT_GROUPS(bf16)
