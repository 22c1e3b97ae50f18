#include "model/rope_table.h"

#include <math.h>
#include <stdlib.h>

void rope_llama3_factors(const model_config *c, float *out) {
    const double factor = c->rope_llama3.factor, lo = c->rope_llama3.low_freq_factor;
    const double hi = c->rope_llama3.high_freq_factor, ctx = (double)c->rope_llama3.original_ctx;
    const double pi = 3.14159265358979323846;
    for (int64_t i = 0; i < c->n_rot / 2; i++) {
        double inv_freq = pow((double)c->rope_base, -2.0 * (double)i / (double)c->n_rot); /* as the table's */
        double wavelen = 2.0 * pi / inv_freq;
        double f;
        if (wavelen < ctx / hi) {
            f = 1.0;
        } else if (wavelen > ctx / lo) {
            f = factor;
        } else {
            double smooth = (ctx / wavelen - lo) / (hi - lo);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        out[i] = (float)f;
    }
}

float *rope_table_build(const model_config *c, const float *freq_factors, int64_t n_pos) {
    int64_t half = c->n_rot / 2;
    float *t = malloc(sizeof(float) * 2 * (size_t)(half * n_pos));
    if (!t) return NULL;
    for (int64_t i = 0; i < half; i++) {
        double inv_freq = pow((double)c->rope_base, -2.0 * (double)i / (double)c->n_rot);
        if (freq_factors) inv_freq /= (double)freq_factors[i];
        inv_freq *= (double)c->rope_freq_scale;
        for (int64_t p = 0; p < n_pos; p++) {
            double ang = (double)p * inv_freq;
            t[(p * half + i) * 2] = (float)cos(ang);
            t[(p * half + i) * 2 + 1] = (float)sin(ang);
        }
    }
    return t;
}
