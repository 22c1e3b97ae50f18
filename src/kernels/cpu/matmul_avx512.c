/* AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels.
 *
 * Same bits as matmul_scalar.c by construction (argument at the top of that file):
 * lane c of every vector is output column c of a 16-column group; the integer block
 * dot products come from vpdpbusd (u8 x s8, exact int32), and the float operations
 * per lane are the scalar term sequence. Rows are processed R at a time (R = 1..8) to
 * reuse each unpacked weight block; every row gets the same per-lane operations
 * whatever R is, so the row blocking (and thus m) cannot change a bit.
 *
 * Q4_0, Q4_1 and Q8_0 (the panel types) read the activations as 8-row panels
 * (matmul_internal.h) and, from three panels up, an unpacked copy of each weight group
 * in L1 (run_panels). K-quants: one row (decode) reads the row layout with the one-row
 * kernels here; from two rows, panels (matmul_kq_avx512.c; the decoded types,
 * matmul_dec_avx512.c). Float types: see below.
 *
 * dpbusd wants unsigned x signed: nibble and six-bit quants are already unsigned and
 * their offsets (-8, -32) come out of the activation sums; Q8_0 weights are made
 * unsigned by w ^ 0x80 = w + 128, and 128 * sum(x) is subtracted again. */
#include <immintrin.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_avx512_ops.h"
#include "kernels/cpu/matmul_internal.h"

#define MR 8

AI __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
AI __m512i dp(__m512i acc, __m512i w, const int8_t *x) { return _mm512_dpbusd_epi32(acc, w, bcast4(x)); }

/* acc = fma(dx, f, acc), the scalar reference's fmaf. */
AI __m512 accum(__m512 acc, float dx, __m512 f) { return _mm512_fmadd_ps(_mm512_set1_ps(dx), f, acc); }

/* The factor of a Q4_K / Q5_K block from its exact dot p and sub-block j's scale and
 * min (mm_unit_q4_K's operations), entered into acc. */
AI __m512 kmin_block(__m512 acc, const uint8_t *rec, int j, __m512 d, __m512 dmin, __m512i p, int xs, float dx) {
    const __m512i isum = _mm512_mullo_epi32(u8x16_epi32(rec + 2112 + 16 * j), p);
    const __m512i imin = _mm512_mullo_epi32(u8x16_epi32(rec + 2240 + 16 * j), _mm512_set1_epi32(xs));
    const __m512 f = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(imin), _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
    return accum(acc, dx, f);
}

/* One activation row (decode) of Q4_K (Q5 = 0) or Q5_K (Q5 = 1): each quant word (and
 * qh word) loaded once for the two blocks of its low and high nibbles, four independent
 * dpbusd chains; the next group's record u prefetched into L2 (PF_ROW), spread over the
 * four word chunks (1.05-1.35x the GB/s of PF_SPREAD at a DRAM footprint on a 2-vCPU
 * Xeon: bench/results/cpu_pfrow-kquant-m1.txt). Per lane the
 * operations and their order are mm_unit_q4_K's / mm_unit_q5_K's (the dots are exact
 * integers). */
AI void k_kmin_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m512 *acc, const int Q5) {
    const xrows X = rows_at(a, i0);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int64_t nu = X.nb / 8;
    const int RB = Q5 ? MM_REC_Q5_K : MM_REC_Q4_K;
    const int pf = cpu_kq_prefetch(CPU_ISA_AVX512, Q5 ? CPU_KQ_Q5_K : CPU_KQ_Q4_K);
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * RB, *ahead = rec + nu * RB;
        const __m512 d = f16x16(rec + 2048), dmin = f16x16(rec + 2080);
        UNROLL for (int c = 0; c < 4; c++) {
            if (pf & CPU_PF_ROW) PF_ROW(ahead, RB, c, 4);
            if (pf & CPU_PF_SPREAD) PF_SPREAD(rec, RB, c, 4);
            const int64_t b0 = u * 8 + 2 * c, b1 = b0 + 1;
            const int8_t *x0 = X.q + 32 * b0, *x1 = X.q + 32 * b1;
            __m512i p0[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, p1[2] = {p0[0], p0[0]};
            UNROLL for (int t = 0; t < 8; t++) {
                const __m512i W = ldw(rec + 64 * (8 * c + t));
                __m512i lo = _mm512_and_si512(W, m4), hi = _mm512_and_si512(_mm512_srli_epi16(W, 4), m4);
                if (Q5) {
                    const __m512i H = ldw(rec + 2368 + 64 * t);
                    lo = _mm512_or_si512(lo, q5_hbit(H, 2 * c));
                    hi = _mm512_or_si512(hi, q5_hbit(H, 2 * c + 1));
                }
                p0[t & 1] = dp(p0[t & 1], lo, x0 + 4 * t);
                p1[t & 1] = dp(p1[t & 1], hi, x1 + 4 * t);
            }
            acc[0] = kmin_block(acc[0], rec, 2 * c, d, dmin, _mm512_add_epi32(p0[0], p0[1]), xsum(&X, 0, b0), X.d[b0]);
            acc[0] = kmin_block(acc[0], rec, 2 * c + 1, d, dmin, _mm512_add_epi32(p1[0], p1[1]), xsum(&X, 0, b1), X.d[b1]);
        }
    }
}
AI void k_q4_k_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m512 *acc) { k_kmin_row(a, grp, i0, acc, 0); }
AI void k_q5_k_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m512 *acc) { k_kmin_row(a, grp, i0, acc, 1); }

