/* AVX-512 kernels of the decoded types (MM_DECODED: Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL,
 * IQ4_XS, MXFP4) over activation panels: prefill and batched decode (m >= 2; one row runs
 * k_decoded in matmul_avx512.c on the row layout).
 *
 * As in matmul_kq_avx512.c, each group's records are unpacked, a chunk of DCB 32-blocks
 * at a time, into an L1 buffer that every panel of the call then reads: per block the
 * eight weight vectors (unsigned bytes q + 128, Q[t] = elements 4t..4t+3 of the 16
 * columns; the nibble form's codes looked up once here instead of once per row block) and
 * the block's scales as floats. Chunks after the first resume the accumulators the
 * previous chunk stored in y.
 *
 * Same bits as the decoded factor of matmul_internal.h (k_decoded, mm_unit_decoded):
 *     isum = s0 * lo + s1 * hi (ONE: s0 * (lo + hi)),  imin = m0 * xs0 + m1 * xs1
 *     f = fma(-dmin, (float)imin, d * (float)isum),  acc = fma(dx, f, acc)
 * with lo, hi the exact dots of the two 16-element halves. The panels carry the offset -128:
 * for two scales a block (MM_PANEL_HALVES) the two chains start at MAGIC - 128 * xs0 and
 * MAGIC - 128 * xs1, so a finished chain read as a float is X = M + lo (Y = M + hi) exactly
 * (M = 1.5 * 2^23 and |lo| <= 16 * 128 * 127 < 2^22), the Q6_K scheme of
 * matmul_kq_avx512.c; for the ONE types (MM_PANEL_WHOLE) one chain over the whole block
 * starts at MAGIC - 128 * (xs0 + xs1) and ends at X = M + lo + hi (|lo + hi| < 2^22: still
 * in M's binade; the integer sum is exact whatever the order). Then, every step exact, so
 * (float)isum and (float)imin are the reference's values:
 *   - two scales: s0 * lo = fma(s0, X, -s0 * M) (|s0 * lo| <= 32 * 16 * 127 * 4 < 2^24 for
 *     Q3_K, smaller for Q2_K) and (float)isum = fma(s1, Y - M, s0 * lo);
 *   - ONE: (float)isum = fma(s0, X, -s0 * M), exact while |isum| < 2^24, which the
 *     largest case, IQ4_XS (|s| <= 32, |q|, |x| <= 127), keeps: 32 * 32 * 127^2 < 2^24;
 *   - imin (Q2_K, Q5_1): A0 = M - (aux as a float) = 128 * xs0 exactly, and with the
 *     stored m0 / 128 (exact), (float)imin = fma(m0/128, A0, fma(m1/128, A1, +0)) (ONE:
 *     A = M - aux = 128 * (xs0 + xs1), fma(m0/128, A, +0)).
 * Zeros: an exact zero comes out +0 at every step (x + -x and +0 + -0 are +0 in round-to-
 * nearest, and each sum of products ends in a +0 term), as (float) of the integer 0 does,
 * so even the sign of a zero factor is the reference's. Every row of a panel gets the same
 * per-lane operations whatever R is, so neither m nor the panel split changes a bit. */
#include <immintrin.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul_avx512_ops.h"
#include "kernels/cpu/matmul_internal.h"

/* One unpacked 32-block: Q[8] @0, then float vectors s0, s1, m0/128, m1/128, d, dmin. */
#define DU_S0 512
#define DU_S1 576
#define DU_M0 640
#define DU_M1 704
#define DU_D 768
#define DU_DMIN 832
#define DUREC 896
#ifndef DCB
#define DCB 16 /* 32-blocks per chunk: 14 KiB, leaving L1 room for the panels' activations */
#endif
_Static_assert(DCB % 8 == 0, "a chunk holds whole 256-element units");

