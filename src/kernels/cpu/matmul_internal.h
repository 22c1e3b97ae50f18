/* Shared definitions of the matmul kernels (scalar, AVX2, AVX-512). Not a public API.
 *
 * Quantised weights. The activation rows are quantised row-locally to int8 blocks of
 * 32 (scale d = amax/127, q = round-half-even(x * 127/amax), plus the sums of q over
 * each 16-element half). y[i][j] is then accumulated block by block in K order:
 *     acc = 0; for each activation block b: acc = fma(dx[b], f_b, acc)
 * (fused: one rounding) where f_b is a per-type float expression of the weight block
 * scales and EXACT integer dot products, itself fused where that saves an operation:
 *     Q4_0, Q8_0, Q6_K:  f = dw * (float)isum
 *     Q4_1:              f = fma(mw, (float)xsum, dw * (float)dot)
 *     Q4_K:              f = fma(-dmin, (float)imin, d * (float)isum)
 * mm_unit_accum_scalar in matmul_scalar.c defines the operation sequence; the SIMD
 * kernels perform the same operations lane-wise (vfmadd / vfnmadd for the fmas).
 *
 * Packed layout. Weight columns (rows of W) are grouped by MM_NC = 16; the last group
 * is zero-padded. For each group and each weight block ("unit": 32 elements, or 256 for
 * K-quants) one record holds the quant bytes as 4-byte words transposed across the 16
 * columns (word w of column c at byte 64*w + 4*c), followed by per-column scales. A
 * 64-byte load thus gives 4 consecutive quant bytes of each of the 16 columns, which
 * is exactly what one VNNI dpbusd (or AVX2 maddubs+madd) step consumes: SIMD lane c
 * always computes column c, so no horizontal reduction of floats is ever needed. */
#ifndef INVAR_MATMUL_INTERNAL_H
#define INVAR_MATMUL_INTERNAL_H
#include <stdint.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul.h"

#define MM_NC 16 /* columns per packed group = SIMD lanes of int32/float in a zmm */
#define MM_QK 32 /* activation quantisation block */

/* Record layouts (byte offsets inside one record of one group). */
/* Q4_0:  qs words[4][16] @0, d fp16[16] @256                        = 288 B */
/* Q4_1:  qs words[4][16] @0, d fp16[16] @256, m fp16[16] @288       = 320 B */
/* Q8_0:  qs words[8][16] @0, d fp16[16] @512                        = 544 B */
/* Q4_K:  qs words[32][16] @0, d[16] @2048, dmin[16] @2080,
 *        sc u8[8][16] @2112, mn u8[8][16] @2240                     = 2368 B */
/* Q6_K:  ql words[32][16] @0, qh words[16][16] @2048, sc i8[16][16] @3072,
 *        d fp16[16] @3328                                           = 3360 B */
#define MM_REC_Q4_0 288
#define MM_REC_Q4_1 320
#define MM_REC_Q8_0 544
#define MM_REC_Q4_K 2368
#define MM_REC_Q6_K 3360

/* Quantised activations of m rows, k = nb * 32 columns. */
typedef struct {
    int8_t *q;   /* [m][k] */
    float *d;    /* [m][nb] */
    int16_t *s;  /* [m][nb][2]: sums of q over elements 0..15 and 16..31 of the block */
    int64_t nb;
} mm_xq;

/* Activation panels: the AVX-512 layout of the quantised activations for Q4_0, Q4_1
 * and Q8_0 weights. Rows are grouped in panels of MM_PR (the last panel has m % MM_PR
 * rows, R in general); panel p starts at byte p * MM_PR * nb * MM_PB and holds, for
 * each block b at offset b * R * MM_PB:
 *     q[R][32] int8  |  d[R] float  |  aux[R]  (4 bytes each)
 * with aux the type's row-only block constant, exact: Q4_0 int32 -8*sum(q),
 * Q8_0 int32 -128*sum(q), Q4_1 float (float)sum(q). The R rows of a block sit side by
 * side, so a kernel addresses any row of the panel at a constant offset from one
 * pointer. Same total size as the row layout of mm_xq (k + 8 bytes per block). */
#define MM_PR 8
#define MM_PB 40 /* bytes per row per block */

/* One call's arguments, shared by all tasks. */
typedef struct {
    const cpu_weight *w;
    int64_t m;
    const float *x; /* float activations (float weight types) */
    int64_t ldx;
    mm_xq xq;       /* quantised activations (quantised weight types) */
    uint8_t *xp;    /* or activation panels (AVX-512 with a panel type), else NULL */
    float *y;
    int64_t ldy;
} mm_args;

int mm_is_quantised(uint32_t type);
/* Elements per weight block ("unit") and bytes of one packed record (0: not packed). */
int64_t mm_unit_elems(uint32_t type);
size_t mm_rec_bytes(uint32_t type);

/* Row-local activation quantisation; all three give the same bits. */
void mm_quantize_row_scalar(const float *x, int64_t k, int8_t *q, float *d, int16_t *s);
void mm_quantize_row_avx2(const float *x, int64_t k, int8_t *q, float *d, int16_t *s);
void mm_quantize_row_avx512(const float *x, int64_t k, int8_t *q, float *d, int16_t *s);
/* Rows [p*MM_PR, p*MM_PR + R) of x (row stride ldx) into panel p (see above); the q and
 * d bits equal those of mm_quantize_row_*. */
int mm_panel_type(uint32_t type);
void mm_quantize_panel_avx512(uint32_t type, const float *x, int64_t ldx, int R, int64_t k,
                              uint8_t *panel);
/* Per-block scale from max|x|, shared by all quantisers so this scalar maths is one
 * piece of code. Returns 0 when the block's quants must be all zero: max 0 or tiny
 * (d = 0), or `bad` = a non-finite input (d = NaN, so the outputs become NaN). */
int mm_block_scale(float amax, int bad, float *d, float *id);

/* Column groups [g0, g1) of W for all m rows. */
void mm_quant_scalar(const mm_args *a, int64_t g0, int64_t g1);
void mm_quant_avx2(const mm_args *a, int64_t g0, int64_t g1);
void mm_quant_avx512(const mm_args *a, int64_t g0, int64_t g1);
/* Columns [j0, j1) for float weight types (F32/F16/BF16); j0 is a multiple of MM_NC. */
void mm_float_scalar(const mm_args *a, int64_t j0, int64_t j1);
void mm_float_avx2(const mm_args *a, int64_t j0, int64_t j1);
void mm_float_avx512(const mm_args *a, int64_t j0, int64_t j1);

/* The reference operation sequence, used by the scalar kernel and the split-K negative
 * control: returns acc after `acc = fma(dx, f, acc)` for the activation blocks of
 * weight unit u of row `wrow` (1 block, or 8 for K-quants); xq/xd/xs are one
 * activation row. */
float mm_unit_accum_scalar(uint32_t type, const void *wrow, int64_t u, const int8_t *xq,
                           const float *xd, const int16_t *xs, float acc);

/* Float weight types (F32, F16, BF16): y[i][j] is one fused multiply-add chain over k,
 *     acc = +0; for k = 0 .. K-1: acc = fma(x[i][k], (float)W[j][k], acc)
 * Weights are packed like the quantised ones, by groups of MM_NC columns: for each k, the
 * 16 columns' values side by side (native type, MM_FREC bytes per k), so lane c of a
 * vector is column c and a tile of rows x groups shares every load. */
#define MM_FREC(type) ((type) == INVAR_T_F32 ? 64 : 32)
float mm_float_dot_scalar(uint32_t type, const float *x, const void *wrow, int64_t k);

#endif
