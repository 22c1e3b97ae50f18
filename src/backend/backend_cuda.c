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
 * row without alternatives is done there (a token id and a float come back); any other row's
 * logits are copied to the host and go through the engine's one sampler with that lse, so
 * temperature, top-k, top-p, min-p, seeds and alternatives mean exactly what they mean on the
 * CPU, and every logprob is sampler_logprob(logit, device lse). */
#ifdef INVAR_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "sampling/sampler.h"
#include "backend/backend.h"
#include "backend/cuda_weights.h"
#include "invar_cuda.h"

_Static_assert(INVAR_CUDA_PAGE == KV_BLOCK, "the engine's KV blocks are the kernels' pages");

typedef struct {
    uint16_t *x, *xn, *q, *attn, *o, *gu, *h, *hid;   /* bf16 activations */
    float *qkv, *logits;
    int32_t *tokens, *pos, *slot, *logit_rows, *btab, *tok_in, *argmax;
    float *lse, *lp;
    size_t btab_cap;                                   /* int32 entries of btab */
} cuda_bufs;

typedef struct {                 /* host staging of one step */
    int32_t *slot, *q_start, *q_len, *ctx_len, *btab, *argmax;
    float *lse, *lp, *row;
    int32_t *work_idx;
    float *work_p;
    size_t btab_cap;
} host_bufs;

typedef struct {
    backend base;
    invar_cuda_ctx *ctx;
    cuda_weights w;
    cuda_bufs d;
    host_bufs h;
    int64_t vocab_pad;
    int64_t D, qd, kvd, F, wqkv;
    backend_gemm_mode gemm_mode;
} cuda_backend;

struct backend_kv {
    uint16_t *k, *v;             /* [n_layer][n_blocks][n_head_kv][PAGE][head_dim] */
    int64_t n_blocks;
};

static cuda_backend *cu(backend *b) { return (cuda_backend *)b; }
static const backend_ops cuda_ops;

static int fail(backend *b, const char *what) {
    snprintf(b->error, sizeof b->error, "cuda: %s: %s", what, invar_cuda_last_error(cu(b)->ctx));
    return -1;
}

static void free_bufs(cuda_bufs *d) {
    void *ps[] = {d->x, d->xn, d->q, d->attn, d->o, d->gu, d->h, d->hid, d->qkv, d->logits, d->tokens, d->pos,
                  d->slot, d->logit_rows, d->btab, d->tok_in, d->argmax, d->lse, d->lp};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) cudaFree(ps[i]);
    memset(d, 0, sizeof *d);
}

static void free_host(host_bufs *h) {
    void *ps[] = {h->slot, h->q_start, h->q_len, h->ctx_len, h->btab, h->argmax, h->lse, h->lp, h->row,
                  h->work_idx, h->work_p};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) free(ps[i]);
    memset(h, 0, sizeof *h);
}

static void cuda_destroy(backend *b) {
    cuda_backend *c = cu(b);
    free_bufs(&c->d);
    free_host(&c->h);
    cuda_weights_free(&c->w);
    invar_cuda_free(c->ctx);
    free(c);
}

static size_t cuda_kv_bytes_per_block(const backend *b) {
    const model_config *c = &b->m->cfg;
    return (size_t)2 * (size_t)c->n_layer * KV_BLOCK * (size_t)(c->n_head_kv * c->head_dim) * sizeof(uint16_t);
}

