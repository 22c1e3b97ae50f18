/* A routed (mixture-of-experts) FFN on the GPU, batch-invariant as on the CPU (model/moe.h):
 *   router   the invariant GEMM's fp32 logits, one row per token;
 *   route    on the host: the logits come down (the step's one wait per routed layer) and
 *            moe_route picks each token's experts and weights from its own row, the CPU's
 *            code and order (top-k, groups, correction bias, normalisation, scaling), and
 *            sorts the (token, rank) pairs by expert;
 *   experts  the pairs' input rows gathered in that order, then per expert two invariant
 *            GEMMs over its rows: a row's bits do not depend on how many rows the expert
 *            got, so not on the batch;
 *   combine  per token, sum_r w_r y_r in the token's rank order from zero, then the shared
 *            experts' output (deepseek2), one bf16 rounding.
 * The shared experts' GEMMs are queued before the wait, so the GPU runs them while the host
 * routes. The wait makes the step's launches unrecordable: decode graphs are off for MoE
 * models (a device-side routing kernel would lift that). */
#ifdef INVAR_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda_backend.h"

static int host_fail(cuda_backend *c, const char *what) {
    snprintf(c->run_error, sizeof c->run_error, "%s: %s", what, cudaGetErrorString(cudaGetLastError()));
    return -1;
}

/* The routing of the layer's T tokens into the pinned route table: gather ids in sorted
 * order, then per token its k combine slots and weights in summation order. */
static void fill_route(cuda_backend *c, int64_t T) {
    const int64_t k = c->k_used, TK = T * k;
    const moe_routing r = moe_routing_of(c->moe);
    int32_t *gidx = c->h.route, *cslot = c->h.route + TK;
    float *cw = (float *)(c->h.route + 2 * TK);
    for (int64_t i = 0; i < TK; i++) gidx[r.slot[i]] = (int32_t)(i / k);
    int order[MODEL_MAX_EXPERTS_USED];
    for (int64_t t = 0; t < T; t++) {
        moe_combine_order(c->moe, t, order);
        for (int64_t j = 0; j < k; j++) {
            cslot[t * k + j] = (int32_t)r.slot[t * k + order[j]];
            cw[t * k + j] = r.wts[t * k + order[j]];
        }
    }
}

int cuda_moe_ffn(cuda_backend *c, invar_cuda_ctx *ctx, int64_t il, int64_t T) {
    const model *m = c->base.m;
    const cuda_layer *L = &c->w.layers[il];
    const cuda_bufs *d = &c->d;
    const int64_t D = c->D, k = c->k_used, TK = T * k, Fe = c->F_exp, Fs = c->F_sh;
    cudaStream_t st = (cudaStream_t)c->stream;
    if (cuda_gemm(c, ctx, d->xn, L->router, d->rlog, INVAR_CUDA_F32, T, c->E8, D)) return -1;
    if (cudaMemcpyAsync(c->h.rlog, d->rlog, sizeof(float) * (size_t)(T * c->E8), cudaMemcpyDeviceToHost, st) !=
        cudaSuccess)
        return host_fail(c, "router logits download");
    if (L->sh_gu && (cuda_gemm(c, ctx, d->xn, L->sh_gu, d->gu, INVAR_CUDA_BF16, T, 2 * Fs, D) ||
                     invar_cuda_silu_mul(ctx, d->gu, d->h, (int)T, (int)Fs) ||
                     cuda_gemm(c, ctx, d->h, L->sh_down, d->sy, INVAR_CUDA_F32, T, D, Fs)))
        return -1;
    if (cudaStreamSynchronize(st) != cudaSuccess) return host_fail(c, "router logits");
    moe_route(c->moe, &m->layers[il], c->h.rlog, c->E8, T);
    fill_route(c, T);
    if (cudaMemcpyAsync(d->route, c->h.route, sizeof(int32_t) * 3 * (size_t)TK, cudaMemcpyHostToDevice, st) !=
        cudaSuccess)
        return host_fail(c, "routing upload");
    if (invar_cuda_embed(ctx, d->xn, d->route, d->xg, (int)TK, (int)D, (int)T)) return -1;
    const moe_routing r = moe_routing_of(c->moe);
    const int64_t E = m->cfg.n_expert;
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = r.count[e], p = r.start[e];
        if (n && cuda_gemm(c, ctx, d->xg + (size_t)(p * D), L->exp_gu + (size_t)e * (size_t)(2 * Fe * D),
                           d->egu + (size_t)(p * 2 * Fe), INVAR_CUDA_BF16, n, 2 * Fe, D))
            return -1;
    }
    if (invar_cuda_silu_mul(ctx, d->egu, d->eh, (int)TK, (int)Fe)) return -1;
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = r.count[e], p = r.start[e];
        if (n && cuda_gemm(c, ctx, d->eh + (size_t)(p * Fe), L->exp_down + (size_t)e * (size_t)(D * Fe),
                           d->ey + (size_t)(p * D), INVAR_CUDA_F32, n, D, Fe))
            return -1;
    }
    return invar_cuda_moe_combine(ctx, d->ey, d->route + TK, (const float *)(d->route + 2 * TK), (int)k,
                                  L->sh_gu ? d->sy : NULL, d->o, (int)T, (int)D);
}
#endif
