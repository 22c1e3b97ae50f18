/* The CUDA backend: the Llama-family forward pass on the batch-invariant kernels of
 * src/kernels/cuda, KV pages in device memory, and sampling from device-side row statistics.
 *
 * Per layer: RMSNorm (fused residual add) -> stacked QKV GEMM (fp32 out) -> qkv_prep (bias,
 * QK-norm, RoPE, q out, k/v into the cache) -> paged attention -> O GEMM -> RMSNorm -> stacked
 * gate/up GEMM -> SiLU x up -> down GEMM. Each kernel computes an element with one fixed
 * operation sequence that depends neither on the rows in the call nor on a row's place
 * (docs/cuda.md), so a token's logits depend only on its own sequence.
 *
 * Sampling: one kernel gives every row its log-sum-exp, argmax and greedy logprob. A greedy
 * row without alternatives is done there (a token id and a float come back); any other row
 * (temperature, top-k, top-p, min-p, seeds, alternatives) goes through the device copy of the
 * engine's sampler (kernels/cuda/sampler.cu), which performs sampler_choose_lse's operations
 * in its order with that lse: the same token, logprob and alternatives, bit for bit. A row
 * whose truncated candidate set outgrows the device sampler's shared memory is copied to the
 * host and sampled there by sampler_choose_lse itself.
 *
 * Traffic per step: the step's inputs go up in one copy from pinned memory (cuda_step.h),
 * the kernels run on the backend's own stream, and the one wait is for the row statistics
 * coming back. Decode steps (one token per sequence) replay CUDA graphs captured when the KV
 * cache is created (cuda_graphs.c); their padding rows change no bit of a real row, since
 * every kernel's per-row arithmetic is independent of the rows beside it. */
#ifdef INVAR_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "sampling/sampler.h"
#include "kernels/cuda/invar_cuda_testing.h" /* the SPLIT_BY_M control GEMM */
#include "backend/cuda_backend.h"

_Static_assert(INVAR_CUDA_PAGE == KV_BLOCK, "the engine's KV blocks are the kernels' pages");
_Static_assert(INVAR_CUDA_SAMPLE_TOP == INVAR_MAX_TOP_LOGPROBS, "the device sampler returns every alternative");

static cuda_backend *cu(backend *b) { return (cuda_backend *)b; }
static const backend_ops cuda_ops;
static cudaStream_t stream_of(const cuda_backend *c) { return (cudaStream_t)c->stream; }

int cuda_fail(backend *b, const char *what) {
    snprintf(b->error, sizeof b->error, "cuda: %s: %s", what, invar_cuda_last_error(cu(b)->ctx));
    return -1;
}

static int cuda_error(backend *b, const char *what) {
    snprintf(b->error, sizeof b->error, "cuda: %s: %s", what, cudaGetErrorString(cudaGetLastError()));
    return -1;
}

static void free_bufs(cuda_bufs *d) {
    void *ps[] = {d->x,      d->xn,     d->q,      d->attn,  d->o,     d->gu,      d->h,     d->hid,
                  d->qkv,    d->logits, d->tok_in, d->stats, d->srows, d->sparams, d->souts, d->swork,
                  d->rlog,   d->ey,     d->sy,     d->xg,    d->egu,   d->eh,      d->mq,    d->qn,
                  d->qc,     d->qpe,    d->olat,   d->ov,    d->qa,    d->moe.sel, d->moe.rel, d->moe.slot,
                  d->moe.count, d->moe.start, d->moe.entries, d->moe.n_entries, d->moe.wts, d->moe.seen,
                  d->mla_entries, d->mla_n_entries, d->mla_ws};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) cudaFree(ps[i]);
    memset(d, 0, sizeof *d);
}

static void free_host(host_bufs *h) {
    void *ps[] = {h->q_start, h->q_len, h->ctx_len, h->slot, h->work_idx, h->work_p};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) free(ps[i]);
    cudaFreeHost(h->stats);
    cudaFreeHost(h->tok_in);
    cudaFreeHost(h->srows);
    cudaFreeHost(h->sparams);
    cudaFreeHost(h->souts);
    cudaFreeHost(h->row);
    free(h->moe_seen);
    memset(h, 0, sizeof *h);
}

static void kv_free(backend_kv *kv) {
    cuda_graphs_free(kv->graphs);
    cudaFree(kv->k);
    cudaFree(kv->v);
    free(kv);
}

static void cuda_destroy(backend *b) {
    cuda_backend *c = cu(b);
    if (c->stream) cudaStreamSynchronize(stream_of(c));
    while (c->kvs) {
        backend_kv *n = c->kvs->next;
        kv_free(c->kvs);
        c->kvs = n;
    }
    free_bufs(&c->d);
    free_host(&c->h);
    step_staging_free(&c->stage);
    cudaFree(c->attn_ws);
    cuda_weights_free(&c->w);
    invar_cuda_free(c->ctx);
    if (c->stream) cudaStreamDestroy(stream_of(c));
    free(c);
}

/* Bytes of K and of V per block, all layers (MLA: one latent row per position, no V). */
static size_t kv_half_bytes(const cuda_backend *c, size_t *v_bytes) {
    const model_config *cf = &c->base.m->cfg;
    const size_t per = (size_t)cf->n_layer * KV_BLOCK * sizeof(uint16_t);
    if (c->mla_R) {
        *v_bytes = 0;
        return per * (size_t)(c->mla_R + c->mla_rope);
    }
    *v_bytes = per * (size_t)(cf->n_head_kv * cf->head_dim);
    return *v_bytes;
}

