/* The backend interface: how the engine and the scoring path reach the hardware.
 *
 * A backend holds a model's weights bound to one device (CPU kernels or a CUDA GPU), the
 * buffers of one forward pass, and the logits of the last one. The engine owns everything
 * else (queue, scheduler, block pool, prefix cache, preemption, chunking), once, for every
 * backend: a backend only runs ragged batches into paged KV storage it allocated, and turns
 * the resulting logits rows into tokens with the one sampler (sampling/sampler.h).
 *
 * Invariance contract for implementations: a token's logits depend only on its sequence's
 * tokens and positions (never on the batch, its order, the chunking or the thread count),
 * and a row's sampled token, logprob and alternatives depend only on that row's logits, its
 * request's parameters and its position. Layer kinds to come (mixture-of-experts FFN, MLA
 * attention) are the backends' business behind forward(); several GPUs would be one backend
 * instance spanning them. */
#ifndef INVAR_BACKEND_H
#define INVAR_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/cpu/attention.h"
#include "model/batch.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "invar.h"

typedef struct {
    int32_t n_threads;      /* CPU worker threads (>= 1) */
    int64_t max_tokens;     /* most tokens one forward carries */
    int64_t max_logits;     /* most logits rows one forward produces */
    int32_t cuda_device;    /* CUDA device ordinal */
    bool cuda_gemm_cublas;  /* CUDA only: cuBLAS GEMMs, fast and NOT batch-invariant */
    bool cuda_graphs;       /* CUDA only: decode steps replay graphs captured with the KV cache */
    attn_kv_type kv_type;   /* CPU only: the KV cache's elements (f32 or f16: attention.h); the
                               CUDA backend keeps a cache of its own and refuses f16 */
} backend_opts;

/* One row of a sampling request: which request parameters, at which absolute position,
 * and (hist.seq != NULL) the request's tokens before it for the logits processing. */
typedef struct {
    const invar_sampling *s;
    int64_t position;
    sampler_history hist;
} sample_row;

static inline const sampler_history *sample_row_history(const sample_row *r) { return r->hist.seq ? &r->hist : NULL; }

typedef struct backend backend;
typedef struct backend_kv backend_kv; /* paged KV storage of a backend (opaque) */

typedef struct {
    const char *name;
    void (*destroy)(backend *b);
    /* Bytes one KV block of KV_BLOCK positions takes, all layers, K and V. */
    size_t (*kv_bytes_per_block)(const backend *b);
    int (*kv_create)(backend *b, int64_t n_blocks, backend_kv **out);
    void (*kv_destroy)(backend *b, backend_kv *kv);
    /* Runs the batch; keeps the logits of b->n_logits rows for the calls below. */
    int (*forward)(backend *b, backend_kv *kv, const fwd_batch *batch);
    /* Row i of the last forward's logits -> out[i], for i < n. */
    int (*sample)(backend *b, int64_t n, const sample_row *rows, invar_token_info *out);
    /* out[i] = logprob of tokens[i] in row first + i (the expression sample() reports). A
     * step's sampling rows come first and its prompt-logprob rows after them. */
    int (*token_logprobs)(backend *b, int64_t first, int64_t n, const int32_t *tokens, float *out);
    /* Right after token_logprobs(first, n): for each of those rows with n_top[i] > 0, its
     * n_top[i] best alternatives into out[i] (top_ids, top_logprobs against the same lse;
     * n_top set), as sample() reports a token's. */
    int (*top_logprobs)(backend *b, int64_t first, int64_t n, const int32_t *n_top, invar_token_info *out);
    /* The raw logits rows [n][n_vocab], float32, to host memory. */
    int (*read_logits)(backend *b, int64_t n, float *out);
} backend_ops;

struct backend {
    const backend_ops *ops;
    model *m;
    backend_opts opts;
    int64_t n_logits;       /* logits rows the last forward kept */
    char error[256];        /* message of the last failed call */
    char info[256];         /* what start-up set up (e.g. the CUDA graphs captured), or "" */
};

