/* invar CUDA backend (Hopper, sm_90a): batch-invariant kernels behind a C API.
 *
 * Every kernel here computes each output element with one fixed sequence of floating-point
 * operations that does not depend on how many rows (tokens, sequences) are in the call, nor
 * on where a row sits in the batch: row i of an M-row call is bitwise equal to the same row
 * computed alone (docs/cuda.md says how each kernel guarantees it).
 *
 * All pointers are device pointers unless a name says host_. bf16 values are raw uint16_t bit
 * patterns. Calls are asynchronous on the context's stream; functions return 0 on success and
 * a negative INVAR_CUDA_E* code otherwise (invar_cuda_last_error() has a one-line message). */
#ifndef INVAR_CUDA_H
#define INVAR_CUDA_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    INVAR_CUDA_OK = 0,
    INVAR_CUDA_EARG = -1,     /* a shape or pointer the kernel cannot take */
    INVAR_CUDA_ECUDA = -2,    /* a CUDA runtime / cuBLAS call failed */
    INVAR_CUDA_ENODEV = -3,   /* no usable sm_90 device */
    INVAR_CUDA_ENOMEM = -4
};

typedef enum { INVAR_CUDA_BF16 = 0, INVAR_CUDA_F32 = 1 } invar_cuda_dtype;

typedef struct invar_cuda_ctx invar_cuda_ctx;

/* Creates a context on `device` (must be compute capability 9.0). */
int invar_cuda_init(invar_cuda_ctx **out, int device);
void invar_cuda_free(invar_cuda_ctx *ctx);
/* stream is a cudaStream_t (NULL = legacy default stream). */
void invar_cuda_set_stream(invar_cuda_ctx *ctx, void *stream);
const char *invar_cuda_last_error(const invar_cuda_ctx *ctx);
int invar_cuda_sm_count(const invar_cuda_ctx *ctx);
/* Grows the split-K / split-KV workspaces so that calls up to these sizes allocate nothing
 * (needed before capturing calls into a CUDA graph). */
int invar_cuda_reserve(invar_cuda_ctx *ctx, size_t gemm_ws_bytes, size_t attn_ws_bytes);

/* ---- GEMM: C[M,N] = A[M,K] . W[N,K]^T, bf16 in, fp32 accumulate --------------------- */
/* Invariant GEMM. K and N multiples of 8; A, W, C 16-byte aligned, row-major, dense. */
int invar_cuda_gemm(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                    invar_cuda_dtype c_type, int M, int N, int K);
/* Tensor parallelism's row-parallel products (docs/tensor-parallel.md). invar_cuda_gemm sums
 * K in absolute chunks of INVAR_CUDA_GEMM_K_CHUNK columns, each from zero, and folds the chunk
 * sums in order: 0 + P_0 + P_1 + ... . invar_cuda_gemm_partials writes each chunk's P_c of
 * A[M,K] . W[N,K]^T as an [M][N] fp32 matrix at partials + c*M*N (ceil(K / chunk) of them, the
 * last chunk may be shorter); invar_cuda_gemm_fold folds n_chunks such matrices in order into
 * C. A K split across GPUs at chunk boundaries, each GPU's partials gathered and folded in
 * chunk order, gives invar_cuda_gemm's bits over the whole K, whatever the number of GPUs. */
#define INVAR_CUDA_GEMM_K_CHUNK 1024
int invar_cuda_gemm_partials(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, float *partials,
                             int M, int N, int K);
int invar_cuda_gemm_fold(invar_cuda_ctx *ctx, const float *partials, int n_chunks, void *c,
                         invar_cuda_dtype c_type, int M, int N);
/* Same product through cuBLAS: fast, NOT batch-invariant (the comparison path). */
int invar_cuda_gemm_cublas(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                           invar_cuda_dtype c_type, int M, int N, int K);

