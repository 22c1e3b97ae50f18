/* Multi-head latent attention (deepseek2) in the absorbed formulation, for every row alike
 * (prefill, chunked prefill, decode): the cache holds per position one latent row
 * [c_kv (R), k_pe (rope)] in bf16; a query head is absorbed into that space
 * (q_lat = W_UK^T q_nope, then its rope'd q_pe), scores against the latent rows, sums c_kv,
 * and goes back through W_UV. CUDA cores in fp32; every value is one fixed chain of
 * operations of its own token (and, for attention, of its own sequence's cache):
 *   latent    one CTA per token; each norm a warp: lane-sequential sums, a fixed xor tree,
 *             lane 0's result;
 *   query /   one CTA per (token, head); an output element is a sequential fused
 *   output    multiply-add chain over its input dims;
 * The attention over the latent rows runs on tensor cores (mla_attention.cu). Nothing
 * depends on the other tokens in the launch, on how many there are, or on whether a
 * token's own sequence was prefilled in one step or decoded position by position. */
#include <cuda_bf16.h>
#include <math.h>
#include "kernels/cuda/cuda_internal.h"

#define MLA_THREADS 256
#define MLA_MAX_DK 576  /* R + rope */
#define MLA_MAX_IN 512  /* query / output projections' input dims */

static __device__ __forceinline__ float bf(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
static __device__ __forceinline__ uint16_t to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/* Sum of squares of x[0..n) by one warp; every lane gets lane 0's result. */
static __device__ float warp_sumsq(const float *x, int n)
{
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int d = lane; d < n; d += 32) ss = __fmaf_rn(x[d], x[d], ss);
    for (int o = 16; o; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    return __shfl_sync(0xffffffffu, ss, 0);
}

static __device__ __forceinline__ float rms_scale(float ss, int n, float eps)
{
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
}

/* Rotates pairs of x[0..rope) by cs (cos, sin per pair), writing bf16 or fp32. */
static __device__ __forceinline__ void rope_pair(const float *x, const float *cs, int i, int rope, int neox,
                                                 float *y0, float *y1, int *a_out, int *b_out)
{
    const int half = rope / 2;
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float c = cs[2 * i], sn = cs[2 * i + 1], x0 = x[a], x1 = x[b];
    *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    *y1 = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
    *a_out = a;
    *b_out = b;
}

/* ---- per token: the query bottleneck's norm, the latent row into the cache ---- */
__global__ void __launch_bounds__(64)
mla_latent_kernel(const float *__restrict__ a, int lda, int q_lora, const float *__restrict__ q_a_norm,
                  uint16_t *__restrict__ qa_out, int kv_off, int R, int rope, const float *__restrict__ kv_a_norm,
                  float eps, const float *__restrict__ rope_cs, const int32_t *__restrict__ pos, int neox,
                  uint16_t *__restrict__ cache, const int32_t *__restrict__ slot)
{
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *row = a + (size_t)t * lda;
    if (warp == 0) {
        const float *kv = row + kv_off;
        const float sc = rms_scale(warp_sumsq(kv, R), R, eps);
        uint16_t *dst = cache + (size_t)slot[t] * (R + rope);
        for (int d = lane; d < R; d += 32) dst[d] = to_bf(__fmul_rn(__fmul_rn(kv[d], sc), kv_a_norm[d]));
        const float *cs = rope_cs + (size_t)pos[t] * rope;
        for (int i = lane; i < rope / 2; i += 32) {
            float y0, y1;
            int ia, ib;
            rope_pair(kv + R, cs, i, rope, neox, &y0, &y1, &ia, &ib);
            dst[R + ia] = to_bf(y0);
            dst[R + ib] = to_bf(y1);
        }
    } else if (q_lora > 0) {
        const float sc = rms_scale(warp_sumsq(row, q_lora), q_lora, eps);
        for (int d = lane; d < q_lora; d += 32)
            qa_out[(size_t)t * q_lora + d] = to_bf(__fmul_rn(__fmul_rn(row[d], sc), q_a_norm[d]));
    }
}

extern "C" int invar_cuda_mla_latent(invar_cuda_ctx *ctx, const float *a, int lda, int q_lora, const float *q_a_norm,
                                     uint16_t *qa_out, int kv_off, int R, int rope, const float *kv_a_norm, float eps,
                                     const float *rope_cs, const int32_t *pos, int neox, uint16_t *cache,
                                     const int32_t *slot, int T)
{
    if (T < 0 || R <= 0 || rope < 0 || rope % 2 || R + rope > MLA_MAX_DK || q_lora < 0 || kv_off + R + rope > lda)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_latent: bad shape (R %d, rope %d)", R, rope);
    if (T == 0) return 0;
    mla_latent_kernel<<<T, 64, 0, ctx->stream>>>(a, lda, q_lora, q_a_norm, qa_out, kv_off, R, rope, kv_a_norm, eps,
                                                 rope_cs, pos, neox, cache, slot);
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_latent launch");
}

/* ---- per (token, head): the absorbed query [W_UK^T q_nope, rope(q_pe)] ---- */
__global__ void __launch_bounds__(MLA_THREADS)
mla_query_kernel(const float *__restrict__ q, int ldq, const uint16_t *__restrict__ uk, int H, int nope, int R,
                 int rope, const float *__restrict__ rope_cs, const int32_t *__restrict__ pos, int neox,
                 float *__restrict__ qlat)
{
    __shared__ float xs[MLA_MAX_IN];
    const int t = blockIdx.x, h = blockIdx.y, Dk = R + rope;
    const float *qh = q + (size_t)t * ldq + (size_t)h * (nope + rope);
    for (int k = threadIdx.x; k < nope; k += blockDim.x) xs[k] = qh[k];
    __syncthreads();
    float *dst = qlat + ((size_t)t * H + h) * Dk;
    const uint16_t *w = uk + (size_t)h * nope * R;
    for (int n = threadIdx.x; n < R; n += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < nope; k++) acc = __fmaf_rn(xs[k], bf(w[(size_t)k * R + n]), acc);
        dst[n] = acc;
    }
    const float *cs = rope_cs + (size_t)pos[t] * rope;
    for (int i = threadIdx.x; i < rope / 2; i += blockDim.x) {
        float y0, y1;
        int ia, ib;
        rope_pair(qh + nope, cs, i, rope, neox, &y0, &y1, &ia, &ib);
        dst[R + ia] = y0;
        dst[R + ib] = y1;
    }
}

