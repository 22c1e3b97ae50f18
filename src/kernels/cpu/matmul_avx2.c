/* AVX2 (+FMA, F16C) matmul kernels.
 *
 * Same bits as matmul_scalar.c by construction (argument at the top of that file).
 * A 16-column group is handled as two halves of 8 columns (ymm int32/float lanes);
 * lane c is always column 8h + c and gets the scalar per-block operations.
 * Integer dots use maddubs (u8 x s8 -> s16 pairs, saturating) + madd: the bounds
 * below keep every s16 intermediate away from saturation, so the sums stay exact.
 *  - 4-bit quants (0..15): a pair is <= 2*15*127 = 3810, so 8 steps may be summed
 *    in s16 (<= 30480) before one madd.
 *  - Q5_K (0..31): a pair is <= 2*31*127 = 7874, 4 steps per madd.
 *  - Q6_K (0..63): a pair is <= 16002, two steps per madd.
 *  - Q8_0 (signed): maddubs(|w|, sign(x, w)); a pair is <= 2*128*127 = 32512. */
#include <immintrin.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_avx2_ops.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_prefetch.h"

#define MR 4

/* Each record of the multi-row kernels is read twice (two 8-column halves): its lines
 * are prefetched on the first. */
AI void prefetch_rec(const uint8_t *rec, int bytes, int h) {
    if (h) return;
    for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)rec + PF_DIST + o, PF_HINT);
}

/* Low nibbles of words 0..3 then high nibbles: the 8 steps of a Q4_0/Q4_1 block. */
AI void unpack_q4(const uint8_t *rec, int h, __m256i *Q) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    UNROLL for (int t = 0; t < 4; t++) {
        __m256i W = ldw(rec + 64 * t + 32 * h);
        Q[t] = _mm256_and_si256(W, m4);
        Q[4 + t] = _mm256_and_si256(_mm256_srli_epi16(W, 4), m4);
    }
}

AI void k_q4_0(const mm_args *a, const uint8_t *grp, int64_t i0, int h, const int R, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    for (int64_t b = 0; b < X.nb; b++) {
        const uint8_t *rec = grp + b * MM_REC_Q4_0;
        prefetch_rec(rec, MM_REC_Q4_0, h);
        __m256i Q[8];
        unpack_q4(rec, h, Q);
        const __m256 dw = f16x8(rec + 256 + 16 * h);
        UNROLL for (int r = 0; r < R; r++) {
            __m256i isum = dot8_u4(Q, X.q + r * X.k + 32 * b);
            isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * xsum(&X, r, b)));
            __m256 f = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(isum));
            acc[r] = accum(acc[r], X.d[r * X.nb + b], f);
        }
    }
}

AI void k_q4_1(const mm_args *a, const uint8_t *grp, int64_t i0, int h, const int R, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    for (int64_t b = 0; b < X.nb; b++) {
        const uint8_t *rec = grp + b * MM_REC_Q4_1;
        prefetch_rec(rec, MM_REC_Q4_1, h);
        __m256i Q[8];
        unpack_q4(rec, h, Q);
        const __m256 dw = f16x8(rec + 256 + 16 * h), mw = f16x8(rec + 288 + 16 * h);
        UNROLL for (int r = 0; r < R; r++) {
            __m256i isum = dot8_u4(Q, X.q + r * X.k + 32 * b);
            __m256 f = _mm256_fmadd_ps(mw, _mm256_set1_ps((float)xsum(&X, r, b)),
                                       _mm256_mul_ps(dw, _mm256_cvtepi32_ps(isum)));
            acc[r] = accum(acc[r], X.d[r * X.nb + b], f);
        }
    }
}

AI void k_q8_0(const mm_args *a, const uint8_t *grp, int64_t i0, int h, const int R, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    for (int64_t b = 0; b < X.nb; b++) {
        const uint8_t *rec = grp + b * MM_REC_Q8_0;
        prefetch_rec(rec, MM_REC_Q8_0, h);
        __m256i W[8], AW[8];
        UNROLL for (int t = 0; t < 8; t++) {
            W[t] = ldw(rec + 64 * t + 32 * h);
            AW[t] = _mm256_abs_epi8(W[t]);
        }
        const __m256 dw = f16x8(rec + 512 + 16 * h);
        UNROLL for (int r = 0; r < R; r++) {
            const int8_t *x = X.q + r * X.k + 32 * b;
            __m256i isum = _mm256_setzero_si256();
            UNROLL for (int t = 0; t < 8; t++)
                isum = _mm256_add_epi32(isum, madd1(_mm256_maddubs_epi16(AW[t], _mm256_sign_epi8(bcast4(x + 4 * t), W[t]))));
            __m256 f = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(isum));
            acc[r] = accum(acc[r], X.d[r * X.nb + b], f);
        }
    }
}