static int cuda_kv_create(backend *b, int64_t n_blocks, backend_kv **out) {
    size_t half = cuda_kv_bytes_per_block(b) / 2 * (size_t)n_blocks, free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    if (2 * half + ((size_t)256 << 20) > free_b) {
        snprintf(b->error, sizeof b->error, "cuda: a KV cache of %lld blocks needs %.1f GiB, the device has %.1f GiB free",
                 (long long)n_blocks, 2.0 * (double)half / (1 << 30), (double)free_b / (1 << 30));
        return -1;
    }
    backend_kv *kv = calloc(1, sizeof *kv);
    if (!kv || cudaMalloc((void **)&kv->k, half) != cudaSuccess || cudaMalloc((void **)&kv->v, half) != cudaSuccess) {
        if (kv) {
            cudaFree(kv->k);
            free(kv);
        }
        snprintf(b->error, sizeof b->error, "cuda: cannot allocate %lld KV blocks", (long long)n_blocks);
        return -1;
    }
    /* Zeroed once: a page slot that no token wrote holds 0, never NaN (attention weighs
     * such slots by exactly 0, and 0 * NaN would not be 0). */
    cudaMemset(kv->k, 0, half);
    cudaMemset(kv->v, 0, half);
    kv->n_blocks = n_blocks;
    *out = kv;
    return 0;
}

static void cuda_kv_destroy(backend *b, backend_kv *kv) {
    (void)b;
    if (!kv) return;
    cudaFree(kv->k);
    cudaFree(kv->v);
    free(kv);
}

static int gemm(cuda_backend *c, const uint16_t *a, const uint16_t *w, void *out, invar_cuda_dtype t, int64_t M,
                int64_t N, int64_t K) {
    switch (c->gemm_mode) {
    case BACKEND_GEMM_CUBLAS: return invar_cuda_gemm_cublas(c->ctx, a, w, out, t, (int)M, (int)N, (int)K);
    case BACKEND_GEMM_SPLIT_BY_M: /* negative control: the K chunk, so the rounding, follows M */
        return invar_cuda_gemm_experiment_kc(c->ctx, a, w, out, t, (int)M, (int)N, (int)K, M <= 8 ? 1024 : 256);
    default: return invar_cuda_gemm(c->ctx, a, w, out, t, (int)M, (int)N, (int)K);
    }
}

int backend_cuda_set_gemm_mode(backend *b, backend_gemm_mode mode) {
    if (b->ops != &cuda_ops) return -1;
    cu(b)->gemm_mode = mode;
    return 0;
}

static int to_dev(void *dst, const void *src, size_t bytes) {
    return bytes && cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess;
}

/* The batch's sequences (runs of tokens sharing a block table at consecutive positions),
 * their block tables packed for the attention kernel, and each token's cache slot. */
