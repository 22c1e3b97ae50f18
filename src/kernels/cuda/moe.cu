/* Mixture of experts: the combine of a token's expert outputs. The experts themselves run
 * on the invariant GEMM over each expert's gathered rows (its row bits do not depend on how
 * many rows an expert has), so all that is left is the weighted sum, in the order the
 * caller lists (the token's router rank order), from zero, one element per thread. */
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_internal.h"

__global__ void moe_combine_kernel(const float *__restrict__ y, const int32_t *__restrict__ slot,
                                   const float *__restrict__ w, int k, const float *__restrict__ shared,
                                   uint16_t *__restrict__ out, int D, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t t = i / D, d = i % D;
    float acc = 0.0f;
    for (int r = 0; r < k; r++) acc = __fmaf_rn(w[t * k + r], y[(size_t)slot[t * k + r] * D + d], acc);
    if (shared) acc = __fadd_rn(acc, shared[i]);
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(acc));
}

extern "C" int invar_cuda_moe_combine(invar_cuda_ctx *ctx, const float *y, const int32_t *slot, const float *w,
                                      int k, const float *shared, uint16_t *out, int T, int D)
{
    if (T < 0 || D <= 0 || k <= 0) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "moe_combine: bad shape");
    size_t n = (size_t)T * D;
    if (!n) return 0;
    moe_combine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, ctx->stream>>>(y, slot, w, k, shared, out, D, n);
    return invar_cuda_check(ctx, cudaGetLastError(), "moe_combine launch");
}
