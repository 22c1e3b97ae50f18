/* A routed (mixture-of-experts) FFN on the GPU, batch-invariant as on the CPU (model/moe.h),
 * with no host round trip, so a step's launches are fixed by its token count alone:
 *   router   the invariant GEMM's fp32 logits, one row per token;
 *   route    on the device (kernels/cuda/moe_route.cu): each token's experts and weights from
 *            its own row, the CPU's rules; the (token, rank) pairs sorted by expert, tokens
 *            ascending within one; their input rows gathered in that order;
 *   experts  one grouped GEMM per projection over the work list the routing wrote: a row's
 *            bits are the invariant GEMM's, whatever number of rows its expert got;
 *   combine  per token, sum_r w_r y_r in the token's rank order from zero, then the shared
 *            experts' output (deepseek2), one bf16 rounding.
 * The shared experts' GEMMs run beside nothing else: the same stream, fixed place. */
#ifdef INVAR_HAVE_CUDA
#include "backend/cuda_backend.h"
#include "kernels/cuda/invar_cuda_testing.h" /* the SPLIT_BY_M control's grouped GEMM */

/* Rows per work-list entry: 128-row tiles once experts average more than 64 rows (prefill),
 * else 64. Only the tiling follows T; a row's arithmetic does not. */
static int tile_rows(const cuda_backend *c, int64_t T) {
    return T * c->k_used > 64 * c->base.m->cfg.n_expert ? 128 : 64;
}

static invar_cuda_moe_cfg moe_cfg(const model_config *cf) {
    return (invar_cuda_moe_cfg){.n_expert = (int)cf->n_expert,
                                .k = (int)cf->n_expert_used,
                                .deepseek = cf->arch == ARCH_DEEPSEEK2,
                                .sigmoid = cf->gating == GATING_SIGMOID,
                                .n_group = (int)cf->n_group,
                                .n_group_used = (int)cf->n_group_used,
                                .group_max = cf->expert_group_max,
                                .normalise = cf->expert_weights_norm,
                                .scale = cf->expert_weights_scale};
}

/* One grouped expert GEMM over the T k routed rows. */
static int grouped(cuda_backend *c, invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *out,
                   invar_cuda_dtype t, int64_t T, int64_t N, int64_t K, int max_entries, int bm) {
    const invar_cuda_moe_bufs *b = &c->d.moe;
    return cuda_gemm_grouped(c, ctx, a, w, out, t, T, (int)(T * c->k_used), N, K, (int)c->base.m->cfg.n_expert,
                             b->entries, b->n_entries, max_entries, bm);
}

int cuda_moe_ffn(cuda_backend *c, invar_cuda_ctx *ctx, int64_t il, int64_t T) {
    const model_config *cf = &c->base.m->cfg;
    const cuda_layer *L = &c->w.layers[il];
    const cuda_bufs *d = &c->d;
    const int64_t D = c->D, k = c->k_used, Fe = c->F_exp, Fs = c->F_sh, E = cf->n_expert, TK = T * k;
    const int bm = tile_rows(c, T);
    const int max_entries = invar_cuda_moe_max_entries((int)T, (int)k, (int)E, bm);
    const invar_cuda_moe_cfg mc = moe_cfg(cf);
    const invar_cuda_moe_bufs *b = &d->moe;
    if (cuda_gemm(c, ctx, d->xn, L->router, d->rlog, INVAR_CUDA_F32, T, c->E8, D) ||
        invar_cuda_moe_route(ctx, d->rlog, (int)c->E8, L->exp_bias, &mc, d->xn, (int)T, (int)D, bm, b, d->xg))
        return -1;
    if (L->sh_gu && (cuda_gemm(c, ctx, d->xn, L->sh_gu, d->gu, INVAR_CUDA_BF16, T, 2 * Fs, D) ||
                     invar_cuda_silu_mul(ctx, d->gu, d->h, (int)T, (int)Fs) ||
                     cuda_gemm(c, ctx, d->h, L->sh_down, d->sy, INVAR_CUDA_F32, T, D, Fs)))
        return -1;
    if (grouped(c, ctx, d->xg, L->exp_gu, d->egu, INVAR_CUDA_BF16, T, 2 * Fe, D, max_entries, bm) ||
        invar_cuda_silu_mul(ctx, d->egu, d->eh, (int)TK, (int)Fe) ||
        grouped(c, ctx, d->eh, L->exp_down, d->ey, INVAR_CUDA_F32, T, D, Fe, max_entries, bm))
        return -1;
    return invar_cuda_moe_combine_by_load(ctx, d->ey, b->slot, b->wts, (int)k, L->sh_gu ? d->sy : NULL, d->o, (int)T,
                                          (int)D, c->moe_by_load ? b->sel : NULL, c->moe_by_load ? b->count : NULL);
}
#endif