extern "C" int invar_cuda_mla_query(invar_cuda_ctx *ctx, const float *q, int ldq, const uint16_t *uk, int H, int nope,
                                    int R, int rope, const float *rope_cs, const int32_t *pos, int neox, float *qlat,
                                    int T)
{
    if (T < 0 || H <= 0 || nope <= 0 || nope > MLA_MAX_IN || R <= 0 || rope < 0 || rope % 2 ||
        R + rope > MLA_MAX_DK || ldq < H * (nope + rope) || H > 65535)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_query: bad shape (nope %d, R %d)", nope, R);
    if (T == 0) return 0;
    mla_query_kernel<<<dim3(T, H), MLA_THREADS, 0, ctx->stream>>>(q, ldq, uk, H, nope, R, rope, rope_cs, pos, neox,
                                                                   qlat);
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_query launch");
}

/* ---- per (token, head): out = W_UV o_lat, bf16, heads side by side ---- */
__global__ void __launch_bounds__(MLA_THREADS)
mla_output_kernel(const float *__restrict__ olat, const uint16_t *__restrict__ uv, int H, int R, int vd,
                  uint16_t *__restrict__ out)
{
    __shared__ float xs[MLA_MAX_IN];
    const int t = blockIdx.x, h = blockIdx.y;
    const float *x = olat + ((size_t)t * H + h) * R;
    for (int k = threadIdx.x; k < R; k += blockDim.x) xs[k] = x[k];
    __syncthreads();
    const uint16_t *w = uv + (size_t)h * R * vd;
    for (int n = threadIdx.x; n < vd; n += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < R; k++) acc = __fmaf_rn(xs[k], bf(w[(size_t)k * vd + n]), acc);
        out[((size_t)t * H + h) * vd + n] = to_bf(acc);
    }
}

extern "C" int invar_cuda_mla_output(invar_cuda_ctx *ctx, const float *olat, const uint16_t *uv, int H, int R, int vd,
                                     uint16_t *out, int T)
{
    if (T < 0 || H <= 0 || R <= 0 || R > MLA_MAX_IN || vd <= 0 || H > 65535)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_output: bad shape (R %d, v_dim %d)", R, vd);
    if (T == 0) return 0;
    mla_output_kernel<<<dim3(T, H), MLA_THREADS, 0, ctx->stream>>>(olat, uv, H, R, vd, out);
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_output launch");
}
