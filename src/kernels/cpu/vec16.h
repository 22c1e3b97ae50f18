/* 16-lane float vectors (GCC/clang vector extensions) and the engine's one exponential.
 *
 * Why vector extensions: the same source compiles to one zmm per operation in an AVX-512
 * translation unit and to two ymm or four xmm operations elsewhere. Every operation is an
 * IEEE add/sub/mul/div/fused multiply-add, compare or integer bit operation performed lane
 * by lane, so a lane's result is the same bits whichever ISA ran it and whatever the other
 * lanes held. That is what lets one exp serve every caller (attention, SiLU, sampling,
 * log-softmax) and every path (decode, prefill, any batch), as docs/invariance.md requires. */
#ifndef INVAR_VEC16_H
#define INVAR_VEC16_H
#include <stdint.h>
#include <string.h>

typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

#define V16_AI static inline __attribute__((always_inline))

#if defined(__AVX512F__) || defined(__FMA__) || defined(__F16C__)
#include <immintrin.h>
#endif
#include <math.h>

#include "formats/quant.h" /* fp16_to_f32 */

/* a*b + c rounded once (IEEE fused multiply-add): one hardware instruction where the
 * unit is built for it, libm's correctly rounded fmaf otherwise; the same bits. */
#if defined(__AVX512F__)
#define V16_FMA(a, b, c) ((f32x16)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#elif defined(__FMA__)
#define V16_FMA(a, b, c) v16_fma_avx2((a), (b), (c))
#else
#define V16_FMA(a, b, c) v16_fma_lanes((a), (b), (c))
#endif

V16_AI f32x16 v16_splat(float c) { return (f32x16){c, c, c, c, c, c, c, c, c, c, c, c, c, c, c, c}; }
V16_AI f32x16 v16_load(const float *p) {
    f32x16 v;
    memcpy(&v, p, sizeof v);
    return v;
}
V16_AI void v16_store(float *p, f32x16 v) { memcpy(p, &v, sizeof v); }
/* 16 IEEE halves widened to floats. Widening is exact, so vcvtph2ps (F16C builds) and
 * formats/fp16.c's fp16_to_f32 lane by lane (elsewhere; it follows F16C bit for bit, NaNs
 * included) give the same bits; test_vec16 compares the builds on f16 caches. */
V16_AI f32x16 v16_load_f16(const uint16_t *p) {
    f32x16 v;
#if defined(__AVX512F__)
    const __m512 w = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    memcpy(&v, &w, sizeof v);
#elif defined(__F16C__)
    const __m256 w[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)))};
    memcpy(&v, w, sizeof v);
#else
    for (int i = 0; i < 16; i++) v[i] = fp16_to_f32(p[i]);
#endif
    return v;
}
/* m lanes are all-ones (true) or zero, as produced by vector comparisons. */
V16_AI f32x16 v16_select(i32x16 m, f32x16 a, f32x16 b) {
    return (f32x16)((m & (i32x16)a) | (~m & (i32x16)b));
}
V16_AI f32x16 v16_max(f32x16 a, f32x16 b) { return v16_select(a > b, a, b); }

#if defined(__FMA__) && !defined(__AVX512F__)
V16_AI f32x16 v16_fma_avx2(f32x16 a, f32x16 b, f32x16 c) {
    __m256 r[2];
    for (int h = 0; h < 2; h++) {
        __m256 x, y, z;
        memcpy(&x, (const float *)&a + 8 * h, 32);
        memcpy(&y, (const float *)&b + 8 * h, 32);
        memcpy(&z, (const float *)&c + 8 * h, 32);
        r[h] = _mm256_fmadd_ps(x, y, z);
    }
    f32x16 v;
    memcpy(&v, r, sizeof v);
    return v;
}
#endif
V16_AI f32x16 v16_fma_lanes(f32x16 a, f32x16 b, f32x16 c) {
    f32x16 r;
    for (int i = 0; i < 16; i++) r[i] = fmaf(a[i], b[i], c[i]);
    return r;
}
/* acc + a * b, fused. */
V16_AI f32x16 v16_fma(f32x16 a, f32x16 b, f32x16 acc) { return V16_FMA(a, b, acc); }

