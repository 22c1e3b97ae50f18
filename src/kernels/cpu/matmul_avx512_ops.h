/* Small AVX-512 helpers shared by the matmul kernel files of that ISA (matmul_avx512.c,
 * matmul_kq_avx512.c, matmul_dec_avx512.c). Include only from files built with the AVX-512 flags. */
#ifndef INVAR_MATMUL_AVX512_OPS_H
#define INVAR_MATMUL_AVX512_OPS_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/matmul_prefetch.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

AI __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
AI __m512i ldw(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }
AI __m512i u8x16_epi32(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
AI __m512i i8x16_epi32(const uint8_t *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }

AI __m512 bcastf(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
}
AI __m512i bcasti(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc + dpbusd(w, 4 bytes at x broadcast), the broadcast as the instruction's memory
 * operand ({1to16}): one fused uop instead of a broadcast load plus the dpbusd, which
 * halves the scheduler entries the long dot chains hold (compilers do not fold it). */
AI __m512i dpm(__m512i acc, __m512i w, const uint8_t *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)x));
    return acc;
}

/* The two 16-element halves' dot chains of rows [r0, r1) of an R-row activation panel
 * block xb (MM_PANEL_HALVES: row r's chains start at its aux and aux2, at xb + 36R + 4r and
 * xb + 40R + 4r) against a 32-block's unpacked weight vectors Q[0..3] (low half) and Q[4..7]
 * (high half). Step-major: the rows' chains side by side. PL, PH: at least r1 entries. */
AI void panel_half_chains(const __m512i *Q, const uint8_t *xb, const int R, const int r0, const int r1,
                          __m512i *PL, __m512i *PH) {
    UNROLL for (int r = r0; r < r1; r++) {
        PL[r] = bcasti(xb + 36 * R + 4 * r);
        PH[r] = bcasti(xb + 40 * R + 4 * r);
    }
    UNROLL for (int t = 0; t < 4; t++) UNROLL for (int r = r0; r < r1; r++) {
        PL[r] = dpm(PL[r], Q[t], xb + 32 * r + 4 * t);
        PH[r] = dpm(PH[r], Q[4 + t], xb + 32 * r + 16 + 4 * t);
    }
}

/* The whole-block dot chains of rows [r0, r1) (MM_PANEL_WHOLE: row r's chain starts at its
 * aux) against Q[0..7]. P: at least r1 entries. */
AI void panel_whole_chains(const __m512i *Q, const uint8_t *xb, const int R, const int r0, const int r1,
                           __m512i *P) {
    UNROLL for (int r = r0; r < r1; r++) P[r] = bcasti(xb + 36 * R + 4 * r);
    UNROLL for (int t = 0; t < 8; t++) UNROLL for (int r = r0; r < r1; r++) P[r] = dpm(P[r], Q[t], xb + 32 * r + 4 * t);
}

AI void prefetch_rec(const uint8_t *rec, int bytes) {
    for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)rec + PF_DIST + o, PF_HINT);
}

/* Q5_K's fifth bit of block j (bit j of each qh byte) as 0x10; the 16-bit shifts move
 * no bit across a byte that the mask keeps. */
AI __m512i q5_hbit(__m512i H, int j) {
    const __m512i m = _mm512_set1_epi8(0x10);
    return j <= 4 ? _mm512_and_si512(_mm512_sll_epi16(H, _mm_cvtsi32_si128(4 - j)), m)
                  : _mm512_and_si512(_mm512_srl_epi16(H, _mm_cvtsi32_si128(j - 4)), m);
}

#endif
