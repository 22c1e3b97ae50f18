/* Mixture of experts: the combine of a token's expert outputs. The experts themselves run
 * on the invariant GEMM over each expert's gathered rows (its row bits do not depend on how
 * many rows an expert has), so all that is left is the weighted sum, in the order the
 * caller lists (the token's router rank order), from zero, one element per thread. */
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_internal.h"

#define COMBINE_MAX_K 64

/* sel/count non-NULL: the negative control's order (most loaded expert first). */
__global__ void moe_combine_kernel(const float *__restrict__ y, const int32_t *__restrict__ slot,
                                   const float *__restrict__ w, int k, const float *__restrict__ shared,
                                   uint16_t *__restrict__ out, int D, size_t n, const int32_t *__restrict__ sel,
                                   const int32_t *__restrict__ count)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t t = i / D, d = i % D;
    int order[COMBINE_MAX_K];
    for (int r = 0; r < k; r++) order[r] = r;
    if (sel)
        for (int r = 1; r < k; r++)
            for (int q = r; q > 0; q--) {
                const int ea = sel[t * k + order[q - 1]], eb = sel[t * k + order[q]];
                if (count[ea] > count[eb] || (count[ea] == count[eb] && ea < eb)) break;
                const int x = order[q - 1];
                order[q - 1] = order[q];
                order[q] = x;
            }
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        const int r = order[j];
        acc = __fmaf_rn(w[t * k + r], y[(size_t)slot[t * k + r] * D + d], acc);
    }
    if (shared) acc = __fadd_rn(acc, shared[i]);
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(acc));
}

extern "C" int invar_cuda_moe_combine(invar_cuda_ctx *ctx, const float *y, const int32_t *slot, const float *w,
                                      int k, const float *shared, uint16_t *out, int T, int D)
{
    return invar_cuda_moe_combine_by_load(ctx, y, slot, w, k, shared, out, T, D, NULL, NULL);
}

extern "C" int invar_cuda_moe_combine_by_load(invar_cuda_ctx *ctx, const float *y, const int32_t *slot,
                                              const float *w, int k, const float *shared, uint16_t *out, int T,
                                              int D, const int32_t *sel, const int32_t *count)
{
    if (T < 0 || D <= 0 || k <= 0 || k > COMBINE_MAX_K || !sel != !count)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "moe_combine: bad shape");
    size_t n = (size_t)T * D;
    if (!n) return 0;
    moe_combine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, ctx->stream>>>(y, slot, w, k, shared, out, D, n, sel,
                                                                             count);
    return invar_cuda_check(ctx, cudaGetLastError(), "moe_combine launch");
}
