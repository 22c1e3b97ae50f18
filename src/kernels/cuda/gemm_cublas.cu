/* The non-invariant comparison path: the same product through cuBLAS (its kernel choice,
 * and so its reduction order, changes with M). */
#include <cublas_v2.h>
#include "kernels/cuda/cuda_internal.h"

void invar_cuda_cublas_destroy(invar_cuda_ctx *ctx)
{
    if (ctx->cublas) cublasDestroy((cublasHandle_t)ctx->cublas);
    ctx->cublas = NULL;
    cudaFree(ctx->cublas_ws);
    ctx->cublas_ws = NULL;
}

extern "C" int invar_cuda_gemm_cublas(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w,
                                      void *c, invar_cuda_dtype c_type, int M, int N, int K)
{
    if (!ctx->cublas) {
        cublasHandle_t h;
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
            return invar_cuda_fail(ctx, INVAR_CUDA_ECUDA, "cublasCreate failed");
        ctx->cublas = h;
        const size_t ws = (size_t)32 << 20;
        if (cudaMalloc(&ctx->cublas_ws, ws) != cudaSuccess || cublasSetWorkspace(h, ctx->cublas_ws, ws) !=
                                                                  CUBLAS_STATUS_SUCCESS)
            return invar_cuda_fail(ctx, INVAR_CUDA_ECUDA, "cuBLAS workspace");
    }
    cublasHandle_t h = (cublasHandle_t)ctx->cublas;
    cublasSetStream(h, ctx->stream);
    float alpha = 1.0f, beta = 0.0f;
    /* Row-major C[M,N] = A W^T is column-major C^T[N,M] = W^T(op T of col-major [K,N]) A^T. */
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, CUDA_R_16BF,
                                     K, a, CUDA_R_16BF, K, &beta, c,
                                     c_type == INVAR_CUDA_F32 ? CUDA_R_32F : CUDA_R_16BF, N,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return invar_cuda_fail(ctx, INVAR_CUDA_ECUDA, "cublasGemmEx failed (%d)", (int)st);
    return 0;
}