/* ---- row kernels: one CTA per row, fixed reduction tree ------------------------------ */
/* residual[i] += x[i] (bf16 round), then y = residual * rsqrt(mean(residual^2) + eps) * w.
 * x may be NULL (plain RMSNorm of residual, residual unchanged). D % 8 == 0. */
int invar_cuda_rmsnorm(invar_cuda_ctx *ctx, const uint16_t *x, uint16_t *residual,
                       const uint16_t *w, uint16_t *y, int M, int D, float eps);
/* out[M,F] = silu(gu[:, :F]) * gu[:, F:], gu is [M, 2F]. F % 8 == 0. */
int invar_cuda_silu_mul(invar_cuda_ctx *ctx, const uint16_t *gu, uint16_t *out, int M, int F);
/* Rotary embedding in place, rotate-half (NeoX / HF Llama) layout: x is [M, H, D] with row
 * stride `row_stride` elements; pair (j, j+D/2) turns by pos[m] * inv_freq[j]. inv_freq is
 * float[D/2] on the device. */
int invar_cuda_rope(invar_cuda_ctx *ctx, uint16_t *x, const int32_t *pos, const float *inv_freq,
                    int M, int H, int D, int row_stride);
/* out[m] = table[ids[m]], rows of D bf16 (zeros for an id outside [0, V)). D % 32 == 0. */
int invar_cuda_embed(invar_cuda_ctx *ctx, const uint16_t *table, const int32_t *ids,
                     uint16_t *out, int M, int D, int V);
/* logp[M,V] (fp32) = log_softmax(logits[M,V]) with logits fp32. V % 4 == 0. */
int invar_cuda_log_softmax(invar_cuda_ctx *ctx, const float *logits, float *logp, int M, int V);

/* Per row of fp32 logits (row stride ld >= V): lse[m] = log-sum-exp of the V values,
 * argmax[m] (lowest id among maxima), logprob[m] = logits[m][tok] - lse[m] with tok =
 * tok_in[m], or the argmax when tok_in is NULL. Any output pointer may be NULL. */
int invar_cuda_row_stats(invar_cuda_ctx *ctx, const float *logits, int ld, int V, int M,
                         const int32_t *tok_in, int32_t *argmax, float *lse, float *logprob);

/* ---- the engine's sampler on the device (sampler.cu) ----
 * Row rows[k] (or k when rows is NULL) of logits (row stride ld, V columns), with its
 * log-sum-exp lse[row], sampled with params[k] exactly as src/sampling/sampler.c's
 * sampler_choose_lse would on the host: same token, logprob and alternatives, bit for bit.
 * status 1: the candidate set of a truncated draw exceeds INVAR_CUDA_SAMPLE_CAP ids (the
 * caller samples that row on the host). work: n rows of ld floats. */
#define INVAR_CUDA_SAMPLE_CAP 8192
#define INVAR_CUDA_SAMPLE_TOP 20
typedef struct {
    float temperature, top_p, min_p;
    int32_t top_k, top_logprobs;
    int32_t reserved;
    uint64_t seed;
    int64_t position;
} invar_cuda_sample_params;
typedef struct {
    int32_t status, token;
    float logprob;
    int32_t n_top;
    int32_t top_ids[INVAR_CUDA_SAMPLE_TOP];
    float top_logprobs[INVAR_CUDA_SAMPLE_TOP];
} invar_cuda_sample_out;
int invar_cuda_sample_rows(invar_cuda_ctx *ctx, const float *logits, int ld, int V, int n, const int32_t *rows,
                           const float *lse, const invar_cuda_sample_params *params, invar_cuda_sample_out *out,
                           float *work);