AI void st(uint8_t *p, __m512i v) { _mm512_store_si512((void *)p, v); }
AI void stf(uint8_t *p, __m512 v) { _mm512_store_ps((void *)p, v); }
AI __m512 ldf(const uint8_t *p) { return _mm512_load_ps((const void *)p); }
AI __m512 s8f(const uint8_t *p) { return _mm512_cvtepi32_ps(i8x16_epi32(p)); }

/* Unit u's record into n32 = UE / 32 unpacked blocks at U; table: codes[n] + 128. */
AI void dec_unpack(const uint8_t *rec, uint8_t *U, __m512i table, const int UE, const int NIB, const int ONE,
                   const int NOMIN) {
    const mm_dec_layout L = mm_dec_layout_of(NIB, UE, ONE, NOMIN);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512 inv128 = _mm512_set1_ps(1.0f / 128.0f);
    prefetch_rec(rec, L.rec);
    const __m512 d = _mm512_loadu_ps((const void *)(rec + L.d));
    const __m512 dmin = NOMIN ? d : _mm512_loadu_ps((const void *)(rec + L.dmin));
    UNROLL for (int j = 0; j < UE / 32; j++) {
        uint8_t *u = U + j * DUREC;
        if (NIB == MM_FORM_PL) { /* q + 128 = (n & 3) + 124, + 4 where the high bit is set */
            const __m512i H = ldw(rec + MM_PL_H(UE) + 64 * j), m3 = _mm512_set1_epi8(3);
            const __m512i c124 = _mm512_set1_epi8(124), c128 = _mm512_set1_epi8((char)128);
            UNROLL for (int t = 0; t < 8; t++) {
                const __m512i lo2 = _mm512_and_si512(_mm512_srli_epi16(ldw(rec + 64 * (2 * j + t / 4)), 2 * (t % 4)), m3);
                const __mmask64 hb = _mm512_test_epi8_mask(H, _mm512_set1_epi8((char)(1 << t)));
                st(u + 64 * t, _mm512_add_epi8(lo2, _mm512_mask_blend_epi8(hb, c124, c128)));
            }
            /* the int8 pairs (s0, s1) of each lane, sign-extended to int16, then each to int32 */
            const __m512i S = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(rec + L.s + 32 * j)));
            stf(u + DU_S0, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(S, 16), 16)));
            stf(u + DU_S1, _mm512_cvtepi32_ps(_mm512_srai_epi32(S, 16)));
            stf(u + DU_D, d);
            continue;
        }
        if (NIB) {
            UNROLL for (int t = 0; t < 4; t++) {
                const __m512i N = ldw(rec + 64 * (4 * j + t));
                st(u + 64 * t, _mm512_shuffle_epi8(table, _mm512_and_si512(N, m4)));
                st(u + 64 * (4 + t), _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(N, 4), m4)));
            }
        } else {
            UNROLL for (int t = 0; t < 8; t++) st(u + 64 * t, ldw(rec + 64 * (8 * j + t)));
        }
        const int a0 = 16 * mm_dec_sidx(&L, j, 0), a1 = 16 * mm_dec_sidx(&L, j, 1);
        stf(u + DU_S0, s8f(rec + L.s + a0));
        if (!ONE) stf(u + DU_S1, s8f(rec + L.s + a1));
        if (!NOMIN) {
            stf(u + DU_M0, _mm512_mul_ps(s8f(rec + L.m + a0), inv128));
            if (!ONE) stf(u + DU_M1, _mm512_mul_ps(s8f(rec + L.m + a1), inv128));
            stf(u + DU_DMIN, dmin);
        }
        stf(u + DU_D, d);
    }
}

/* Rows [r0, r1) of the R-row panel block xb (row r: q at xb + 32r, d at xb + 32R + 4r,
 * aux, aux2 at xb + 36R + 4r, xb + 40R + 4r) against unpacked block u. */
