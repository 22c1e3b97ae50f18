/* The epilogue store of the GEMM kernels (gemm_invariant.cu and gemm_narrow.cu): one thread's
 * fragment of a 64 x BN fp32 accumulator (wgmma layout: element 4j + 2h + e is row
 * lane_row + 8h, column 8j + lane_col + e of the tile) written at (row0, col0) of the M x N
 * output, as fp32 or rounded to bf16; elements outside the output are skipped. */
#ifndef INVAR_GEMM_STORE_CUH
#define INVAR_GEMM_STORE_CUH
#include <cuda_bf16.h>

template <int BN>
static __device__ __forceinline__ void gemm_store_frag(void *out, int out_f32, int M, int N, const float *v,
                                                       int row0, int col0, int lane_row, int lane_col)
{
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int col = col0 + 8 * j + lane_col;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + lane_row + 8 * h;
            if (row >= M || col >= N) continue;
            const size_t off = (size_t)row * N + col;
            const float x0 = v[4 * j + 2 * h], x1 = v[4 * j + 2 * h + 1];
            if (out_f32)
                *(float2 *)((float *)out + off) = make_float2(x0, x1);
            else
                *(__nv_bfloat162 *)((__nv_bfloat16 *)out + off) = __floats2bfloat162_rn(x0, x1);
        }
    }
}

#endif