static int describe_batch(cuda_backend *c, const fwd_batch *b, int *n_seqs, int *max_pages) {
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
    size_t need = (size_t)ns * (size_t)mp;
    if (need > h->btab_cap) {
        int32_t *nb = realloc(h->btab, sizeof(int32_t) * need);
        if (!nb) return -1;
        h->btab = nb;
        h->btab_cap = need;
    }
    if (need > c->d.btab_cap) {
        cudaFree(c->d.btab);
        if (cudaMalloc((void **)&c->d.btab, sizeof(int32_t) * need) != cudaSuccess) {
            c->d.btab = NULL;
            c->d.btab_cap = 0;
            return -1;
        }
        c->d.btab_cap = need;
    }
    for (int s = 0; s < ns; s++) {
        const int32_t *bt = b->block_tables[h->q_start[s]];
        int pages = (h->ctx_len[s] + KV_BLOCK - 1) / KV_BLOCK;
        for (int p = 0; p < mp; p++) h->btab[(size_t)s * mp + p] = p < pages ? bt[p] : 0;
    }
    *n_seqs = ns;
    *max_pages = mp;
    return 0;
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

static int layer(cuda_backend *c, backend_kv *kv, int64_t il, int64_t T, const invar_cuda_attn_plan *plan) {
    const model_config *cf = &c->base.m->cfg;
    const cuda_layer *L = &c->w.layers[il];
    const cuda_bufs *d = &c->d;
    const size_t layer_off = (size_t)il * (size_t)kv->n_blocks * KV_BLOCK * (size_t)c->kvd;
    uint16_t *kc = kv->k + layer_off, *vc = kv->v + layer_off;
    const uint16_t *next_norm = il + 1 < cf->n_layer ? c->w.layers[il + 1].attn_norm : c->w.out_norm;
    if (gemm(c, d->xn, L->wqkv, d->qkv, INVAR_CUDA_F32, T, c->wqkv, c->D)) return fail(&c->base, "qkv gemm");
    if (invar_cuda_qkv_prep(c->ctx, d->qkv, (int)T, (int)cf->n_head, (int)cf->n_head_kv, (int)cf->head_dim, L->bqkv,
                            L->q_norm, L->k_norm, cf->rms_eps, c->w.rope_cs, d->pos, (int)cf->n_rot, cf->rope_neox,
                            d->q, kc, vc, d->slot))
        return fail(&c->base, "qkv prep");
    if (invar_cuda_attention(c->ctx, plan, d->q, kc, vc, d->btab, d->attn, 1.0f / sqrtf((float)cf->head_dim)))
        return fail(&c->base, "attention");
    if (gemm(c, d->attn, L->wo, d->o, INVAR_CUDA_BF16, T, c->D, c->qd)) return fail(&c->base, "o gemm");
    if (invar_cuda_rmsnorm(c->ctx, d->o, d->x, L->ffn_norm, d->xn, (int)T, (int)c->D, cf->rms_eps))
        return fail(&c->base, "ffn norm");
    if (gemm(c, d->xn, L->wgu, d->gu, INVAR_CUDA_BF16, T, 2 * c->F, c->D)) return fail(&c->base, "gate/up gemm");
    if (invar_cuda_silu_mul(c->ctx, d->gu, d->h, (int)T, (int)c->F)) return fail(&c->base, "silu");
    if (gemm(c, d->h, L->wdown, d->o, INVAR_CUDA_BF16, T, c->D, c->F)) return fail(&c->base, "down gemm");
    if (invar_cuda_rmsnorm(c->ctx, d->o, d->x, next_norm, d->xn, (int)T, (int)c->D, cf->rms_eps))
        return fail(&c->base, "attn norm");
    return 0;
}

static int cuda_forward(backend *b, backend_kv *kv, const fwd_batch *batch) {
    cuda_backend *c = cu(b);
    const model_config *cf = &b->m->cfg;
    const int64_t T = batch->n_tokens;
    b->n_logits = 0;
    if (check_batch(b, batch)) {
        snprintf(b->error, sizeof b->error, "forward pass rejected its batch");
        return -1;
    }
    int ns, mp;
    if (describe_batch(c, batch, &ns, &mp)) {
        snprintf(b->error, sizeof b->error, "cuda: out of memory for block tables");
        return -1;
    }
    const cuda_bufs *d = &c->d;
    if (to_dev(d->tokens, batch->tokens, sizeof(int32_t) * (size_t)T) ||
        to_dev(d->pos, batch->pos, sizeof(int32_t) * (size_t)T) ||
        to_dev(d->slot, c->h.slot, sizeof(int32_t) * (size_t)T) ||
        to_dev(d->logit_rows, batch->logit_rows, sizeof(int32_t) * (size_t)batch->n_logits) ||
        to_dev(d->btab, c->h.btab, sizeof(int32_t) * (size_t)ns * (size_t)mp)) {
        snprintf(b->error, sizeof b->error, "cuda: batch upload failed");
        return -1;
    }
    invar_cuda_attn_plan *plan = NULL;
    if (invar_cuda_attn_plan_create(c->ctx, &plan, ns, c->h.q_start, c->h.q_len, c->h.ctx_len, (int)cf->n_head,
                                    (int)cf->n_head_kv, (int)cf->head_dim, mp))
        return fail(b, "attention plan");
    int rc = 0;
    if (invar_cuda_embed(c->ctx, c->w.embd, d->tokens, d->x, (int)T, (int)c->D, (int)cf->n_vocab) ||
        invar_cuda_rmsnorm(c->ctx, NULL, d->x, c->w.layers[0].attn_norm, d->xn, (int)T, (int)c->D, cf->rms_eps))
        rc = fail(b, "embedding");
    for (int64_t il = 0; rc == 0 && il < cf->n_layer; il++) rc = layer(c, kv, il, T, plan);
    invar_cuda_attn_plan_free(plan);
    if (rc) return rc;
    if (batch->n_logits > 0) {
        /* The normed rows whose logits are wanted, gathered (the embedding kernel is a row
         * gather), then the output head. */
        if (invar_cuda_embed(c->ctx, d->xn, d->logit_rows, d->hid, (int)batch->n_logits, (int)c->D, (int)T))
            return fail(b, "logit rows");
        if (gemm(c, d->hid, c->w.out, d->logits, INVAR_CUDA_F32, batch->n_logits, c->vocab_pad, c->D))
            return fail(b, "output gemm");
    }
    if (cudaDeviceSynchronize() != cudaSuccess) {
        snprintf(b->error, sizeof b->error, "cuda: forward failed: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    b->n_logits = batch->n_logits;
    return 0;
}


/* Row statistics of rows first.. of the last forward; tok_in (host, or NULL for the argmax)
 * picks whose logprob comes back. */
static int stats(cuda_backend *c, int64_t first, int64_t n, const int32_t *tok_in) {
    const cuda_bufs *d = &c->d;
    const int V = (int)c->base.m->cfg.n_vocab;
    if (tok_in && to_dev(d->tok_in, tok_in, sizeof(int32_t) * (size_t)n)) return -1;
    const float *rows = d->logits + (size_t)first * (size_t)c->vocab_pad;
    if (invar_cuda_row_stats(c->ctx, rows, (int)c->vocab_pad, V, (int)n, tok_in ? d->tok_in : NULL, d->argmax, d->lse,
                             d->lp))
        return fail(&c->base, "row stats");
    if (cudaMemcpy(c->h.argmax, d->argmax, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(c->h.lse, d->lse, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(c->h.lp, d->lp, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(c->base.error, sizeof c->base.error, "cuda: reading row statistics failed");
        return -1;
    }
    return 0;
}

static int read_row(cuda_backend *c, int64_t i, float *out) {
    const size_t V = (size_t)c->base.m->cfg.n_vocab;
    if (cudaMemcpy(out, c->d.logits + (size_t)i * (size_t)c->vocab_pad, sizeof(float) * V, cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
        snprintf(c->base.error, sizeof c->base.error, "cuda: reading logits failed");
        return -1;
    }
    return 0;
}

static int cuda_sample(backend *b, int64_t n, const sample_row *rows, invar_token_info *out) {
    if (!backend_rows_ok(b, n)) return -1;
    if (n == 0) return 0;
    cuda_backend *c = cu(b);
    if (stats(c, 0, n, NULL)) return -1;
    const int64_t V = b->m->cfg.n_vocab;
    for (int64_t i = 0; i < n; i++) {
        const invar_sampling *s = rows[i].s;
        if (s->temperature == 0.0f && s->top_logprobs == 0) {
            out[i] = (invar_token_info){.token = c->h.argmax[i], .logprob = c->h.lp[i], .n_top = 0};
            continue;
        }
        if (read_row(c, i, c->h.row)) return -1;
        sampler_choose_lse(c->h.row, V, s, rows[i].position, c->h.lse[i], &out[i], c->h.work_idx, c->h.work_p);
    }
    return 0;
}

static int cuda_token_logprobs(backend *b, int64_t first, int64_t n, const int32_t *tokens, float *out) {
    if (first < 0 || !backend_rows_ok(b, first + n)) return -1;
    if (n == 0) return 0;
    cuda_backend *c = cu(b);
    if (stats(c, first, n, tokens)) return -1;
    memcpy(out, c->h.lp, sizeof(float) * (size_t)n);
    return 0;
}

static int cuda_read_logits(backend *b, int64_t n, float *out) {
    if (!backend_rows_ok(b, n)) return -1;
    for (int64_t i = 0; i < n; i++)
        if (read_row(cu(b), i, out + i * b->m->cfg.n_vocab)) return -1;
    return 0;
}

static const backend_ops cuda_ops = {"cuda",       cuda_destroy, cuda_kv_bytes_per_block, cuda_kv_create,
                                     cuda_kv_destroy, cuda_forward, cuda_sample, cuda_token_logprobs,
                                     cuda_read_logits};

/* Shapes the kernels take: GEMM dimensions multiples of 8, the embedding gather's rows of a
 * multiple of 32, head_dim 64 or 128. */
static int check_shapes(const model_config *c, char *err, size_t errlen) {
    const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    if (c->head_dim != 64 && c->head_dim != 128)
        return snprintf(err, errlen, "cuda: head_dim %lld is not supported (64 or 128)", (long long)c->head_dim), -1;
    if (c->n_embd % 32 || qd % 8 || kvd % 8 || c->n_ff % 8)
        return snprintf(err, errlen, "cuda: n_embd must be a multiple of 32 and the head and FFN widths of 8"), -1;
    if (c->n_head % c->n_head_kv || c->n_head / c->n_head_kv > 64)
        return snprintf(err, errlen, "cuda: n_head / n_head_kv must be a whole number <= 64"), -1;
    if (c->n_embd > 8192) return snprintf(err, errlen, "cuda: n_embd above 8192 is not supported"), -1;
    return 0;
}

static int alloc_all(cuda_backend *c) {
    const model_config *cf = &c->base.m->cfg;
    const size_t T = (size_t)c->base.opts.max_tokens, L = (size_t)c->base.opts.max_logits;
    cuda_bufs *d = &c->d;
    struct { void **p; size_t bytes; } a[] = {
        {(void **)&d->x, 2 * T * (size_t)c->D},       {(void **)&d->xn, 2 * T * (size_t)c->D},
        {(void **)&d->q, 2 * T * (size_t)c->qd},      {(void **)&d->attn, 2 * T * (size_t)c->qd},
        {(void **)&d->o, 2 * T * (size_t)c->D},       {(void **)&d->gu, 4 * T * (size_t)c->F},
        {(void **)&d->h, 2 * T * (size_t)c->F},       {(void **)&d->hid, 2 * L * (size_t)c->D},
        {(void **)&d->qkv, 4 * T * (size_t)c->wqkv}, {(void **)&d->logits, 4 * L * (size_t)c->vocab_pad},
        {(void **)&d->tokens, 4 * T},                 {(void **)&d->pos, 4 * T},
        {(void **)&d->slot, 4 * T},                   {(void **)&d->logit_rows, 4 * L},
        {(void **)&d->tok_in, 4 * L},                 {(void **)&d->argmax, 4 * L},
        {(void **)&d->lse, 4 * L},                    {(void **)&d->lp, 4 * L}};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        if (cudaMalloc(a[i].p, a[i].bytes) != cudaSuccess) {
            *a[i].p = NULL;
            return -1;
        }
    host_bufs *h = &c->h;
    const size_t V = (size_t)cf->n_vocab;
    h->slot = malloc(4 * T);
    h->q_start = malloc(4 * T);
    h->q_len = malloc(4 * T);
    h->ctx_len = malloc(4 * T);
    h->argmax = malloc(4 * L);
    h->lse = malloc(4 * L);
    h->lp = malloc(4 * L);
    h->row = malloc(4 * V);
    h->work_idx = malloc(4 * V);
    h->work_p = malloc(4 * V);
    return h->slot && h->q_start && h->q_len && h->ctx_len && h->argmax && h->lse && h->lp && h->row &&
                   h->work_idx && h->work_p
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
    c->vocab_pad = (cf->n_vocab + 7) / 8 * 8;
    c->gemm_mode = o->cuda_gemm_cublas ? BACKEND_GEMM_CUBLAS : BACKEND_GEMM_INVARIANT;
    if (invar_cuda_init(&c->ctx, o->cuda_device)) {
        snprintf(err, errlen, "cuda: no usable sm_90 GPU %d: %s", o->cuda_device,
                 c->ctx ? invar_cuda_last_error(c->ctx) : "initialisation failed");
        cuda_destroy(&c->base);
        return -1;
    }
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
