/* AVX2 K-quant (Q4_K, Q5_K, Q6_K) kernels for several rows (KQ_ROWS_MIN of matmul_avx2.c
 * or more): batched decode and prefill (fewer rows run the one-row kernels there).
 *
 * Each group's records are unpacked, KU2 units at a time, into an L1 buffer that every
 * tile of rows then reads: per 32-block the eight quant vectors (unsigned bytes, word t
 * of the 16 columns, as in the record) and the block's scales widened to int32, so the
 * nibble, bit and scale unpacking is paid once per group and chunk instead of once per
 * tile of MR2 rows and 8-column half, and the records leave DRAM once, in address order.
 * Chunks after the first resume the accumulators the previous chunk stored in y (float
 * stores and loads are exact).
 *
 * Same bits as mm_unit_q4_K / q5_K / q6_K and the one-row kernels of matmul_avx2.c: per
 * lane and row the same integers isum = sc * dot and imin = mn * sum(x) (Q4_K, Q5_K) and
 * isum = sl * plo + sh * phi (Q6_K), computed exactly (the s16 partial dots within the
 * bounds at the top of matmul_avx2.c; each vpmaddwd of them by a scale below 2^7 sums two
 * products below 2^22 into an int32), and the same float operations on them in order:
 *   Q4_K, Q5_K: f = fnmadd(dmin, (float)imin, d * (float)isum)
 *   Q6_K:       f = d * (float)isum
 * then acc = fma(dx, f, acc) per block in K order. Q4_K and Q5_K take dmin * (float)imin
 * as dm * (float)sum(x) with dm = dmin * mn, computed once per record: dm is exact (an
 * fp16 times an integer below 2^6 needs at most 17 significant bits) and so the fused
 * product dm * sum(x) is the exact dmin * imin that the reference's fnmadd rounds once
 * with the same addend; where dmin is inf or NaN both are NaN for mn = 0 or sum(x) = 0.
 * They can differ only in the sign of a zero product (mn = 0, sum(x) < 0), which changes
 * f only when f is a zero itself, and a zero f never changes acc: acc starts at +0, an
 * exact zero sum of fma is +0 unless both terms are -0, so acc is never -0, and
 * acc + (+-0) is acc. Only that, where the operands come from (L1 instead of the record)
 * and the order of tiles and chunks differ. */
#include <immintrin.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul_avx2_ops.h"
#include "kernels/cpu/matmul_internal.h"

#define MR2 4 /* rows per tile: 8 quant vectors, 4 accumulators and temporaries in 16 ymm */
#ifndef KU2
#define KU2 3 /* units per chunk: 16.7 KiB, leaving L1 room for the tile's activations */
#endif
#ifndef KQ2_GROUP_MAJOR_M
#define KQ2_GROUP_MAJOR_M 16 /* up to this many rows, group by group (see kq_run) */
#endif

/* Unpacked unit (256 elements, 16 columns): block j's quant vectors at 512j + 64t
 * (bytes 0..31 columns 0..7, 32..63 columns 8..15), then per block j its scale vectors,
 * each lane a pair of int16 (the operand vpmaddwd multiplies the dots' s16 pairs by):
 * S1 at 4096 + 64j: (sc, sc) (Q4_K, Q5_K) or (sl, sl) (Q6_K); S2 at 4608 + 64j: the
 * float dm = dmin * mn (Q4_K, Q5_K) or (sh, sh); S3 at 5184 + 64j (Q6_K): (32 sl, 32 sh).
 * The unit's float d at 5120. */
#define KUREC2 5696
#define KU_S1 4096
#define KU_S2 4608
#define KU_D 5120
#define KU_S3 5184

AI size_t kq_rec_bytes(const uint32_t type) {
    return type == INVAR_T_Q4_K ? MM_REC_Q4_K : type == INVAR_T_Q5_K ? MM_REC_Q5_K : MM_REC_Q6_K;
}

AI void st(uint8_t *p, __m256i v) { _mm256_store_si256((__m256i *)(void *)p, v); }
AI __m256i ld(const uint8_t *p) { return _mm256_load_si256((const __m256i *)(const void *)p); }
AI __m256 ldf(const uint8_t *p) { return _mm256_load_ps((const float *)(const void *)p); }