/* ---- paged attention ------------------------------------------------------------------ */
/* KV cache: k_cache/v_cache are [n_pages][n_kv_heads][INVAR_CUDA_PAGE][head_dim] bf16.
 * Sequence s has ctx_len[s] cached positions (its new tokens included, already written with
 * invar_cuda_kv_write) mapped through block_table[s * max_pages + p]; its q_len[s] query
 * tokens are rows q_start[s] .. q_start[s]+q_len[s]-1 of q [T, n_heads, head_dim] and sit at
 * positions ctx_len[s]-q_len[s] .. ctx_len[s]-1 (causal). The KV reduction is cut at
 * absolute positions that are multiples of INVAR_CUDA_KV_SPLIT and merged in position order,
 * so a token's output is the same in decode, prefill, chunked prefill or after a prefix hit,
 * whatever else is batched. head_dim 64 or 128; n_heads % n_kv_heads == 0. */
#define INVAR_CUDA_PAGE 16
/* 512: the in-CTA fold of a split's state (and the lost softmax overlap of the block after
 * it) comes once per 8 key blocks of 64 (bench/cuda/notes_attention.md, v6). A build may set
 * another multiple of 64 (the benchmark's same-run peer); every launch of one build uses one. */
#ifndef INVAR_CUDA_KV_SPLIT
#define INVAR_CUDA_KV_SPLIT 512
#endif
/* MLA attention's split (a kernel family of its own: its own fixed absolute boundaries; a
 * build may set another multiple of 64, as for INVAR_CUDA_KV_SPLIT). */
#ifndef INVAR_CUDA_MLA_KV_SPLIT
#define INVAR_CUDA_MLA_KV_SPLIT 256
#endif

typedef struct invar_cuda_attn_plan invar_cuda_attn_plan;
/* Builds the work list for one batch (host arrays; copies them to the device). */
int invar_cuda_attn_plan_create(invar_cuda_ctx *ctx, invar_cuda_attn_plan **out, int n_seqs,
                                const int32_t *host_q_start, const int32_t *host_q_len,
                                const int32_t *host_ctx_len, int n_heads, int n_kv_heads,
                                int head_dim, int max_pages);
void invar_cuda_attn_plan_free(invar_cuda_attn_plan *plan);
/* 1 if the plan splits the KV across CTAs (partials + a merge pass), 0 if each CTA folds all
 * of a token's splits itself; both give the same bits. force: -1 auto, 0 never, 1 always. */
int invar_cuda_attn_plan_split(const invar_cuda_attn_plan *plan);
void invar_cuda_attn_plan_force_split(invar_cuda_attn_plan *plan, int force);
/* The number of pages the caches passed to invar_cuda_attention hold (lets prefill tiles run
 * on the TMA kernel; without it they run on the cp.async one: the same bits). */
void invar_cuda_attn_plan_cache_pages(invar_cuda_attn_plan *plan, int64_t pages);
/* out [T, n_heads, head_dim] bf16; scale is usually 1/sqrt(head_dim). */
int invar_cuda_attention(invar_cuda_ctx *ctx, const invar_cuda_attn_plan *plan, const uint16_t *q,
                         const uint16_t *k_cache, const uint16_t *v_cache,
                         const int32_t *block_table, uint16_t *out, float scale);
/* The same attention for callers that keep a step's work lists in memory of their own (the
 * engine's backend: one upload per step, CUDA graphs). A work item is a tile of query rows of
 * one sequence against the nchunk consecutive KV splits from chunk (chunk >= 0; every split's
 * partial is written out) or against all of its splits (chunk = -1). */
typedef struct invar_cuda_attn_item {
    int32_t seq, tok0, ntok, pos0, chunk, nchunk;
} invar_cuda_attn_item;
typedef struct {
    int n_tokens;           /* rows of q: the largest q_start + q_len */
    int n_items_tile;       /* items with chunk = -1 */
    int n_items_split;      /* items with chunk >= 0 (runs of consecutive splits) */
    size_t n_partials;      /* split partials per head: sum over tokens of pos / KV_SPLIT + 1 */
    int rows_max;           /* query rows of the largest tile */
    int auto_split;         /* 1 where whole tiles would leave most of the chip idle */
} invar_cuda_attn_shape;
/* Measures a batch (arguments as invar_cuda_attn_plan_create, all host memory). */
int invar_cuda_attn_measure(int n_seqs, const int32_t *host_q_start, const int32_t *host_q_len,
                            const int32_t *host_ctx_len, int n_heads, int n_kv_heads, int head_dim,
                            int max_pages, int sm_count, invar_cuda_attn_shape *out);