/* One activation row over a whole group (see k_q4_k_row): each block's record once. */
AI void k_q8_0_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    __m256 ac[2] = {acc[0], acc[1]};
    for (int64_t b = 0; b < X.nb; b++) {
        const uint8_t *rec = grp + b * MM_REC_Q8_0;
        prefetch_rec(rec, MM_REC_Q8_0, 0);
        const int8_t *x = X.q + 32 * b;
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        UNROLL for (int t = 0; t < 8; t++) {  /* step-major: one broadcast for both halves */
            const __m256i bx = bcast4(x + 4 * t);
            UNROLL for (int h = 0; h < 2; h++) {
                const __m256i W = ldw(rec + 64 * t + 32 * h);
                isum[h] = _mm256_add_epi32(isum[h], madd1(_mm256_maddubs_epi16(_mm256_abs_epi8(W), _mm256_sign_epi8(bx, W))));
            }
        }
        UNROLL for (int h = 0; h < 2; h++)
            ac[h] = accum(ac[h], X.d[b], _mm256_mul_ps(f16x8(rec + 512 + 16 * h), _mm256_cvtepi32_ps(isum[h])));
    }
    acc[0] = ac[0];
    acc[1] = ac[1];
}

/* One activation row (decode) over a whole 16-column group: both 8-column halves in one
 * pass over the record, so it is streamed once, and each quant word is loaded once for
 * the two blocks of its low and high nibbles. Per lane, the operations and their order
 * are those of kq_block in matmul_kq_avx2.c, the kernel for more rows (the integer
 * dots are exact, however they are summed); as there, sc * dot and mn * sum(x) are one
 * vpmaddwd each against int16 pairs (sc, sc) and (mn, 0) x (sum(x), 0). */
AI void k_q4_k_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const int64_t nu = X.nb / 8;
    const int pf = cpu_kq_prefetch(CPU_ISA_AVX2, CPU_KQ_Q4_K);
    __m256 ac[2] = {acc[0], acc[1]}; /* local: GCC kept acc[] in memory across the loop */
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * MM_REC_Q4_K, *ahead = rec + nu * MM_REC_Q4_K;
        for (int c = 0; c < 4; c++) {
            if (pf & CPU_PF_ROW) PF_ROW(ahead, MM_REC_Q4_K, c, 4);
            if (pf & CPU_PF_SPREAD) PF_SPREAD(rec, MM_REC_Q4_K, c, 4);
            const int64_t b0 = u * 8 + 2 * c, b1 = b0 + 1;
            const int8_t *x0 = X.q + 32 * b0, *x1 = X.q + 32 * b1;
            const __m256i xs0 = xsum_pair(&X, b0), xs1 = xsum_pair(&X, b1);
            /* Step-major, both halves per step: each activation broadcast is used twice
             * while it is in a register (half-major kept 16 of them live and spilled them). */
            __m256i plo[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, phi[2] = {plo[0], plo[0]};
            UNROLL for (int t = 0; t < 8; t++) {
                const __m256i bx0 = bcast4(x0 + 4 * t), bx1 = bcast4(x1 + 4 * t);
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m256i W = ldw(rec + 64 * (8 * c + t) + 32 * h);
                    plo[h] = _mm256_add_epi16(plo[h], _mm256_maddubs_epi16(_mm256_and_si256(W, m4), bx0));
                    phi[h] = _mm256_add_epi16(
                        phi[h], _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(W, 4), m4), bx1));
                }
            }
            UNROLL for (int h = 0; h < 2; h++) {
                const __m256 d = f16x8(rec + 2048 + 16 * h), dmin = f16x8(rec + 2080 + 16 * h);
                const uint8_t *sc = rec + 2112 + 8 * h, *mn = rec + 2240 + 8 * h;
                __m256i isum = _mm256_madd_epi16(plo[h], sc_pair(sc + 16 * (2 * c)));
                __m256i imin = _mm256_madd_epi16(u8x8_epi32(mn + 16 * (2 * c)), xs0);
                __m256 f = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(imin), _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
                ac[h] = accum(ac[h], X.d[b0], f);
                isum = _mm256_madd_epi16(phi[h], sc_pair(sc + 16 * (2 * c + 1)));
                imin = _mm256_madd_epi16(u8x8_epi32(mn + 16 * (2 * c + 1)), xs1);
                f = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(imin), _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
                ac[h] = accum(ac[h], X.d[b1], f);
            }
        }
    }
    acc[0] = ac[0];
    acc[1] = ac[1];
}

