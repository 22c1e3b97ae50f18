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
 *   attention one CTA per (token, group of MLA_HG heads); the keys 0..pos in splits of
 *             `split` positions from absolute position 0 (INVAR_CUDA_KV_SPLIT), each split
 *             scored (a sequential chain per key), its max (exact in any order), its
 *             exponent sum by one thread in position order, its value sum per element in
 *             position order, and the splits merged in order. Nothing depends on the other
 *             tokens in the launch, on how many there are, or on whether a token's own
 *             sequence was prefilled in one step or decoded position by position. */
#include <cuda_bf16.h>
#include <math.h>
#include "kernels/cuda/cuda_internal.h"

#define MLA_THREADS 256
#define MLA_HG 8        /* query heads per attention CTA */
#define MLA_MAX_R 512   /* c_kv: R <= 2 * MLA_THREADS */
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

/* ---- attention over the latent cache ---- */
__global__ void __launch_bounds__(MLA_THREADS)
mla_attention_kernel(const float *__restrict__ qlat, const uint16_t *__restrict__ cache,
                     const int32_t *__restrict__ pos, const int32_t *__restrict__ tok_seq,
                     const int32_t *__restrict__ btab, int bt_stride, const int32_t *__restrict__ bt_stride_dev,
                     float *__restrict__ olat, int H, int R, int rope, float scale, int split)
{
    if (bt_stride_dev) bt_stride = *bt_stride_dev;
    __shared__ float qs[MLA_HG][MLA_MAX_DK];
    __shared__ float ps[MLA_HG][MLA_THREADS];
    __shared__ float wmax[MLA_HG][MLA_THREADS / 32];
    __shared__ float sM[MLA_HG], sL[MLA_HG], sA[MLA_HG], sB[MLA_HG];
    const int t = blockIdx.x, h0 = blockIdx.y * MLA_HG, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hg = H - h0 < MLA_HG ? H - h0 : MLA_HG, Dk = R + rope, p = pos[t];
    const int32_t *bt = btab + (size_t)tok_seq[t] * bt_stride;
    for (int i = tid; i < MLA_HG * Dk; i += MLA_THREADS) {
        const int g = i / Dk, d = i % Dk;
        qs[g][d] = g < hg ? qlat[((size_t)t * H + h0 + g) * Dk + d] : 0.0f;
    }
    if (tid < MLA_HG) {
        sM[tid] = -INFINITY;
        sL[tid] = 0.0f;
    }
    float O[MLA_HG][2];
#pragma unroll
    for (int g = 0; g < MLA_HG; g++) O[g][0] = O[g][1] = 0.0f;
    __syncthreads();
    for (int j0 = 0; j0 <= p; j0 += split) {
        const int n = p - j0 + 1 < split ? p - j0 + 1 : split;
        const bool valid = tid < n;
        float s[MLA_HG];
#pragma unroll
        for (int g = 0; g < MLA_HG; g++) s[g] = 0.0f;
        if (valid) {
            const int j = j0 + tid;
            const uint16_t *row = cache + ((size_t)bt[j / INVAR_CUDA_PAGE] * INVAR_CUDA_PAGE + j % INVAR_CUDA_PAGE) * Dk;
            for (int d0 = 0; d0 < Dk; d0 += 8) {
                const uint4 v = *(const uint4 *)(row + d0);
                const uint16_t *pv = (const uint16_t *)&v;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float kv = bf(pv[e]);
#pragma unroll
                    for (int g = 0; g < MLA_HG; g++) s[g] = __fmaf_rn(qs[g][d0 + e], kv, s[g]);
                }
            }
        }
#pragma unroll
        for (int g = 0; g < MLA_HG; g++) {
            s[g] = valid ? __fmul_rn(s[g], scale) : -INFINITY;
            float m = s[g];
            for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (lane == 0) wmax[g][warp] = m;
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < MLA_HG; g++) {
            float m = wmax[g][0];
            for (int w = 1; w < MLA_THREADS / 32; w++) m = fmaxf(m, wmax[g][w]);
            ps[g][tid] = valid ? expf(__fsub_rn(s[g], m)) : 0.0f;
            if (tid == 0) sA[g] = m; /* the split's max, for the merge below */
        }
        __syncthreads();
        if (tid < MLA_HG) { /* the split's exponent sum in position order, then the merge */
            const int g = tid;
            float l = 0.0f;
            for (int i = 0; i < n; i++) l = __fadd_rn(l, ps[g][i]);
            const float m = sA[g], M = sM[g], M2 = fmaxf(M, m);
            const float alpha = M == -INFINITY ? 0.0f : expf(__fsub_rn(M, M2)), beta = expf(__fsub_rn(m, M2));
            sL[g] = __fadd_rn(__fmul_rn(sL[g], alpha), __fmul_rn(l, beta));
            sM[g] = M2;
            sB[g] = beta;
            sA[g] = alpha;
        }
        __syncthreads();
#pragma unroll
        for (int ri = 0; ri < 2; ri++) {
            const int r = tid + ri * MLA_THREADS;
            if (r >= R) break;
            float os[MLA_HG];
#pragma unroll
            for (int g = 0; g < MLA_HG; g++) os[g] = 0.0f;
            for (int i = 0; i < n; i++) {
                const int j = j0 + i;
                const float c =
                    bf(cache[((size_t)bt[j / INVAR_CUDA_PAGE] * INVAR_CUDA_PAGE + j % INVAR_CUDA_PAGE) * Dk + r]);
#pragma unroll
                for (int g = 0; g < MLA_HG; g++) os[g] = __fmaf_rn(ps[g][i], c, os[g]);
            }
#pragma unroll
            for (int g = 0; g < MLA_HG; g++) O[g][ri] = __fadd_rn(__fmul_rn(O[g][ri], sA[g]), __fmul_rn(os[g], sB[g]));
        }
        __syncthreads();
    }