/* One activation row of Q6_K (decode). Per 128-element half n and step t the three
 * words of the record's streaming order (ql 16n+t, ql 16n+8+t, qh 8n+t: consecutive
 * lines) are loaded once and give one quant vector of each of the half's four blocks,
 * into eight independent dpbusd chains ([16-element half][block]); the record is read
 * strictly in address order. Prefetch, spread over the 16 steps: the next group's record u
 * into L2 (PF_ROW) and this group's record PF_DIST ahead into L1 (PF_SPREAD); both together
 * read faster than either alone at a DRAM footprint (bench/results/cpu_pfrow-kquant-m1.txt).
 * The block factors
 * then enter acc in block order with mm_unit_q6_K's operations (the dots are exact). */
AI void k_q6_k_row(const mm_args *a, const uint8_t *grp, int64_t i0, __m512 *acc) {
    const xrows X = rows_at(a, i0);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const int64_t nu = X.nb / 8;
    const int pf = cpu_kq_prefetch(CPU_ISA_AVX512, CPU_KQ_Q6_K);
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * MM_REC_Q6_K, *ahead = rec + nu * MM_REC_Q6_K;
        UNROLL for (int n = 0; n < 2; n++) {
            const int8_t *x = X.q + 32 * (u * 8 + 4 * n);
            __m512i P[2][4]; /* [16-element half][qtr] */
            UNROLL for (int q = 0; q < 4; q++) P[0][q] = P[1][q] = _mm512_setzero_si512();
            UNROLL for (int t = 0; t < 8; t++) {
                if (pf & CPU_PF_ROW) PF_ROW(ahead, MM_REC_Q6_K, 8 * n + t, 16);
                if (pf & CPU_PF_SPREAD) PF_SPREAD(rec, MM_REC_Q6_K, 8 * n + t, 16);
                const __m512i LA = ldw(rec + MM_Q6_QL(16 * n + t)), LB = ldw(rec + MM_Q6_QL(16 * n + 8 + t));
                const __m512i H = ldw(rec + MM_Q6_QH(8 * n + t));
                const __m512i q[4] = {
                    _mm512_or_si512(_mm512_and_si512(LA, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30)),
                    _mm512_or_si512(_mm512_and_si512(LB, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(LA, 4), m4), _mm512_and_si512(H, m30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(LB, 4), m4),
                                    _mm512_and_si512(_mm512_srli_epi16(H, 2), m30))};
                UNROLL for (int qtr = 0; qtr < 4; qtr++) P[t / 4][qtr] = dp(P[t / 4][qtr], q[qtr], x + 32 * qtr + 4 * t);
            }
            const __m512 d = f16x16(rec + MM_Q6_D);
            UNROLL for (int qtr = 0; qtr < 4; qtr++) {
                const int ab = 4 * n + qtr;
                const int64_t b = u * 8 + ab;
                const int16_t *s = X.s + 2 * b;
                const __m512i pl = _mm512_sub_epi32(P[0][qtr], _mm512_set1_epi32(32 * s[0]));
                const __m512i ph = _mm512_sub_epi32(P[1][qtr], _mm512_set1_epi32(32 * s[1]));
                const __m512i sl = i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * ab));
                const __m512i sh = i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * ab + 1));
                const __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(sl, pl), _mm512_mullo_epi32(sh, ph));
                acc[0] = accum(acc[0], X.d[b], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
            }
        }
    }
}

/* Q3_K's plane form (MM_REC_PL; UE = 256, NOMIN, not ONE). Per 32-block j: the code
 * n = q + 4 of step t is the two bits 2(t % 4) of low word 2j + t / 4 plus 4 where bit t
 * of high word j is set (vptestmb, masked vpaddb); dpbusd(n, x) of each half gives
 * dot + 4 * (half sum of x), and the two halves' chains (|.| <= 16 * 7 * 127 < 2^15) go
 * into one int16 pair per lane, less (4 * xs0, 4 * xs1), so that one vpmaddwd with the
 * record's int16 scale pairs gives isum = s0 * dlo + s1 * dhi, exactly. Then the NOMIN
 * factor, f = d * (float)isum, acc = fma(dx, f, acc): k_decoded's operations. */
AI void k_pl(const mm_args *a, const uint8_t *grp, int64_t i0, const int R, __m512 *acc) {
    const xrows X = rows_at(a, i0);
    const int64_t nu = X.nb / 8;
    const int rb = MM_REC_PL(256);
    const __m512i m3 = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(4);
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * rb;
        /* The next group's record u (one row of records ahead: the group the task runs next,
         * or past its range, harmlessly) into L2, a few lines per 32-block (PF_ROW). */
        const uint8_t *ahead = rec + nu * rb;
        const __m512 d = _mm512_loadu_ps((const void *)(rec + MM_PL_D(256)));
        UNROLL for (int j = 0; j < 8; j++) {
            PF_ROW(ahead, rb, j, 8);
            const int64_t b = u * 8 + j;
            const __m512i H = ldw(rec + MM_PL_H(256) + 64 * j);
            __m512i Q[8];
            UNROLL for (int p = 0; p < 2; p++) {
                const __m512i W = ldw(rec + 64 * (2 * j + p));
                UNROLL for (int k = 0; k < 4; k++) {
                    const int t = 4 * p + k;
                    const __m512i lo2 = _mm512_and_si512(k ? _mm512_srli_epi16(W, 2 * k) : W, m3);
                    const __mmask64 hb = _mm512_test_epi8_mask(H, _mm512_set1_epi8((char)(1 << t)));
                    Q[t] = _mm512_mask_add_epi8(lo2, hb, lo2, four);
                }
            }
            const __m512i S = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(rec + MM_PL_S(256) + 32 * j)));
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *x = X.q + r * X.k + 32 * b;
                __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                UNROLL for (int t = 0; t < 4; t++) {
                    lo = dp(lo, Q[t], x + 4 * t);
                    hi = dp(hi, Q[4 + t], x + 16 + 4 * t);
                }
                /* (xs0, xs1) as an int16 pair per lane, times 4 (|4 * xs| <= 4 * 16 * 127) */
                const __m512i xs4 = _mm512_slli_epi16(bcast4((const int8_t *)(X.s + r * 2 * X.nb + 2 * b)), 2);
                const __m512i P = _mm512_mask_blend_epi16(0xAAAAAAAA, lo, _mm512_slli_epi32(hi, 16));
                const __m512i isum = _mm512_madd_epi16(_mm512_sub_epi16(P, xs4), S);
                acc[r] = accum(acc[r], X.d[r * X.nb + b], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
            }
        }
    }
}

