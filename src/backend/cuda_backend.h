/* State of the CUDA backend, shared by backend_cuda.c (the forward pass and sampling) and
 * cuda_graphs.c (decode steps captured as CUDA graphs). Private to src/backend. */
#ifndef INVAR_CUDA_BACKEND_H
#define INVAR_CUDA_BACKEND_H
#include "backend/backend.h"
#include "backend/cuda_step.h"
#include "backend/cuda_weights.h"
#include "invar_cuda.h"
#include "model/moe.h" /* moe_combine_mode */

typedef struct {
    uint16_t *x, *xn, *q, *attn, *o, *gu, *h, *hid;   /* bf16 activations */
    float *qkv, *logits;
    int32_t *tok_in;
    int32_t *stats;              /* [3][max_logits]: argmax, lse, logprob of each row */
    /* the device sampler: rows to sample, their parameters, results, weights [rows][vocab_pad] */
    int32_t *srows;
    invar_cuda_sample_params *sparams;
    invar_cuda_sample_out *souts;
    float *swork;
    /* routed layers: router logits [T][E8]; expert rows in expert order: inputs [T k][D],
     * gate|up [T k][2 F_exp], hidden [T k][F_exp], outputs fp32 [T k][D]; the shared experts'
     * output fp32 [T][D]; the device routing's tables (invar_cuda_moe_bufs) */
    float *rlog, *ey, *sy;
    uint16_t *xg, *egu, *eh;
    invar_cuda_moe_bufs moe;
    /* MLA: q from wq_b fp32 [T][H qk] (q_lora), q_a normed bf16 [T][q_lora]; head-major bf16
     * rows (h T + t): q_nope [H T][nope], absorbed q_c [H T][R], rotated q_pe [H T][rope],
     * latent outputs [H T][R], after W_UV [H T][v_dim]; the per-head GEMMs' work list */
    float *mq;
    uint16_t *qa, *qn, *qc, *qpe, *olat, *ov;
    int32_t *mla_entries, *mla_n_entries;
    float *mla_ws;               /* split-parallel attention's split states (few tokens) */
} cuda_bufs;

typedef struct {
    int32_t *q_start, *q_len, *ctx_len, *slot;        /* [max_tokens], the step's sequences */
    int32_t *stats, *tok_in;     /* pinned: stats [3][max_logits], tok_in [max_logits] */
    int32_t *srows;              /* pinned, [max_logits] each: */
    invar_cuda_sample_params *sparams;
    invar_cuda_sample_out *souts;
    float *row;                  /* pinned: one logits row */
    int32_t *work_idx;
    float *work_p;
    uint64_t *moe_seen;          /* tests: the device's expert-count bits, downloaded when asked */
} host_bufs;

typedef struct cuda_graphs cuda_graphs;

typedef struct {
    backend base;
    invar_cuda_ctx *ctx;
    void *stream;                /* cudaStream_t every call of the backend goes on */
    cuda_weights w;
    cuda_bufs d;
    host_bufs h;
    step_staging stage;          /* eager steps' inputs */
    float *attn_ws;              /* eager steps' split-KV partials */
    size_t attn_ws_bytes;
    int64_t vocab_pad;
    int64_t D, qd, kvd, F, wqkv;
    int64_t F_alloc;             /* gu / h widths: the dense FFN's or the shared experts' */
    /* Mixture of experts (cuda_moe.c), routed on the device: k_used 0 for a dense model */
    int64_t E8, F_exp, F_sh, k_used;
    bool moe_by_load;            /* the negative control's load-order combine */
    /* MLA (cuda_mla.c; kv_lora 0: none): the latent cache row is R + rope bf16 */
    int64_t mla_R, mla_rope, mla_nope, mla_vd, mla_ql, mla_nq;
    bool mla_split_by_batch;     /* the negative control's batch-dependent key split */
    int64_t mla_ws_splits;       /* splits of the longest position (rope_len) */
    int64_t mla_parts_tmax;      /* forwards of up to this many tokens split the attention over CTAs */
    char run_error[160];         /* a host-side failure inside cuda_run (else "") */
    backend_gemm_mode gemm_mode;
    struct backend_kv *kvs;      /* every live KV cache (their graphs follow the GEMM mode) */
} cuda_backend;

struct backend_kv {
    uint16_t *k, *v;             /* [n_layer][n_alloc][n_head_kv][PAGE][head_dim]; MLA: k holds the
                                    latent rows [n_layer][n_alloc][PAGE][R + rope], v is unused */
    int64_t n_blocks;            /* blocks the engine's pool hands out */
    int64_t n_alloc;             /* n_blocks + 1: the last is the padding rows' scratch page */
    cuda_graphs *graphs;         /* NULL: every step runs eagerly */
    struct backend_kv *next;
};

/* Embedding -> layers -> output head for T tokens whose inputs are at `dev`, on ctx (its
 * workspaces) and the backend's stream; attn describes the attention launch. */
int cuda_run(cuda_backend *c, invar_cuda_ctx *ctx, struct backend_kv *kv, const step_arrays *dev, int64_t T,
             int64_t n_logits, const invar_cuda_attn_launch *attn);
int cuda_fail(backend *b, const char *what);
int cuda_gemm(cuda_backend *c, invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *out,
              invar_cuda_dtype t, int64_t M, int64_t N, int64_t K);
/* invar_cuda_gemm_grouped (experts, or MLA's heads) for a forward of T tokens; under the
 * SPLIT_BY_M negative control its K chunk follows T as cuda_gemm's does. */
int cuda_gemm_grouped(cuda_backend *c, invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *out,
                      invar_cuda_dtype t, int64_t T, int rows, int64_t N, int64_t K, int E, const int32_t *entries,
                      const int32_t *n_entries, int max_entries, int bm);

/* A routed layer's FFN of the T rows of d.xn into d.o (bf16); launches fixed by T alone. */
int cuda_moe_ffn(cuda_backend *c, invar_cuda_ctx *ctx, int64_t il, int64_t T);
/* A deepseek2 layer's attention of the T rows of d.xn into d.attn [T][H v_dim] (before
 * attn_output); writes their latent rows into the cache first. bt_stride: block-table row
 * stride of dev->btab. */
int cuda_mla_attention(cuda_backend *c, invar_cuda_ctx *ctx, struct backend_kv *kv, int64_t il, int64_t T,
                       const step_arrays *dev, const invar_cuda_attn_launch *attn);

/* Graphs of a KV cache: device bytes they will need, capture (reported in base.info; on
 * failure the cache just runs eagerly), release. */
size_t cuda_graphs_bytes(const cuda_backend *c);
void cuda_graphs_capture(cuda_backend *c, struct backend_kv *kv);
void cuda_graphs_free(cuda_graphs *g);
/* Runs a decode step through a graph: 1 if it did, 0 if the step is not one a graph takes
 * (the caller runs it eagerly), -1 on error. The step's sequences are in c->h. */
int cuda_graphs_step(cuda_backend *c, struct backend_kv *kv, const fwd_batch *b, int n_seqs, int max_pages);

#endif
