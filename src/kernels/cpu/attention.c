#include "attention.h"

#include <math.h>
#include <string.h>

#include "rowops.h"

#define MAX_HEAD_DIM 512

void attn_head(const attn_shape *sh, const attn_job *job, int64_t h) {
    const int64_t hd = sh->head_dim;
    const int64_t group = sh->n_heads / sh->n_kv_heads;
    const int64_t kvh = h / group;
    const float *q = job->q + h * hd;
    float *out = job->out + h * hd;

    float m = -INFINITY, l = 0.0f;
    float acc[MAX_HEAD_DIM];
    memset(acc, 0, sizeof(float) * (size_t)hd);
    float scores[ATTN_SPLIT];
    float part[MAX_HEAD_DIM];

    for (int64_t s0 = 0; s0 <= job->pos; s0 += ATTN_SPLIT) {
        int64_t s1 = s0 + ATTN_SPLIT - 1;
        if (s1 > job->pos) s1 = job->pos;
        int64_t n = s1 - s0 + 1;
        float mc = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float *k = attn_kv_row(job->kv.k, &job->kv, s0 + j) + kvh * hd;
            scores[j] = row_dot(q, k, hd) * sh->scale;
            if (scores[j] > mc) mc = scores[j];
        }
        float lc = 0.0f;
        memset(part, 0, sizeof(float) * (size_t)hd);
        for (int64_t j = 0; j < n; j++) {
            float w = invar_expf(scores[j] - mc);
            lc += w;
            const float *v = attn_kv_row(job->kv.v, &job->kv, s0 + j) + kvh * hd;
            for (int64_t d = 0; d < hd; d++) part[d] += w * v[d];
        }
        /* Merge this split into the running result, always in split order. */
        float mn = m > mc ? m : mc;
        float a = invar_expf(m - mn), b = invar_expf(mc - mn);
        l = l * a + lc * b;
        for (int64_t d = 0; d < hd; d++) acc[d] = acc[d] * a + part[d] * b;
        m = mn;
    }
    float inv = 1.0f / l;
    for (int64_t d = 0; d < hd; d++) out[d] = acc[d] * inv;
}

typedef struct {
    const attn_shape *shape;
    const attn_job *jobs;
} attn_ctx;

static void attn_task(void *p, int64_t t) {
    const attn_ctx *c = p;
    int64_t nh = c->shape->n_heads;
    attn_head(c->shape, &c->jobs[t / nh], t % nh);
}

void attn_run(threadpool *tp, const attn_shape *shape, const attn_job *jobs, int64_t n_jobs) {
    attn_ctx c = {shape, jobs};
    threadpool_run(tp, attn_task, &c, n_jobs * shape->n_heads);
}
