/* Programmatic dependent launch (PDL) for the row and attention kernels (the GEMMs set it
 * up themselves). INVAR_CUDA_PDL is a mask of the kernel classes below. A kernel of a class
 * in the mask is launched with the attribute, so it may be scheduled while the kernel before
 * it still runs (its launch and prologue hide under that kernel's tail), and it lets its own
 * successor be scheduled as soon as it starts. Every kernel here calls pdl_enter before it
 * touches global memory: the wait there holds it until every kernel before it has finished
 * and its writes are visible. So results are those of plain stream order: speed only, the
 * same bits. Classes not in the mask launch exactly as before 2026-12-07 (the wait is then a
 * no-op). */
#ifndef INVAR_CUDA_PDL_CUH
#define INVAR_CUDA_PDL_CUH
#include "kernels/cuda/cuda_internal.h"

enum {
    PDL_ROWS = 1,   /* rmsnorm, silu_mul, rope, embed, log_softmax, row_stats */
    PDL_QKV = 2,    /* qkv_prep, kv_write */
    PDL_ATTN = 4,   /* the attention kernels */
    PDL_MERGE = 8   /* the split-KV merge kernel */
};

/* pdl: the kernel's class is in the context's mask (pdl_launch passes it as the last
 * argument). Only then does the kernel let its successor be scheduled early: a successor
 * launched with the attribute (every GEMM is) otherwise starts when this kernel's CTAs have
 * exited, as before 2026-12-07. */
static __device__ __forceinline__ void pdl_enter(int pdl)
{
    if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

/* kern<<<grid, block, smem, ctx->stream>>>(args...), with the PDL attribute where the
 * context's mask has the kernel's class. Returns the launch's status. */
template <typename... KArgs, typename... Args>
static cudaError_t pdl_launch(const invar_cuda_ctx *ctx, int cls, void (*kern)(KArgs...), dim3 grid, dim3 block,
                              size_t smem, Args... args)
{
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = &at;
    const int on = (ctx->pdl & cls) != 0;
    cfg.numAttrs = on ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kern, args..., on);
}
#endif