/* Writes the batch's work lists to host memory: items_tile [n_items_tile] and items_split
 * [n_items_split] (either may be NULL), tok_pos and tok_pbase [n_tokens]. */
void invar_cuda_attn_fill(int n_seqs, const int32_t *host_q_start, const int32_t *host_q_len,
                          const int32_t *host_ctx_len, int n_heads, int n_kv_heads,
                          invar_cuda_attn_item *host_items_tile, invar_cuda_attn_item *host_items_split,
                          int32_t *host_tok_pos, int32_t *host_tok_pbase);
/* Bytes of split partials for n_partials (shape.n_partials). */
size_t invar_cuda_attn_ws_bytes(size_t n_partials, int n_heads, int head_dim);
typedef struct {
    const invar_cuda_attn_item *items; /* the split items (split = 1) or the tile items */
    int grid;                /* CTAs per KV head */
    const int32_t *counts;   /* NULL: CTA x runs item x (grid = the item count). Else device
                                {n_items, max_pages}: the CTAs stride over n_items items, so
                                the grid can stay fixed while the work changes (graphs) */
    int max_pages;           /* block_table row stride when counts is NULL */
    int split, rows_max, n_tokens, n_heads, n_kv_heads, head_dim;
    const int32_t *ctx_len, *tok_pos, *tok_pbase, *block_table;
    float *ws;               /* split: invar_cuda_attn_ws_bytes of partials */
    int64_t cache_pages;     /* pages in k_cache / v_cache (each [pages][n_kv_heads][PAGE][head_dim]);
                                0: unknown, which keeps items of more than 64 rows off the TMA kernel */
} invar_cuda_attn_launch;
int invar_cuda_attention_launch(invar_cuda_ctx *ctx, const invar_cuda_attn_launch *launch,
                                const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache,
                                uint16_t *out, float scale);
/* Writes k,v [T, n_kv_heads, head_dim] into the cache at slot[t] = page * PAGE + offset. */
int invar_cuda_kv_write(invar_cuda_ctx *ctx, const uint16_t *k, const uint16_t *v,
                        uint16_t *k_cache, uint16_t *v_cache, const int32_t *slot, int T,
                        int n_kv_heads, int head_dim);

/* After the fused QKV GEMM (qkv: fp32 [T][(n_heads + 2 n_kv_heads) head_dim], q heads then
 * k heads then v heads): adds bias (fp32, that width, or NULL), applies per-head RMSNorm with
 * q_norm / k_norm (fp32 [head_dim], or NULL) and eps, rotates the first n_rot dims of q and k
 * by rope_cs[pos[t]] (fp32 [n_pos][n_rot/2][cos, sin]; neox: pairs (i, i + n_rot/2), else
 * (2i, 2i+1)), and writes bf16 q to q_out [T][n_heads][head_dim] and k, v to their cache
 * slots slot[t] = page * INVAR_CUDA_PAGE + offset. head_dim <= 128. */
int invar_cuda_qkv_prep(invar_cuda_ctx *ctx, const float *qkv, int T, int n_heads, int n_kv_heads,
                        int head_dim, const float *bias, const float *q_norm, const float *k_norm,
                        float eps, const float *rope_cs, const int32_t *pos, int n_rot, int neox,
                        uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache, const int32_t *slot);

/* ---- mixture of experts (moe.cu) ----
 * out[t] (bf16) = sum over r = 0..k-1, in that order, of w[t k + r] * y[slot[t k + r]] (fp32
 * fused multiply-adds from 0; y fp32 [*][D], the experts' output rows), then + shared[t]
 * (fp32 [T][D], or NULL), rounded once. The caller lists each token's experts in the order
 * the sum must take (the router's rank order). */