/* One activation row of Q5_K over a whole group (see k_q4_k_row): each quant word and
 * each qh word loaded once for the two blocks of its nibbles. */
AI void k_q5_k_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const int64_t nu = X.nb / 8;
    const int pf = cpu_kq_prefetch(CPU_ISA_AVX2, CPU_KQ_Q5_K);
    __m256 ac[2] = {acc[0], acc[1]};
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * MM_REC_Q5_K, *ahead = rec + nu * MM_REC_Q5_K;
        UNROLL for (int c = 0; c < 4; c++) {
            if (pf & CPU_PF_ROW) PF_ROW(ahead, MM_REC_Q5_K, c, 4);
            if (pf & CPU_PF_SPREAD) PF_SPREAD(rec, MM_REC_Q5_K, c, 4);
            const int64_t b0 = u * 8 + 2 * c, b1 = b0 + 1;
            const int8_t *x0 = X.q + 32 * b0, *x1 = X.q + 32 * b1;
            const __m256i xs0 = xsum_pair(&X, b0), xs1 = xsum_pair(&X, b1);
            /* step-major over both halves, as k_q4_k_row; plo/phi[2 * h + t / 4] */
            __m256i plo[4], phi[4];
            UNROLL for (int i = 0; i < 4; i++) plo[i] = phi[i] = _mm256_setzero_si256();
            UNROLL for (int t = 0; t < 8; t++) {
                const __m256i bx0 = bcast4(x0 + 4 * t), bx1 = bcast4(x1 + 4 * t);
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m256i W = ldw(rec + 64 * (8 * c + t) + 32 * h);
                    const __m256i H = ldw(rec + 2368 + 64 * t + 32 * h);
                    const __m256i q0 = _mm256_or_si256(_mm256_and_si256(W, m4), q5_hbit(H, 2 * c));
                    const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(W, 4), m4), q5_hbit(H, 2 * c + 1));
                    plo[2 * h + t / 4] = _mm256_add_epi16(plo[2 * h + t / 4], _mm256_maddubs_epi16(q0, bx0));
                    phi[2 * h + t / 4] = _mm256_add_epi16(phi[2 * h + t / 4], _mm256_maddubs_epi16(q1, bx1));
                }
            }
            UNROLL for (int h = 0; h < 2; h++) {
                const __m256 d = f16x8(rec + 2048 + 16 * h), dmin = f16x8(rec + 2080 + 16 * h);
                const uint8_t *sc = rec + 2112 + 8 * h, *mn = rec + 2240 + 8 * h;
                const __m256i s0 = sc_pair(sc + 16 * (2 * c)), s1 = sc_pair(sc + 16 * (2 * c + 1));
                __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(plo[2 * h], s0), _mm256_madd_epi16(plo[2 * h + 1], s0));
                __m256i imin = _mm256_madd_epi16(u8x8_epi32(mn + 16 * (2 * c)), xs0);
                __m256 f = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(imin), _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
                ac[h] = accum(ac[h], X.d[b0], f);
                isum = _mm256_add_epi32(_mm256_madd_epi16(phi[2 * h], s1), _mm256_madd_epi16(phi[2 * h + 1], s1));
                imin = _mm256_madd_epi16(u8x8_epi32(mn + 16 * (2 * c + 1)), xs1);
                f = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(imin), _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
                ac[h] = accum(ac[h], X.d[b1], f);
            }
        }
    }
    acc[0] = ac[0];
    acc[1] = ac[1];
}

/* One activation row over a whole 16-column group (see k_q4_k_row). The four blocks of
 * a 128-element half n share their high-bit words, and blocks qtr, qtr + 2 their low
 * words: each word is loaded once per half and its four block factors are computed
 * before they enter acc in block order, as kq_block of matmul_kq_avx2.c does. */
