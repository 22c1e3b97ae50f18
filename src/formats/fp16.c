/* IEEE binary16 and bfloat16 <-> binary32 conversions.
 * Semantics follow the x86 conversion instructions (F16C): round to nearest even,
 * subnormals kept, signalling NaNs come back quiet with their payload truncated/extended.
 * Matching the hardware matters: SIMD kernels use vcvtph2ps and are tested against these. */
#include "formats/quant.h"

#include <string.h>

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) { /* Inf / NaN; a NaN is made quiet as F16C does */
        uint32_t bits = sign | 0x7f800000u | (mant << 13);
        if (mant) bits |= 0x00400000u;
        return bits_f32(bits);
    }
    if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    /* Subnormal half: value mant * 2^-24, always a normal float; normalise it. */
    uint32_t e = 113; /* biased float exponent of 2^-14 */
    while (!(mant & 0x400u)) { mant <<= 1; e--; }
    return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (halfway past the max half) rounds to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* result is a normal half: rebias and round 23->10 bits */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) /* <= 2^-25: rounds (ties to even) to zero */
        return sign;
    /* Subnormal half: count of 2^-24 units, rounded to nearest even. */
    uint32_t e = a >> 23;                       /* 102..112 */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;   /* value m * 2^(e-150) */
    uint32_t shift = 126u - e;                  /* 14..24 */
    uint32_t k = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (k & 1u))) k++;
    return (uint16_t)(sign | k);
}

float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
