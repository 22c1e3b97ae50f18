/* State of the CUDA backend, shared by backend_cuda.c (the forward pass and sampling) and
 * cuda_graphs.c (decode steps captured as CUDA graphs). Private to src/backend. */
#ifndef INVAR_CUDA_BACKEND_H
#define INVAR_CUDA_BACKEND_H
#include "backend/backend.h"
#include "backend/cuda_step.h"
#include "backend/cuda_weights.h"
#include "invar_cuda.h"

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
    backend_gemm_mode gemm_mode;
    struct backend_kv *kvs;      /* every live KV cache (their graphs follow the GEMM mode) */
} cuda_backend;

struct backend_kv {
    uint16_t *k, *v;             /* [n_layer][n_alloc][n_head_kv][PAGE][head_dim] */
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

/* Graphs of a KV cache: device bytes they will need, capture (reported in base.info; on
 * failure the cache just runs eagerly), release. */
size_t cuda_graphs_bytes(const cuda_backend *c);
void cuda_graphs_capture(cuda_backend *c, struct backend_kv *kv);
void cuda_graphs_free(cuda_graphs *g);
/* Runs a decode step through a graph: 1 if it did, 0 if the step is not one a graph takes
 * (the caller runs it eagerly), -1 on error. The step's sequences are in c->h. */
int cuda_graphs_step(cuda_backend *c, struct backend_kv *kv, const fwd_batch *b, int n_seqs, int max_pages);

#endif
