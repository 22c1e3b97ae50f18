/* Multi-head latent attention (deepseek2) in the absorbed formulation, for every row alike
 * (prefill, chunked prefill, decode): the cache holds per position one latent row
 * [c_kv (R), k_pe (rope)] in bf16; a query head is absorbed into that space
 * (q_lat = W_UK^T q_nope, then its rope'd q_pe), scores against the latent rows, sums c_kv,
 * and goes back through W_UV. The row kernels here run in fp32; every value is one fixed
 * chain of operations of its own token (and, for attention, of its own sequence's cache):
 *   latent    one CTA per token; each norm a warp: lane-sequential sums, a fixed xor tree,
 *             lane 0's result;
 *   query     one CTA per token: q_nope of every head to bf16, head-major, for the
 *             absorption (a grouped invariant GEMM over the heads, W_UK per head), and the
 *             rotated q_pe;
 *   output    the attention's head-major outputs go through W_UV per head (the grouped
 *             GEMM again) and back to token-major rows here.
 * The attention over the latent rows runs on tensor cores (mla_attention.cu). Nothing
 * depends on the other tokens in the launch, on how many there are, or on whether a
 * token's own sequence was prefilled in one step or decoded position by position. */
#include <cuda_bf16.h>
#include <math.h>
#include "kernels/cuda/cuda_internal.h"

#define MLA_THREADS 256
#define MLA_MAX_DK 576  /* R + rope */

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

/* ---- per token: the query heads head-major for the absorption's grouped GEMM ---- */
/* qn[h T + t] = q_nope of (t, h) and qpe[h T + t] = its rotated q_pe, both rounded to bf16 once
 * (the GEMM and the attention's tensor cores take bf16). */
__global__ void __launch_bounds__(MLA_THREADS)
mla_query_prep_kernel(const float *__restrict__ q, int ldq, int H, int nope, int rope,
                      const float *__restrict__ rope_cs, const int32_t *__restrict__ pos, int neox,
                      uint16_t *__restrict__ qn, uint16_t *__restrict__ qpe, int T)
{
    const int t = blockIdx.x, half = rope / 2;
    const float *row = q + (size_t)t * ldq;
    for (int i = threadIdx.x; i < H * nope; i += blockDim.x) {
        const int h = i / nope, k = i % nope;
        qn[((size_t)h * T + t) * nope + k] = to_bf(row[(size_t)h * (nope + rope) + k]);
    }
    const float *cs = rope_cs + (size_t)pos[t] * rope;
    for (int i = threadIdx.x; i < H * half; i += blockDim.x) {
        const int h = i / half, j = i % half;
        float y0, y1;
        int ia, ib;
        rope_pair(row + (size_t)h * (nope + rope) + nope, cs, j, rope, neox, &y0, &y1, &ia, &ib);
        uint16_t *dst = qpe + ((size_t)h * T + t) * rope;
        dst[ia] = to_bf(y0);
        dst[ib] = to_bf(y1);
    }
}

extern "C" int invar_cuda_mla_query_prep(invar_cuda_ctx *ctx, const float *q, int ldq, int H, int nope, int rope,
                                         const float *rope_cs, const int32_t *pos, int neox, uint16_t *qn,
                                         uint16_t *qpe, int T)
{
    if (T < 0 || H <= 0 || nope <= 0 || rope < 0 || rope % 2 || ldq < H * (nope + rope))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_query_prep: bad shape (H %d, nope %d, rope %d)", H, nope,
                               rope);
    if (T == 0) return 0;
    mla_query_prep_kernel<<<T, MLA_THREADS, 0, ctx->stream>>>(q, ldq, H, nope, rope, rope_cs, pos, neox, qn, qpe, T);
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_query_prep launch");
}

/* ---- the per-head GEMMs' work list: head h's rows [h T, (h + 1) T) in bm-row entries ---- */
__global__ void mla_heads_plan_kernel(int H, int T, int bm, int4 *__restrict__ entries, int *__restrict__ n_entries)
{
    const int per = (T + bm - 1) / bm, n = H * per;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int h = i / per, r0 = h * T + (i % per) * bm, end = (h + 1) * T;
        entries[i] = make_int4(r0, r0 + bm < end ? r0 + bm : end, h, 0);
    }
    if (threadIdx.x == 0) *n_entries = n;
}

extern "C" int invar_cuda_mla_heads_max_entries(int H, int T, int bm)
{
    return H <= 0 || T <= 0 || bm <= 0 ? 1 : H * ((T + bm - 1) / bm);
}

extern "C" int invar_cuda_mla_heads_plan(invar_cuda_ctx *ctx, int H, int T, int bm, int32_t *entries,
                                         int32_t *n_entries)
{
    if (H <= 0 || T < 0 || bm <= 0 || (long)H * T > INT32_MAX || ((uintptr_t)entries & 15))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_heads_plan: bad shape (H %d, T %d, bm %d)", H, T, bm);
    if (T == 0) return 0;
    mla_heads_plan_kernel<<<1, 256, 0, ctx->stream>>>(H, T, bm, (int4 *)entries, n_entries);
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_heads_plan launch");
}

/* ---- head-major [H][T][vd] rows back to token-major [T][H vd] for attn_output ---- */
__global__ void __launch_bounds__(MLA_THREADS)
mla_heads_to_tokens_kernel(const uint4 *__restrict__ in, int H, int T, int vch, uint4 *__restrict__ out)
{
    const int t = blockIdx.x;
    for (int i = threadIdx.x; i < H * vch; i += blockDim.x) {
        const int h = i / vch, c = i % vch;
        out[(size_t)t * H * vch + i] = in[((size_t)h * T + t) * vch + c];
    }
}

extern "C" int invar_cuda_mla_heads_to_tokens(invar_cuda_ctx *ctx, const uint16_t *in, int H, int T, int vd,
                                              uint16_t *out)
{
    if (T < 0 || H <= 0 || vd <= 0 || vd % 8 || (((uintptr_t)in | (uintptr_t)out) & 15))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_heads_to_tokens: bad shape (H %d, v_dim %d)", H, vd);
    if (T == 0) return 0;
    mla_heads_to_tokens_kernel<<<T, MLA_THREADS, 0, ctx->stream>>>((const uint4 *)in, H, T, vd / 8, (uint4 *)out);
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_heads_to_tokens launch");
}