/* For implementations: 1 if n rows of the last forward exist, else 0 with a message. */
int backend_rows_ok(backend *b, int64_t n);

/* Creates the backend for `device`; a clear message in err when the device is missing, was
 * not built in, or cannot hold the model. */
int backend_create(invar_device device, model *m, const backend_opts *o, backend **out, char *err,
                   size_t errlen);
void backend_destroy(backend *b);

/* Implementations (backend_cuda_none.c stands in when CUDA is not built). */
int backend_cpu_create(model *m, const backend_opts *o, backend **out, char *err, size_t errlen);
int backend_cuda_create(model *m, const backend_opts *o, backend **out, char *err, size_t errlen);

/* Tests only: the CPU backend's matmul (negative controls swap in a non-invariant one).
 * Returns -1 for a backend that is not the CPU's. */
#include "model/forward.h"
int backend_cpu_set_matmul(backend *b, matmul_fn fn);
/* Tests only: the CPU backend's attention split (ATTN_SPLIT_BY_BATCH, attention.h, is a
 * negative control whose split boundaries follow the number of tokens in the forward). -1
 * for a backend that is not the CPU's. */
int backend_cpu_set_attention(backend *b, attn_split_mode mode);
/* NEGATIVE CONTROL, tests only: with on, row i of a sample call draws with the counter
 * (seed, position + i), so a sampled token depends on its row's place in the step. -1 for
 * a backend that is not the CPU's. */
int backend_cpu_set_draw_by_row(backend *b, bool on);
/* NEGATIVE CONTROL, tests only: an f16 cache stores the K/V of odd-sized forwards rounded
 * toward zero (fwd_state_set_kv_round_by_batch). -1 for a backend that is not the CPU's. */
int backend_cpu_set_kv_round_by_batch(backend *b, bool on);
/* Tests only: how a MoE model combines a token's experts (MOE_COMBINE_BY_LOAD, model/moe.h,
 * is a negative control). -1 for a backend that is not the CPU's or a dense model. */
int backend_cpu_set_moe_combine(backend *b, moe_combine_mode mode);
/* Tests only: which per-expert token counts the CPU backend's forwards have seen
 * (moe_counts_seen, model/moe.h); NULL for another backend or a dense model. */
const uint64_t *backend_cpu_moe_counts_seen(backend *b);
/* NEGATIVE CONTROL, tests only: MLA prefill rows in the plain formulation
 * (fwd_state_set_mla_prefill_plain); -1 for a model without MLA or another backend. */
int backend_cpu_set_mla_prefill_plain(backend *b, bool on);
/* Tests and benchmarks: the CUDA backend's GEMM (its decode graphs are captured again).
 * SPLIT_BY_M is a negative control (the invariant kernel with a K chunk that depends on M's
 * parity). -1 for another backend. */
typedef enum { BACKEND_GEMM_INVARIANT, BACKEND_GEMM_CUBLAS, BACKEND_GEMM_SPLIT_BY_M } backend_gemm_mode;
int backend_cuda_set_gemm_mode(backend *b, backend_gemm_mode mode);
/* Tests only, the CUDA backend's MoE and MLA (docs/cuda.md), as the CPU's above: how a
 * token's experts are combined (MOE_COMBINE_BY_LOAD: the negative control), the per-expert
 * token counts its forwards have seen (NULL for another backend or a dense model), and the
 * NEGATIVE CONTROL of MLA attention whose key splits are 64 (1 + T % 3) positions, T the
 * forward's tokens, instead of INVAR_CUDA_MLA_KV_SPLIT. -1 for another backend or model kind. */
int backend_cuda_set_moe_combine(backend *b, moe_combine_mode mode);
const uint64_t *backend_cuda_moe_counts_seen(backend *b);
int backend_cuda_set_mla_split_by_batch(backend *b, bool on);

#endif
