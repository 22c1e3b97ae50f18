#include "rowops.h"

#include <math.h>

/* libm's expf is deterministic for a given input; routing every caller through this one
 * function keeps it the only exp in the engine (vector paths must call it too). */
float invar_expf(float x) { return expf(x); }

float invar_silu(float x) { return x / (1.0f + invar_expf(-x)); }

void row_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    float ss = row_dot(x, x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

void row_silu_mul(const float *gate, const float *up, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = invar_silu(gate[i]) * up[i];
}

void row_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void row_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float *cs, bool neox) {
    int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            int64_t a = neox ? i : 2 * i;
            int64_t b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

float row_logsumexp(const float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (!isfinite(mx)) return mx;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)invar_expf(x[i] - mx);
    return mx + (float)log(s);
}
