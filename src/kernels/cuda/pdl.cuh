/* Programmatic dependent launch (PDL) for the row, attention and sampling kernels (the GEMMs
 * set it up themselves). A kernel launched through pdl_launch may be scheduled while the
 * kernel before it in the stream still runs, so its launch and prologue hide under that
 * kernel's tail. Each such kernel calls pdl_enter() before it touches global memory: that
 * lets its own successor be scheduled, then waits until every kernel before it has finished
 * and its writes are visible. Nothing is read or written before that wait, so results are
 * those of plain stream order: speed only, the same bits. INVAR_CUDA_PDL is a mask of the
 * kernel classes below that get the attribute (the others launch as before 2026-12-07, and
 * pdl_enter's wait then returns at once). */
#ifndef INVAR_CUDA_PDL_CUH
#define INVAR_CUDA_PDL_CUH
#include "kernels/cuda/cuda_internal.h"

enum {
    PDL_ROWS = 1,   /* rmsnorm, silu_mul, rope, embed, log_softmax, row_stats */
    PDL_QKV = 2,    /* qkv_prep, kv_write */
    PDL_ATTN = 4,   /* the attention kernels */
    PDL_MERGE = 8,  /* the split-KV merge kernel */
    PDL_SAMPLE = 16 /* the sampler */
};

static __device__ __forceinline__ void pdl_enter(void)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
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
    cfg.numAttrs = (ctx->pdl & cls) ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kern, args...);
}
#endif