/* Decoded types: q + 128 as unsigned bytes, so dpbusd gives dot + 128 * (half sum of x),
 * taken off again; then the factor of matmul_internal.h. The byte form (NIB = 0,
 * MM_REC_DEC) stores those bytes; the nibble form (NIB = 1, MM_REC_NIB) stores codes,
 * looked up in a 16-byte table of codes[n] + 128: word 4j + t gives the bytes of the byte
 * form's words 8j + t (low nibbles) and 8j + 4 + t (high nibbles). */
AI void k_decoded(const mm_args *a, const uint8_t *grp, int64_t i0, const int R, __m512 *acc, const int UE,
                  const int NIB, const int ONE, const int NOMIN) {
    if (NIB == MM_FORM_PL) {
        k_pl(a, grp, i0, R, acc);
        return;
    }
    const xrows X = rows_at(a, i0);
    const int n32 = UE / 32;
    const int64_t nu = X.nb / n32;
    const mm_dec_layout L = mm_dec_layout_of(NIB, UE, ONE, NOMIN);
    const int rb = L.rec;
    __m512i table = _mm512_setzero_si512();
    if (NIB) {
        uint8_t t16[16];
        for (int n = 0; n < 16; n++) t16[n] = (uint8_t)(a->kt->q->codes[n] + 128);
        table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t16));
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = grp + u * rb;
        prefetch_rec(rec, rb);
        const __m512 d = _mm512_loadu_ps((const void *)(rec + L.d));
        const __m512 dmin = NOMIN ? d : _mm512_loadu_ps((const void *)(rec + L.dmin));
        for (int j = 0; j < n32; j++) {
            const int64_t b = u * n32 + j;
            __m512i Q[8];
            if (NIB) {
                UNROLL for (int t = 0; t < 4; t++) {
                    const __m512i N = ldw(rec + 64 * (4 * j + t));
                    Q[t] = _mm512_shuffle_epi8(table, _mm512_and_si512(N, m4));
                    Q[4 + t] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(N, 4), m4));
                }
            } else {
                UNROLL for (int t = 0; t < 8; t++) Q[t] = ldw(rec + 64 * (8 * j + t));
            }
            const int a0 = 16 * mm_dec_sidx(&L, j, 0), a1 = 16 * mm_dec_sidx(&L, j, 1);
            const __m512i s0 = i8x16_epi32(rec + L.s + a0), s1 = ONE ? s0 : i8x16_epi32(rec + L.s + a1);
            const __m512i m0 = NOMIN ? s0 : i8x16_epi32(rec + L.m + a0);
            const __m512i m1 = NOMIN ? s0 : i8x16_epi32(rec + L.m + a1);
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *x = X.q + r * X.k + 32 * b;
                const int16_t *xs = X.s + r * 2 * X.nb + 2 * b;
                __m512i isum, imin = _mm512_setzero_si512();
                if (ONE) { /* s * (dlo + dhi): one chain over the 32 */
                    __m512i dot = _mm512_setzero_si512();
                    UNROLL for (int t = 0; t < 4; t++) dot = dp(dp(dot, Q[t], x + 4 * t), Q[4 + t], x + 16 + 4 * t);
                    const __m512i xs01 = _mm512_set1_epi32(xs[0] + xs[1]);
                    isum = _mm512_mullo_epi32(s0, _mm512_sub_epi32(dot, _mm512_slli_epi32(xs01, 7)));
                    if (!NOMIN) imin = _mm512_mullo_epi32(m0, xs01);
                } else {
                    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                    UNROLL for (int t = 0; t < 4; t++) {
                        lo = dp(lo, Q[t], x + 4 * t);
                        hi = dp(hi, Q[4 + t], x + 16 + 4 * t);
                    }
                    const __m512i xs0 = _mm512_set1_epi32(xs[0]), xs1 = _mm512_set1_epi32(xs[1]);
                    lo = _mm512_sub_epi32(lo, _mm512_slli_epi32(xs0, 7));
                    hi = _mm512_sub_epi32(hi, _mm512_slli_epi32(xs1, 7));
                    isum = _mm512_add_epi32(_mm512_mullo_epi32(s0, lo), _mm512_mullo_epi32(s1, hi));
                    if (!NOMIN) imin = _mm512_add_epi32(_mm512_mullo_epi32(m0, xs0), _mm512_mullo_epi32(m1, xs1));
                }
                const __m512 di = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum));
                const __m512 f = NOMIN ? di : _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(imin), di);
                acc[r] = accum(acc[r], X.d[r * X.nb + b], f);
            }
        }
    }
}
/* ---- Panel kernels (Q4_0, Q4_1, Q8_0): activations in panels (matmul_internal.h). ----
 * Row r of block b is at xb + 32r, its scale at xb + 32R + 4r and its aux at
 * xb + 36R + 4r: constant offsets from one pointer, folded into the instructions
 * (the broadcasts are memory operands). */