AI void k_q6_k_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const int64_t nu = X.nb / 8;
    const int pf = cpu_kq_prefetch(CPU_ISA_AVX2, CPU_KQ_Q6_K);
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * MM_REC_Q6_K, *ahead = rec + nu * MM_REC_Q6_K;
        for (int n = 0; n < 2; n++) {
            UNROLL for (int h = 0; h < 2; h++) {
                if (pf & CPU_PF_ROW) PF_ROW(ahead, MM_REC_Q6_K, 2 * n + h, 4);
                if (pf & CPU_PF_SPREAD) PF_SPREAD(rec, MM_REC_Q6_K, 2 * n + h, 4);
                __m256 f[4];
                UNROLL for (int p = 0; p < 2; p++) {
                    /* pl/ph: the two 16-element halves of blocks qtr = p (A) and p + 2 (B) */
                    __m256i plA = _mm256_setzero_si256(), phA = plA, plB = plA, phB = plA;
                    const int8_t *xa = X.q + 32 * (u * 8 + 4 * n + p), *xb = xa + 64;
                    UNROLL for (int t = 0; t < 8; t += 2) {
                        __m256i sA = _mm256_setzero_si256(), sB = sA;
                        UNROLL for (int e = 0; e < 2; e++) {
                            const __m256i L = ldw(rec + MM_Q6_QL(16 * n + 8 * p + t + e) + 32 * h);
                            const __m256i H = ldw(rec + MM_Q6_QH(8 * n + t + e) + 32 * h);
                            const __m256i hA = p ? _mm256_slli_epi16(H, 2) : _mm256_slli_epi16(H, 4);
                            const __m256i hB = p ? _mm256_srli_epi16(H, 2) : H;
                            const __m256i qA = _mm256_or_si256(_mm256_and_si256(L, m4), _mm256_and_si256(hA, m30));
                            const __m256i qB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), m4),
                                                               _mm256_and_si256(hB, m30));
                            sA = _mm256_add_epi16(sA, _mm256_maddubs_epi16(qA, bcast4(xa + 4 * (t + e))));
                            sB = _mm256_add_epi16(sB, _mm256_maddubs_epi16(qB, bcast4(xb + 4 * (t + e))));
                        }
                        if (t < 4) {
                            plA = _mm256_add_epi32(plA, madd1(sA));
                            plB = _mm256_add_epi32(plB, madd1(sB));
                        } else {
                            phA = _mm256_add_epi32(phA, madd1(sA));
                            phB = _mm256_add_epi32(phB, madd1(sB));
                        }
                    }
                    const __m256 d = f16x8(rec + MM_Q6_D + 16 * h);
                    UNROLL for (int q = 0; q < 2; q++) {
                        const int ab = 4 * n + p + 2 * q;
                        const int64_t b = u * 8 + ab;
                        const int16_t *xs = X.s + 2 * b;
                        const __m256i pl = _mm256_sub_epi32(q ? plB : plA, _mm256_set1_epi32(32 * xs[0]));
                        const __m256i ph = _mm256_sub_epi32(q ? phB : phA, _mm256_set1_epi32(32 * xs[1]));
                        const __m256i sl = i8x8_epi32(rec + MM_Q6_SC + 16 * (2 * ab) + 8 * h);
                        const __m256i sh = i8x8_epi32(rec + MM_Q6_SC + 16 * (2 * ab + 1) + 8 * h);
                        const __m256i isum = _mm256_add_epi32(_mm256_mullo_epi32(sl, pl), _mm256_mullo_epi32(sh, ph));
                        f[p + 2 * q] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum));
                    }
                }
                UNROLL for (int qtr = 0; qtr < 4; qtr++) acc[h] = accum(acc[h], X.d[u * 8 + 4 * n + qtr], f[qtr]);
            }
        }
    }
}

/* Q3_K's plane form (MM_REC_PL; UE = 256, NOMIN, not ONE), columns 8h..8h+7: the code
 * n = q + 4 of step t is bits 2(t % 4) of low word 2j + t / 4 with bit t of high word j
 * moved to bit 2; n is unsigned (0..7), so maddubs(n, x) needs no sign trick: a pair is
 * <= 2 * 7 * 127, a half's four steps summed in s16 <= 7112, and madd(., 1) gives
 * dot + 4 * (half sum of x) (< 2^15). The two halves go into one int16 pair per lane, less
 * (4 * xs0, 4 * xs1), and one madd with the record's int16 scale pairs gives
 * isum = s0 * dlo + s1 * dhi exactly; then k_decoded's NOMIN factor and fold. */