static size_t cuda_kv_bytes_per_block(const backend *b) {
    size_t v, k = kv_half_bytes((const cuda_backend *)b, &v);
    return k + v;
}

static int cuda_kv_create(backend *b, int64_t n_blocks, backend_kv **out) {
    cuda_backend *c = cu(b);
    const int64_t n_alloc = n_blocks + 1;
    size_t vb, kb = kv_half_bytes(c, &vb), free_b = 0, total = 0;
    const size_t k_bytes = kb * (size_t)n_alloc, v_bytes = vb ? vb * (size_t)n_alloc : 16;
    const bool graphs_on = b->opts.cuda_graphs; /* every layer's launches are fixed by T alone */
    size_t graphs = graphs_on ? cuda_graphs_bytes(c) : 0;
    cudaMemGetInfo(&free_b, &total);
    if (k_bytes + v_bytes + graphs + ((size_t)256 << 20) > free_b) {
        snprintf(b->error, sizeof b->error,
                 "cuda: a KV cache of %lld blocks needs %.1f GiB (+%.2f GiB for decode graphs), the device has "
                 "%.1f GiB free",
                 (long long)n_blocks, (double)(k_bytes + v_bytes) / (1 << 30), (double)graphs / (1 << 30),
                 (double)free_b / (1 << 30));
        return -1;
    }
    backend_kv *kv = calloc(1, sizeof *kv);
    if (!kv || cudaMalloc((void **)&kv->k, k_bytes) != cudaSuccess ||
        cudaMalloc((void **)&kv->v, v_bytes) != cudaSuccess) {
        if (kv) kv_free(kv);
        snprintf(b->error, sizeof b->error, "cuda: cannot allocate %lld KV blocks", (long long)n_blocks);
        return -1;
    }
    /* Zeroed once: a page slot that no token wrote holds 0, never NaN (attention weighs
     * such slots by exactly 0, and 0 * NaN would not be 0). */
    if (cudaMemsetAsync(kv->k, 0, k_bytes, stream_of(c)) != cudaSuccess ||
        cudaMemsetAsync(kv->v, 0, v_bytes, stream_of(c)) != cudaSuccess ||
        cudaStreamSynchronize(stream_of(c)) != cudaSuccess) {
        kv_free(kv);
        return cuda_error(b, "KV cache clear");
    }
    kv->n_blocks = n_blocks;
    kv->n_alloc = n_alloc;
    kv->next = c->kvs;
    c->kvs = kv;
    if (graphs_on) cuda_graphs_capture(c, kv);
    *out = kv;
    return 0;
}

static void cuda_kv_destroy(backend *b, backend_kv *kv) {
    cuda_backend *c = cu(b);
    if (!kv) return;
    cudaStreamSynchronize(stream_of(c));
    for (backend_kv **p = &c->kvs; *p; p = &(*p)->next)
        if (*p == kv) {
            *p = kv->next;
            break;
        }
    kv_free(kv);
}

int cuda_gemm(cuda_backend *c, invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *out,
              invar_cuda_dtype t, int64_t M, int64_t N, int64_t K) {
    switch (c->gemm_mode) {
    case BACKEND_GEMM_CUBLAS: return invar_cuda_gemm_cublas(ctx, a, w, out, t, (int)M, (int)N, (int)K);
    case BACKEND_GEMM_SPLIT_BY_M:
        /* Negative control: the K chunk, so the rounding, follows M (its parity: a lone
         * decode row folds 1024-wide chunks, an even batch 256-wide; every graph bucket above
         * 1 is even, so an odd batch differs from its padded replay too). */
        return invar_cuda_gemm_experiment_kc(ctx, a, w, out, t, (int)M, (int)N, (int)K, M % 2 ? 1024 : 256);
    default: return invar_cuda_gemm(ctx, a, w, out, t, (int)M, (int)N, (int)K);
    }
}

int cuda_gemm_grouped(cuda_backend *c, invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *out,
                      invar_cuda_dtype t, int64_t T, int rows, int64_t N, int64_t K, int E, const int32_t *entries,
                      const int32_t *n_entries, int max_entries, int bm) {
    if (c->gemm_mode == BACKEND_GEMM_SPLIT_BY_M)
        return invar_cuda_gemm_grouped_experiment_kc(ctx, a, w, out, t, rows, (int)N, (int)K, E, entries, n_entries,
                                                     max_entries, bm, T % 2 ? 1024 : 256);
    return invar_cuda_gemm_grouped(ctx, a, w, out, t, rows, (int)N, (int)K, E, entries, n_entries, max_entries, bm);
}

int backend_cuda_set_moe_combine(backend *b, moe_combine_mode mode) {
    if (b->ops != &cuda_ops || !cu(b)->k_used) return -1;
    cu(b)->moe_by_load = mode == MOE_COMBINE_BY_LOAD;
    return 0;
}