/* P[r] += the exact integer dot of one 32-block of weights Q (Q[t] holds elements
 * 4t..4t+3 of the 16 columns) with activation row r at xb + 32r, for r < R. Step-major
 * order: the R chains are independent, so consecutive instructions never wait on
 * each other and the scheduler holds fewer stalled uops than row after row. */
AI void dot_rows(const __m512i *Q, const uint8_t *xb, const int R, __m512i *P) {
    UNROLL for (int t = 0; t < 8; t++) UNROLL for (int r = 0; r < R; r++)
        P[r] = dpm(P[r], Q[t], xb + 32 * r + 4 * t);
}

/* One weight record of a panel type, ready for dot_rows: Q[t] (unsigned bytes), the
 * column scales dw and (Q4_1) mins mw. */
AI void unpack_rec(const uint32_t type, const uint8_t *rec, __m512i *Q, __m512 *dw, __m512 *mw) {
    if (type == INVAR_T_Q8_0) {
        const __m512i off = _mm512_set1_epi8((char)0x80);
        UNROLL for (int t = 0; t < 8; t++) Q[t] = _mm512_xor_si512(ldw(rec + 64 * t), off);
        *dw = f16x16(rec + 512);
        *mw = _mm512_setzero_ps();
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    UNROLL for (int t = 0; t < 4; t++) {
        const __m512i W = ldw(rec + 64 * t);
        Q[t] = _mm512_and_si512(W, m4);
        Q[4 + t] = _mm512_and_si512(_mm512_srli_epi16(W, 4), m4);
    }
    *dw = f16x16(rec + 256);
    *mw = type == INVAR_T_Q4_1 ? f16x16(rec + 288) : _mm512_setzero_ps();
}

AI size_t rec_bytes(const uint32_t type) {
    return type == INVAR_T_Q8_0 ? MM_REC_Q8_0 : type == INVAR_T_Q4_1 ? MM_REC_Q4_1 : MM_REC_Q4_0;
}

/* One block of one group for the R rows of a panel block xb: the scalar factors
 *   Q4_0, Q8_0: f = dw * (float)(dot + aux)          (aux = -8 / -128 * sum)
 *   Q4_1:       f = fma(mw, aux, dw * (float)dot)    (aux = (float)sum)
 * then acc = fma(dx, f, acc). */
AI void block_rows(const uint32_t type, const __m512i *Q, __m512 dw, __m512 mw, const uint8_t *xb,
                   const int R, __m512 *acc) {
    __m512i P[MM_PR];
    UNROLL for (int r = 0; r < R; r++)
        P[r] = type == INVAR_T_Q4_1 ? _mm512_setzero_si512() : bcasti(xb + 36 * R + 4 * r);
    dot_rows(Q, xb, R, P);
    UNROLL for (int r = 0; r < R; r++) {
        __m512 f = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(P[r]));
        if (type == INVAR_T_Q4_1) f = _mm512_fmadd_ps(mw, bcastf(xb + 36 * R + 4 * r), f);
        acc[r] = _mm512_fmadd_ps(bcastf(xb + 32 * R + 4 * r), f, acc[r]);
    }
}

/* Streaming: each record unpacked for this panel only (decode: few rows). */
AI void panel_stream(const uint32_t type, const uint8_t *grp, const uint8_t *xp, int64_t nb,
                     const int R, __m512 *acc) {
    const size_t rb = rec_bytes(type);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = grp + b * rb;
        prefetch_rec(rec, (int)rb);
        __m512i Q[8];
        __m512 dw, mw;
        unpack_rec(type, rec, Q, &dw, &mw);
        block_rows(type, Q, dw, mw, xp + b * R * MM_PB, R, acc);
    }
}

/* One row (decode, R = 1) streaming: two blocks at a time, each dot split into two
 * chains (even and odd steps), so four dpbusd chains run side by side instead of one
 * chain of eight per block; the integer sums are exact and the float operations are
 * block_rows' in block order. (PF_ROW's prefetch of the next group's record into L2
 * instead of prefetch_rec read only 1.02-1.04x faster for Q8_0 at a DRAM footprint, and
 * in panel_stream slower for Q4_1 at K = 8192: bench/results/cpu_pfrow-kquant-m1.txt.) */
AI void panel_stream_row(const uint32_t type, const uint8_t *grp, const uint8_t *xp, int64_t nb, __m512 *acc) {
    const size_t rb = rec_bytes(type);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i P[2][2];
        __m512 dw[2], mw[2];
        UNROLL for (int e = 0; e < 2; e++) {
            const uint8_t *rec = grp + (b + e) * rb, *xb = xp + (b + e) * MM_PB;
            prefetch_rec(rec, (int)rb);
            __m512i Q[8];
            unpack_rec(type, rec, Q, &dw[e], &mw[e]);
            P[e][0] = type == INVAR_T_Q4_1 ? _mm512_setzero_si512() : bcasti(xb + 36);
            P[e][1] = _mm512_setzero_si512();
            UNROLL for (int t = 0; t < 8; t++) P[e][t & 1] = dpm(P[e][t & 1], Q[t], xb + 4 * t);
        }
        UNROLL for (int e = 0; e < 2; e++) {
            const uint8_t *xb = xp + (b + e) * MM_PB;
            __m512 f = _mm512_mul_ps(dw[e], _mm512_cvtepi32_ps(_mm512_add_epi32(P[e][0], P[e][1])));
            if (type == INVAR_T_Q4_1) f = _mm512_fmadd_ps(mw[e], bcastf(xb + 36), f);
            acc[0] = _mm512_fmadd_ps(bcastf(xb + 32), f, acc[0]);
        }
    }
    if (b < nb) panel_stream(type, grp + b * rb, xp + b * MM_PB, nb - b, 1, acc);
}

