#include "rowops.h"

#include <math.h>
#include <string.h>

#include "vec16.h"
#include "vec16_kernels.h"

/* Lane 0 of the vector exp: the same bits as any lane of any vector call. */
float invar_expf(float x) {
    f32x16 v = {x};
    return invar_exp16(v)[0];
}

void invar_expf_n(const float *x, float sub, float *y, int64_t n) { vec16_active()->expf_n(x, sub, y, n); }

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
    vec16_active()->silu_mul(gate, up, out, n);
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

float row_logsumexp(const float *x, int64_t n) { return vec16_active()->logsumexp(x, n); }

int64_t row_argmax(const float *x, int64_t n) { return vec16_active()->argmax(x, n); }
