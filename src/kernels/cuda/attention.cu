/* Paged, ragged, grouped-query attention with a batch-invariant KV reduction.
 *
 * For a query row (token, head) the keys are cut into splits at absolute positions
 * [256c, 256c+256). Each split is reduced over its 256 fixed slots (slots past the token's
 * position or the cache end are -inf scores / zero weights, which change no sum), giving
 * (m_c = max score, l_c = sum exp(s - m_c), o_c = sum exp(s - m_c) v). Splits are then folded in
 * order c = 0, 1, ... by fold_step, either inside the CTA (one CTA walks all splits of its
 * tokens) or by attn_merge_kernel over partials that separate CTAs wrote: the same function
 * on the same fp32 values, so the bits do not depend on which path ran, on how many tokens a
 * CTA holds, nor on what else is in the batch. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cuda_internal.h"

#define SPLIT INVAR_CUDA_KV_SPLIT
#define PAGE INVAR_CUDA_PAGE
#define ATT_THREADS 256
#define ATT_MAX_ROWS 64        /* query rows (tokens x heads of one KV head) per CTA */
static_assert(SPLIT == ATT_THREADS, "one split slot per thread in the score pass");
static_assert(SPLIT % PAGE == 0, "splits start on page boundaries");

struct attn_item {
    int seq;
    int tok0;      /* first query row of the tile in q / out */
    int ntok;
    int pos0;      /* position of tok0 */
    int chunk;     /* split to do, or -1: all splits of the tile, folded in the CTA */
};

struct invar_cuda_attn_plan {
    int n_seqs, n_tokens, n_heads, n_kv_heads, head_dim, max_pages;
    int n_items_tile, n_items_split;
    int rmax;                  /* query rows of the largest tile */
    int force;                 /* -1 auto, 0, 1 */
    int auto_split;
    size_t n_partials;         /* sum over tokens of their split count */
    struct attn_item *d_items_tile, *d_items_split;
    int32_t *d_ctx_len;        /* [n_seqs] */
    int32_t *d_tok_pos;        /* [n_tokens] */
    int32_t *d_tok_pbase;      /* [n_tokens] first partial of the token */
};

static __device__ __forceinline__ float bf(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

/* One fold step: (m, l, o) <- (m, l, o) (+) (mc, lc, oc). The caller applies it only for
 * splits that hold at least one key of the row, so mc is finite. */
static __device__ __forceinline__ void fold_scales(float m, float mc, float *mn, float *a, float *b)
{
    *mn = fmaxf(m, mc);
    *a = expf(__fsub_rn(m, *mn));
    *b = expf(__fsub_rn(mc, *mn));
}
static __device__ __forceinline__ float fold_val(float x, float xc, float a, float b)
{
    return __fadd_rn(__fmul_rn(x, a), __fmul_rn(xc, b));
}

#define HD 128
#define AT(name) name##_hd128
#include "kernels/cuda/attention_body.cuh"
#undef HD
#undef AT
#define HD 64
#define AT(name) name##_hd64
#include "kernels/cuda/attention_body.cuh"
#undef HD
#undef AT

/* ---- host side ---- */

extern "C" int invar_cuda_kv_write(invar_cuda_ctx *ctx, const uint16_t *k, const uint16_t *v,
                                   uint16_t *k_cache, uint16_t *v_cache, const int32_t *slot,
                                   int T, int n_kv_heads, int head_dim)
{
    if ((head_dim != 64 && head_dim != 128) || T < 0 || n_kv_heads <= 0)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "kv_write: head_dim must be 64 or 128");
    size_t nvec = (size_t)T * n_kv_heads * head_dim / 8;
    if (!nvec) return 0;
    unsigned grid = (unsigned)((nvec + 255) / 256);
    if (head_dim == 128)
        kv_write_kernel_hd128<<<grid, 256, 0, ctx->stream>>>(k, v, k_cache, v_cache, slot, n_kv_heads, nvec);
    else
        kv_write_kernel_hd64<<<grid, 256, 0, ctx->stream>>>(k, v, k_cache, v_cache, slot, n_kv_heads, nvec);
    return invar_cuda_check(ctx, cudaGetLastError(), "kv_write launch");
}

