/* Small AVX-512 helpers shared by the matmul kernel files of that ISA (matmul_avx512.c,
 * matmul_kq_avx512.c). Include only from files built with the AVX-512 flags. */
#ifndef INVAR_MATMUL_AVX512_OPS_H
#define INVAR_MATMUL_AVX512_OPS_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

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

/* Software prefetch of the weight stream, this far ahead: one core's hardware
 * prefetchers leave decode (m = 1, bandwidth bound) at ~60% of what this reaches. */
#ifndef PF_DIST
#define PF_DIST 4096
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif
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
