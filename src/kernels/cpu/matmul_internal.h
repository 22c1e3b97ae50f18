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
 *     Q4_K, Q5_K:        f = fma(-dmin, (float)imin, d * (float)isum)
 * mm_unit_* in matmul_scalar.c define the operation sequence; the SIMD
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
/* Q5_K:  Q4_K's record (qs = the low nibbles), then qh words[8][16] @2368
 *        (bit j of qh byte l: the fifth bit of element 32j + l)     = 2880 B */
/* Q6_K:  the ql and qh words in the order a one-row pass consumes them (MM_Q6_QL/QH):
 *        for each 128-element half n and step t = 0..7, ql word 16n+t (low nibbles:
 *        block 4n, high: 4n+2), ql word 16n+8+t (blocks 4n+1, 4n+3) and qh word 8n+t
 *        (two bits of each of the four), so the record streams strictly in address
 *        order; sc i8[16][16] @3072, d fp16[16] @3328, 32 B of padding so that every
 *        record (and every 64-byte word load) starts on a cache line   = 3392 B */
#define MM_REC_Q4_0 288
#define MM_REC_Q4_1 320
#define MM_REC_Q8_0 544
#define MM_REC_Q4_K 2368
#define MM_REC_Q5_K 2880
#define MM_REC_Q6_K 3392
#define MM_Q6_QL(w) (64 * (3 * (8 * ((w) / 16) + (w) % 8) + ((w) / 8) % 2)) /* ql word w, 0..31 */
#define MM_Q6_QH(w) (64 * (3 * (w) + 2))                                   /* qh word w, 0..15 */
#define MM_Q6_SC 3072
#define MM_Q6_D 3328
/* Decoded types (quant_traits.decode: Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS,
 * MXFP4) are packed from the integer form quant_iblock, per unit of UE = 32 or 256
 * elements, in one of two generic records:
 *  - byte form (Q5_0, Q5_1: 32 values of q): q + 128 as u8 words[UE/4][16] @0,
 *    d f32[16] @16UE, dmin f32[16] @16UE+64, s i8[UE/16][16] @16UE+128,
 *    m i8[UE/16][16] @17UE+128                                        = 18UE + 128 B
 *  - nibble form (the types with quant_traits.codes: q is codes[n] for a 4-bit n):
 *    n as nibble words[UE/8][16] @0, word 4j + t holding elements 32j + 4t .. + 3 in its
 *    low nibbles and 32j + 16 + 4t .. + 3 in its high ones (the two 16-element halves of
 *    32-block j), then d f32[16], dmin f32[16] (not for NOMIN types, below), s i8[NS][16]
 *    and m i8[NS][16] (not for NOMIN), NS = UE/32 for ONE types (one per 32-block), else
 *    UE/16 (mm_dec_layout_of): IQ4_XS 2240 B per 256 x 16 weights (0.55 bytes a weight),
 *    Q2_K 2688 (Q3_K's would be 2368: it has the plane form below), against the byte
 *    form's 4736.
 * Both compute the same factor, so a type's bits do not depend on its form. Per
 * activation block b (sub-block j of the unit), with dlo/dhi the exact dots of the two
 * 16-element halves and xs the activation half sums:
 *     isum = s[2j]*dlo + s[2j+1]*dhi,  imin = m[2j]*xs0 + m[2j+1]*xs1
 *     f = fma(-dmin, (float)imin, d * (float)isum)                    */
/* The plane form (PL, Q3_K: q + 4 is a 3-bit code n, codes[n] = n - 4) stores n as a
 * 2-bit plane and a 1-bit plane (7 UE + 64 bytes: 1856 per 256 x 16 weights, 0.45 bytes a
 * weight, against the nibble form's 2368), NOMIN and not ONE only:
 *    low bits: words[UE/16][16] @0, word 2j + p, byte 4c + i, bits 2k..2k+1 holding n & 3 of
 *              element 32j + 4t + i of column c, t = 4p + k (the step of a 32-block: word 2j
 *              is the block's low 16-element half, 2j + 1 its high half);
 *    high bit: words[UE/32][16] @4UE, word j, byte 4c + i, bit t holding n >> 2 of the same
 *              element (the bit that Q3_K's hmask sets: q = (n & 3) - 4 where it is clear);
 *    d f32[16] @6UE, then s as int8 pairs @6UE + 64: byte 32j + 2c + half, the scales of
 *    32-block j's two halves side by side (one int16 pair per column for vpmaddwd).
 * Same factor as the other forms (the integer dots are exact, whatever their order). */