AI __m256i pl_high(__m256i H, int t) {
    const __m256i m = _mm256_set1_epi8(4);
    return t <= 2 ? _mm256_and_si256(_mm256_slli_epi16(H, 2 - t), m) : _mm256_and_si256(_mm256_srli_epi16(H, t - 2), m);
}
AI void k_pl(const mm_args *a, const uint8_t *grp, int64_t i0, int h, const int R, __m256 *acc) {
    const xrows X = rows_at(a, i0);
    const int64_t nu = X.nb / 8;
    const int rb = MM_REC_PL(256);
    const __m256i m3 = _mm256_set1_epi8(0x03);
    const int pf = h ? 0 : cpu_kq_prefetch(CPU_ISA_AVX2, CPU_KQ_DECODED); /* as k_decoded */
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * rb, *ahead = rec + nu * rb;
        if (pf & CPU_PF_BURST) prefetch_rec(rec, rb, 0);
        const __m256 d = _mm256_loadu_ps((const float *)(rec + MM_PL_D(256) + 32 * h));
        for (int j = 0; j < 8; j++) {
            const int64_t b = u * 8 + j;
            if (pf & CPU_PF_ROW) PF_ROW(ahead, rb, j, 8);
            if (pf & CPU_PF_SPREAD) PF_SPREAD(rec, rb, j, 8);
            const __m256i H = ldw(rec + MM_PL_H(256) + 64 * j + 32 * h);
            __m256i Q[8];
            UNROLL for (int p = 0; p < 2; p++) {
                const __m256i W = ldw(rec + 64 * (2 * j + p) + 32 * h);
                UNROLL for (int k = 0; k < 4; k++)
                    Q[4 * p + k] = _mm256_or_si256(_mm256_and_si256(k ? _mm256_srli_epi16(W, 2 * k) : W, m3),
                                                   pl_high(H, 4 * p + k));
            }
            const __m256i S = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(rec + MM_PL_S(256) + 32 * j + 16 * h)));
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *x = X.q + r * X.k + 32 * b;
                __m256i lo = _mm256_maddubs_epi16(Q[0], bcast4(x)), hi = _mm256_maddubs_epi16(Q[4], bcast4(x + 16));
                UNROLL for (int t = 1; t < 4; t++) {
                    lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(Q[t], bcast4(x + 4 * t)));
                    hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(Q[4 + t], bcast4(x + 16 + 4 * t)));
                }
                const __m256i xs4 = _mm256_slli_epi16(bcast4((const int8_t *)(X.s + r * 2 * X.nb + 2 * b)), 2);
                const __m256i P = _mm256_blend_epi16(madd1(lo), _mm256_slli_epi32(madd1(hi), 16), 0xAA);
                const __m256i isum = _mm256_madd_epi16(_mm256_sub_epi16(P, xs4), S);
                acc[r] = accum(acc[r], X.d[r * X.nb + b], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
            }
        }
    }
}

/* Decoded types: signed q, dots by maddubs(|q|, sign(x, q)): a pair is <= 2*127*127, no
 * saturation. The byte form (NIB = 0, MM_REC_DEC) stores q + 128; the nibble form (NIB = 1,
 * MM_REC_NIB) codes, looked up in the 16-byte table codes[]: word 4j + t gives the byte
 * form's words 8j + t (low nibbles) and 8j + 4 + t (high nibbles). */
