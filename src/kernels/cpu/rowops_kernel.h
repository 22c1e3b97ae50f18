/* Vectorised row operations, compiled once per ISA (vec16_*.c) from this one source;
 * lane-wise IEEE operations only, so every ISA gives the same bits. */
#include <string.h>

#include "vec16.h"

/* silu(x) = x / (1 + e^-x), lane-wise. */
V16_AI f32x16 silu16(f32x16 x) { return x / (1.0f + invar_exp16(-x)); }

/* Loads lanes [0, n) of p (n < 16), the rest 0: tails go through the same lane code. */
V16_AI f32x16 load_tail(const float *p, int64_t n) {
    float t[16] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    return v16_load(t);
}

static void silu_mul_any(const float *gate, const float *up, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) v16_store(out + i, silu16(v16_load(gate + i)) * v16_load(up + i));
    if (i < n) {
        const f32x16 r = silu16(load_tail(gate + i, n - i)) * load_tail(up + i, n - i);
        memcpy(out + i, &r, sizeof(float) * (size_t)(n - i));
    }
}

static void expf_n_any(const float *x, float sub, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) v16_store(y + i, invar_exp16(v16_load(x + i) - sub));
    if (i < n) {
        const f32x16 e = invar_exp16(load_tail(x + i, n - i) - sub);
        memcpy(y + i, &e, sizeof(float) * (size_t)(n - i));
    }
}