AI void dec_rows(const uint8_t *u, const __m512i *Q, const uint8_t *xb, const int R, const int r0, const int r1,
                 __m512 *acc, const int ONE, const int NOMIN) {
    const __m512 magic = _mm512_castsi512_ps(_mm512_set1_epi32(MM_PANEL_MAGIC));
    const __m512 s0 = ldf(u + DU_S0), ns0m = _mm512_mul_ps(s0, _mm512_set1_ps(-12582912.0f)); /* -s0 * M, exact */
    __m512i PL[MM_PR], PH[MM_PR];
    if (ONE) panel_whole_chains(Q, xb, R, r0, r1, PL);
    else panel_half_chains(Q, xb, R, r0, r1, PL, PH);
    UNROLL for (int r = r0; r < r1; r++) {
        const __m512 X = _mm512_castsi512_ps(PL[r]);
        const __m512 isum = ONE ? _mm512_fmadd_ps(s0, X, ns0m)
                                : _mm512_fmadd_ps(ldf(u + DU_S1), _mm512_sub_ps(_mm512_castsi512_ps(PH[r]), magic),
                                                  _mm512_fmadd_ps(s0, X, ns0m));
        __m512 f = _mm512_mul_ps(ldf(u + DU_D), isum);
        if (!NOMIN) {
            const __m512 zero = _mm512_setzero_ps();
            const __m512 A0 = _mm512_sub_ps(magic, bcastf(xb + 36 * R + 4 * r));
            const __m512 imin = ONE ? _mm512_fmadd_ps(ldf(u + DU_M0), A0, zero)
                                    : _mm512_fmadd_ps(ldf(u + DU_M0), A0,
                                                      _mm512_fmadd_ps(ldf(u + DU_M1),
                                                                      _mm512_sub_ps(magic, bcastf(xb + 40 * R + 4 * r)), zero));
            f = _mm512_fnmadd_ps(ldf(u + DU_DMIN), imin, f);
        }
        acc[r] = _mm512_fmadd_ps(bcastf(xb + 32 * R + 4 * r), f, acc[r]);
    }
}

/* One tile: rows [i0, i0 + R) x group g over the nbc unpacked blocks of U, which start at
 * block b0. Two scales a block: four rows at a time (eight rows' sixteen chains would not
 * fit the registers); ONE: all rows at once, one chain each. */