/* Unpacked group (see run_panels): per block Q[8], dw, mw as 640 bytes. */
#define UREC 640
#ifndef UBUF
#define UBUF (24 * UREC) /* 768 of K per chunk: leaves L1 room for the activation panels */
#endif

AI void panel_unpacked(const uint32_t type, const uint8_t *U, const uint8_t *xp, int64_t nb,
                       const int R, __m512 *acc) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *u = U + b * UREC;
        __m512i Q[8];
        UNROLL for (int t = 0; t < 8; t++) Q[t] = _mm512_load_si512((const void *)(u + 64 * t));
        block_rows(type, Q, _mm512_load_ps((const void *)(u + 512)), _mm512_load_ps((const void *)(u + 576)),
                   xp + b * R * MM_PB, R, acc);
    }
}

/* One tile: rows [i0, i0 + R) x group g over blocks [b0, b0 + nbc). A tile that does
 * not start at block 0 continues the accumulators it stored in y (float stores and
 * loads are exact, so splitting K this way keeps every operation and its order). */
AI void tile(const mm_args *a, const uint32_t type, const uint8_t *src, int unpacked, int64_t i0,
             int64_t g, int64_t b0, int64_t nbc, const int R) {
    const int64_t nb = a->xq.nb;
    const uint8_t *xp = a->xp + (size_t)i0 * (size_t)nb * MM_PB + (size_t)b0 * (size_t)R * MM_PB;
    const int64_t left = a->w->n - g * MM_NC;
    const __mmask16 cm = left >= MM_NC ? 0xFFFF : (__mmask16)((1u << left) - 1);
    float *y = a->y + i0 * a->ldy + g * MM_NC;
    __m512 acc[MM_PR];
    UNROLL for (int r = 0; r < R; r++)
        acc[r] = b0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(cm, y + r * a->ldy);
    if (unpacked) panel_unpacked(type, src, xp, nbc, R, acc);
    else if (R == 1 && type == INVAR_T_Q8_0) panel_stream_row(type, src, xp, nbc, acc);
    else panel_stream(type, src, xp, nbc, R, acc);
    UNROLL for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * a->ldy, cm, acc[r]);
}

#define TILE_R(a, type, src, unpacked, i0, g, b0, nbc, R)                  \
    switch (R) {                                                           \
    case 1: tile(a, type, src, unpacked, i0, g, b0, nbc, 1); break;        \
    case 2: tile(a, type, src, unpacked, i0, g, b0, nbc, 2); break;        \
    case 3: tile(a, type, src, unpacked, i0, g, b0, nbc, 3); break;        \
    case 4: tile(a, type, src, unpacked, i0, g, b0, nbc, 4); break;        \
    case 5: tile(a, type, src, unpacked, i0, g, b0, nbc, 5); break;        \
    case 6: tile(a, type, src, unpacked, i0, g, b0, nbc, 6); break;        \
    case 7: tile(a, type, src, unpacked, i0, g, b0, nbc, 7); break;        \
    default: tile(a, type, src, unpacked, i0, g, b0, nbc, 8); break;       \
    }

/* Groups [g0, g1) for all rows. With three panels or more, each group's records are
 * unpacked once into an L1-sized buffer that every panel then reads (the nibble and
 * scale unpacking is paid once per group instead of once per panel); K longer than
 * the buffer is done in chunks of blocks, the panels' accumulators parked in y in
 * between. With one or two panels the records are unpacked as they stream (that
 * overlaps the weight reads with the dots better). */
AI void run_panels(const mm_args *a, const uint32_t type, int64_t g0, int64_t g1) {
    const int64_t nb = a->xq.nb, cb = UBUF / UREC;
    const size_t rb = rec_bytes(type);
    const uint8_t *packed = (const uint8_t *)a->w->packed;
    if (a->m > 2 * MM_PR) {
        _Alignas(64) uint8_t U[UBUF];
        for (int64_t g = g0; g < g1; g++)
            for (int64_t b0 = 0; b0 < nb; b0 += cb) {
                const int64_t nbc = nb - b0 < cb ? nb - b0 : cb;
                const uint8_t *recs = packed + (size_t)(g * nb + b0) * rb;
                for (int64_t b = 0; b < nbc; b++) {
                    __m512i Q[8];
                    __m512 dw, mw;
                    prefetch_rec(recs + b * rb, (int)rb);
                    unpack_rec(type, recs + b * rb, Q, &dw, &mw);
                    uint8_t *u = U + b * UREC;
                    UNROLL for (int t = 0; t < 8; t++) _mm512_store_si512((void *)(u + 64 * t), Q[t]);
                    _mm512_store_ps((void *)(u + 512), dw);
                    _mm512_store_ps((void *)(u + 576), mw);
                }
                /* The records that follow (next chunk or group) towards L2 while the
                 * panels run: with few panels the weights come from DRAM and the
                 * unpack loop would otherwise wait on them. */
                if (g + 1 < g1 || b0 + nbc < nb)
                    for (size_t o = 0; o < (size_t)nbc * rb; o += 64)
                        _mm_prefetch((const char *)recs + (size_t)nbc * rb + o, _MM_HINT_T1);
                for (int64_t i0 = 0; i0 < a->m; i0 += MM_PR) {
                    const int R = (int)(a->m - i0 < MM_PR ? a->m - i0 : MM_PR);
                    TILE_R(a, type, U, 1, i0, g, b0, nbc, R)
                }
            }
        return;
    }
    for (int64_t i0 = 0; i0 < a->m; i0 += MM_PR) {
        const int R = (int)(a->m - i0 < MM_PR ? a->m - i0 : MM_PR);
        for (int64_t g = g0; g < g1; g++) TILE_R(a, type, packed + (size_t)(g * nb) * rb, 0, i0, g, 0, nb, R)
    }
}

