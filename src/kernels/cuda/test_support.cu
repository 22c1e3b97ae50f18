/* Device-side helpers for the tests and the benchmark: random fill without a host round trip,
 * and a bitwise row comparison that avoids copying gigabytes back. */
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_internal.h"

static __device__ __forceinline__ float hash_uniform(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + i * 0xBF58476D1CE4E5B9ULL + 0x94D049BB133111EBULL;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return (float)(x >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint64_t seed, float scale)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(hash_uniform(seed, i) * scale));
}

__global__ void fill_f32_kernel(float *p, size_t n, uint64_t seed, float scale)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash_uniform(seed, i) * scale;
}

__global__ void rows_differ_kernel(const uint32_t *a, const uint32_t *b, size_t rows, size_t words,
                                   unsigned long long *count)
{
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int d = 0;
        for (size_t i = threadIdx.x; i < words; i += blockDim.x) d |= a[r * words + i] != b[r * words + i];
        if (__syncthreads_or(d) && threadIdx.x == 0) atomicAdd(count, 1ULL);
    }
}

extern "C" int invar_cuda_fill_random_bf16(invar_cuda_ctx *ctx, uint16_t *p, size_t n, uint64_t seed, float scale)
{
    fill_bf16_kernel<<<4096, 256, 0, ctx->stream>>>(p, n, seed, scale);
    return invar_cuda_check(ctx, cudaGetLastError(), "fill bf16");
}

extern "C" int invar_cuda_fill_random_f32(invar_cuda_ctx *ctx, float *p, size_t n, uint64_t seed, float scale)
{
    fill_f32_kernel<<<4096, 256, 0, ctx->stream>>>(p, n, seed, scale);
    return invar_cuda_check(ctx, cudaGetLastError(), "fill f32");
}

extern "C" long invar_cuda_rows_differ(invar_cuda_ctx *ctx, const void *a, const void *b, size_t rows,
                                       size_t row_bytes)
{
    if (row_bytes % 4) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "rows_differ: row_bytes %% 4");
    if (!rows) return 0;
    unsigned long long *d = NULL, h = 0;
    if (invar_cuda_check(ctx, cudaMalloc(&d, sizeof *d), "rows_differ alloc")) return INVAR_CUDA_ECUDA;
    cudaMemsetAsync(d, 0, sizeof *d, ctx->stream);
    unsigned blocks = rows < 65536 ? (unsigned)rows : 65536u;
    rows_differ_kernel<<<blocks, 256, 0, ctx->stream>>>((const uint32_t *)a, (const uint32_t *)b, rows,
                                                         row_bytes / 4, d);
    int rc = invar_cuda_check(ctx, cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, ctx->stream),
                              "rows_differ copy");
    if (!rc) rc = invar_cuda_check(ctx, cudaStreamSynchronize(ctx->stream), "rows_differ sync");
    cudaFree(d);
    return rc ? rc : (long)h;
}

__global__ void read_flush_kernel(const uint4 *p, size_t n, int *sink)
{
    uint32_t acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldcg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = (int)acc; /* keeps the loads; practically never taken */
}

extern "C" int invar_cuda_read_flush(invar_cuda_ctx *ctx, const void *buf, size_t bytes, int *sink)
{
    read_flush_kernel<<<4 * ctx->sm_count, 512, 0, ctx->stream>>>((const uint4 *)buf, bytes / 16, sink);
    return invar_cuda_check(ctx, cudaGetLastError(), "read_flush");
}

extern "C" void invar_cuda_testing_norm_by_rows(invar_cuda_ctx *ctx, int on) { ctx->testing_norm_by_rows = on; }
extern "C" void invar_cuda_testing_merge_by_batch(invar_cuda_ctx *ctx, int on) { ctx->testing_merge_by_batch = on; }
extern "C" int invar_cuda_testing_attn_mma(invar_cuda_ctx *ctx, int on)
{
    int was = ctx->attn_mma;
    if (on >= 0) ctx->attn_mma = on != 0;
    return was;
}
extern "C" int invar_cuda_testing_attn_prefill(invar_cuda_ctx *ctx, int mode)
{
    int was = ctx->attn_prefill;
    if (mode >= 0 && mode <= 3) ctx->attn_prefill = mode;
    return was;
}
extern "C" void invar_cuda_testing_attn_fold_by_rows(invar_cuda_ctx *ctx, int on) { ctx->testing_fold_by_rows = on; }
extern "C" int invar_cuda_testing_attn_merge_kernel(invar_cuda_ctx *ctx, int on)
{
    int was = ctx->attn_merge_kernel;
    if (on >= 0 && on <= 2) ctx->attn_merge_kernel = on;
    return was;
}
extern "C" int invar_cuda_testing_attn_decode_ring(invar_cuda_ctx *ctx, int stages)
{
    int was = ctx->attn_decode_ring ? ctx->attn_decode_ring : 3;
    if (stages >= 3 && stages <= 6) ctx->attn_decode_ring = stages == 3 ? 0 : stages;
    return was;
}
