/* Causal grouped-query attention over a paged KV cache.
 *
 * Invariance: a query at position p reduces over keys 0..p in splits of ATTN_SPLIT
 * positions aligned to absolute position 0. Inside a split, the score of key j is a
 * sequential chain of fused multiply-adds over head_dim, the softmax denominator is
 * summed lane-wise over 16-key groups and then by a fixed tree, and each output element
 * is a chain of fused multiply-adds over the split's keys in position order; the splits are merged in
 * order. Which other queries (heads of the group, other tokens, other sequences) share a
 * kernel call only changes how loads are shared, so prefill, chunked prefill, decode and
 * recompute give the same bits, on every ISA (attention_kernel.h). */
#ifndef INVAR_ATTENTION_H
#define INVAR_ATTENTION_H
#include <stddef.h>
#include <stdint.h>
#include "formats/quant.h"
#include "kernels/cpu/threadpool.h"

#define ATTN_SPLIT 256
#define KV_BLOCK 16 /* tokens per KV-cache block = lanes of one key vector */
#define ATTN_MAX_HEAD_DIM 576 /* MLA's latent head: kv_lora 512 + rope 64 (DeepSeek-V2/V3) */

/* A pool block holds KV_BLOCK positions of every KV head. Per KV head, K is stored
 * transposed, [head_dim][KV_BLOCK], so element d of 16 consecutive keys is one vector.
 * The value rows depend on the cache layout:
 *   ATTN_KV_SEPARATE  V is a pool of its own, [KV_BLOCK][head_dim_v] per KV head;
 *   ATTN_KV_LATENT    V is the first head_dim_v floats of the key itself (MLA's latent head
 *                     scores against [c_kv, k_pe] and sums c_kv alone), so nothing is stored
 *                     twice: v is NULL and the kernel reads V out of the K block. */
typedef enum { ATTN_KV_SEPARATE = 0, ATTN_KV_LATENT = 1 } attn_kv_layout;

/* The cache's element type. ATTN_KV_F16: IEEE halves, rounded once when a position is
 * stored (attn_kv_store: f32_to_fp16, nearest even) and widened exactly by every reader,
 * so the kernel's arithmetic is the f32 kernel's on the widened values and a position's
 * stored bits depend only on its own K/V: invariance holds by construction. */
typedef enum { ATTN_KV_F32 = 0, ATTN_KV_F16 = 1 } attn_kv_type;

static inline size_t attn_kv_type_size(attn_kv_type t) { return t == ATTN_KV_F16 ? 2 : 4; }

/* Element i of a pool of type t, widened to f32 (exact for halves): the one scalar read of
 * the cache (the kernel's scalar tails and attn_kv_load). */
static inline float attn_kv_elem(const void *base, int64_t i, attn_kv_type t) {
    return t == ATTN_KV_F16 ? fp16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

typedef struct {
    void *k, *v;                 /* pools: n_blocks * KV_BLOCK * n_kv_heads * head_dim (_v) elements */
    const int32_t *block_table;  /* logical block -> pool block */
    int64_t n_kv_heads, head_dim, head_dim_v;
    attn_kv_layout layout;
    attn_kv_type type;           /* of the pools' elements (0: f32) */
} attn_kv;

/* One attention job: a query token of one sequence. */
typedef struct {
    const float *q;     /* n_heads * head_dim */
    float *out;         /* n_heads * head_dim_v */
    attn_kv kv;
    int64_t pos;        /* attends to positions 0..pos */
} attn_job;

typedef struct {
    int64_t n_heads, n_kv_heads, head_dim;
    float scale;
    int64_t head_dim_v; /* <= head_dim */
} attn_shape;

/* Runs all jobs, parallel over (job, KV head). head_dim <= ATTN_MAX_HEAD_DIM. */
void attn_run(threadpool *tp, const attn_shape *shape, const attn_job *jobs, int64_t n_jobs);

/* NEGATIVE CONTROL, tests only. ATTN_SPLIT_BY_BATCH splits every query's keys every
 * KV_BLOCK * (1 + n_jobs % 4) positions instead of ATTN_SPLIT, merging the partials as
 * usual: the boundaries move with the number of queries in the call, so a query's bits
 * depend on its batch. attn_run is attn_run_split(..., ATTN_SPLIT_INVARIANT). */
typedef enum { ATTN_SPLIT_INVARIANT = 0, ATTN_SPLIT_BY_BATCH = 1 } attn_split_mode;
void attn_run_split(threadpool *tp, const attn_shape *shape, const attn_job *jobs, int64_t n_jobs,
                    attn_split_mode mode);

/* Writes / reads position p's K and V rows (n_kv_heads * head_dim, n_kv_heads * head_dim_v
 * floats; an f16 cache rounds them on the way in, widens them on the way out).
 * ATTN_KV_LATENT: the store ignores v (V is K's prefix), the load copies it from K. */
void attn_kv_store(const attn_kv *kv, int64_t p, const float *k, const float *v);
void attn_kv_load(const attn_kv *kv, int64_t p, float *k, float *v);

/* NEGATIVE CONTROL, tests only: ATTN_KV_ROUND_TOWARD_ZERO stores an f16 cache's halves
 * truncated instead of rounded to nearest; the forward pass picks it for forwards with an
 * odd number of tokens (fwd_state_set_kv_round_by_batch), so stored bits follow the batch.
 * attn_kv_store is attn_kv_store_rounded(..., ATTN_KV_ROUND_NEAREST). No effect on f32. */
typedef enum { ATTN_KV_ROUND_NEAREST = 0, ATTN_KV_ROUND_TOWARD_ZERO = 1 } attn_kv_rounding;
void attn_kv_store_rounded(const attn_kv *kv, int64_t p, const float *k, const float *v, attn_kv_rounding r);

/* Element offsets into the pools. K of KV head h for the block holding position p:
 * [head_dim][KV_BLOCK] from kv->k + attn_k_block_at. */
static inline int64_t attn_k_block_at(const attn_kv *kv, int64_t p, int64_t h) {
    return (int64_t)kv->block_table[p / KV_BLOCK] * (KV_BLOCK * kv->n_kv_heads * kv->head_dim) +
           h * kv->head_dim * KV_BLOCK;
}
/* V row of position p, KV head h: head_dim_v elements from kv->v + attn_v_row_at
 * (ATTN_KV_SEPARATE only). */
static inline int64_t attn_v_row_at(const attn_kv *kv, int64_t p, int64_t h) {
    return (int64_t)kv->block_table[p / KV_BLOCK] * (KV_BLOCK * kv->n_kv_heads * kv->head_dim_v) +
           (h * KV_BLOCK + p % KV_BLOCK) * kv->head_dim_v;
}

#endif