/* Record rec (one unit of one group) into the unpacked form at U. */
AI void unpack_unit(const uint32_t type, const uint8_t *rec, uint8_t *U) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    UNROLL for (int h = 0; h < 2; h++) {
        if (type == INVAR_T_Q6_K) {
            const __m256i m30 = _mm256_set1_epi8(0x30);
            UNROLL for (int n = 0; n < 2; n++) UNROLL for (int t = 0; t < 8; t++) {
                /* ql words 16n+t (blocks 4n, 4n+2), 16n+8+t (4n+1, 4n+3), qh word 8n+t. */
                const __m256i LA = ldw(rec + MM_Q6_QL(16 * n + t) + 32 * h);
                const __m256i LB = ldw(rec + MM_Q6_QL(16 * n + 8 + t) + 32 * h);
                const __m256i H = ldw(rec + MM_Q6_QH(8 * n + t) + 32 * h);
                uint8_t *u = U + 512 * (4 * n) + 64 * t + 32 * h;
                st(u, _mm256_or_si256(_mm256_and_si256(LA, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30)));
                st(u + 512, _mm256_or_si256(_mm256_and_si256(LB, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30)));
                st(u + 1024, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(LA, 4), m4), _mm256_and_si256(H, m30)));
                st(u + 1536, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(LB, 4), m4),
                                             _mm256_and_si256(_mm256_srli_epi16(H, 2), m30)));
            }
            UNROLL for (int j = 0; j < 8; j++) {
                const __m256i sl = i8x8_epi32(rec + MM_Q6_SC + 16 * (2 * j) + 8 * h);
                const __m256i sh = i8x8_epi32(rec + MM_Q6_SC + 16 * (2 * j + 1) + 8 * h);
                st(U + KU_S1 + 64 * j + 32 * h, pair16(sl, sl));
                st(U + KU_S2 + 64 * j + 32 * h, pair16(sh, sh));
                st(U + KU_S3 + 64 * j + 32 * h, pair16(_mm256_slli_epi32(sl, 5), _mm256_slli_epi32(sh, 5)));
            }
            _mm256_store_ps((float *)(void *)(U + KU_D + 32 * h), f16x8(rec + MM_Q6_D + 16 * h));
            continue;
        }
        /* Q4_K / Q5_K: block j = 2c + e is nibble e of words 8c..8c+7 (Q5_K: | bit j of qh). */
        UNROLL for (int c = 0; c < 4; c++) UNROLL for (int t = 0; t < 8; t++) {
            const __m256i W = ldw(rec + 64 * (8 * c + t) + 32 * h);
            __m256i lo = _mm256_and_si256(W, m4), hi = _mm256_and_si256(_mm256_srli_epi16(W, 4), m4);
            if (type == INVAR_T_Q5_K) {
                const __m256i H = ldw(rec + 2368 + 64 * t + 32 * h);
                lo = _mm256_or_si256(lo, q5_hbit(H, 2 * c));
                hi = _mm256_or_si256(hi, q5_hbit(H, 2 * c + 1));
            }
            st(U + 512 * (2 * c) + 64 * t + 32 * h, lo);
            st(U + 512 * (2 * c + 1) + 64 * t + 32 * h, hi);
        }
        const __m256 dmin = f16x8(rec + 2080 + 16 * h);
        UNROLL for (int j = 0; j < 8; j++) {
            const __m256i sc = u8x8_epi32(rec + 2112 + 16 * j + 8 * h);
            st(U + KU_S1 + 64 * j + 32 * h, pair16(sc, sc));
            _mm256_store_ps((float *)(void *)(U + KU_S2 + 64 * j + 32 * h),
                            _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(u8x8_epi32(rec + 2240 + 16 * j + 8 * h))));
        }
        _mm256_store_ps((float *)(void *)(U + KU_D + 32 * h), f16x8(rec + 2048 + 16 * h));
    }
}

