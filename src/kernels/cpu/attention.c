/* Attention entry points: KV-cache layout, task split over (job, KV head, head tile) and
 * ISA dispatch. The kernel itself is attention_kernel.h. */
#include "attention.h"

#include "vec16_kernels.h"

#define GT 4 /* = ATTN_GT */

void attn_kv_store(const attn_kv *kv, int64_t p, const float *k, const float *v) {
    const int64_t hd = kv->head_dim, lane = p % KV_BLOCK;
    for (int64_t h = 0; h < kv->n_kv_heads; h++) {
        float *kb = attn_k_block(kv, p, h), *vr = attn_v_row(kv, p, h);
        for (int64_t d = 0; d < hd; d++) {
            kb[d * KV_BLOCK + lane] = k[h * hd + d];
            vr[d] = v[h * hd + d];
        }
    }
}

void attn_kv_load(const attn_kv *kv, int64_t p, float *k, float *v) {
    const int64_t hd = kv->head_dim, lane = p % KV_BLOCK;
    for (int64_t h = 0; h < kv->n_kv_heads; h++) {
        const float *kb = attn_k_block(kv, p, h), *vr = attn_v_row(kv, p, h);
        for (int64_t d = 0; d < hd; d++) {
            k[h * hd + d] = kb[d * KV_BLOCK + lane];
            v[h * hd + d] = vr[d];
        }
    }
}

typedef void (*tile_fn)(const attn_shape *, const attn_job *, int64_t, int64_t, int);

typedef struct {
    const attn_shape *shape;
    const attn_job *jobs;
    tile_fn tile;
    int64_t tiles_per_kvh, tiles_per_job;
} attn_ctx;

static void attn_task(void *p, int64_t t) {
    const attn_ctx *c = p;
    const int64_t group = c->shape->n_heads / c->shape->n_kv_heads;
    const int64_t r = t % c->tiles_per_job, kvh = r / c->tiles_per_kvh, g0 = (r % c->tiles_per_kvh) * GT;
    const int64_t G = group - g0 < GT ? group - g0 : GT;
    c->tile(c->shape, &c->jobs[t / c->tiles_per_job], kvh, kvh * group + g0, (int)G);
}

void attn_run(threadpool *tp, const attn_shape *shape, const attn_job *jobs, int64_t n_jobs) {
    attn_ctx c = {shape, jobs, vec16_active()->attn_tile, 0, 0};
    const int64_t group = shape->n_heads / shape->n_kv_heads;
    c.tiles_per_kvh = (group + GT - 1) / GT;
    c.tiles_per_job = c.tiles_per_kvh * shape->n_kv_heads;
    threadpool_run(tp, attn_task, &c, n_jobs * c.tiles_per_job);
}
