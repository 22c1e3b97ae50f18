/* Vectorised row operations, compiled once per ISA (vec16_*.c) from this one source;
 * lane-wise IEEE operations only, so every ISA gives the same bits. Their exp is
 * v16_kernel_exp (vec16.h): invar_exp16, but in the tests-only flipped builds. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/vec16.h"

/* silu(x) = x / (1 + e^-x), lane-wise. */
V16_AI f32x16 silu16(f32x16 x) { return x / (1.0f + v16_kernel_exp(-x)); }

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
    for (; i + 16 <= n; i += 16) v16_store(y + i, v16_kernel_exp(v16_load(x + i) - sub));
    if (i < n) {
        const f32x16 e = v16_kernel_exp(load_tail(x + i, n - i) - sub);
        memcpy(y + i, &e, sizeof(float) * (size_t)(n - i));
    }
}

/* Largest element, NaNs ignored (-inf if none); any order gives the same value. */
static float max_any(const float *x, int64_t n) {
    f32x16 mv = v16_splat(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) mv = v16_max(v16_load(x + i), mv);
    float mx = v16_max_lanes(mv);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* First index holding the largest element (0 if there is none). */
static int64_t argmax_any(const float *x, int64_t n) {
    const float mx = max_any(x, n);
    for (int64_t i = 0; i < n; i++)
        if (x[i] == mx) return i;
    return 0;
}

/* log(sum(exp(x - max))) + max: 16 double accumulators (element i goes to i % 16, in
 * index order), then a fixed tree. */
static float logsumexp_any(const float *x, int64_t n) {
    const float mx = max_any(x, n);
    if (!isfinite(mx)) return mx;
    double acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const f32x16 e = v16_kernel_exp(v16_load(x + i) - mx);
        for (int l = 0; l < 16; l++) acc[l] += (double)e[l];
    }
    if (i < n) {
        const f32x16 e = v16_kernel_exp(load_tail(x + i, n - i) - mx);
        for (int l = 0; l < n - i; l++) acc[l] += (double)e[l];
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] = acc[l] + acc[l + w];
    return mx + (float)log(acc[0]);
}