#define MM_FORM_BYTE 0
#define MM_FORM_NIB 1
#define MM_FORM_PL 2
#define MM_PL_H(UE) (4 * (UE))
#define MM_PL_D(UE) (6 * (UE))
#define MM_PL_S(UE) (6 * (UE) + 64)
#define MM_REC_PL(UE) (7 * (UE) + 64)
#define MM_REC_DEC(UE) (18 * (UE) + 128)
#define MM_DEC_D(UE) (16 * (UE))
#define MM_DEC_DMIN(UE) (16 * (UE) + 64)
#define MM_DEC_S(UE) (16 * (UE) + 128)
#define MM_DEC_M(UE) (17 * (UE) + 128)
#define MM_NIB_NS(UE, ONE) ((ONE) ? (UE) / 32 : (UE) / 16)
#define MM_REC_NIB(UE, ONE, NOMIN) (8 * (UE) + ((NOMIN) ? 64 + 16 * MM_NIB_NS(UE, ONE) : 128 + 32 * MM_NIB_NS(UE, ONE)))
/* Where a decoded record keeps its parts (byte offsets), for form NIB and the type's facts
 * (below); the scales of 32-block j's halves are at s + 16 * sidx(j, half) (m likewise). */
typedef struct {
    int rec, d, dmin, s, m, per32, pairs;
} mm_dec_layout;
static inline __attribute__((always_inline)) mm_dec_layout mm_dec_layout_of(int nib, int ue, int one, int nomin) {
    mm_dec_layout L;
    L.pairs = 0;
    if (nib == MM_FORM_PL) { /* NOMIN, not ONE: dmin and m are never read */
        L.d = L.dmin = MM_PL_D(ue), L.s = L.m = MM_PL_S(ue), L.rec = MM_REC_PL(ue);
        L.per32 = 0, L.pairs = 1;
    } else if (!nib) {
        L.rec = MM_REC_DEC(ue), L.d = MM_DEC_D(ue), L.dmin = MM_DEC_DMIN(ue), L.s = MM_DEC_S(ue), L.m = MM_DEC_M(ue);
        L.per32 = 0;
    } else {
        L.d = 8 * ue, L.dmin = 8 * ue + 64, L.s = 8 * ue + (nomin ? 64 : 128);
        L.m = L.s + 16 * MM_NIB_NS(ue, one), L.rec = MM_REC_NIB(ue, one, nomin);
        L.per32 = one;
    }
    return L;
}
static inline __attribute__((always_inline)) int mm_dec_sidx(const mm_dec_layout *L, int j, int half) {
    return L->per32 ? j : 2 * j + half;
}
/* Byte offset in the record of the scale of 32-block j's half `half`, column c (m likewise
 * from L->m, for the forms that store it). */
static inline __attribute__((always_inline)) int mm_dec_soff(const mm_dec_layout *L, int j, int half, int c) {
    return L->pairs ? L->s + 32 * j + 2 * c + half : L->s + 16 * mm_dec_sidx(L, j, half) + c;
}
/* The decoded types: X(lower-case name, ggml name, unit elements, NIB, ONE, NOMIN), NIB
 * the record form (MM_FORM_*: 0 bytes, 1 nibbles, 2 planes), then facts of the type's integer form that the
 * kernels and the nibble record specialise on: ONE, the two
 * halves of every 32-block share one scale (isum = s * (dlo + dhi), exactly the same
 * integer); NOMIN, dmin = 0 and m = 0 (f = d * isum: fma(-0, 0, x) is x, sign of zero
 * included). test_matmul_invariance checks each kernel against the unspecialised factor. */
#define MM_DECODED(X)                                                                          \
    X(q5_0, Q5_0, 32, 0, 1, 1) X(q5_1, Q5_1, 32, 0, 1, 0) X(iq4_nl, IQ4_NL, 32, 1, 1, 1)         \
    X(mxfp4, MXFP4, 32, 1, 1, 1) X(q2_K, Q2_K, 256, 1, 0, 0) X(q3_K, Q3_K, 256, 2, 0, 1)        \
    X(iq4_xs, IQ4_XS, 256, 1, 1, 1)