AI void k_decoded(const mm_args *a, const uint8_t *grp, int64_t i0, int h, const int R, __m256 *acc, const int UE,
                  const int NIB, const int ONE, const int NOMIN) {
    if (NIB == MM_FORM_PL) {
        k_pl(a, grp, i0, h, R, acc);
        return;
    }
    const xrows X = rows_at(a, i0);
    const int n32 = UE / 32;
    const int64_t nu = X.nb / n32;
    const mm_dec_layout L = mm_dec_layout_of(NIB, UE, ONE, NOMIN);
    const int rb = L.rec;
    const __m256i off = _mm256_set1_epi8((char)0x80), m4 = _mm256_set1_epi8(0x0F);
    const __m256i table = NIB ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a->kt->q->codes))
                              : _mm256_setzero_si256();
    const int pf = h ? 0 : cpu_kq_prefetch(CPU_ISA_AVX2, CPU_KQ_DECODED); /* on the first half's pass */
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * rb, *ahead = rec + nu * rb;
        if (pf & CPU_PF_BURST) prefetch_rec(rec, rb, 0);
        const __m256 d = _mm256_loadu_ps((const float *)(rec + L.d + 32 * h));
        const __m256 dmin = NOMIN ? d : _mm256_loadu_ps((const float *)(rec + L.dmin + 32 * h));
        for (int j = 0; j < n32; j++) {
            const int64_t b = u * n32 + j;
            if (pf & CPU_PF_ROW) PF_ROW(ahead, rb, j, n32);
            if (pf & CPU_PF_SPREAD) PF_SPREAD(rec, rb, j, n32);
            __m256i W[8], AW[8];
            if (NIB) {
                UNROLL for (int t = 0; t < 4; t++) {
                    const __m256i N = ldw(rec + 64 * (4 * j + t) + 32 * h);
                    W[t] = _mm256_shuffle_epi8(table, _mm256_and_si256(N, m4));
                    W[4 + t] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(N, 4), m4));
                }
            } else {
                UNROLL for (int t = 0; t < 8; t++) W[t] = _mm256_xor_si256(ldw(rec + 64 * (8 * j + t) + 32 * h), off);
            }
            UNROLL for (int t = 0; t < 8; t++) AW[t] = _mm256_abs_epi8(W[t]);
            const int a0 = 16 * mm_dec_sidx(&L, j, 0) + 8 * h, a1 = 16 * mm_dec_sidx(&L, j, 1) + 8 * h;
            const __m256i s0 = i8x8_epi32(rec + L.s + a0), s1 = ONE ? s0 : i8x8_epi32(rec + L.s + a1);
            const __m256i m0 = NOMIN ? s0 : i8x8_epi32(rec + L.m + a0), m1 = NOMIN ? s0 : i8x8_epi32(rec + L.m + a1);
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *x = X.q + r * X.k + 32 * b;
                const int16_t *xs = X.s + r * 2 * X.nb + 2 * b;
                __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256(), isum, imin = hi;
                UNROLL for (int t = 0; t < 4; t++) {
                    lo = _mm256_add_epi32(lo, madd1(_mm256_maddubs_epi16(AW[t], _mm256_sign_epi8(bcast4(x + 4 * t), W[t]))));
                    hi = _mm256_add_epi32(hi, madd1(_mm256_maddubs_epi16(AW[4 + t], _mm256_sign_epi8(bcast4(x + 16 + 4 * t), W[4 + t]))));
                }
                if (ONE) { /* s * (dlo + dhi) */
                    isum = _mm256_mullo_epi32(s0, _mm256_add_epi32(lo, hi));
                    if (!NOMIN) imin = _mm256_mullo_epi32(m0, _mm256_set1_epi32(xs[0] + xs[1]));
                } else {
                    isum = _mm256_add_epi32(_mm256_mullo_epi32(s0, lo), _mm256_mullo_epi32(s1, hi));
                    if (!NOMIN)
                        imin = _mm256_add_epi32(_mm256_mullo_epi32(m0, _mm256_set1_epi32(xs[0])),
                                                _mm256_mullo_epi32(m1, _mm256_set1_epi32(xs[1])));
                }
                const __m256 di = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum));
                const __m256 f = NOMIN ? di : _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(imin), di);
                acc[r] = accum(acc[r], X.d[r * X.nb + b], f);
            }
        }
    }
}
#define RUN_ROWS(K, R)                                                                       \
    do {                                                                                     \
        __m256 acc[R];                                                                       \
        UNROLL for (int r = 0; r < (R); r++) acc[r] = _mm256_setzero_ps();                   \
        K(a, grp, i0, h, (R), acc);                                                          \
        UNROLL for (int r = 0; r < (R); r++)                                                 \
            store_cols(a->y + (i0 + r) * a->ldy + g * MM_NC + 8 * h, acc[r], cols);          \
    } while (0)

/* A single row over whole groups (ROWK(a, grp, i0, acc[2]): lanes of both halves). */
#define RUN_ROW(ROWK)                                               \
    do {                                                            \
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; \
        ROWK(a, grp, i0, acc);                                      \
        float *yr = a->y + i0 * a->ldy + g * MM_NC;                 \
        const int64_t cols = w->n - g * MM_NC;                      \
        store_cols(yr, acc[0], cols < 8 ? cols : 8);                \
        if (cols > 8) store_cols(yr + 8, acc[1], cols - 8);         \
    } while (0)

