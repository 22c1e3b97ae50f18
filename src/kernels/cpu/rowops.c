#include "kernels/cpu/rowops.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/vec16.h"
#include "kernels/cpu/vec16_kernels.h"

/* Lane 0 of the vector exp: the same bits as any lane of any vector call. */
float invar_expf(float x) {
    f32x16 v = {x};
    return invar_exp16(v)[0];
}

void invar_expf_n(const float *x, float sub, float *y, int64_t n) { vec16_active()->expf_n(x, sub, y, n); }

/* rows_testing_set_norm_by_rows (tests only): written by the caller of rows_run before the
 * pool starts its tasks, read by them. */
static bool g_norm_by_rows;
static int64_t g_rows_in_call;

void rows_testing_set_norm_by_rows(bool on) { g_norm_by_rows = on; }

/* The negative control's norm: the sum of squares in 1 + (rows % 3) consecutive parts, each
 * summed in order. Out of line, so row_rmsnorm's own code is as without the hook. */
static __attribute__((noinline, cold)) void rmsnorm_by_rows(const float *x, const float *w, float *y, int64_t n,
                                                              float eps) {
    const int64_t parts = 1 + g_rows_in_call % 3;
    float ss = 0.0f;
    for (int64_t p = 0; p < parts; p++) {
        float part = 0.0f;
        for (int64_t i = n * p / parts; i < n * (p + 1) / parts; i++) part += x[i] * x[i];
        ss += part;
    }
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

void row_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    if (__builtin_expect(g_norm_by_rows, 0)) { /* tests only */
        rmsnorm_by_rows(x, w, y, n, eps);
        return;
    }
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

_Static_assert(ROWS_PER_TASK == KV_BLOCK, "row tasks start at KV-block boundaries");

int64_t rows_cut(int64_t n_rows, const int32_t *pos, const int32_t *const *tables, int64_t *cuts) {
    int64_t n = 0;
    cuts[n++] = 0;
    for (int64_t t = 1; t < n_rows; t++) {
        const int boundary = pos[t] % KV_BLOCK == 0 || tables[t] != tables[t - 1];
        if (t - cuts[n - 1] >= ROWS_PER_TASK && boundary) cuts[n++] = t;
    }
    cuts[n] = n_rows;
    return n;
}

typedef struct {
    const int64_t *cuts;
    rows_fn fn;
    void *ctx;
} rows_ctx;

static void rows_task(void *p, int64_t task) {
    const rows_ctx *c = p;
    for (int64_t t = c->cuts[task]; t < c->cuts[task + 1]; t++) c->fn(c->ctx, t);
}

void rows_run(threadpool *tp, int64_t n_rows, const int64_t *cuts, int64_t n_tasks, rows_fn fn, void *ctx) {
    if (g_norm_by_rows) g_rows_in_call = n_rows; /* tests only */
    if (n_rows < ROWS_PARALLEL_MIN) {
        for (int64_t t = 0; t < n_rows; t++) fn(ctx, t);
        return;
    }
    rows_ctx c = {cuts, fn, ctx};
    threadpool_run(tp, rows_task, &c, n_tasks);
}
