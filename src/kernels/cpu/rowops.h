/* Row operations. Each output row depends on its own input row only, through one
 * fixed sequence of float operations, so they are batch-invariant by construction.
 * invar_expf is the single exp used everywhere (softmax, SiLU, sampling). */
#ifndef INVAR_ROWOPS_H
#define INVAR_ROWOPS_H
#include <stdbool.h>
#include <stdint.h>
#include "kernels/cpu/threadpool.h"

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

/* The forward pass's row path: per-token work between the matmuls, spread over the pool.
 * Each row depends on that row only, so how rows are grouped into tasks and which thread
 * runs a task cannot change a bit; small batches (decode, fewer than ROWS_PARALLEL_MIN
 * rows) run on the calling thread, where handing out tasks would cost more than it saves.
 *
 * Tasks start only where a row begins a KV block or a new sequence: the K cache is stored
 * transposed ([head_dim][16] per block), so two threads storing tokens of one block would
 * write the same cache lines (false sharing made the store ten times as costly in CPU time
 * at two threads). Tasks hold ROWS_PER_TASK to 2 x ROWS_PER_TASK - 1 rows. */
#define ROWS_PER_TASK 16 /* = KV_BLOCK */
#define ROWS_PARALLEL_MIN 32
typedef void (*rows_fn)(void *ctx, int64_t row);
/* Cuts n_rows rows (row t: position pos[t] of the sequence whose block table is tables[t])
 * into tasks: task i is rows cuts[i] .. cuts[i + 1] - 1. cuts has room for n_rows + 1
 * entries; returns the number of tasks. */
int64_t rows_cut(int64_t n_rows, const int32_t *pos, const int32_t *const *tables, int64_t *cuts);
/* fn(ctx, t) for every row t < n_rows, in the tasks rows_cut made. */
void rows_run(threadpool *tp, int64_t n_rows, const int64_t *cuts, int64_t n_tasks, rows_fn fn, void *ctx);

/* NEGATIVE CONTROL, tests only: with on, row_rmsnorm sums the squares in 1 + (n % 3)
 * consecutive parts, n the number of rows of the last rows_run call, so a row's bits depend
 * on how many rows ran with it. */
void rows_testing_set_norm_by_rows(bool on);

#endif
