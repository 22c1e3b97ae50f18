/* Multi-head latent attention (deepseek2) over the paged cache, in ONE formulation for
 * every row: prefill, chunked prefill, decode and prefix-cache hits alike (docs/moe.md).
 *
 * The cache holds per position one latent head: K = [c_kv, k_pe] (kv_lora + rope dims:
 * the normed compressed KV and the shared rope'd key) and V = c_kv. Every query runs
 * absorbed: per head, q_lat = W_UK^T q_nope (k_b), the query [q_lat, q_pe] scores against
 * the latent keys in the ordinary attention kernel (one KV head, group n_head, value dim
 * kv_lora), and the latent output o_lat goes back through W_UV (v_b). Decode cannot
 * afford to decompress every cached position, so the absorbed form is the one that serves
 * every row; a row's bits then depend on its own sequence only, whichever path it took. */
#ifndef INVAR_MODEL_MLA_H
#define INVAR_MODEL_MLA_H
#include <stdbool.h>
#include <stdint.h>
#include "model/forward.h"

typedef struct mla_state mla_state;

/* Buffers for up to max_tokens tokens; NULL when out of memory. */
mla_state *mla_state_create(const model_config *c, int64_t max_tokens);
void mla_state_free(mla_state *s);
/* NEGATIVE CONTROL, tests only: rows of a prefill (their sequence has another token in
 * the forward) attend in the plain, non-absorbed formulation (every cached position's key
 * and value decompressed per head), decode rows absorbed: the two are the same maths with
 * different rounding, so a token's logprob then depends on whether it was prefilled. */
void mla_state_set_prefill_plain(mla_state *s, bool on);

typedef struct {
    const model *m;
    int64_t il;
    threadpool *tp;
    kv_storage *kv;
    const fwd_batch *b;
    const int64_t *row_cuts; /* rows_cut's tasks */
    int64_t n_tasks;
    matmul_fn mm;
    void *scratch; /* cpu_matmul_scratch_bytes for T rows of every MLA weight */
    attn_split_mode split;
    attn_kv_rounding kv_round; /* ATTN_KV_ROUND_NEAREST but in a negative control */
} mla_args;

/* Layer il's attention of the T rows of xn (stride n_embd) into out [T][n_head v_dim]
 * (before attn_output); writes the rows' latent K/V into their sequences' caches first. */
void mla_attention(mla_state *s, const mla_args *a, const float *xn, float *out);

#endif