/* ROWK: the kernel of a row block of one row (R = 1: decode) when HAS_ROW. */
#define GROUP_LOOP_ROW(NAME, K, REC, ROWK, HAS_ROW)                                         \
    void NAME(const mm_args *a, int64_t g0, int64_t g1) {                                   \
        const cpu_weight *w = a->w;                                                         \
        const int64_t nu = w->k / a->kt->q->block_elems;                                    \
        for (int64_t i0 = 0; i0 < a->m; i0 += MR) {                                         \
            const int64_t R = a->m - i0 < MR ? a->m - i0 : MR;                              \
            for (int64_t g = g0; g < g1; g++) {                                             \
                const uint8_t *grp = (const uint8_t *)w->packed + (size_t)(g * nu) * (REC); \
                if ((HAS_ROW) && R == 1) {                                                  \
                    RUN_ROW(ROWK);                                                          \
                    continue;                                                               \
                }                                                                           \
                for (int h = 0; h < 2; h++) {                                               \
                    const int64_t cols = w->n - g * MM_NC - 8 * h;                          \
                    if (cols <= 0) break;                                                   \
                    switch (R) {                                                            \
                    case 1: RUN_ROWS(K, 1); break;                                          \
                    case 2: RUN_ROWS(K, 2); break;                                          \
                    case 3: RUN_ROWS(K, 3); break;                                          \
                    default: RUN_ROWS(K, 4); break;                                         \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

/* Types without a row kernel name no_row (never called). */
AI void no_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m256 *acc) {
    (void)a, (void)grp, (void)i0, (void)acc;
}
#define GROUP_LOOP(NAME, K, REC) GROUP_LOOP_ROW(NAME, K, REC, no_row, 0)

GROUP_LOOP(mm_avx2_q4_0, k_q4_0, MM_REC_Q4_0)
GROUP_LOOP(mm_avx2_q4_1, k_q4_1, MM_REC_Q4_1)
GROUP_LOOP_ROW(mm_avx2_q8_0, k_q8_0, MM_REC_Q8_0, k_q8_0_row, 1)
/* K-quants: from KQ_ROWS_MIN rows the unpacked-chunk kernels (mm_avx2_q*_K_rows); fewer
 * rows run the one-row kernel ROWK row by row over the task's groups (the first row
 * streams them from DRAM, the others find them in L2). On a Zen 1 core 2 or 3 rows were
 * faster that way: unpacking a record costs about as much as one row's dots over it
 * (bench/README.md). Both perform mm_unit_*'s operations per block, so the choice by m
 * changes no bit. */
#define KQ_ROWS_MIN 4
#define KQ_LOOP(NAME, ROWS, ROWK, REC)                                                      \
    void NAME(const mm_args *a, int64_t g0, int64_t g1) {                                   \
        if (a->m >= KQ_ROWS_MIN) {                                                          \
            ROWS(a, g0, g1);                                                                \
            return;                                                                         \
        }                                                                                   \
        const cpu_weight *w = a->w;                                                         \
        const int64_t nu = w->k / 256;                                                      \
        for (int64_t i0 = 0; i0 < a->m; i0++)                                               \
            for (int64_t g = g0; g < g1; g++) {                                             \
                const uint8_t *grp = (const uint8_t *)w->packed + (size_t)(g * nu) * (REC); \
                RUN_ROW(ROWK);                                                              \
            }                                                                               \
    }
KQ_LOOP(mm_avx2_q4_K, mm_avx2_q4_K_rows, k_q4_k_row, MM_REC_Q4_K)
KQ_LOOP(mm_avx2_q5_K, mm_avx2_q5_K_rows, k_q5_k_row, MM_REC_Q5_K)
KQ_LOOP(mm_avx2_q6_K, mm_avx2_q6_K_rows, k_q6_k_row, MM_REC_Q6_K)
/* Each decoded type's kernel: k_decoded specialised on its form and integer-form facts. */
#define DECODED_TYPE(t, T, UE, NIB, ONE, NOMIN)                                                           \
    AI void k_##t(const mm_args *a, const uint8_t *grp, int64_t i0, int h, const int R, __m256 *acc) { \
        k_decoded(a, grp, i0, h, R, acc, UE, NIB, ONE, NOMIN);                                         \
    }                                                                                                  \
    GROUP_LOOP(mm_avx2_##t, k_##t, MM_REC_DECODED(UE, NIB, ONE, NOMIN))
MM_DECODED(DECODED_TYPE)

/* Exact max / integer sum of 8 lanes (order cannot matter for these). */
AI float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
AI int hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

void mm_quantize_row_avx2(const float *x, int64_t k, int8_t *q, float *d, int16_t *s) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 fmax = _mm256_set1_ps(3.40282347e+38f);
    for (int64_t b = 0; b < k / MM_QK; b++) {
        __m256 v[4], amax = _mm256_setzero_ps();
        int bad = 0;
        UNROLL for (int t = 0; t < 4; t++) {
            v[t] = _mm256_loadu_ps(x + 32 * b + 8 * t);
            __m256 av = _mm256_and_ps(v[t], absmask);
            bad |= _mm256_movemask_ps(_mm256_cmp_ps(av, fmax, _CMP_NLE_UQ));
            amax = _mm256_max_ps(amax, av);
        }
        float id;
        if (!mm_block_scale(bad ? 0.0f : hmax8(amax), bad != 0, &d[b], &id)) {
            memset(q + 32 * b, 0, 32);
            s[2 * b] = s[2 * b + 1] = 0;
            continue;
        }
        const __m256 vid = _mm256_set1_ps(id);
        __m256i qi[4];
        UNROLL for (int t = 0; t < 4; t++) qi[t] = _mm256_cvtps_epi32(_mm256_mul_ps(v[t], vid));
        /* Values are within [-127, 127]: the saturating packs are plain narrowing. */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + 32 * b), p);
        s[2 * b] = (int16_t)hsum8i(_mm256_add_epi32(qi[0], qi[1]));
        s[2 * b + 1] = (int16_t)hsum8i(_mm256_add_epi32(qi[2], qi[3]));
    }
}

/* ---- Float weights: lane c = column c; one FMA chain over k per output. ----
 * A tile is R rows x one 16-column group (two ymm halves): per k, the group's 16 packed
 * weights and one broadcast activation per row. */
#define FT2_R 4

AI void fload16(uint32_t type, const uint8_t *p, __m256 *lo, __m256 *hi) {
    switch (type) {
    case INVAR_T_F16:
        *lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        *hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
        break;
    case INVAR_T_BF16:
        *lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
        *hi = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 16))), 16));
        break;
    default:
        *lo = _mm256_loadu_ps((const float *)p);
        *hi = _mm256_loadu_ps((const float *)p + 8);
    }
}