static void *to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess) return NULL;
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

extern "C" void invar_cuda_attn_plan_free(invar_cuda_attn_plan *p)
{
    if (!p) return;
    cudaFree(p->d_items_tile);
    cudaFree(p->d_items_split);
    cudaFree(p->d_ctx_len);
    cudaFree(p->d_tok_pos);
    cudaFree(p->d_tok_pbase);
    free(p);
}

extern "C" int invar_cuda_attn_plan_create(invar_cuda_ctx *ctx, invar_cuda_attn_plan **out,
                                           int n_seqs, const int32_t *q_start, const int32_t *q_len,
                                           const int32_t *ctx_len, int n_heads, int n_kv_heads,
                                           int head_dim, int max_pages)
{
    *out = NULL;
    if ((head_dim != 64 && head_dim != 128) || n_kv_heads <= 0 || n_heads % n_kv_heads || n_seqs <= 0 ||
        n_heads / n_kv_heads > ATT_MAX_ROWS)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "attn plan: unsupported heads/head_dim");
    int G = n_heads / n_kv_heads;
    int qt = ATT_MAX_ROWS / G; /* tokens per CTA tile */
    int T = 0, ni_tile = 0, maxtok = 1;
    size_t ni_split = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (q_len[s] < 0 || ctx_len[s] < q_len[s] || ctx_len[s] > max_pages * PAGE)
            return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "attn plan: bad lengths for seq %d", s);
        if (q_start[s] + q_len[s] > T) T = q_start[s] + q_len[s];
        int tiles = (q_len[s] + qt - 1) / qt;
        if (q_len[s] > maxtok) maxtok = q_len[s] < qt ? q_len[s] : qt;
        ni_tile += tiles;
        for (int t0 = 0; t0 < q_len[s]; t0 += qt) {
            int n = q_len[s] - t0 < qt ? q_len[s] - t0 : qt;
            int lastp = ctx_len[s] - q_len[s] + t0 + n - 1;
            ni_split += (size_t)(lastp / SPLIT + 1);
        }
    }
    invar_cuda_attn_plan *p = (invar_cuda_attn_plan *)calloc(1, sizeof *p);
    struct attn_item *it_t = (struct attn_item *)malloc(sizeof *it_t * (ni_tile + 1));
    struct attn_item *it_s = (struct attn_item *)malloc(sizeof *it_s * (ni_split + 1));
    int32_t *pos = (int32_t *)calloc((size_t)T + 1, 4), *pbase = (int32_t *)calloc((size_t)T + 1, 4);
    if (!p || !it_t || !it_s || !pos || !pbase) {
        free(p); free(it_t); free(it_s); free(pos); free(pbase);
        return invar_cuda_fail(ctx, INVAR_CUDA_ENOMEM, "attn plan: out of host memory");
    }
    int a = 0;
    size_t b = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int t0 = 0; t0 < q_len[s]; t0 += qt) {
            int n = q_len[s] - t0 < qt ? q_len[s] - t0 : qt;
            struct attn_item w = {s, q_start[s] + t0, n, ctx_len[s] - q_len[s] + t0, -1};
            it_t[a++] = w;
            int lastp = w.pos0 + n - 1;
            for (int c = 0; c <= lastp / SPLIT; c++) {
                w.chunk = c;
                it_s[b++] = w;
            }
        }
        for (int j = 0; j < q_len[s]; j++) pos[q_start[s] + j] = ctx_len[s] - q_len[s] + j;
    }
    size_t np = 0;
    for (int t = 0; t < T; t++) {
        pbase[t] = (int32_t)np;
        np += (size_t)(pos[t] / SPLIT + 1);
    }
    p->n_seqs = n_seqs;
    p->n_tokens = T;
    p->n_heads = n_heads;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->max_pages = max_pages;
    p->n_items_tile = ni_tile;
    p->n_items_split = (int)ni_split;
    p->n_partials = np;
    p->rmax = maxtok * G;
    p->force = -1;
    /* Split the KV over CTAs only when whole tiles would leave most of the chip idle. */
    p->auto_split = (long)ni_tile * n_kv_heads < 4L * ctx->sm_count && ni_split > (size_t)ni_tile;
    p->d_items_tile = (struct attn_item *)to_dev(it_t, sizeof *it_t * ni_tile);
    p->d_items_split = (struct attn_item *)to_dev(it_s, sizeof *it_s * ni_split);
    p->d_ctx_len = (int32_t *)to_dev(ctx_len, 4 * (size_t)n_seqs);
    p->d_tok_pos = (int32_t *)to_dev(pos, 4 * (size_t)T);
    p->d_tok_pbase = (int32_t *)to_dev(pbase, 4 * (size_t)T);
    free(it_t); free(it_s); free(pos); free(pbase);
    if (!p->d_items_tile || !p->d_items_split || !p->d_ctx_len || !p->d_tok_pos || !p->d_tok_pbase) {
        invar_cuda_attn_plan_free(p);
        return invar_cuda_fail(ctx, INVAR_CUDA_ENOMEM, "attn plan: device allocation failed");
    }
    *out = p;
    return 0;
}