#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
        const int r = tid + ri * MLA_THREADS;
        if (r >= R) break;
#pragma unroll
        for (int g = 0; g < MLA_HG; g++)
            if (g < hg) olat[((size_t)t * H + h0 + g) * R + r] = __fdiv_rn(O[g][ri], sL[g]);
    }
}

static int mla_attention(invar_cuda_ctx *ctx, const float *qlat, const uint16_t *cache, const int32_t *pos,
                         const int32_t *tok_seq, const int32_t *block_table, int bt_stride,
                         const int32_t *bt_stride_dev, float *olat, int T, int H, int R, int rope, float scale,
                         int split)
{
    if (T < 0 || H <= 0 || R <= 0 || R > MLA_MAX_R || rope < 0 || (R + rope) % 8 || R + rope > MLA_MAX_DK ||
        split <= 0 || split > MLA_THREADS || (H + MLA_HG - 1) / MLA_HG > 65535)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_attention: bad shape (R %d, rope %d, split %d)", R, rope,
                               split);
    if (T == 0) return 0;
    mla_attention_kernel<<<dim3(T, (H + MLA_HG - 1) / MLA_HG), MLA_THREADS, 0, ctx->stream>>>(
        qlat, cache, pos, tok_seq, block_table, bt_stride, bt_stride_dev, olat, H, R, rope, scale, split);
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_attention launch");
}

extern "C" int invar_cuda_mla_attention(invar_cuda_ctx *ctx, const float *qlat, const uint16_t *cache,
                                        const int32_t *pos, const int32_t *tok_seq, const int32_t *block_table,
                                        int bt_stride, float *olat, int T, int H, int R, int rope, float scale,
                                        int split)
{
    return mla_attention(ctx, qlat, cache, pos, tok_seq, block_table, bt_stride, NULL, olat, T, H, R, rope, scale,
                         split);
}

extern "C" int invar_cuda_mla_attention_dev(invar_cuda_ctx *ctx, const float *qlat, const uint16_t *cache,
                                            const int32_t *pos, const int32_t *tok_seq, const int32_t *block_table,
                                            const int32_t *bt_stride_dev, float *olat, int T, int H, int R, int rope,
                                            float scale, int split)
{
    if (!bt_stride_dev) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_attention: no stride");
    return mla_attention(ctx, qlat, cache, pos, tok_seq, block_table, 1, bt_stride_dev, olat, T, H, R, rope, scale,
                         split);
}