AI void ftile2(const mm_args *a, const uint32_t type, int64_t i0, const int R, int64_t g) {
    const cpu_weight *w = a->w;
    const int64_t k = w->k, rec = MM_FREC(type);
    const uint8_t *panel = (const uint8_t *)w->packed + (size_t)g * (size_t)k * (size_t)rec;
    __m256 lo[FT2_R], hi[FT2_R];
    UNROLL for (int r = 0; r < R; r++) lo[r] = hi[r] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < k; kk++) {
        __m256 wl, wh;
        fload16(type, panel + kk * rec, &wl, &wh);
        UNROLL for (int r = 0; r < R; r++) {
            const __m256 xb = _mm256_set1_ps(a->x[(i0 + r) * a->ldx + kk]);
            lo[r] = _mm256_fmadd_ps(xb, wl, lo[r]);
            hi[r] = _mm256_fmadd_ps(xb, wh, hi[r]);
        }
    }
    const int64_t nc = w->n - g * MM_NC < MM_NC ? w->n - g * MM_NC : MM_NC;
    UNROLL for (int r = 0; r < R; r++) {
        float *y = a->y + (i0 + r) * a->ldy + g * MM_NC;
        store_cols(y, lo[r], nc < 8 ? nc : 8);
        if (nc > 8) store_cols(y + 8, hi[r], nc - 8);
    }
}

AI void float_groups2(const mm_args *a, const uint32_t type, int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; g++) {
        int64_t i0 = 0;
        for (; i0 + FT2_R <= a->m; i0 += FT2_R) ftile2(a, type, i0, FT2_R, g);
        switch (a->m - i0) {
        case 1: ftile2(a, type, i0, 1, g); break;
        case 2: ftile2(a, type, i0, 2, g); break;
        case 3: ftile2(a, type, i0, 3, g); break;
        default: break;
        }
    }
}

void mm_avx2_f32(const mm_args *a, int64_t g0, int64_t g1) { float_groups2(a, INVAR_T_F32, g0, g1); }
void mm_avx2_f16(const mm_args *a, int64_t g0, int64_t g1) { float_groups2(a, INVAR_T_F16, g0, g1); }
void mm_avx2_bf16(const mm_args *a, int64_t g0, int64_t g1) { float_groups2(a, INVAR_T_BF16, g0, g1); }