const uint64_t *backend_cuda_moe_counts_seen(backend *b) {
    if (b->ops != &cuda_ops || !cu(b)->k_used) return NULL;
    cuda_backend *c = cu(b);
    const size_t bytes = sizeof(uint64_t) * (size_t)c->base.m->cfg.n_expert;
    if (cudaStreamSynchronize(stream_of(c)) != cudaSuccess ||
        cudaMemcpy(c->h.moe_seen, c->d.moe.seen, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        return NULL;
    return c->h.moe_seen;
}

int backend_cuda_set_mla_split_by_batch(backend *b, bool on) {
    if (b->ops != &cuda_ops || !cu(b)->mla_R) return -1;
    cu(b)->mla_split_by_batch = on;
    return 0;
}

int backend_cuda_set_gemm_mode(backend *b, backend_gemm_mode mode) {
    if (b->ops != &cuda_ops) return -1;
    cuda_backend *c = cu(b);
    c->gemm_mode = mode;
    /* Graphs hold the GEMMs they were captured with. */
    for (backend_kv *kv = c->kvs; kv; kv = kv->next)
        if (kv->graphs) {
            cuda_graphs_free(kv->graphs);
            kv->graphs = NULL;
            cuda_graphs_capture(c, kv);
        }
    return 0;
}

/* The batch's sequences (runs of tokens sharing a block table at consecutive positions)
 * into c->h, each token's cache slot, and the longest block table. */
static int describe_batch(cuda_backend *c, const fwd_batch *b, int *max_pages) {
    host_bufs *h = &c->h;
    int ns = 0, mp = 1;
    for (int64_t t = 0; t < b->n_tokens; t++) {
        const int32_t *bt = b->block_tables[t];
        int32_t p = b->pos[t];
        h->slot[t] = bt[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK;
        if (t == 0 || bt != b->block_tables[t - 1] || p != b->pos[t - 1] + 1) {
            h->q_start[ns] = (int32_t)t;
            h->q_len[ns] = 0;
            ns++;
        }
        h->q_len[ns - 1]++;
        h->ctx_len[ns - 1] = p + 1;
        int pages = (p + KV_BLOCK) / KV_BLOCK;
        if (pages > mp) mp = pages;
    }
    *max_pages = mp;
    return ns;
}

static int check_batch(backend *b, const fwd_batch *batch) {
    const model *m = b->m;
    if (batch->n_tokens <= 0 || batch->n_tokens > b->opts.max_tokens || batch->n_logits < 0 ||
        batch->n_logits > b->opts.max_logits)
        return -1;
    for (int64_t t = 0; t < batch->n_tokens; t++) {
        if (batch->tokens[t] < 0 || batch->tokens[t] >= m->cfg.n_vocab) return -1;
        if (batch->pos[t] < 0 || batch->pos[t] >= m->rope_len) return -1;
    }
    for (int64_t i = 0; i < batch->n_logits; i++)
        if (batch->logit_rows[i] < 0 || batch->logit_rows[i] >= batch->n_tokens) return -1;
    return 0;
}

static int layer(cuda_backend *c, invar_cuda_ctx *ctx, backend_kv *kv, int64_t il, int64_t T,
                 const step_arrays *dev, const invar_cuda_attn_launch *attn) {
    const model_config *cf = &c->base.m->cfg;
    const cuda_layer *L = &c->w.layers[il];
    const cuda_bufs *d = &c->d;
    const uint16_t *next_norm = il + 1 < cf->n_layer ? c->w.layers[il + 1].attn_norm : c->w.out_norm;
    if (c->mla_R) {
        if (cuda_mla_attention(c, ctx, kv, il, T, dev, attn)) return -1;
    } else {
        const size_t layer_off = (size_t)il * (size_t)kv->n_alloc * KV_BLOCK * (size_t)c->kvd;
        uint16_t *kc = kv->k + layer_off, *vc = kv->v + layer_off;
        if (cuda_gemm(c, ctx, d->xn, L->wqkv, d->qkv, INVAR_CUDA_F32, T, c->wqkv, c->D)) return -1;
        if (invar_cuda_qkv_prep(ctx, d->qkv, (int)T, (int)cf->n_head, (int)cf->n_head_kv, (int)cf->head_dim,
                                L->bqkv, L->q_norm, L->k_norm, cf->rms_eps, c->w.rope_cs, dev->pos, (int)cf->n_rot,
                                cf->rope_neox, d->q, kc, vc, dev->slot))
            return -1;
        if (invar_cuda_attention_launch(ctx, attn, d->q, kc, vc, d->attn, 1.0f / sqrtf((float)cf->head_dim)))
            return -1;
    }
    if (cuda_gemm(c, ctx, d->attn, L->wo, d->o, INVAR_CUDA_BF16, T, c->D, c->qd)) return -1;
    if (invar_cuda_rmsnorm(ctx, d->o, d->x, L->ffn_norm, d->xn, (int)T, (int)c->D, cf->rms_eps)) return -1;
    if (L->router) {
        if (cuda_moe_ffn(c, ctx, il, T)) return -1;
    } else {
        if (cuda_gemm(c, ctx, d->xn, L->wgu, d->gu, INVAR_CUDA_BF16, T, 2 * c->F, c->D)) return -1;
        if (invar_cuda_silu_mul(ctx, d->gu, d->h, (int)T, (int)c->F)) return -1;
        if (cuda_gemm(c, ctx, d->h, L->wdown, d->o, INVAR_CUDA_BF16, T, c->D, c->F)) return -1;
    }
    if (invar_cuda_rmsnorm(ctx, d->o, d->x, next_norm, d->xn, (int)T, (int)c->D, cf->rms_eps)) return -1;
    return 0;
}

int cuda_run(cuda_backend *c, invar_cuda_ctx *ctx, backend_kv *kv, const step_arrays *dev, int64_t T,
             int64_t n_logits, const invar_cuda_attn_launch *attn) {
    const model_config *cf = &c->base.m->cfg;
    const cuda_bufs *d = &c->d;
    if (invar_cuda_embed(ctx, c->w.embd, dev->tokens, d->x, (int)T, (int)c->D, (int)cf->n_vocab) ||
        invar_cuda_rmsnorm(ctx, NULL, d->x, c->w.layers[0].attn_norm, d->xn, (int)T, (int)c->D, cf->rms_eps))
        return -1;
    for (int64_t il = 0; il < cf->n_layer; il++)
        if (layer(c, ctx, kv, il, T, dev, attn)) return -1;
    if (n_logits > 0) {
        /* The normed rows whose logits are wanted, gathered (the embedding kernel is a row
         * gather), then the output head. */
        if (invar_cuda_embed(ctx, d->xn, dev->logit_rows, d->hid, (int)n_logits, (int)c->D, (int)T) ||
            cuda_gemm(c, ctx, d->hid, c->w.out, d->logits, INVAR_CUDA_F32, n_logits, c->vocab_pad, c->D))
            return -1;
    }
    return 0;
}

/* An eager step: the inputs packed into the staging buffer at sizes of this step, one copy,
 * then the kernels. */
static int eager_step(cuda_backend *c, backend_kv *kv, const fwd_batch *batch, int ns, int mp) {
    backend *b = &c->base;
    const model_config *cf = &b->m->cfg;
    const host_bufs *h = &c->h;
    const int64_t T = batch->n_tokens, L = batch->n_logits;
    invar_cuda_attn_shape sh = {.n_items_tile = 1, .n_items_split = 1};
    if (!c->mla_R && invar_cuda_attn_measure(ns, h->q_start, h->q_len, h->ctx_len, (int)cf->n_head,
                                             (int)cf->n_head_kv, (int)cf->head_dim, mp,
                                             invar_cuda_sm_count(c->ctx), &sh)) {
        snprintf(b->error, sizeof b->error, "cuda: attention cannot take this batch");
        return -1;
    }
    const int split = c->mla_R ? 0 : sh.auto_split;
    step_caps caps = {(size_t)T, (size_t)L, (size_t)ns, (size_t)(split ? sh.n_items_split : sh.n_items_tile),
                      (size_t)ns * (size_t)mp};
    step_layout lay = step_layout_of(&caps);
    if (step_staging_fit(&c->stage, lay.end) || step_staging_wait(&c->stage))
        return cuda_error(b, "step staging");
    step_arrays hs = step_arrays_at(c->stage.host, &lay), ds = step_arrays_at(c->stage.dev, &lay);
    memcpy(hs.tokens, batch->tokens, sizeof(int32_t) * (size_t)T);
    memcpy(hs.pos, batch->pos, sizeof(int32_t) * (size_t)T);
    memcpy(hs.slot, h->slot, sizeof(int32_t) * (size_t)T);
    memcpy(hs.logit_rows, batch->logit_rows, sizeof(int32_t) * (size_t)L);
    memcpy(hs.ctx_len, h->ctx_len, sizeof(int32_t) * (size_t)ns);
    for (int s = 0; s < ns; s++) {
        const int32_t *bt = batch->block_tables[h->q_start[s]];
        int pages = (h->ctx_len[s] + KV_BLOCK - 1) / KV_BLOCK;
        for (int p = 0; p < mp; p++) hs.btab[(size_t)s * mp + p] = p < pages ? bt[p] : 0;
    }
    for (int s = 0; s < ns; s++)
        for (int j = 0; j < h->q_len[s]; j++) hs.tok_seq[h->q_start[s] + j] = s;
    if (!c->mla_R)
        invar_cuda_attn_fill(ns, h->q_start, h->q_len, h->ctx_len, (int)cf->n_head, (int)cf->n_head_kv,
                             split ? NULL : hs.items, split ? hs.items : NULL, hs.tok_pos, hs.tok_pbase);
    if (step_staging_upload(&c->stage, 0, lay.end) || step_staging_uploaded(&c->stage))
        return cuda_error(b, "batch upload");
    invar_cuda_attn_launch at = {
        .items = ds.items, .grid = split ? sh.n_items_split : sh.n_items_tile, .counts = NULL, .max_pages = mp,
        .split = split, .rows_max = sh.rows_max, .n_tokens = sh.n_tokens, .n_heads = (int)cf->n_head,
        .n_kv_heads = (int)cf->n_head_kv, .head_dim = (int)cf->head_dim, .ctx_len = ds.ctx_len,
        .tok_pos = ds.tok_pos, .tok_pbase = ds.tok_pbase, .block_table = ds.btab, .ws = NULL,
        .cache_pages = kv->n_alloc};
    if (split) {
        size_t need = invar_cuda_attn_ws_bytes(sh.n_partials, (int)cf->n_head, (int)cf->head_dim);
        if (need > c->attn_ws_bytes) {
            cudaStreamSynchronize(stream_of(c)); /* earlier steps may still read the old one */
            cudaFree(c->attn_ws);
            c->attn_ws_bytes = 0;
            if (cudaMalloc((void **)&c->attn_ws, need + need / 4) != cudaSuccess) {
                c->attn_ws = NULL;
                return cuda_error(b, "attention workspace");
            }
            c->attn_ws_bytes = need + need / 4;
        }
        at.ws = c->attn_ws;
    }
    c->run_error[0] = 0;
    if (cuda_run(c, c->ctx, kv, &ds, T, L, &at)) {
        if (!c->run_error[0]) return cuda_fail(b, "forward");
        snprintf(b->error, sizeof b->error, "cuda: forward: %s", c->run_error);
        return -1;
    }
    return 0;
}

static int cuda_forward(backend *b, backend_kv *kv, const fwd_batch *batch) {
    cuda_backend *c = cu(b);
    b->n_logits = 0;
    if (check_batch(b, batch)) {
        snprintf(b->error, sizeof b->error, "forward pass rejected its batch");
        return -1;
    }
    int mp;
    int ns = describe_batch(c, batch, &mp);
    int rc = cuda_graphs_step(c, kv, batch, ns, mp);
    if (rc == 0) rc = eager_step(c, kv, batch, ns, mp) ? -1 : 1;
    if (rc < 0) return -1;
    /* Launch errors show here; faults inside kernels at the next wait (row statistics). */
    if (cudaPeekAtLastError() != cudaSuccess) return cuda_error(b, "forward");
    b->n_logits = batch->n_logits;
    return 0;
}

/* Row statistics of rows first.. of the last forward; tok_in (host, or NULL for the argmax)
 * picks whose logprob comes back. Queued, not waited for (stats_wait). */
static int stats_launch(cuda_backend *c, int64_t first, int64_t n, const int32_t *tok_in) {
    const cuda_bufs *d = &c->d;
    const int V = (int)c->base.m->cfg.n_vocab;
    const size_t L = (size_t)c->base.opts.max_logits;
    if (tok_in) {
        memcpy(c->h.tok_in, tok_in, sizeof(int32_t) * (size_t)n);
        if (cudaMemcpyAsync(d->tok_in, c->h.tok_in, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice,
                            stream_of(c)) != cudaSuccess)
            return cuda_error(&c->base, "token upload");
    }
    const float *rows = d->logits + (size_t)first * (size_t)c->vocab_pad;
    if (invar_cuda_row_stats(c->ctx, rows, (int)c->vocab_pad, V, (int)n, tok_in ? d->tok_in : NULL, d->stats,
                             (float *)d->stats + L, (float *)d->stats + 2 * L))
        return cuda_fail(&c->base, "row stats");
    if (cudaMemcpyAsync(c->h.stats, d->stats, sizeof(int32_t) * 3 * L, cudaMemcpyDeviceToHost, stream_of(c)) !=
        cudaSuccess)
        return cuda_error(&c->base, "row stats download");
    return 0;
}

/* The one wait of a step. */
static int step_wait(cuda_backend *c) {
    return cudaStreamSynchronize(stream_of(c)) == cudaSuccess ? 0 : cuda_error(&c->base, "step");
}

static int stats(cuda_backend *c, int64_t first, int64_t n, const int32_t *tok_in) {
    return stats_launch(c, first, n, tok_in) || step_wait(c) ? -1 : 0;
}

static int read_row(cuda_backend *c, int64_t i, float *out) {
    const size_t V = (size_t)c->base.m->cfg.n_vocab;
    if (cudaMemcpyAsync(c->h.row, c->d.logits + (size_t)i * (size_t)c->vocab_pad, sizeof(float) * V,
                        cudaMemcpyDeviceToHost, stream_of(c)) != cudaSuccess ||
        cudaStreamSynchronize(stream_of(c)) != cudaSuccess)
        return cuda_error(&c->base, "reading logits");
    if (out != c->h.row) memcpy(out, c->h.row, sizeof(float) * V);
    return 0;
}

/* Rows that need more than the argmax go to the device sampler: their parameters go up,
 * the sampler runs after the row statistics (it reads their lse), both come back, one wait. */
static int sample_launch(cuda_backend *c, int64_t n, const sample_row *rows, int *n_dev) {
    const cuda_bufs *d = &c->d;
    host_bufs *h = &c->h;
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        const invar_sampling *s = rows[i].s;
        if (s->temperature == 0.0f && s->top_logprobs == 0) continue;
        if (sample_row_history(&rows[i])) continue; /* logits processing: the host sampler */
        h->srows[k] = (int32_t)i;
        h->sparams[k] = (invar_cuda_sample_params){.temperature = s->temperature, .top_p = s->top_p,
                                                   .min_p = s->min_p, .top_k = s->top_k,
                                                   .top_logprobs = s->top_logprobs, .seed = s->seed,
                                                   .position = rows[i].position};
        k++;
    }
    *n_dev = k;
    if (k == 0) return 0;
    const float *lse = (const float *)d->stats + c->base.opts.max_logits;
    if (cudaMemcpyAsync(d->srows, h->srows, sizeof(int32_t) * (size_t)k, cudaMemcpyHostToDevice, stream_of(c)) !=
            cudaSuccess ||
        cudaMemcpyAsync(d->sparams, h->sparams, sizeof *h->sparams * (size_t)k, cudaMemcpyHostToDevice,
                        stream_of(c)) != cudaSuccess)
        return cuda_error(&c->base, "sampling upload");
    if (invar_cuda_sample_rows(c->ctx, d->logits, (int)c->vocab_pad, (int)c->base.m->cfg.n_vocab, k, d->srows, lse,
                               d->sparams, d->souts, d->swork))
        return cuda_fail(&c->base, "sampling");
    if (cudaMemcpyAsync(h->souts, d->souts, sizeof *h->souts * (size_t)k, cudaMemcpyDeviceToHost, stream_of(c)) !=
        cudaSuccess)
        return cuda_error(&c->base, "sampling download");
    return 0;
}

static int cuda_sample(backend *b, int64_t n, const sample_row *rows, invar_token_info *out) {
    if (!backend_rows_ok(b, n)) return -1;
    if (n == 0) return 0;
    cuda_backend *c = cu(b);
    int n_dev;
    if (stats_launch(c, 0, n, NULL) || sample_launch(c, n, rows, &n_dev) || step_wait(c)) return -1;
    const int64_t V = b->m->cfg.n_vocab, L = b->opts.max_logits;
    const int32_t *argmax = c->h.stats;
    const float *lse = (const float *)c->h.stats + L, *lp = (const float *)c->h.stats + 2 * L;
    for (int64_t i = 0; i < n; i++) {
        out[i] = (invar_token_info){.token = argmax[i], .logprob = lp[i], .n_top = 0};
        if (!sample_row_history(&rows[i])) continue;
        /* Penalties, logit_bias, min_tokens: the row comes to the host sampler (rare; one
         * row read each), which reports against the device's lse like the device sampler. */
        if (read_row(c, i, c->h.row)) return -1;
        sampler_choose_lse(c->h.row, V, rows[i].s, rows[i].position, &rows[i].hist, lse[i], &out[i], c->h.work_idx,
                           c->h.work_p);
    }
    for (int k = 0; k < n_dev; k++) {
        const int64_t i = c->h.srows[k];
        const invar_cuda_sample_out *o = &c->h.souts[k];
        if (o->status != 0) { /* candidate set too large for the device: the host sampler */
            if (read_row(c, i, c->h.row)) return -1;
            sampler_choose_lse(c->h.row, V, rows[i].s, rows[i].position, NULL, lse[i], &out[i], c->h.work_idx,
                               c->h.work_p);
            continue;
        }
        out[i].token = o->token;
        out[i].logprob = o->logprob;
        out[i].n_top = o->n_top;
        for (int32_t r = 0; r < o->n_top; r++) {
            out[i].top_ids[r] = o->top_ids[r];
            out[i].top_logprobs[r] = o->top_logprobs[r];
        }
    }
    return 0;
}

static int cuda_token_logprobs(backend *b, int64_t first, int64_t n, const int32_t *tokens, float *out) {
    if (first < 0 || !backend_rows_ok(b, first + n)) return -1;
    if (n == 0) return 0;
    cuda_backend *c = cu(b);
    if (stats(c, first, n, tokens)) return -1;
    memcpy(out, (const float *)c->h.stats + 2 * b->opts.max_logits, sizeof(float) * (size_t)n);
    return 0;
}

/* The rows come to the host one by one (echo with logprobs only) and are ranked there,
 * against the lse token_logprobs just computed on the device. */
static int cuda_top_logprobs(backend *b, int64_t first, int64_t n, const int32_t *n_top, invar_token_info *out) {
    if (first < 0 || !backend_rows_ok(b, first + n)) return -1;
    cuda_backend *c = cu(b);
    const float *lse = (const float *)c->h.stats + b->opts.max_logits;
    for (int64_t i = 0; i < n; i++) {
        if (n_top[i] <= 0) continue;
        if (read_row(c, first + i, c->h.row)) return -1;
        out[i].n_top = n_top[i];
        sampler_top(c->h.row, b->m->cfg.n_vocab, n_top[i], lse[i], out[i].top_ids, out[i].top_logprobs);
    }
    return 0;
}

static int cuda_read_logits(backend *b, int64_t n, float *out) {
    if (!backend_rows_ok(b, n)) return -1;
    for (int64_t i = 0; i < n; i++)
        if (read_row(cu(b), i, out + i * b->m->cfg.n_vocab)) return -1;
    return 0;
}

static const backend_ops cuda_ops = {
    "cuda",       cuda_destroy, cuda_kv_bytes_per_block, cuda_kv_create,    cuda_kv_destroy,
    cuda_forward, cuda_sample,  cuda_token_logprobs,     cuda_top_logprobs, cuda_read_logits};

/* Shapes the kernels take: GEMM dimensions multiples of 8, the embedding gather's rows of a
 * multiple of 32, head_dim 64 or 128 (MLA: its own kernels' bounds, include/invar_cuda.h). */
static int check_mla(const model_config *c, char *err, size_t errlen) {
    const int64_t R = c->mla.kv_lora, rope = c->n_rot, nope = c->mla.qk_nope, ql = c->mla.q_lora;
    const int64_t nq = ql ? ql : c->n_head * (nope + rope);
    if (R > 512 || R + rope > 576 || (R + rope) % 8 || R % 8 || nope > 512 || nope <= 0 || rope % 2)
        return snprintf(err, errlen,
                        "cuda: MLA with kv_lora %lld, rope %lld, qk_nope %lld is not supported (kv_lora <= 512 and "
                        "kv_lora + rope <= 576, multiples of 8; qk_nope <= 512)",
                        (long long)R, (long long)rope, (long long)nope),
               -1;
    if ((nq + R + rope) % 8 || (c->n_head * (nope + rope)) % 8 || ql % 8 || (c->n_head * c->mla.v_dim) % 8)
        return snprintf(err, errlen, "cuda: MLA projection widths must be multiples of 8"), -1;
    return 0;
}

static int check_shapes(const model_config *c, char *err, size_t errlen) {
    if (c->n_expert && (c->n_ff_exp % 8 || c->n_expert_used > MODEL_MAX_EXPERTS_USED))
        return snprintf(err, errlen, "cuda: the experts' FFN width must be a multiple of 8"), -1;
    if (c->n_expert > 256)
        return snprintf(err, errlen, "cuda: %lld experts (the device routing takes up to 256)", (long long)c->n_expert),
               -1;
    if (c->n_embd % 32 || c->n_ff % 8)
        return snprintf(err, errlen, "cuda: n_embd must be a multiple of 32 and the FFN width of 8"), -1;
    if (c->n_embd > 8192) return snprintf(err, errlen, "cuda: n_embd above 8192 is not supported"), -1;
    if (c->mla.kv_lora) return check_mla(c, err, errlen);
    const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    if (c->head_dim != 64 && c->head_dim != 128)
        return snprintf(err, errlen, "cuda: head_dim %lld is not supported (64 or 128)", (long long)c->head_dim), -1;
    if (qd % 8 || kvd % 8) return snprintf(err, errlen, "cuda: the head widths must be multiples of 8"), -1;
    if (c->n_head % c->n_head_kv || c->n_head / c->n_head_kv > 64)
        return snprintf(err, errlen, "cuda: n_head / n_head_kv must be a whole number <= 64"), -1;
    return 0;
}

static int alloc_all(cuda_backend *c) {
    const model_config *cf = &c->base.m->cfg;
    const size_t T = (size_t)c->base.opts.max_tokens, L = (size_t)c->base.opts.max_logits;
    cuda_bufs *d = &c->d;
    const size_t TK = T * (size_t)c->k_used, H = (size_t)cf->n_head;
    const size_t moe = c->k_used ? 1 : 0, mla = c->mla_R ? 1 : 0, E = (size_t)cf->n_expert;
    const size_t entries = moe ? (size_t)invar_cuda_moe_max_entries((int)T, (int)c->k_used, (int)E, 64) : 0;
    struct { void **p; size_t bytes; } a[] = {
        {(void **)&d->x, 2 * T * (size_t)c->D},       {(void **)&d->xn, 2 * T * (size_t)c->D},
        {(void **)&d->q, 2 * T * (size_t)c->qd},      {(void **)&d->attn, 2 * T * (size_t)c->qd},
        {(void **)&d->o, 2 * T * (size_t)c->D},       {(void **)&d->gu, 4 * T * (size_t)c->F_alloc},
        {(void **)&d->h, 2 * T * (size_t)c->F_alloc}, {(void **)&d->hid, 2 * L * (size_t)c->D},
        {(void **)&d->rlog, moe * 4 * T * (size_t)c->E8},
        {(void **)&d->xg, moe * 2 * TK * (size_t)c->D},
        {(void **)&d->egu, moe * 4 * TK * (size_t)c->F_exp},
        {(void **)&d->eh, moe * 2 * TK * (size_t)c->F_exp},
        {(void **)&d->ey, moe * 4 * TK * (size_t)c->D},
        {(void **)&d->sy, (c->F_sh ? 4 : 0) * T * (size_t)c->D},
        {(void **)&d->moe.sel, moe * 4 * TK},         {(void **)&d->moe.rel, moe * 4 * TK},
        {(void **)&d->moe.slot, moe * 4 * TK},        {(void **)&d->moe.wts, moe * 4 * TK},
        {(void **)&d->moe.count, moe * 4 * E},        {(void **)&d->moe.start, moe * 4 * (E + 1)},
        {(void **)&d->moe.entries, 16 * entries},     {(void **)&d->moe.n_entries, moe * 4},
        {(void **)&d->moe.seen, moe * 8 * E},
        {(void **)&d->mq, mla * (c->mla_ql ? 4 : 0) * T * H * (size_t)(c->mla_nope + c->mla_rope)},
        {(void **)&d->qa, mla * 2 * T * (size_t)c->mla_ql},
        {(void **)&d->qn, mla * 2 * T * H * (size_t)c->mla_nope},
        {(void **)&d->qc, mla * 2 * T * H * (size_t)c->mla_R},
        {(void **)&d->qpe, mla * 2 * T * H * (size_t)c->mla_rope},
        {(void **)&d->olat, mla * 2 * T * H * (size_t)c->mla_R},
        {(void **)&d->ov, mla * 2 * T * H * (size_t)c->mla_vd},
        {(void **)&d->mla_entries, mla * 16 * (size_t)invar_cuda_mla_heads_max_entries((int)H, (int)T, 64)},
        {(void **)&d->mla_n_entries, mla * 4},
        {(void **)&d->mla_ws, mla * invar_cuda_mla_parts_bytes((int)c->mla_parts_tmax, (int)H, (int)c->mla_R,
                                                                 (int)c->mla_ws_splits)},
        {(void **)&d->qkv, 4 * T * (size_t)c->wqkv}, {(void **)&d->logits, 4 * L * (size_t)c->vocab_pad},
        {(void **)&d->tok_in, 4 * L},                 {(void **)&d->stats, 12 * L},
        {(void **)&d->srows, 4 * L},                  {(void **)&d->sparams, sizeof *d->sparams * L},
        {(void **)&d->souts, sizeof *d->souts * L},   {(void **)&d->swork, 4 * L * (size_t)c->vocab_pad}};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        if (cudaMalloc(a[i].p, a[i].bytes ? a[i].bytes : 16) != cudaSuccess) {
            *a[i].p = NULL;
            return -1;
        }
    host_bufs *h = &c->h;
    const size_t V = (size_t)cf->n_vocab;
    h->q_start = malloc(4 * T);
    h->q_len = malloc(4 * T);
    h->ctx_len = malloc(4 * T);
    h->slot = malloc(4 * T);
    h->work_idx = malloc(4 * V);
    h->work_p = malloc(8 * V); /* the sampler's two rows */
    if (cudaMallocHost((void **)&h->stats, 12 * L) != cudaSuccess) h->stats = NULL;
    if (cudaMallocHost((void **)&h->tok_in, 4 * L) != cudaSuccess) h->tok_in = NULL;
    if (cudaMallocHost((void **)&h->row, 4 * V) != cudaSuccess) h->row = NULL;
    if (cudaMallocHost((void **)&h->srows, 4 * L) != cudaSuccess) h->srows = NULL;
    if (cudaMallocHost((void **)&h->sparams, sizeof *h->sparams * L) != cudaSuccess) h->sparams = NULL;
    if (cudaMallocHost((void **)&h->souts, sizeof *h->souts * L) != cudaSuccess) h->souts = NULL;
    h->moe_seen = calloc(E ? E : 1, sizeof(uint64_t));
    if (moe && cudaMemset(d->moe.seen, 0, 8 * E) != cudaSuccess) return -1;
    return h->q_start && h->q_len && h->ctx_len && h->slot && h->work_idx && h->work_p && h->stats && h->tok_in &&
                   h->row && h->srows && h->sparams && h->souts && h->moe_seen
               ? 0
               : -1;
}

int backend_cuda_create(model *m, const backend_opts *o, backend **out, char *err, size_t errlen) {
    *out = NULL;
    const model_config *cf = &m->cfg;
    if (check_shapes(cf, err, errlen)) return -1;
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return snprintf(err, errlen, "out of memory"), -1;
    c->base = (backend){.ops = &cuda_ops, .m = m, .opts = *o};
    c->D = cf->n_embd;
    c->qd = cf->n_head * cf->head_dim;
    c->kvd = cf->n_head_kv * cf->head_dim;
    c->F = cf->n_ff;
    c->wqkv = c->qd + 2 * c->kvd;
    c->F_alloc = c->F;
    if (cf->n_expert) {
        c->E8 = (cf->n_expert + 7) / 8 * 8;
        c->F_exp = cf->n_ff_exp;
        c->F_sh = cf->n_ff_exp * cf->n_expert_shared;
        c->k_used = cf->n_expert_used;
        if (c->F_sh > c->F_alloc) c->F_alloc = c->F_sh;
    }
    if (cf->mla.kv_lora) {
        c->mla_R = cf->mla.kv_lora;
        c->mla_rope = cf->n_rot;
        c->mla_nope = cf->mla.qk_nope;
        c->mla_vd = cf->mla.v_dim;
        c->mla_ql = cf->mla.q_lora;
        c->mla_nq = c->mla_ql ? c->mla_ql : cf->n_head * (c->mla_nope + c->mla_rope);
        /* Split-parallel attention for forwards of few tokens: its states for every split of
         * the longest position, for up to 8 tokens within 256 MB. */
        c->mla_ws_splits = m->rope_len / INVAR_CUDA_MLA_KV_SPLIT + 1;
        const int64_t per_tok = (int64_t)invar_cuda_mla_parts_bytes(1, (int)cf->n_head, (int)c->mla_R,
                                                                    (int)c->mla_ws_splits);
        c->mla_parts_tmax = per_tok > 0 ? (256LL << 20) / per_tok : 0;
        if (c->mla_parts_tmax > 8) c->mla_parts_tmax = 8;
        if (c->mla_parts_tmax > c->base.opts.max_tokens) c->mla_parts_tmax = c->base.opts.max_tokens;
        c->qd = cf->n_head * c->mla_vd; /* attn_output's input */
        c->kvd = 0;
        c->wqkv = c->mla_nq + c->mla_R + c->mla_rope; /* the stacked projection's fp32 row */
    }
    c->vocab_pad = (cf->n_vocab + 7) / 8 * 8;
    c->gemm_mode = o->cuda_gemm_cublas ? BACKEND_GEMM_CUBLAS : BACKEND_GEMM_INVARIANT;
    if (invar_cuda_init(&c->ctx, o->cuda_device)) {
        snprintf(err, errlen, "cuda: no usable sm_90 GPU %d: %s", o->cuda_device,
                 c->ctx ? invar_cuda_last_error(c->ctx) : "initialisation failed");
        cuda_destroy(&c->base);
        return -1;
    }
    cudaStream_t st;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
        step_staging_init(&c->stage, (c->stream = st))) {
        snprintf(err, errlen, "cuda: cannot create a stream: %s", cudaGetErrorString(cudaGetLastError()));
        cuda_destroy(&c->base);
        return -1;
    }
    invar_cuda_set_stream(c->ctx, st);
    size_t free_b = 0, total = 0, need = cuda_weights_bytes(m, c->vocab_pad);
    cudaMemGetInfo(&free_b, &total);
    if (need + ((size_t)512 << 20) > free_b) {
        snprintf(err, errlen, "cuda: the model needs %.2f GiB of device memory as bf16, GPU %d has %.2f GiB free",
                 (double)need / (1 << 30), o->cuda_device, (double)free_b / (1 << 30));
        cuda_destroy(&c->base);
        return -1;
    }
    if (cuda_weights_upload(m, c->vocab_pad, o->n_threads, &c->w, err, errlen)) {
        cuda_destroy(&c->base);
        return -1;
    }
    if (alloc_all(c)) {
        snprintf(err, errlen, "cuda: out of memory for activations of %lld tokens", (long long)o->max_tokens);
        cuda_destroy(&c->base);
        return -1;
    }
    *out = &c->base;
    return 0;
}
#endif
