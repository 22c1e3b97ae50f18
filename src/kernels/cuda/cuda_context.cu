/* Context: device properties, the driver's tensor-map encoder, growable workspaces. */
#include <cudaTypedefs.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cuda_internal.h"

int invar_cuda_fail(invar_cuda_ctx *ctx, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (ctx) vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    return code;
}

int invar_cuda_check(invar_cuda_ctx *ctx, cudaError_t st, const char *what)
{
    if (st == cudaSuccess) return 0;
    return invar_cuda_fail(ctx, INVAR_CUDA_ECUDA, "%s: %s", what, cudaGetErrorString(st));
}

int invar_cuda_grow(invar_cuda_ctx *ctx, void **buf, size_t *have, size_t bytes,
                               int zero)
{
    if (bytes <= *have) return 0;
    if (*buf) {
        /* Earlier launches may still read the old buffer. */
        if (invar_cuda_check(ctx, cudaDeviceSynchronize(), "sync before grow")) return INVAR_CUDA_ECUDA;
        cudaFree(*buf);
        *buf = NULL;
        *have = 0;
    }
    if (cudaMalloc(buf, bytes) != cudaSuccess) {
        *buf = NULL;
        return invar_cuda_fail(ctx, INVAR_CUDA_ENOMEM, "cudaMalloc(%zu) failed", bytes);
    }
    if (zero && invar_cuda_check(ctx, cudaMemset(*buf, 0, bytes), "memset workspace"))
        return INVAR_CUDA_ECUDA;
    *have = bytes;
    return 0;
}

extern "C" int invar_cuda_init(invar_cuda_ctx **out, int device)
{
    *out = NULL;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= device) return INVAR_CUDA_ENODEV;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return INVAR_CUDA_ENODEV;
    if (prop.major != 9) return INVAR_CUDA_ENODEV; /* wgmma / TMA code is sm_90a only */
    if (cudaSetDevice(device) != cudaSuccess) return INVAR_CUDA_ENODEV;
    invar_cuda_ctx *ctx = (invar_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) return INVAR_CUDA_ENOMEM;
    ctx->device = device;
    ctx->sm_count = prop.multiProcessorCount;
    ctx->smem_optin = prop.sharedMemPerBlockOptin;
    /* A fallback and a comparison, never needed for correctness: both kernels are invariant
     * (their bits differ from each other's). */
    const char *attn = getenv("INVAR_CUDA_ATTN");
    ctx->attn_mma = attn && strcmp(attn, "mma") == 0;
    ctx->attn_decode_ring = invar_cuda_attn_decode_ring_env();
    /* Speed only (same bits): INVAR_CUDA_ATTN_PREFILL=1 (consumer turns), 2 (the cp.async
     * kernel) or 3 (persistent grid) for prefill tiles. */
    const char *pre = getenv("INVAR_CUDA_ATTN_PREFILL");
    ctx->attn_prefill = pre && pre[0] >= '0' && pre[0] <= '3' && !pre[1] ? pre[0] - '0' : 0;
    /* Speed only (same bits): split decode launches merge in each tile's last CTA
     * (INVAR_CUDA_ATTN_MERGE=cta) or in the merge kernel after the attention (=kernel). */
    const char *mg = getenv("INVAR_CUDA_ATTN_MERGE");
    ctx->attn_merge_kernel = !mg                    ? INVAR_CUDA_ATTN_MERGE_KERNEL_DEFAULT
                             : !strcmp(mg, "cta")   ? 0
                             : !strcmp(mg, "kernel") ? 1
                                                    : INVAR_CUDA_ATTN_MERGE_KERNEL_DEFAULT;
    /* INVAR_CUDA_ATTN_PV=64: P V of head_dim 128 as two m64n64k16 per k16 step (other bits). */
    const char *pv = getenv("INVAR_CUDA_ATTN_PV");
    ctx->attn_pv128 = !(pv && strcmp(pv, "64") == 0);
    cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn) {
        free(ctx);
        return INVAR_CUDA_ENODEV;
    }
    ctx->encode_tiled = fn;
    ctx->gemm_cluster = 1; /* 2-CTA B multicast: +2..18% at large M (bench gemm_cluster_experiment) */
    ctx->gemm_max_clusters = -1;
    /* Small M on the multi-chain narrow kernel (same bits); INVAR_CUDA_GEMM_NARROW=0 keeps the
     * wide kernel for comparison runs. */
    const char *nar = getenv("INVAR_CUDA_GEMM_NARROW");
    ctx->gemm_narrow = !(nar && !strcmp(nar, "0"));
    ctx->gemm_narrow_pack_a = 1;
    /* Without the counters every split launch runs the merge kernel (the same bits). */
    if (cudaMalloc((void **)&ctx->attn_done, sizeof(int32_t) * INVAR_CUDA_ATTN_DONE_SLOTS) != cudaSuccess ||
        cudaMemset(ctx->attn_done, 0, sizeof(int32_t) * INVAR_CUDA_ATTN_DONE_SLOTS) != cudaSuccess) {
        cudaFree(ctx->attn_done);
        ctx->attn_done = NULL;
        (void)cudaGetLastError();
    }
    *out = ctx;
    return 0;
}

void invar_cuda_cublas_destroy(invar_cuda_ctx *ctx); /* gemm_cublas.cu */

extern "C" void invar_cuda_free(invar_cuda_ctx *ctx)
{
    if (!ctx) return;
    cudaDeviceSynchronize();
    invar_cuda_cublas_destroy(ctx);
    cudaFree(ctx->gemm_ws);
    cudaFree(ctx->attn_ws);
    cudaFree(ctx->attn_done);
    free(ctx);
}

extern "C" void invar_cuda_set_stream(invar_cuda_ctx *ctx, void *stream)
{
    ctx->stream = (cudaStream_t)stream;
}

extern "C" const char *invar_cuda_last_error(const invar_cuda_ctx *ctx)
{
    return ctx ? ctx->err : "no context";
}

extern "C" int invar_cuda_sm_count(const invar_cuda_ctx *ctx) { return ctx->sm_count; }

extern "C" int invar_cuda_reserve(invar_cuda_ctx *ctx, size_t gemm_ws_bytes, size_t attn_ws_bytes)
{
    int rc = invar_cuda_grow(ctx, (void **)&ctx->gemm_ws, &ctx->gemm_ws_bytes, gemm_ws_bytes, 0);
    if (rc) return rc;
    return invar_cuda_grow(ctx, (void **)&ctx->attn_ws, &ctx->attn_ws_bytes, attn_ws_bytes, 0);
}