/* Block b (block j of unpacked unit u) for the R rows of X, 8-column half h. The s16
 * partial dots go through vpmaddwd with the scale pairs: the widening and the scale
 * product in one exact operation (llama.cpp's AVX2 kernels do the same), instead of a
 * widening vpmaddwd by ones and a vpmulld, the slowest multiply on this ISA. */
AI void kq_block(const uint32_t type, const uint8_t *u, int j, int h, const xrows *X, int64_t b, const int R,
                 __m256 *acc) {
    __m256i Q[8];
    UNROLL for (int t = 0; t < 8; t++) Q[t] = ld(u + 512 * j + 64 * t + 32 * h);
    const __m256i s1 = ld(u + KU_S1 + 64 * j + 32 * h), s2 = ld(u + KU_S2 + 64 * j + 32 * h);
    const __m256 d = ldf(u + KU_D + 32 * h);
    if (type == INVAR_T_Q6_K) {
        const __m256i s3 = ld(u + KU_S3 + 64 * j + 32 * h);
        UNROLL for (int r = 0; r < R; r++) {
            const int8_t *x = X->q + r * X->k + 32 * b;
            __m256i p[4];
            UNROLL for (int e = 0; e < 4; e++)
                p[e] = _mm256_add_epi16(_mm256_maddubs_epi16(Q[2 * e], bcast4(x + 8 * e)),
                                        _mm256_maddubs_epi16(Q[2 * e + 1], bcast4(x + 8 * e + 4)));
            /* isum = sl * (dot_lo - 32 s0) + sh * (dot_hi - 32 s1), regrouped (exact). */
            const int16_t *s = X->s + r * 2 * X->nb + 2 * b;
            const __m256i xs = _mm256_set1_epi32((int32_t)(((uint32_t)(uint16_t)s[1] << 16) | (uint16_t)s[0]));
            const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(p[0], s1), _mm256_madd_epi16(p[1], s1));
            const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(p[2], s2), _mm256_madd_epi16(p[3], s2));
            const __m256i isum = _mm256_sub_epi32(_mm256_add_epi32(lo, hi), _mm256_madd_epi16(s3, xs));
            acc[r] = accum(acc[r], X->d[r * X->nb + b], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
        }
        return;
    }
    const __m256 dm = _mm256_castsi256_ps(s2);
    UNROLL for (int r = 0; r < R; r++) {
        const int8_t *x = X->q + r * X->k + 32 * b;
        __m256i isum;
        if (type == INVAR_T_Q5_K) {
            __m256i p0 = _mm256_maddubs_epi16(Q[0], bcast4(x)), p1 = _mm256_maddubs_epi16(Q[4], bcast4(x + 16));
            UNROLL for (int t = 1; t < 4; t++) {
                p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(Q[t], bcast4(x + 4 * t)));
                p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(Q[4 + t], bcast4(x + 16 + 4 * t)));
            }
            isum = _mm256_add_epi32(_mm256_madd_epi16(p0, s1), _mm256_madd_epi16(p1, s1));
        } else {
            __m256i p = _mm256_maddubs_epi16(Q[0], bcast4(x));
            UNROLL for (int t = 1; t < 8; t++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(Q[t], bcast4(x + 4 * t)));
            isum = _mm256_madd_epi16(p, s1);
        }
        const __m256 xs = _mm256_set1_ps((float)xsum(X, r, b));
        const __m256 f = _mm256_fnmadd_ps(dm, xs, _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
        acc[r] = accum(acc[r], X->d[r * X->nb + b], f);
    }
}

/* Lanes [0, cols) of y (cols 1..8), the others 0. */
AI __m256 load_cols(const float *y, int64_t cols) {
    if (cols >= 8) return _mm256_loadu_ps(y);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cols), lane));
}

/* One tile: rows [i0, i0 + R) x half h of group g over the nuc unpacked units of U,
 * which start at unit u0. */
