/* What the invariant GEMM's two kernels (gemm_invariant.cu: wide tiles, any M; gemm_narrow.cu:
 * narrow tiles with several chunk chains, small M) share on the host side. */
#ifndef INVAR_GEMM_INTERNAL_H
#define INVAR_GEMM_INTERNAL_H
#include <cuda.h>
#include "kernels/cuda/cuda_internal.h"

/* A 2-D bf16 tensor map over a row-major [rows][K] matrix: boxes of 64 K-elements (one
 * 128-byte swizzle row) by box_rows rows, 128-byte swizzle, zeros outside the matrix. */
int gemm_make_map(invar_cuda_ctx *ctx, CUtensorMap *m, const void *ptr, int rows, int K, int box_rows);

/* Whether the narrow kernel takes this product and with which tile width and chain count
 * (0: the wide kernel does, or the shape is invalid and the wide path reports it). Fills
 * plan's fields when it does. */
int gemm_narrow_plan(const invar_cuda_ctx *ctx, int M, int N, int K, invar_cuda_gemm_plan *plan);
/* Runs C = A . W^T on the narrow kernel with a plan from gemm_narrow_plan. */
int gemm_narrow_run(invar_cuda_ctx *ctx, const invar_cuda_gemm_plan *plan, const uint16_t *a,
                    const uint16_t *w, void *c, int out_f32, int M, int N, int K);

#endif