int invar_cuda_moe_combine(invar_cuda_ctx *ctx, const float *y, const int32_t *slot, const float *w, int k,
                           const float *shared, uint16_t *out, int T, int D);
/* NEGATIVE CONTROL (tests only): the same sum with each token's experts taken in the order of
 * their loads in this forward (count[sel], most rows first; ties: lower id), so the rounding
 * follows the batch. sel [T k] the experts, count [E] their rows. */
int invar_cuda_moe_combine_by_load(invar_cuda_ctx *ctx, const float *y, const int32_t *slot, const float *w, int k,
                                   const float *shared, uint16_t *out, int T, int D, const int32_t *sel,
                                   const int32_t *count);

/* Routing on the device (moe_route.cu), model/moe.c's semantics: per token its k experts
 * (sel, in rank order) and weights (wts) from its fp32 router logits [T][ld]; per expert its
 * rows in token order; each pair's sorted row slot[t k + r] (experts in id order, tokens
 * ascending within one) and xg[slot] = xn[t] (bf16 [T][D]); start [E + 1] each expert's first
 * row; entries [max][4] the grouped GEMM's work list {first row, end row, expert, 0}, one per
 * bm rows of an expert, *n_entries of them (max: invar_cuda_moe_max_entries). seen (or NULL):
 * tests, bit c-1 of seen[e] set once expert e got c rows in a layer (bit 63: 64 or more). */
typedef struct {
    int n_expert, k;
    int deepseek;            /* 0: qwen3moe (softmax top-k by logit) */
    int sigmoid;             /* deepseek2 gating: 1 sigmoid, 0 softmax */
    int n_group, n_group_used, group_max;
    int normalise;
    float scale;
} invar_cuda_moe_cfg;
typedef struct {
    int32_t *sel, *rel, *slot, *count, *start, *entries, *n_entries;
    float *wts;
    unsigned long long *seen;
} invar_cuda_moe_bufs;
int invar_cuda_moe_route(invar_cuda_ctx *ctx, const float *logits, int ld, const float *bias,
                         const invar_cuda_moe_cfg *cf, const uint16_t *xn, int T, int D, int bm,
                         const invar_cuda_moe_bufs *b, uint16_t *xg);
int invar_cuda_moe_max_entries(int T, int k, int E, int bm);
/* The experts' products in one launch: for every entry {r0, r1, e} of the device's work list,
 * C[r0..r1) = A[r0..r1) . W_e^T with W = [E][N][K] bf16, A [rows][K], C [rows][N]. Every row's
 * bits are invar_cuda_gemm's for the same row and weights (same chunked order), whatever
 * the entries. bm (64 or 128) must be the one the work list was made with. */
int invar_cuda_gemm_grouped(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                            invar_cuda_dtype c_type, int rows, int N, int K, int E, const int32_t *entries,
                            const int32_t *n_entries, int max_entries, int bm);

/* ---- multi-head latent attention, absorbed (mla.cu) ----
 * The latent cache: per position one row [c_kv (R), k_pe (rope)] bf16 at
 * cache[(page * INVAR_CUDA_PAGE + offset) * (R + rope)]. R <= 512, R + rope <= 576 and a
 * multiple of 8. rope_cs as for qkv_prep (n_rot = rope).
 * latent: from fp32 rows a (stride lda): with q_lora > 0, RMSNorm of a[t][0..q_lora) with
 * q_a_norm (fp32) to qa_out [T][q_lora] bf16; c_kv = RMSNorm of a[t][kv_off..kv_off+R) with
 * kv_a_norm (fp32) and k_pe = a[t][kv_off+R..+rope) rotated by pos[t], to cache slot[t]. */
int invar_cuda_mla_latent(invar_cuda_ctx *ctx, const float *a, int lda, int q_lora, const float *q_a_norm,
                          uint16_t *qa_out, int kv_off, int R, int rope, const float *kv_a_norm, float eps,
                          const float *rope_cs, const int32_t *pos, int neox, uint16_t *cache, const int32_t *slot,
                          int T);