/* The record size of a decoded type. */
#define MM_REC_DECODED(UE, NIB, ONE, NOMIN) \
    ((NIB) == MM_FORM_PL ? MM_REC_PL(UE) : (NIB) ? MM_REC_NIB(UE, ONE, NOMIN) : MM_REC_DEC(UE))

/* Quantised activations of m rows, k = nb * 32 columns. */
typedef struct {
    int8_t *q;   /* [m][k] */
    float *d;    /* [m][nb] */
    int16_t *s;  /* [m][nb][2]: sums of q over elements 0..15 and 16..31 of the block */
    int64_t nb;
} mm_xq;

/* Activation panels: the AVX-512 layout of the quantised activations for Q4_0, Q4_1,
 * Q8_0 and (from 2 rows) K-quant and decoded-type weights. Rows are grouped in panels of
 * MM_PR (the last panel has m % MM_PR rows, R in general); with PB = mm_panel_bytes(kt),
 * panel p starts at byte p * MM_PR * nb * PB and holds, for each block b at offset
 * b * R * PB:
 *     q[R][32] int8  |  d[R] float  |  aux[R]  (4 bytes each)  [| aux2[R]]
 * with aux the type's row-only block constant, exact: Q4_0 int32 -8*sum(q),
 * Q8_0 int32 -128*sum(q), Q4_1, Q4_K, Q5_K float (float)sum(q); Q6_K and the decoded
 * types with two scales a block (MM_PANEL_HALVES) int32 MM_PANEL_MAGIC + panel_offset *
 * sum(q[0..15]) (offset -32 and -128) and aux2 the same of q[16..31] (the start of a dot
 * chain whose int32 result, read as a float, is 1.5 * 2^23 + the exact dot); the decoded
 * ONE types (MM_PANEL_WHOLE) int32 MM_PANEL_MAGIC - 128 * sum(q), one chain a block. The R rows of a block sit side
 * by side, so a kernel addresses any row of the panel at a constant offset from one
 * pointer. PB = 40: the size of the row layout of mm_xq (k + 8 bytes per block); 44 with
 * aux2 (cpu_matmul_scratch_bytes leaves room for it). */
#define MM_PR 8
#define MM_PB 40 /* bytes per row per block, without aux2 */
/* The bits of 1.5 * 2^23: added to an integer n with |n| < 2^22, they give the bits of the
 * float 1.5 * 2^23 + n exactly (one unit per integer in that binade). */
#define MM_PANEL_MAGIC 0x4B400000

struct mm_kernel;
typedef struct mm_args mm_args;
/* Output columns of groups [g0, g1) (MM_NC columns each, the last one partial), all m rows. */
typedef void (*mm_groups_fn)(const mm_args *a, int64_t g0, int64_t g1);

/* One call's arguments, shared by all tasks. */
struct mm_args {
    const cpu_weight *w;
    int64_t m;
    const float *x; /* float activations (float weight types) */
    int64_t ldx;
    mm_xq xq;       /* quantised activations (quantised weight types) */
    uint8_t *xp;    /* or activation panels (AVX-512 with a panel type), else NULL */
    float *y;
    int64_t ldy;
    const struct mm_kernel *kt; /* w's row of the kernel table */
    mm_groups_fn run;           /* kt's kernel for the ISA of this call */
};

/* The quantised activation rows from row i0 on, as the SIMD kernels of every ISA read them:
 * int8 values, per-block scales d and per-half-block sums s (two int16 per block). */
typedef struct {
    const int8_t *q;
    const float *d;
    const int16_t *s;
    int64_t k, nb;
} xrows;

static inline __attribute__((always_inline)) xrows rows_at(const mm_args *a, int64_t i0) {
    xrows r;
    r.k = a->w->k;
    r.nb = a->xq.nb;
    r.q = a->xq.q + i0 * r.k;
    r.d = a->xq.d + i0 * r.nb;
    r.s = a->xq.s + i0 * 2 * r.nb;
    return r;
}

/* Block sum of activation row r, block b. */
static inline __attribute__((always_inline)) int xsum(const xrows *X, int r, int64_t b) {
    return X->s[r * 2 * X->nb + 2 * b] + X->s[r * 2 * X->nb + 2 * b + 1];
}

