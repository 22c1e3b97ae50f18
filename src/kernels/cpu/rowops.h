/* Row operations. Each output row depends on its own input row only, through one
 * fixed sequence of float operations, so they are batch-invariant by construction.
 * invar_expf is the single exp used everywhere (softmax, SiLU, sampling). */
#ifndef INVAR_ROWOPS_H
#define INVAR_ROWOPS_H
#include <stdbool.h>
#include <stdint.h>

/* The one exp (vec16.h: invar_exp16); scalar callers get lane 0 of the same code. */
float invar_expf(float x);
/* y[i] = invar_expf(x[i] - sub), 16 lanes at a time. y may alias x. */
void invar_expf_n(const float *x, float sub, float *y, int64_t n);

/* Fixed-order dot product: 8 interleaved partial sums, then a fixed tree. Inline so the
 * attention loop can keep it in registers; the compiler may vectorise the lanes but never
 * reorders the sums (no -ffast-math), so every copy gives the same bits. */
static inline float row_dot(const float *a, const float *b, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; l < 8 && i < n; i++, l++) acc[l] += a[i] * b[i]; /* tail: < 8 left */
    float s0 = (acc[0] + acc[4]) + (acc[2] + acc[6]);
    float s1 = (acc[1] + acc[5]) + (acc[3] + acc[7]);
    return s0 + s1;
}
/* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no weight). y may alias x. */
void row_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);
/* out = silu(gate) * up, elementwise. out may alias gate. */
void row_silu_mul(const float *gate, const float *up, float *out, int64_t n);
/* y += x */
void row_add(float *y, const float *x, int64_t n);

/* RoPE: rotates n_heads heads of head_dim floats at one position.
 * cs holds cos/sin pairs for this position: cs[2*i], cs[2*i+1] for i < n_rot/2.
 * neox: pairs (i, i + n_rot/2) (Qwen); else adjacent pairs (2i, 2i+1) (Llama in GGUF). */
void row_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float *cs, bool neox);

/* log-softmax statistics of a row: log(sum(exp(x - max))) + max, the sum accumulated in
 * double in 16 lanes (element i in lane i % 16, index order) and then a fixed tree. */
float row_logsumexp(const float *x, int64_t n);
/* First index of the largest element (NaNs ignored). */
int64_t row_argmax(const float *x, int64_t n);

#endif
