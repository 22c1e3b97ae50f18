/* Small AVX2 helpers shared by the matmul kernel files of that ISA (matmul_avx2.c,
 * matmul_kq_avx2.c). Include only from files built with the AVX2 flags. */
#ifndef INVAR_MATMUL_AVX2_OPS_H
#define INVAR_MATMUL_AVX2_OPS_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/matmul_internal.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

AI __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
AI __m256 f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
AI __m256i ldw(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
AI __m256i madd1(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

/* acc = fma(dx, f, acc), the scalar reference's fmaf. */
AI __m256 accum(__m256 acc, float dx, __m256 f) { return _mm256_fmadd_ps(_mm256_set1_ps(dx), f, acc); }

/* Q[0..7]: u8 quants 0..15 for the 8 four-element steps of one 32-block. */
AI __m256i dot8_u4(const __m256i *Q, const int8_t *x) {
    __m256i p = _mm256_maddubs_epi16(Q[0], bcast4(x));
    UNROLL for (int t = 1; t < 8; t++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(Q[t], bcast4(x + 4 * t)));
    return madd1(p);
}

AI __m256i u8x8_epi32(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
AI __m256i i8x8_epi32(const uint8_t *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* Q[0..7]: u8 quants 0..31 for the 8 steps of one 32-block (4 steps per madd). */
AI __m256i dot8_u5(const __m256i *Q, const int8_t *x) {
    __m256i p0 = _mm256_maddubs_epi16(Q[0], bcast4(x)), p1 = _mm256_maddubs_epi16(Q[4], bcast4(x + 16));
    UNROLL for (int t = 1; t < 4; t++) {
        p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(Q[t], bcast4(x + 4 * t)));
        p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(Q[4 + t], bcast4(x + 16 + 4 * t)));
    }
    return _mm256_add_epi32(madd1(p0), madd1(p1));
}

/* Q5_K's fifth bit of block j (bit j of each qh byte) as 0x10. The 16-bit shifts move
 * no bit across a byte that the mask keeps (j - 4 <= 3, 4 - j <= 4). */
AI __m256i q5_hbit(__m256i H, int j) {
    const __m256i m = _mm256_set1_epi8(0x10);
    return j <= 4 ? _mm256_and_si256(_mm256_sll_epi16(H, _mm_cvtsi32_si128(4 - j)), m)
                  : _mm256_and_si256(_mm256_srl_epi16(H, _mm_cvtsi32_si128(j - 4)), m);
}

/* Stores lanes [0, cols) of v to y (cols 1..8). */
AI void store_cols(float *y, __m256 v, int64_t cols) {
    if (cols >= 8) {
        _mm256_storeu_ps(y, v);
    } else {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(y, t, (size_t)cols * sizeof(float));
    }
}

/* Lanes of int16 pairs (lo, hi) from int32 lanes in [-32768, 32767]: the scale operand of
 * a vpmaddwd that widens s16 partial dots and multiplies them in one exact step. */
AI __m256i pair16(__m256i lo, __m256i hi) {
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(hi, 16));
}
/* (sc, sc) from 8 u8 scales. */
AI __m256i sc_pair(const uint8_t *p) {
    const __m256i v = u8x8_epi32(p);
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}
/* (sum(x), 0) of row 0 of X, block b: |sum| <= 32 * 127 fits int16. */
AI __m256i xsum_pair(const xrows *X, int64_t b) { return _mm256_set1_epi32((uint16_t)xsum(X, 0, b)); }

#endif
