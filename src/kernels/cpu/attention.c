/* Attention entry points: KV-cache layout, task split over (job, KV head, head tile) and
 * ISA dispatch. The kernel itself is attention_kernel.h. */
#include "kernels/cpu/attention.h"

#include <math.h>

#include "formats/quant.h"
#include "kernels/cpu/vec16_kernels.h"

/* The one rounding of an f16 cache: f32_to_fp16, nearest even. The negative control's
 * truncation steps a half that rounded away from zero back by one. */
static uint16_t kv_half(float x, attn_kv_rounding r) {
    uint16_t h = f32_to_fp16(x);
    if (r == ATTN_KV_ROUND_TOWARD_ZERO && (h & 0x7fffu) < 0x7c00u && fabsf(fp16_to_f32(h)) > fabsf(x)) h--;
    return h;
}

static void kv_put(const attn_kv *kv, void *base, int64_t i, float x, attn_kv_rounding r) {
    if (kv->type == ATTN_KV_F16) ((uint16_t *)base)[i] = kv_half(x, r);
    else ((float *)base)[i] = x;
}

void attn_kv_store(const attn_kv *kv, int64_t p, const float *k, const float *v) {
    attn_kv_store_rounded(kv, p, k, v, ATTN_KV_ROUND_NEAREST);
}

void attn_kv_store_rounded(const attn_kv *kv, int64_t p, const float *k, const float *v, attn_kv_rounding r) {
    const int64_t hd = kv->head_dim, hdv = kv->head_dim_v, lane = p % KV_BLOCK;
    for (int64_t h = 0; h < kv->n_kv_heads; h++) {
        const int64_t kb = attn_k_block_at(kv, p, h);
        for (int64_t d = 0; d < hd; d++) kv_put(kv, kv->k, kb + d * KV_BLOCK + lane, k[h * hd + d], r);
        if (kv->layout == ATTN_KV_LATENT) continue;
        const int64_t vr = attn_v_row_at(kv, p, h);
        for (int64_t d = 0; d < hdv; d++) kv_put(kv, kv->v, vr + d, v[h * hdv + d], r);
    }
}

void attn_kv_load(const attn_kv *kv, int64_t p, float *k, float *v) {
    const int64_t hd = kv->head_dim, hdv = kv->head_dim_v, lane = p % KV_BLOCK;
    for (int64_t h = 0; h < kv->n_kv_heads; h++) {
        const int64_t kb = attn_k_block_at(kv, p, h);
        for (int64_t d = 0; d < hd; d++) k[h * hd + d] = attn_kv_elem(kv->k, kb + d * KV_BLOCK + lane, kv->type);
        if (kv->layout == ATTN_KV_LATENT)
            for (int64_t d = 0; d < hdv; d++) v[h * hdv + d] = attn_kv_elem(kv->k, kb + d * KV_BLOCK + lane, kv->type);
        else
            for (int64_t d = 0; d < hdv; d++) v[h * hdv + d] = attn_kv_elem(kv->v, attn_v_row_at(kv, p, h) + d, kv->type);
    }
}

/* Tasks. Jobs are taken in fixed groups of `span` consecutive jobs; inside a group, each
 * run of jobs that share a sequence's KV cache (a prefill chunk) forms one tile with the
 * query heads of one KV head, so each K/V load serves span x group queries. Decode jobs
 * are one per sequence and make tiles of one token. How jobs are grouped changes no
 * query's operations (attention_kernel.h). Query heads of a KV head are split into
 * tiles of at most ATTN_TILE_QUERIES. */
typedef struct {
    const attn_shape *shape;
    const attn_job *jobs;
    int64_t n_jobs, span, group, heads_per_tile, tiles_per_kvh, split;
    const vec16_kernels *k;
} attn_ctx;

static int same_cache(const attn_kv *a, const attn_kv *b) {
    return a->k == b->k && a->v == b->v && a->block_table == b->block_table && a->type == b->type;
}

static void attn_task(void *p, int64_t t) {
    const attn_ctx *c = p;
    const int64_t per_group = c->shape->n_kv_heads * c->tiles_per_kvh;
    const int64_t j0 = (t / per_group) * c->span, r = t % per_group;
    const int64_t kvh = r / c->tiles_per_kvh, g0 = (r % c->tiles_per_kvh) * c->heads_per_tile;
    const int64_t G = c->group - g0 < c->heads_per_tile ? c->group - g0 : c->heads_per_tile;
    const int64_t j1 = j0 + c->span < c->n_jobs ? j0 + c->span : c->n_jobs;
    for (int64_t a = j0; a < j1;) {
        int64_t b = a + 1;
        while (b < j1 && same_cache(&c->jobs[b].kv, &c->jobs[a].kv)) b++;
        const int64_t h0 = kvh * c->group + g0;
        if (c->split == ATTN_SPLIT) c->k->attn_tile(c->shape, c->jobs + a, (int)(b - a), kvh, h0, (int)G);
        else c->k->attn_tile_split(c->shape, c->jobs + a, (int)(b - a), kvh, h0, (int)G, c->split); /* tests only */
        a = b;
    }
}

void attn_run(threadpool *tp, const attn_shape *shape, const attn_job *jobs, int64_t n_jobs) {
    attn_run_split(tp, shape, jobs, n_jobs, ATTN_SPLIT_INVARIANT);
}

void attn_run_split(threadpool *tp, const attn_shape *shape, const attn_job *jobs, int64_t n_jobs,
                    attn_split_mode mode) {
    attn_ctx c;
    /* ATTN_SPLIT_BY_BATCH, tests only: splits of 16, 32, 48 or 64 keys as n_jobs goes. */
    c.split = mode == ATTN_SPLIT_BY_BATCH ? KV_BLOCK * (1 + n_jobs % 4) : ATTN_SPLIT;
    c.shape = shape;
    c.jobs = jobs;
    c.n_jobs = n_jobs;
    c.group = shape->n_heads / shape->n_kv_heads;
    c.heads_per_tile = c.group < ATTN_TILE_QUERIES ? c.group : ATTN_TILE_QUERIES;
    c.tiles_per_kvh = (c.group + c.heads_per_tile - 1) / c.heads_per_tile;
    c.span = ATTN_TILE_QUERIES / c.heads_per_tile;
    c.k = vec16_active();
    const int64_t n_groups = (n_jobs + c.span - 1) / c.span;
    threadpool_run(tp, attn_task, &c, n_groups * shape->n_kv_heads * c.tiles_per_kvh);
}