extern "C" int invar_cuda_attn_plan_split(const invar_cuda_attn_plan *p)
{
    return p->force >= 0 ? p->force : p->auto_split;
}

extern "C" void invar_cuda_attn_plan_force_split(invar_cuda_attn_plan *p, int force)
{
    p->force = force < 0 ? -1 : (force ? 1 : 0);
}

typedef void (*attn_kernel_fn)(const struct attn_item *, const uint16_t *, const uint16_t *, const uint16_t *,
                               const int32_t *, const int32_t *, const int32_t *, uint16_t *, float *, int, int,
                               int, float, int);
typedef void (*attn_merge_fn)(const float *, const int32_t *, const int32_t *, uint16_t *, int, int);

extern "C" int invar_cuda_attention(invar_cuda_ctx *ctx, const invar_cuda_attn_plan *p,
                                    const uint16_t *q, const uint16_t *k_cache,
                                    const uint16_t *v_cache, const int32_t *block_table,
                                    uint16_t *out, float scale)
{
    const int hd = p->head_dim;
    attn_kernel_fn kern = hd == 128 ? attn_kernel_hd128 : attn_kernel_hd64;
    attn_merge_fn merge = hd == 128 ? attn_merge_kernel_hd128 : attn_merge_kernel_hd64;
    int split = invar_cuda_attn_plan_split(p);
    size_t smem = sizeof(float) * ((size_t)p->rmax * (2 * hd + SPLIT + 4)) + (size_t)SPLIT * hd * 2;
    if (invar_cuda_check(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                         "attn smem attribute"))
        return INVAR_CUDA_ECUDA;
    if (p->n_tokens == 0) return 0;
    if (split) {
        size_t need = p->n_partials * p->n_heads * (hd + 4) * sizeof(float);
        int rc = invar_cuda_grow(ctx, (void **)&ctx->attn_ws, &ctx->attn_ws_bytes, need, 0);
        if (rc) return rc;
        dim3 grid(p->n_items_split, p->n_kv_heads);
        kern<<<grid, ATT_THREADS, smem, ctx->stream>>>(
            p->d_items_split, q, k_cache, v_cache, block_table, p->d_ctx_len, p->d_tok_pbase, out,
            ctx->attn_ws, p->n_heads, p->n_kv_heads, p->max_pages, scale, p->rmax);
        size_t warps = (size_t)p->n_tokens * p->n_heads;
        merge<<<(unsigned)((warps * 32 + 255) / 256), 256, 0, ctx->stream>>>(
            ctx->attn_ws, p->d_tok_pos, p->d_tok_pbase, out, p->n_tokens, p->n_heads);
    } else {
        dim3 grid(p->n_items_tile, p->n_kv_heads);
        kern<<<grid, ATT_THREADS, smem, ctx->stream>>>(
            p->d_items_tile, q, k_cache, v_cache, block_table, p->d_ctx_len, p->d_tok_pbase, out,
            NULL, p->n_heads, p->n_kv_heads, p->max_pages, scale, p->rmax);
    }
    return invar_cuda_check(ctx, cudaGetLastError(), "attention launch");
}
