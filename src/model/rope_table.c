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

/* YaRN (config.h: yarn), as ggml's rope computes it: the dims whose wavelength fits the
 * original context fewer than beta_slow = 1 times are interpolated by 1/factor, those
 * turning more than beta_fast = 32 times kept, a linear ramp between. */
static double yarn_corr_dim(const model_config *c, double n_turns) {
    const double pi = 3.14159265358979323846;
    return (double)c->n_rot * log((double)c->yarn.original_ctx / (n_turns * 2.0 * pi)) /
           (2.0 * log((double)c->rope_base));
}

static double yarn_inv_freq(const model_config *c, int64_t i, double inv_freq) {
    const double lo = fmax(0.0, floor(yarn_corr_dim(c, 32.0)));
    const double hi = fmin((double)(c->n_rot - 1), ceil(yarn_corr_dim(c, 1.0)));
    const double y = ((double)i - lo) / fmax(0.001, hi - lo);
    const double keep = 1.0 - fmin(1.0, fmax(0.0, y)); /* 1: extrapolate (unscaled) */
    return inv_freq / (double)c->yarn.factor * (1.0 - keep) + inv_freq * keep;
}

float *rope_table_build(const model_config *c, const float *freq_factors, int64_t n_pos) {
    int64_t half = c->n_rot / 2;
    float *t = malloc(sizeof(float) * 2 * (size_t)(half * n_pos));
    if (!t) return NULL;
    for (int64_t i = 0; i < half; i++) {
        double inv_freq = pow((double)c->rope_base, -2.0 * (double)i / (double)c->n_rot);
        if (freq_factors) inv_freq /= (double)freq_factors[i];
        inv_freq *= (double)c->rope_freq_scale;
        if (c->yarn.factor > 0) inv_freq = yarn_inv_freq(c, i, inv_freq);
        for (int64_t p = 0; p < n_pos; p++) {
            double ang = (double)p * inv_freq;
            t[(p * half + i) * 2] = (float)cos(ang);
            t[(p * half + i) * 2 + 1] = (float)sin(ang);
        }
    }
    return t;
}