void mm_avx512_q4_0(const mm_args *a, int64_t g0, int64_t g1) { run_panels(a, INVAR_T_Q4_0, g0, g1); }
void mm_avx512_q4_1(const mm_args *a, int64_t g0, int64_t g1) { run_panels(a, INVAR_T_Q4_1, g0, g1); }
void mm_avx512_q8_0(const mm_args *a, int64_t g0, int64_t g1) { run_panels(a, INVAR_T_Q8_0, g0, g1); }

/* Runs kernel K for rows [i0, i0+R) of group g and stores the valid columns. */
#define RUN_ROWS(K, R)                                                                  \
    do {                                                                                \
        __m512 acc[R];                                                                  \
        UNROLL for (int r = 0; r < (R); r++) acc[r] = _mm512_setzero_ps();              \
        K(a, grp, i0, (R), acc);                                                        \
        UNROLL for (int r = 0; r < (R); r++)                                            \
            _mm512_mask_storeu_ps(a->y + (i0 + r) * a->ldy + g * MM_NC, cmask, acc[r]); \
    } while (0)

#define DISPATCH_ROWS(K)                                 \
    switch (R) {                                         \
    case 1: RUN_ROWS(K, 1); break;                       \
    case 2: RUN_ROWS(K, 2); break;                       \
    case 3: RUN_ROWS(K, 3); break;                       \
    case 4: RUN_ROWS(K, 4); break;                       \
    case 5: RUN_ROWS(K, 5); break;                       \
    case 6: RUN_ROWS(K, 6); break;                       \
    case 7: RUN_ROWS(K, 7); break;                       \
    default: RUN_ROWS(K, 8); break;                      \
    }

/* Groups [g0, g1) for all rows, MR rows at a time (decoded types). */
#define GROUP_LOOP(NAME, K, REC)                                                        \
    static void NAME(const mm_args *a, int64_t g0, int64_t g1) {                        \
        const cpu_weight *w = a->w;                                                     \
        const int64_t nu = w->k / a->kt->q->block_elems;                                \
        for (int64_t i0 = 0; i0 < a->m; i0 += MR) {                                     \
            const int64_t R = a->m - i0 < MR ? a->m - i0 : MR;                          \
            for (int64_t g = g0; g < g1; g++) {                                         \
                const uint8_t *grp = (const uint8_t *)w->packed + (size_t)(g * nu) * (REC); \
                const int64_t left = w->n - g * MM_NC;                                  \
                const __mmask16 cmask = left >= MM_NC ? 0xFFFF : (__mmask16)((1u << left) - 1); \
                DISPATCH_ROWS(K)                                                        \
            }                                                                           \
        }                                                                               \
    }

/* K-quants: activation panels from 2 rows (mm_avx512_q*_K_panels); a single row (decode,
 * no panels: kt->panel_min_m) runs the one-row kernel ROWK on the row layout. Both
 * perform mm_unit_*'s operations per block, so the choice by m changes no bit. */
#define KQ_LOOP(NAME, PANELS, ROWK, REC)                                                \
    void NAME(const mm_args *a, int64_t g0, int64_t g1) {                               \
        if (a->xp) {                                                                    \
            PANELS(a, g0, g1);                                                          \
            return;                                                                     \
        }                                                                               \
        const cpu_weight *w = a->w;                                                     \
        const int64_t nu = w->k / 256;                                                  \
        for (int64_t i0 = 0; i0 < a->m; i0++)                                           \
            for (int64_t g = g0; g < g1; g++) {                                         \
                const uint8_t *grp = (const uint8_t *)w->packed + (size_t)(g * nu) * (REC); \
                const int64_t left = w->n - g * MM_NC;                                  \
                const __mmask16 cmask = left >= MM_NC ? 0xFFFF : (__mmask16)((1u << left) - 1); \
                __m512 acc1 = _mm512_setzero_ps();                                      \
                ROWK(a, grp, i0, &acc1);                                                \
                _mm512_mask_storeu_ps(a->y + i0 * a->ldy + g * MM_NC, cmask, acc1);     \
            }                                                                           \
    }

KQ_LOOP(mm_avx512_q4_K, mm_avx512_q4_K_panels, k_q4_k_row, MM_REC_Q4_K)
KQ_LOOP(mm_avx512_q5_K, mm_avx512_q5_K_panels, k_q5_k_row, MM_REC_Q5_K)
/* Q6_K's one-row kernel streams at the DRAM bound only with the record in its streaming
 * order (MM_Q6_QL/QH): over the old order's three interleaved word arrays it read
 * 13-16.6 GB/s against the multi-row kernel's 19-28 (bench/README.md). */
KQ_LOOP(mm_avx512_q6_K, mm_avx512_q6_K_panels, k_q6_k_row, MM_REC_Q6_K)
/* Each decoded type's kernel: k_decoded specialised on its form and integer-form facts for
 * one row (decode, the row layout), the panel kernels of matmul_dec_avx512.c from two rows;
 * both perform the decoded factor's operations per block, so the choice by m changes no bit. */