AI void dec_tile(const mm_args *a, const uint8_t *U, int64_t i0, int64_t g, int64_t b0, int64_t nbc, const int R,
                 const int ONE, const int NOMIN) {
    const int64_t nb = a->xq.nb;
    const size_t pb = (size_t)mm_panel_bytes(a->kt);
    const uint8_t *xp = a->xp + (size_t)i0 * (size_t)nb * pb + (size_t)b0 * (size_t)R * pb;
    const int64_t left = a->w->n - g * MM_NC;
    const __mmask16 cm = left >= MM_NC ? 0xFFFF : (__mmask16)((1u << left) - 1);
    float *y = a->y + i0 * a->ldy + g * MM_NC;
    __m512 acc[MM_PR];
    UNROLL for (int r = 0; r < R; r++)
        acc[r] = b0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(cm, y + r * a->ldy);
    for (int64_t b = 0; b < nbc; b++) {
        const uint8_t *u = U + b * DUREC, *xb = xp + (size_t)b * (size_t)R * pb;
        __m512i Q[8];
        UNROLL for (int t = 0; t < 8; t++) Q[t] = _mm512_load_si512((const void *)(u + 64 * t));
        if (ONE) {
            dec_rows(u, Q, xb, R, 0, R, acc, ONE, NOMIN);
        } else {
            dec_rows(u, Q, xb, R, 0, R < 4 ? R : 4, acc, ONE, NOMIN);
            if (R > 4) dec_rows(u, Q, xb, R, 4, R, acc, ONE, NOMIN);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * a->ldy, cm, acc[r]);
}

#define DEC_TILE_R(R_) dec_tile(a, U, i0, g, b0, nbc, R_, ONE, NOMIN)

/* Blocks [b0, b0 + nbc) of group g (whole units): unpacked into U, then every panel over
 * them; next: the records to bring towards L2 meanwhile, or NULL. */
AI void dec_chunk(const mm_args *a, __m512i table, uint8_t *U, int64_t g, int64_t b0, int64_t nbc,
                  const uint8_t *next, const int UE, const int NIB, const int ONE, const int NOMIN) {
    const int n32 = UE / 32, rb = mm_dec_layout_of(NIB, UE, ONE, NOMIN).rec;
    const int64_t nu = a->w->k / UE;
    const uint8_t *recs = (const uint8_t *)a->w->packed + (size_t)(g * nu + b0 / n32) * (size_t)rb;
    for (int64_t u = 0; u < nbc / n32; u++) dec_unpack(recs + u * rb, U + u * n32 * DUREC, table, UE, NIB, ONE, NOMIN);
    if (next)
        for (size_t o = 0; o < (size_t)(DCB / n32) * (size_t)rb; o += 64)
            _mm_prefetch((const char *)next + o, _MM_HINT_T1);
    for (int64_t i0 = 0; i0 < a->m; i0 += MM_PR) {
        switch (a->m - i0 < MM_PR ? a->m - i0 : MM_PR) {
        case 1: DEC_TILE_R(1); break;
        case 2: DEC_TILE_R(2); break;
        case 3: DEC_TILE_R(3); break;
        case 4: DEC_TILE_R(4); break;
        case 5: DEC_TILE_R(5); break;
        case 6: DEC_TILE_R(6); break;
        case 7: DEC_TILE_R(7); break;
        default: DEC_TILE_R(8); break;
        }
    }
}

/* Groups [g0, g1), in kq_run's two orders (matmul_kq_avx512.c): few rows group by group,
 * many rows chunk by chunk of K across the groups. Either performs each output's blocks
 * in K order. */
AI void dec_run(const mm_args *a, int64_t g0, int64_t g1, const int UE, const int NIB, const int ONE,
                const int NOMIN) {
    const int n32 = UE / 32, rb = mm_dec_layout_of(NIB, UE, ONE, NOMIN).rec;
    const int64_t nb = a->xq.nb, nu = nb / n32;
    const uint8_t *packed = (const uint8_t *)a->w->packed;
    __m512i table = _mm512_setzero_si512();
    if (NIB) {
        uint8_t t16[16];
        for (int n = 0; n < 16; n++) t16[n] = (uint8_t)(a->kt->q->codes[n] + 128);
        table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t16));
    }
#define REC_AT(g_, b_) (packed + (size_t)((g_) * nu + (b_) / n32) * (size_t)rb)
    _Alignas(64) uint8_t U[DCB * DUREC];
    if (a->m <= 2 * MM_PR) {
        for (int64_t g = g0; g < g1; g++)
            for (int64_t b0 = 0; b0 < nb; b0 += DCB) {
                const int64_t nbc = nb - b0 < DCB ? nb - b0 : DCB;
                const int last = g + 1 == g1 && b0 + nbc == nb;
                dec_chunk(a, table, U, g, b0, nbc, last ? NULL : b0 + nbc < nb ? REC_AT(g, b0 + nbc) : REC_AT(g + 1, 0),
                          UE, NIB, ONE, NOMIN);
            }
        return;
    }
    for (int64_t b0 = 0; b0 < nb; b0 += DCB) {
        const int64_t nbc = nb - b0 < DCB ? nb - b0 : DCB;
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *next = g + 1 < g1 ? REC_AT(g + 1, b0) : b0 + nbc < nb ? REC_AT(g0, b0 + nbc) : NULL;
            dec_chunk(a, table, U, g, b0, nbc, next, UE, NIB, ONE, NOMIN);
        }
    }
#undef REC_AT
}

#define DEC_PANELS(t, T, UE, NIB, ONE, NOMIN) \
    void mm_avx512_##t##_panels(const mm_args *a, int64_t g0, int64_t g1) { dec_run(a, g0, g1, UE, NIB, ONE, NOMIN); }
MM_DECODED(DEC_PANELS)