AI void kq_tile(const mm_args *a, const uint32_t type, const uint8_t *U, int64_t i0, int64_t g, int h,
                int64_t u0, int64_t nuc, const int R) {
    const xrows X = rows_at(a, i0);
    const int64_t cols = a->w->n - g * MM_NC - 8 * h;
    float *y = a->y + i0 * a->ldy + g * MM_NC + 8 * h;
    __m256 acc[MR2];
    UNROLL for (int r = 0; r < R; r++) acc[r] = u0 == 0 ? _mm256_setzero_ps() : load_cols(y + r * a->ldy, cols);
    for (int64_t u = 0; u < nuc; u++)
        for (int j = 0; j < 8; j++) kq_block(type, U + u * KUREC2, j, h, &X, (u0 + u) * 8 + j, R, acc);
    UNROLL for (int r = 0; r < R; r++) store_cols(y + r * a->ldy, acc[r], cols);
}

#define KQ_TILE_R(R_) kq_tile(a, type, U, i0, g, h, u0, nuc, R_)

/* Chunk [u0, u0 + nuc) of group g: unpacked into U, then every tile over it; next: the
 * records to bring towards L2 meanwhile (the next chunk in the caller's order), or NULL. */
AI void kq_chunk(const mm_args *a, const uint32_t type, uint8_t *U, int64_t g, int64_t u0, int64_t nuc,
                 const uint8_t *next) {
    const size_t rb = kq_rec_bytes(type);
    const uint8_t *recs = (const uint8_t *)a->w->packed + (size_t)(g * (a->w->k / 256) + u0) * rb;
    for (int64_t u = 0; u < nuc; u++) unpack_unit(type, recs + u * rb, U + u * KUREC2);
    if (next)
        for (size_t o = 0; o < (size_t)KU2 * rb; o += 64) _mm_prefetch((const char *)next + o, _MM_HINT_T1);
    const int nh = a->w->n - g * MM_NC > 8 ? 2 : 1;
    for (int64_t i0 = 0; i0 < a->m; i0 += MR2)
        for (int h = 0; h < nh; h++) {
            switch (a->m - i0 < MR2 ? a->m - i0 : MR2) {
            case 1: KQ_TILE_R(1); break;
            case 2: KQ_TILE_R(2); break;
            case 3: KQ_TILE_R(3); break;
            default: KQ_TILE_R(4); break;
            }
        }
}

/* Groups [g0, g1). Few rows (batched decode: the weights stream from DRAM) go group by
 * group, reading each group's records in address order. Many rows (prefill) go chunk
 * by chunk of K across the groups, so the chunk's activations stay in L2 for all the
 * task's groups. Either order performs each output's blocks in K order. */
AI void kq_run(const mm_args *a, const uint32_t type, int64_t g0, int64_t g1) {
    const int64_t nu = a->w->k / 256;
    const size_t rb = kq_rec_bytes(type);
    const uint8_t *packed = (const uint8_t *)a->w->packed;
    _Alignas(64) uint8_t U[KU2 * KUREC2];
    if (a->m <= KQ2_GROUP_MAJOR_M) {
        for (int64_t g = g0; g < g1; g++)
            for (int64_t u0 = 0; u0 < nu; u0 += KU2) {
                const int64_t nuc = nu - u0 < KU2 ? nu - u0 : KU2;
                const int last = g + 1 == g1 && u0 + nuc == nu;
                kq_chunk(a, type, U, g, u0, nuc, last ? NULL : packed + (size_t)(g * nu + u0 + nuc) * rb);
            }
        return;
    }
    for (int64_t u0 = 0; u0 < nu; u0 += KU2) {
        const int64_t nuc = nu - u0 < KU2 ? nu - u0 : KU2;
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *next = g + 1 < g1 ? packed + (size_t)((g + 1) * nu + u0) * rb
                                  : u0 + nuc < nu ? packed + (size_t)(g0 * nu + u0 + nuc) * rb : NULL;
            kq_chunk(a, type, U, g, u0, nuc, next);
        }
    }
}

void mm_avx2_q4_K_rows(const mm_args *a, int64_t g0, int64_t g1) { kq_run(a, INVAR_T_Q4_K, g0, g1); }
void mm_avx2_q5_K_rows(const mm_args *a, int64_t g0, int64_t g1) { kq_run(a, INVAR_T_Q5_K, g0, g1); }
void mm_avx2_q6_K_rows(const mm_args *a, int64_t g0, int64_t g1) { kq_run(a, INVAR_T_Q6_K, g0, g1); }