#define DECODED_TYPE(t, T, UE, NIB, ONE, NOMIN)                                                    \
    AI void k_##t(const mm_args *a, const uint8_t *grp, int64_t i0, const int R, __m512 *acc) { \
        k_decoded(a, grp, i0, R, acc, UE, NIB, ONE, NOMIN);                                     \
    }                                                                                           \
    GROUP_LOOP(mm_avx512_##t##_rows, k_##t, MM_REC_DECODED(UE, NIB, ONE, NOMIN))                \
    void mm_avx512_##t(const mm_args *a, int64_t g0, int64_t g1) {                              \
        if (a->xp) mm_avx512_##t##_panels(a, g0, g1);                                           \
        else mm_avx512_##t##_rows(a, g0, g1);                                                   \
    }
MM_DECODED(DECODED_TYPE)

/* One 32-block: q, its scale d and the sums of the two 16-element halves. */
AI void quant_block(const float *xb, int8_t *q, float *d, int *s0, int *s1) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 fmax = _mm512_set1_ps(3.40282347e+38f);
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const __m512 a0 = _mm512_and_ps(v0, absmask), a1 = _mm512_and_ps(v1, absmask);
    /* NLE_UQ: true for NaN and +inf, the scalar `!(a <= FLT_MAX)` */
    const int bad = (_mm512_cmp_ps_mask(a0, fmax, _CMP_NLE_UQ) |
                     _mm512_cmp_ps_mask(a1, fmax, _CMP_NLE_UQ)) != 0;
    const float amax = bad ? 0.0f : _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    float id;
    if (!mm_block_scale(amax, bad, d, &id)) {
        memset(q, 0, 32);
        *s0 = *s1 = 0;
        return;
    }
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
    *s0 = _mm512_reduce_add_epi32(q0);
    *s1 = _mm512_reduce_add_epi32(q1);
}

void mm_quantize_row_avx512(const float *x, int64_t k, int8_t *q, float *d, int16_t *s) {
    for (int64_t b = 0; b < k / MM_QK; b++) {
        int s0, s1;
        quant_block(x + 32 * b, q + 32 * b, d + b, &s0, &s1);
        s[2 * b] = (int16_t)s0;
        s[2 * b + 1] = (int16_t)s1;
    }
}

void mm_quantize_panel_avx512(const mm_kernel *kt, const float *x, int64_t ldx, int R, int64_t k,
                              uint8_t *panel) {
    const mm_panel_kind kind = kt->panel;
    const int offset = kt->panel_offset, pb = mm_panel_bytes(kt);
    for (int r = 0; r < R; r++)
        for (int64_t b = 0; b < k / MM_QK; b++) {
            uint8_t *blk = panel + (size_t)b * (size_t)R * (size_t)pb;
            float d;
            int s0, s1;
            quant_block(x + r * ldx + 32 * b, (int8_t *)blk + 32 * r, &d, &s0, &s1);
            int32_t aux;
            if (kind == MM_PANEL_SUM) {
                const float fs = (float)(s0 + s1);
                memcpy(&aux, &fs, 4);
            } else if (kind == MM_PANEL_HALVES) {
                const int32_t aux2 = MM_PANEL_MAGIC + offset * s1;
                aux = MM_PANEL_MAGIC + offset * s0;
                memcpy(blk + 40 * R + 4 * r, &aux2, 4);
            } else if (kind == MM_PANEL_WHOLE) {
                aux = MM_PANEL_MAGIC + offset * (s0 + s1);
            } else {
                aux = offset * (s0 + s1);
            }
            memcpy(blk + 32 * R + 4 * r, &d, 4);
            memcpy(blk + 36 * R + 4 * r, &aux, 4);
        }
}

/* ---- Float weights: lane c = column c; one FMA chain over k per output. ----
 * A tile is R rows x G groups of 16 columns: per k, G weight vectors and one broadcast
 * activation per row feed R x G FMAs (8 x 3: 24 accumulators). Small batches read the
 * packed weights directly (F16/BF16 converted per tile: decode is bound by the weight
 * stream). From FT_CONV_MIN_M rows the task's groups are first converted to float32,
 * FT_KC values of k at a time, into a stack buffer shared by all its row tiles, so the
 * conversion (two uops on the FMA ports per vector) is paid once per task; the tiles then
 * resume their chains from y for each later k chunk (stored and reloaded exactly). Every
 * path performs the same chain per output, so the choice (by m) changes no bit. */
#define FT_R 8
#define FT_G 3
#define FT_CONV_MIN_M 16
#define FT_KC 1024
_Static_assert(FT_G * MM_NC * FT_KC * 4 <= 192 * 1024, "conversion buffer fits the stack comfortably");

AI __m512 fload(const uint32_t type, const uint8_t *p) {
    switch (type) {
    case INVAR_T_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    case INVAR_T_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    default: return _mm512_loadu_ps((const float *)p);
    }
}

/* Rows [i0, i0 + R) x groups [g, g + G) over k in [k0, k1). w points at group g's value
 * of k = k0 (rec bytes per k, gstride bytes between groups); resume: continue the
 * chains from y (an earlier k chunk) instead of from +0. */