/* Lane sum by a fixed tree: (l0+l8)+(l4+l12) ... the same pairs on every path. */
V16_AI float v16_sum_tree(f32x16 v) {
    float s8[8], s4[4], s2[2];
    for (int i = 0; i < 8; i++) s8[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    for (int i = 0; i < 2; i++) s2[i] = s4[i] + s4[i + 2];
    return s2[0] + s2[1];
}
V16_AI float v16_max_lanes(f32x16 v) {
    float m = v[0];
    for (int i = 1; i < 16; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* The four rounds of a 16x16 transpose: round W exchanges, between rows i and i + W (bit W
 * of i clear), the lanes whose index has bit W set in row i with those that have it clear
 * in row i + W. */
V16_AI void v16_xchg1(f32x16 *a, f32x16 *b) {
    const f32x16 x = __builtin_shufflevector(*a, *b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    *b = __builtin_shufflevector(*a, *b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    *a = x;
}
V16_AI void v16_xchg2(f32x16 *a, f32x16 *b) {
    const f32x16 x = __builtin_shufflevector(*a, *b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    *b = __builtin_shufflevector(*a, *b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    *a = x;
}
V16_AI void v16_xchg4(f32x16 *a, f32x16 *b) {
    const f32x16 x = __builtin_shufflevector(*a, *b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    *b = __builtin_shufflevector(*a, *b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    *a = x;
}
V16_AI void v16_xchg8(f32x16 *a, f32x16 *b) {
    const f32x16 x = __builtin_shufflevector(*a, *b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    *b = __builtin_shufflevector(*a, *b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    *a = x;
}
/* r[i][l] becomes r[l][i]: each round swaps one bit of the row and the lane index. Only
 * data movement, so the same bits on every ISA. */
V16_AI void v16_transpose16(f32x16 *r) {
    for (int i = 0; i < 16; i += 2) v16_xchg1(&r[i], &r[i + 1]);
    for (int i = 0; i < 16; i++)
        if (!(i & 2)) v16_xchg2(&r[i], &r[i + 2]);
    for (int i = 0; i < 16; i++)
        if (!(i & 4)) v16_xchg4(&r[i], &r[i + 4]);
    for (int i = 0; i < 8; i++) v16_xchg8(&r[i], &r[i + 8]);
}

/* Tests only (negative control of the cross-ISA comparisons): the lowest bit of lane 5
 * flipped, a one-ulp change in one lane. */
V16_AI f32x16 v16_testing_flip(f32x16 v) {
    const i32x16 bit = {0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    return (f32x16)((i32x16)v ^ bit);
}

/* e^x, lane-wise, within 1 ulp of the exact value for normal results (test_vec16). Range reduction
 * x = n ln2 + r with n = nearest integer of x log2(e) (by the 1.5*2^23 rounding trick,
 * whose bits also give n as an integer), ln2 split in two parts so n*ln2_hi is exact, a
 * degree-6 polynomial for e^r on |r| <= ln2/2, then scaling by 2^n built from bits (as
 * 2^(n-1) * 2 when n > 0, so n = 128 does not overflow the exponent field). Results
 * below FLT_MIN's range are 0, above FLT_MAX's +inf; NaN stays NaN. Only mul and add
 * (no FMA): short, and the same bits with or without FMA hardware. */
V16_AI f32x16 invar_exp16(f32x16 x) {
    const float lo = -87.33654475f, hi = 88.72283906f;
    const f32x16 magic = v16_splat(12582912.0f); /* 1.5 * 2^23 */
    /* Lanes below lo become 0 in the last selects; they are computed at x = 0 rather
     * than at lo, whose result is near the smallest normal: subnormal intermediates cost
     * a microcode assist per instruction on x86 (a third of the attention time, for the
     * masked -inf scores of every causal tile). No result bit depends on it. */
    f32x16 xc = v16_select(x < lo, v16_splat(0.0f), x);
    xc = v16_select(xc > hi, v16_splat(hi), xc);
    xc = v16_select(xc == xc, xc, v16_splat(0.0f)); /* NaN: computed as 0, fixed below */
    const f32x16 t = xc * 1.44269504088896341f + magic;
    const f32x16 n = t - magic;
    const i32x16 ni = (i32x16)t - (i32x16)magic;
    f32x16 r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    f32x16 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const f32x16 y = (p * (r * r) + r) + 1.0f;
    const i32x16 pos = ni > 0; /* -1 where n > 0 */
    const i32x16 e1 = (ni + pos + 127) << 23;              /* 2^(n-1) or 2^n */
    const i32x16 e2 = ((i32x16){0} + 0x3f800000) + (pos & 0x00800000); /* 2 or 1 */
    f32x16 res = (y * (f32x16)e1) * (f32x16)e2;
    res = v16_select(x < lo, v16_splat(0.0f), res);
    res = v16_select(x > hi, v16_splat(__builtin_inff()), res);
    return v16_select(x == x, res, x);
}

/* The exp of the vec16 kernels (attention_kernel.h, rowops_kernel.h): invar_exp16. The
 * tests-only flipped builds (vec16_flip_*.c: VEC16_TESTING_FLIP) flip one lane of it. */
#if defined(VEC16_TESTING_FLIP)
#define v16_kernel_exp(x) v16_testing_flip(invar_exp16(x))
#else
#define v16_kernel_exp(x) invar_exp16(x)
#endif

#endif