/* The absorbed query and the output projection are grouped invariant GEMMs over the heads
 * (invar_cuda_gemm_grouped, E = H) on head-major rows: row h T + t is token t's head h.
 * query_prep: qn [H][T][nope] bf16 = q[t][h][0..nope), qpe [H][T][rope] bf16 = q[t][h][nope..]
 * rotated by pos[t]; q fp32, row stride ldq, heads of nope + rope. Then q_c = qn . W_UK^T per
 * head (W_UK [H][R][nope] bf16) as [H][T][R] bf16.
 * heads_plan: the grouped GEMMs' work list for H heads of T rows, bm rows an entry, at most
 * invar_cuda_mla_heads_max_entries entries. */
int invar_cuda_mla_query_prep(invar_cuda_ctx *ctx, const float *q, int ldq, int H, int nope, int rope,
                              const float *rope_cs, const int32_t *pos, int neox, uint16_t *qn, uint16_t *qpe, int T);
int invar_cuda_mla_heads_max_entries(int H, int T, int bm);
int invar_cuda_mla_heads_plan(invar_cuda_ctx *ctx, int H, int T, int bm, int32_t *entries, int32_t *n_entries);
/* olat [H][T][R] bf16: each (token, head) attends causally to positions 0..pos[t] of its
 * sequence (block table row tok_seq[t] of block_table, stride bt_stride), scores
 * scale * [q_c, q_pe] . [c_kv, k_pe] (qc [H][T][R], qpe [H][T][rope], bf16), values c_kv
 * (tensor cores, fp32 accumulation, the softmax weights in bf16); the keys in blocks of 64 and
 * splits of `split` (a multiple of 64) positions from absolute 0 merged in order:
 * INVAR_CUDA_MLA_KV_SPLIT, or a negative control's other value. R <= 512, R and rope multiples
 * of 8, R + rope <= 576; pointers 16-byte aligned.
 * par NULL or parts 1: each CTA merges its token's splits itself. parts > 1 (few tokens: the
 * GPU filled over the splits): `parts` CTAs per token take every parts-th split and write each
 * split's state to ws (invar_cuda_mla_parts_bytes(T, H, R, ws_splits) bytes; ws_splits >
 * every pos / split), then a fold takes them in position order with the merge's own
 * operations: the same bits for any parts. */
typedef struct {
    int parts;
    float *ws;
    int ws_splits;
} invar_cuda_mla_parts;
size_t invar_cuda_mla_parts_bytes(int T, int H, int R, int ws_splits);
int invar_cuda_mla_attention(invar_cuda_ctx *ctx, const uint16_t *qc, const uint16_t *qpe, const uint16_t *cache,
                             const int32_t *pos, const int32_t *tok_seq, const int32_t *block_table, int bt_stride,
                             uint16_t *olat, int T, int H, int R, int rope, float scale, int split,
                             const invar_cuda_mla_parts *par);
/* The same with the block-table stride read from device memory (*bt_stride_dev, e.g. a
 * graph's staging buffer), so a captured launch serves every step's stride. */
int invar_cuda_mla_attention_dev(invar_cuda_ctx *ctx, const uint16_t *qc, const uint16_t *qpe, const uint16_t *cache,
                                 const int32_t *pos, const int32_t *tok_seq, const int32_t *block_table,
                                 const int32_t *bt_stride_dev, uint16_t *olat, int T, int H, int R, int rope,
                                 float scale, int split, const invar_cuda_mla_parts *par);
/* After the output GEMM (olat . W_UV^T per head, W_UV [H][vd][R] bf16, into [H][T][vd]):
 * out [T][H vd] bf16, token t's heads side by side. vd % 8 == 0. */
int invar_cuda_mla_heads_to_tokens(invar_cuda_ctx *ctx, const uint16_t *in, int H, int T, int vd, uint16_t *out);

#ifdef __cplusplus
}
#endif
#endif