AI void ftile(const mm_args *a, const uint32_t type, const uint8_t *w, size_t gstride, int64_t k0, int64_t k1,
              int64_t i0, const int R, int64_t g, const int G, int resume, int prefetch) {
    const int64_t rec = MM_FREC(type), n = a->w->n;
    __mmask16 cm[FT_G];
    UNROLL for (int q = 0; q < G; q++) {
        const int64_t nc = n - (g + q) * MM_NC;
        cm[q] = nc >= MM_NC ? 0xFFFF : (__mmask16)((1u << nc) - 1);
    }
    __m512 acc[FT_R][FT_G];
    const float *x = a->x + i0 * a->ldx;
    float *y = a->y + i0 * a->ldy + g * MM_NC;
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int q = 0; q < G; q++)
        acc[r][q] = resume ? _mm512_maskz_loadu_ps(cm[q], y + r * a->ldy + q * MM_NC) : _mm512_setzero_ps();
    for (int64_t kk = k0; kk < k1; kk++, w += rec) {
        __m512 W[FT_G];
        UNROLL for (int q = 0; q < G; q++) {
            if (prefetch && ((kk * rec) & 63) == 0) _mm_prefetch((const char *)w + q * gstride + PF_DIST, _MM_HINT_T0);
            W[q] = fload(type, w + q * gstride);
        }
        UNROLL for (int r = 0; r < R; r++) {
            const __m512 xb = _mm512_set1_ps(x[r * a->ldx + kk]);
            UNROLL for (int q = 0; q < G; q++) acc[r][q] = _mm512_fmadd_ps(xb, W[q], acc[r][q]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int q = 0; q < G; q++)
        _mm512_mask_storeu_ps(y + r * a->ldy + q * MM_NC, cm[q], acc[r][q]);
}

/* All rows, tiles of FT_R rows and then the remainder, for groups [g, g + G). */
AI void ftile_rows(const mm_args *a, const uint32_t type, const uint8_t *w, size_t gstride, int64_t k0, int64_t k1,
                   int64_t g, const int G, int resume, int prefetch) {
    int64_t i0 = 0;
    for (; i0 + FT_R <= a->m; i0 += FT_R) ftile(a, type, w, gstride, k0, k1, i0, FT_R, g, G, resume, prefetch);
    switch (a->m - i0) {
    case 1: ftile(a, type, w, gstride, k0, k1, i0, 1, g, G, resume, prefetch); break;
    case 2: ftile(a, type, w, gstride, k0, k1, i0, 2, g, G, resume, prefetch); break;
    case 3: ftile(a, type, w, gstride, k0, k1, i0, 3, g, G, resume, prefetch); break;
    case 4: ftile(a, type, w, gstride, k0, k1, i0, 4, g, G, resume, prefetch); break;
    case 5: ftile(a, type, w, gstride, k0, k1, i0, 5, g, G, resume, prefetch); break;
    case 6: ftile(a, type, w, gstride, k0, k1, i0, 6, g, G, resume, prefetch); break;
    case 7: ftile(a, type, w, gstride, k0, k1, i0, 7, g, G, resume, prefetch); break;
    default: break;
    }
}

/* Groups [g, g + G) straight from the packed weights. */
AI void float_direct(const mm_args *a, const uint32_t type, int64_t g, const int G) {
    const size_t gstride = (size_t)a->w->k * (size_t)MM_FREC(type);
    const uint8_t *w = (const uint8_t *)a->w->packed + (size_t)g * gstride;
    ftile_rows(a, type, w, gstride, 0, a->w->k, g, G, 0, 1);
}

/* Groups [g, g + G) through the float32 buffer, FT_KC values of k at a time. */
AI void float_converted(const mm_args *a, const uint32_t type, int64_t g, const int G) {
    _Alignas(64) float buf[FT_G * FT_KC * MM_NC];
    const int64_t k = a->w->k, rec = MM_FREC(type);
    const size_t gstride = (size_t)k * (size_t)rec, bstride = (size_t)FT_KC * MM_NC * sizeof(float);
    const uint8_t *src = (const uint8_t *)a->w->packed + (size_t)g * gstride;
    for (int64_t k0 = 0; k0 < k; k0 += FT_KC) {
        const int64_t k1 = k0 + FT_KC < k ? k0 + FT_KC : k;
        for (int q = 0; q < G; q++)
            for (int64_t kk = k0; kk < k1; kk++)
                _mm512_store_ps(buf + (q * FT_KC + kk - k0) * MM_NC, fload(type, src + q * gstride + kk * rec));
        ftile_rows(a, INVAR_T_F32, (const uint8_t *)buf, bstride, k0, k1, g, G, k0 > 0, 0);
    }
}

#define FLOAT_GROUPS(NAME, TYPE)                                                           \
    static void NAME(const mm_args *a, int64_t g, int G, int convert) {                     \
        if (convert) {                                                                      \
            if (G == 3) float_converted(a, TYPE, g, 3);                                     \
            else if (G == 2) float_converted(a, TYPE, g, 2);                                \
            else float_converted(a, TYPE, g, 1);                                            \
        } else {                                                                            \
            if (G == 3) float_direct(a, TYPE, g, 3);                                        \
            else if (G == 2) float_direct(a, TYPE, g, 2);                                   \
            else float_direct(a, TYPE, g, 1);                                               \
        }                                                                                   \
    }

FLOAT_GROUPS(float_f16, INVAR_T_F16)
FLOAT_GROUPS(float_bf16, INVAR_T_BF16)

/* F32 needs no conversion; a buffer copy would only add a pass. */
static void float_f32(const mm_args *a, int64_t g, int G, int convert) {
    (void)convert;
    if (G == 3) float_direct(a, INVAR_T_F32, g, 3);
    else if (G == 2) float_direct(a, INVAR_T_F32, g, 2);
    else float_direct(a, INVAR_T_F32, g, 1);
}

/* Groups [g0, g1), FT_G at a time. */
#define FLOAT_KERNEL(NAME, GROUPS)                                          \
    void NAME(const mm_args *a, int64_t g0, int64_t g1) {                   \
        const int convert = a->m >= FT_CONV_MIN_M;                          \
        for (int64_t g = g0; g < g1; g += FT_G)                             \
            GROUPS(a, g, (int)(g1 - g < FT_G ? g1 - g : FT_G), convert);    \
    }

FLOAT_KERNEL(mm_avx512_f32, float_f32)
FLOAT_KERNEL(mm_avx512_f16, float_f16)
FLOAT_KERNEL(mm_avx512_bf16, float_bf16)
