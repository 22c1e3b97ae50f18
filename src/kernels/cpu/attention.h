/* Causal grouped-query attention over a paged KV cache, one query token at a time.
 *
 * Invariance: a query at position p reduces over keys 0..p in splits of ATTN_SPLIT
 * positions aligned to absolute position 0, each split reduced in position order and the
 * splits merged in order. Nothing depends on how many tokens were computed together, so
 * prefill, chunked prefill, decode and recompute give the same bits. */
#ifndef INVAR_ATTENTION_H
#define INVAR_ATTENTION_H
#include <stdint.h>
#include "threadpool.h"

#define ATTN_SPLIT 256
#define KV_BLOCK 16 /* tokens per KV-cache block */

typedef struct {
    const float *k, *v;          /* pools: [block][KV_BLOCK][kv_dim] */
    const int32_t *block_table;  /* logical block -> pool block */
    int64_t kv_dim;              /* n_kv_heads * head_dim */
} attn_kv;

/* One attention job: a query token of one sequence. */
typedef struct {
    const float *q;     /* n_heads * head_dim */
    float *out;         /* n_heads * head_dim */
    attn_kv kv;
    int64_t pos;        /* attends to positions 0..pos */
} attn_job;

typedef struct {
    int64_t n_heads, n_kv_heads, head_dim;
    float scale;
} attn_shape;

/* Runs all jobs, parallel over (job, head). head_dim <= 512. */
void attn_run(threadpool *tp, const attn_shape *shape, const attn_job *jobs, int64_t n_jobs);

/* One (job, head): exposed for tests. */
void attn_head(const attn_shape *shape, const attn_job *job, int64_t head);

static inline const float *attn_kv_row(const float *pool, const attn_kv *kv, int64_t p) {
    return pool + ((int64_t)kv->block_table[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK) * kv->kv_dim;
}

#endif