/* ---- The kernel table: one row per weight type the matmul supports (matmul_traits.c).
 * Every type-dependent choice outside the kernels' own code reads it; cpu_matmul looks
 * the row up once per call, never inside a loop over rows, columns or K. (Inside a
 * kernel, a `type` argument is a compile-time constant of an always-inlined body shared
 * by several types, e.g. unpack_rec or fload: specialisation, not dispatch.) */

/* Fills one packed record from unit u of the (up to MM_NC) rows of one column group. */
typedef void (*mm_pack_fn)(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
/* The reference operation sequence of one weight unit (mm_unit_* below). */
typedef float (*mm_unit_fn)(const void *wrow, int64_t u, const int8_t *xq, const float *xd,
                            const int16_t *xs, float acc);

/* What the AVX-512 activation panels store as a block's aux for this type (see MM_PR). */
typedef enum {
    MM_PANEL_NONE,   /* no panels: the kernels read the row layout of mm_xq */
    MM_PANEL_OFFSET, /* int32 panel_offset * sum(q): the weights' offset, folded into the dot */
    MM_PANEL_SUM,    /* float (float)sum(q): multiplies the weight block's minimum */
    MM_PANEL_HALVES, /* MM_PANEL_MAGIC + panel_offset * sum of each 16-element half (aux, aux2) */
    MM_PANEL_WHOLE,  /* MM_PANEL_MAGIC + panel_offset * sum(q): one chain per block (the
                      * decoded ONE types, whose two halves share one scale) */
} mm_panel_kind;

#define MM_N_ISA 3 /* cpu_isa values: scalar, AVX2, AVX-512 */

typedef struct mm_kernel {
    const quant_traits *q; /* block geometry: the type's row of formats' table */
    int quantised;         /* int8 activation blocks; else one float FMA chain per output */
    size_t rec_bytes;      /* packed record: per weight unit (quantised) or per k (float) */
    mm_panel_kind panel;
    int panel_offset;      /* MM_PANEL_OFFSET, MM_PANEL_HALVES and MM_PANEL_WHOLE */
    int panel_min_m;       /* panels only for calls of at least this many rows (0: all) */
    mm_pack_fn pack;       /* quantised only (float types are transposed generically) */
    mm_unit_fn unit;       /* quantised only: the reference sequence (split-K control) */
    mm_groups_fn run[MM_N_ISA]; /* by cpu_isa; NULL: the next lower ISA's (scalar required) */
} mm_kernel;

/* The row of a type, or NULL when the matmul does not support it. */
const mm_kernel *mm_kernel_of(uint32_t type);

/* Bytes per row per block of the panels of kernel kt (see MM_PR). */
static inline int mm_panel_bytes(const mm_kernel *kt) { return kt->panel == MM_PANEL_HALVES ? MM_PB + 4 : MM_PB; }

/* Row-local activation quantisation; all three give the same bits. */
void mm_quantize_row_scalar(const float *x, int64_t k, int8_t *q, float *d, int16_t *s);
void mm_quantize_row_avx2(const float *x, int64_t k, int8_t *q, float *d, int16_t *s);
void mm_quantize_row_avx512(const float *x, int64_t k, int8_t *q, float *d, int16_t *s);
/* Rows [p*MM_PR, p*MM_PR + R) of x (row stride ldx) into panel p (see above) for a weight
 * of kernel kt (kt->panel != MM_PANEL_NONE); the q and d bits equal those of
 * mm_quantize_row_*. */
void mm_quantize_panel_avx512(const mm_kernel *kt, const float *x, int64_t ldx, int R, int64_t k,
                              uint8_t *panel);
/* Per-block scale from max|x|, shared by all quantisers so this scalar maths is one
 * piece of code. Returns 0 when the block's quants must be all zero: max 0 or tiny
 * (d = 0), or `bad` = a non-finite input (d = NaN, so the outputs become NaN). */
int mm_block_scale(float amax, int bad, float *d, float *id);

/* The kernels of the table (mm_groups_fn), per ISA and type. */
#define MM_KERNELS(isa)                                                  \
    void mm_##isa##_f32(const mm_args *a, int64_t g0, int64_t g1);      \
    void mm_##isa##_f16(const mm_args *a, int64_t g0, int64_t g1);      \
    void mm_##isa##_bf16(const mm_args *a, int64_t g0, int64_t g1);     \
    void mm_##isa##_q8_0(const mm_args *a, int64_t g0, int64_t g1);     \
    void mm_##isa##_q4_0(const mm_args *a, int64_t g0, int64_t g1);     \
    void mm_##isa##_q4_1(const mm_args *a, int64_t g0, int64_t g1);     \
    void mm_##isa##_q4_K(const mm_args *a, int64_t g0, int64_t g1);     \
    void mm_##isa##_q5_K(const mm_args *a, int64_t g0, int64_t g1);     \
    void mm_##isa##_q6_K(const mm_args *a, int64_t g0, int64_t g1);     \
    MM_DECODED(MM_DECODED_KERNEL_##isa)
#define MM_DECODED_KERNEL(isa, t) void mm_##isa##_##t(const mm_args *a, int64_t g0, int64_t g1);
#define MM_DECODED_KERNEL_scalar(t, T, ...) MM_DECODED_KERNEL(scalar, t)
#define MM_DECODED_KERNEL_avx2(t, T, ...) MM_DECODED_KERNEL(avx2, t)
#define MM_DECODED_KERNEL_avx512(t, T, ...) MM_DECODED_KERNEL(avx512, t)
MM_KERNELS(scalar)
MM_KERNELS(avx2)
MM_KERNELS(avx512)
/* K-quant kernels over activation panels (matmul_kq_avx512.c), called by mm_avx512_q*_K. */
void mm_avx512_q4_K_panels(const mm_args *a, int64_t g0, int64_t g1);
void mm_avx512_q5_K_panels(const mm_args *a, int64_t g0, int64_t g1);
void mm_avx512_q6_K_panels(const mm_args *a, int64_t g0, int64_t g1);
/* Decoded-type kernels over activation panels (matmul_dec_avx512.c), likewise. */
#define MM_DECODED_PANELS(t, T, ...) void mm_avx512_##t##_panels(const mm_args *a, int64_t g0, int64_t g1);
MM_DECODED(MM_DECODED_PANELS)
/* AVX2 K-quant kernels for several rows (matmul_kq_avx2.c), called by mm_avx2_q*_K. */
void mm_avx2_q4_K_rows(const mm_args *a, int64_t g0, int64_t g1);
void mm_avx2_q5_K_rows(const mm_args *a, int64_t g0, int64_t g1);
void mm_avx2_q6_K_rows(const mm_args *a, int64_t g0, int64_t g1);
#undef MM_KERNELS
#undef MM_DECODED_KERNEL_scalar
#undef MM_DECODED_KERNEL_avx2
#undef MM_DECODED_KERNEL_avx512
#undef MM_DECODED_KERNEL

/* Record packing (mm_pack_fn), matmul_pack.c. */
void mm_pack_q8_0(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
void mm_pack_q4_0(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
void mm_pack_q4_1(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
void mm_pack_q4_K(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
void mm_pack_q5_K(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
void mm_pack_q6_K(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
#define MM_PACK_DECODED(t, T, ...) void mm_pack_##t(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u);
MM_DECODED(MM_PACK_DECODED)
#undef MM_PACK_DECODED

/* The reference operation sequence (mm_unit_fn), used by the scalar kernels and the
 * split-K negative control: returns acc after `acc = fma(dx, f, acc)` for the activation
 * blocks of weight unit u of row `wrow` (1 block, or 8 for K-quants); xq/xd/xs are one
 * activation row. */
#define MM_UNIT(T) \
    float mm_unit_##T(const void *wrow, int64_t u, const int8_t *xq, const float *xd, const int16_t *xs, float acc);
MM_UNIT(q8_0)
MM_UNIT(q4_0)
MM_UNIT(q4_1)
MM_UNIT(q4_K)
MM_UNIT(q5_K)
MM_UNIT(q6_K)
#define MM_UNIT_DECODED(t, T, ...) MM_UNIT(t)
MM_DECODED(MM_UNIT_DECODED)
#undef MM_UNIT_DECODED
#undef MM_UNIT

/* Float weight types (F32, F16, BF16): y[i][j] is one fused multiply-add chain over k,
 *     acc = +0; for k = 0 .. K-1: acc = fma(x[i][k], (float)W[j][k], acc)
 * Weights are packed like the quantised ones, by groups of MM_NC columns: for each k, the
 * 16 columns' values side by side (native type, MM_FREC bytes per k), so lane c of a
 * vector is column c and a tile of rows x groups shares every load. */
#define MM_FREC(type) ((type) == INVAR_T_F32 ? 64 : 32)

#endif
