/* The forward pass over a ragged batch: tokens of many sequences (prefill chunks and
 * decode steps mixed) go through every layer together; each token attends to its own
 * sequence's paged KV cache. Every per-token result depends only on that token's
 * sequence (see docs/invariance.md): the batch only changes speed. */
#ifndef INVAR_FORWARD_H
#define INVAR_FORWARD_H
#include <stdbool.h>
#include <stdint.h>
#include "kernels/cpu/attention.h"
#include "kernels/cpu/threadpool.h"
#include "model/batch.h"
#include "model/model.h"
#include "model/moe.h"

/* KV storage: per layer, n_blocks pool blocks of KV_BLOCK * kv_dim elements for K and
 * KV_BLOCK * kv_dim_v for V (layout inside a block: attention.h), elements of `type` (f32
 * or f16: attention.h). The layout is the model's: ATTN_KV_LATENT for MLA (one latent head
 * [c_kv, k_pe] per position, V read from its c_kv: no V pool, kv_dim_v 0),
 * ATTN_KV_SEPARATE otherwise. */
typedef struct {
    int64_t n_blocks, kv_dim, kv_dim_v, n_layer; /* kv_dim_v: V elements stored per position */
    attn_kv_layout layout;
    attn_kv_type type;
    void *k, *v;             /* 64-byte aligned; v NULL for ATTN_KV_LATENT */
    void *k_raw, *v_raw;     /* what to free */
} kv_storage;

/* The cache layout of a model (MLA: ATTN_KV_LATENT). */
attn_kv_layout kv_layout_of(const model_config *c);
int kv_storage_init(kv_storage *s, const model_config *c, int64_t n_blocks, attn_kv_type type);
void kv_storage_free(kv_storage *s);
/* Bytes of one block (KV_BLOCK positions) over all layers, K and V as the layout stores
 * them in elements of `type`: an f16 cache's blocks are half the size. */
size_t kv_bytes_per_block(const model_config *c, attn_kv_type type);
/* Layer il's pools as an attention view of n_kv_heads heads (head_dim kv_dim / n_kv_heads,
 * value rows head_dim_v); block_table still to be set. */
attn_kv kv_layer_view(const kv_storage *s, int64_t il, int64_t n_kv_heads, int64_t head_dim_v);


typedef struct fwd_state fwd_state;

typedef void (*matmul_fn)(threadpool *tp, const cpu_weight *w, const float *x, int64_t m, int64_t ldx,
                          float *y, int64_t ldy, void *scratch);

/* max_tokens: the most tokens one forward will carry; max_logits: rows of logits. */
fwd_state *fwd_state_create(const model *m, int64_t max_tokens, int64_t max_logits);
void fwd_state_free(fwd_state *s);
/* Tests only: swap the matmul (negative controls use a non-invariant one; NULL: cpu_matmul). */
void fwd_state_set_matmul(fwd_state *s, matmul_fn fn);
/* Tests only: the attention split (ATTN_SPLIT_BY_BATCH is a negative control). */
void fwd_state_set_attention(fwd_state *s, attn_split_mode mode);
/* Tests only: how a routed layer combines a token's experts (MOE_COMBINE_BY_LOAD is a
 * negative control); -1 for a dense model. */
int fwd_state_set_moe_combine(fwd_state *s, moe_combine_mode mode);
/* NEGATIVE CONTROL, tests only: MLA rows of a prefill (a sequence with more than one
 * token in the forward) attend in the plain formulation, decode rows in the absorbed one
 * (mla.h); -1 for a model without MLA. */
int fwd_state_set_mla_prefill_plain(fwd_state *s, bool on);
/* NEGATIVE CONTROL, tests only: an f16 cache stores the K/V of forwards with an odd number
 * of tokens rounded toward zero (ATTN_KV_ROUND_TOWARD_ZERO), of the others to nearest. */
void fwd_state_set_kv_round_by_batch(fwd_state *s, bool on);
/* Tests only: moe_counts_seen of the routed layers (n_expert entries), NULL for a dense model. */
const uint64_t *fwd_state_moe_counts_seen(const fwd_state *s);

/* Writes logits [n_logits][n_vocab]. Positions must be < m->rope_len and each
 * sequence's blocks for positions 0..pos must exist. Returns 0, -1 on bad input. */
int model_forward(const model *m, fwd_state *s, threadpool *tp, kv_storage *kv, const fwd_batch *b,
                  float *logits);

#endif
