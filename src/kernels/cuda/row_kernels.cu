/* Row kernels. Each row is reduced by one CTA of a fixed size with a fixed tree, and
 * elementwise kernels touch each element once, so no result depends on the number of rows or
 * on a row's place in the batch. Arithmetic that a CPU or another kernel must match is written
 * with explicit rounding intrinsics (no contraction into FMA left to the compiler). */
#include <cuda_bf16.h>
#include <math.h>
#include "kernels/cuda/cuda_internal.h"

#define NORM_THREADS 256
#define NORM_MAX_VEC 4      /* D <= NORM_THREADS * 8 * NORM_MAX_VEC = 8192 */
#define VOCAB_THREADS 1024

static __device__ __forceinline__ float bf(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
static __device__ __forceinline__ uint16_t to_bf(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* Sum over the block; every thread gets thread 0's result (lanes of an xor tree may round
 * differently, so one lane's value is the answer). sh holds >= 33 floats. */
static __device__ float block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sh[lane] : 0.0f;
        for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    float r = sh[32];
    __syncthreads();
    return r;
}

/* Negative control only (invar_cuda_testing_norm_by_rows): block_sum with the warp totals
 * added one after another, last warp first, instead of by the xor tree. A different
 * association of the same partials: the row's sum moves by about an ulp, often enough for
 * the bf16 outputs of a few rows in a hundred to change. */
static __device__ float block_sum_serial_reversed(float v, float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = nw - 1; w >= 0; w--) t = __fadd_rn(t, sh[w]);
        sh[32] = t;
    }
    __syncthreads();
    float r = sh[32];
    __syncthreads();
    return r;
}

/* (max, sum of exp(x - max)) pairs merged in a fixed order. */
struct ms { float m, s; };
static __device__ __forceinline__ struct ms ms_merge(struct ms a, struct ms b)
{
    struct ms r;
    r.m = fmaxf(a.m, b.m);
    if (r.m == -INFINITY) {
        r.s = 0.0f;
        return r;
    }
    r.s = __fadd_rn(__fmul_rn(a.s, expf(a.m - r.m)), __fmul_rn(b.s, expf(b.m - r.m)));
    return r;
}
/* Same value as ms_merge(a, {x, 1}) for finite x, with one exp instead of two. */
static __device__ __forceinline__ struct ms ms_add(struct ms a, float x)
{
    if (x <= a.m) {
        a.s = __fadd_rn(a.s, expf(__fsub_rn(x, a.m)));
    } else {
        a.s = __fadd_rn(__fmul_rn(a.s, expf(__fsub_rn(a.m, x))), 1.0f);
        a.m = x;
    }
    return a;
}

static __device__ struct ms block_ms(struct ms v, float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o; o >>= 1) {
        struct ms w = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = ms_merge(v, w);
    }
    if (lane == 0) {
        sh[2 * warp] = v.m;
        sh[2 * warp + 1] = v.s;
    }
    __syncthreads();
    if (warp == 0) {
        struct ms z = {-INFINITY, 0.0f};
        if (lane < nw) {
            z.m = sh[2 * lane];
            z.s = sh[2 * lane + 1];
        }
        for (int o = 16; o; o >>= 1) {
            struct ms w = {__shfl_xor_sync(0xffffffffu, z.m, o), __shfl_xor_sync(0xffffffffu, z.s, o)};
            z = ms_merge(z, w);
        }
        if (lane == 0) {
            sh[64] = z.m;
            sh[65] = z.s;
        }
    }
    __syncthreads();
    struct ms r = {sh[64], sh[65]};
    __syncthreads();
    return r;
}

/* ---- RMSNorm with fused residual add ---- */
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(const uint16_t *__restrict__ x, uint16_t *__restrict__ res,
               const uint16_t *__restrict__ w, uint16_t *__restrict__ y, int D, float eps, int reverse)
{
    __shared__ float sh[66];
    size_t row = blockIdx.x;
    int nv = D / 8;
    uint4 r[NORM_MAX_VEC];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_MAX_VEC; i++) {
        int v = threadIdx.x + i * NORM_THREADS;
        if (v < nv) {
            uint4 rv = __ldcs((const uint4 *)(res + row * D) + v);
            if (x) {
                uint4 xv = __ldcs((const uint4 *)(x + row * D) + v);
                uint16_t *pr = (uint16_t *)&rv;
                const uint16_t *px = (const uint16_t *)&xv;
#pragma unroll
                for (int e = 0; e < 8; e++) pr[e] = to_bf(__fadd_rn(bf(pr[e]), bf(px[e])));
                ((uint4 *)(res + row * D))[v] = rv;
            }
            r[i] = rv;
            const uint16_t *pr = (const uint16_t *)&rv;
#pragma unroll
            for (int e = 0; e < 8; e++) ss = __fadd_rn(ss, __fmul_rn(bf(pr[e]), bf(pr[e])));
        }
    }
    ss = reverse ? block_sum_serial_reversed(ss, sh) : block_sum(ss, sh);
    float inv = 1.0f / sqrtf(__fadd_rn(ss / (float)D, eps));
#pragma unroll
    for (int i = 0; i < NORM_MAX_VEC; i++) {
        int v = threadIdx.x + i * NORM_THREADS;
        if (v < nv) {
            uint4 wv = __ldg((const uint4 *)w + v), o;
            const uint16_t *pr = (const uint16_t *)&r[i], *pw = (const uint16_t *)&wv;
            uint16_t *po = (uint16_t *)&o;
#pragma unroll
            for (int e = 0; e < 8; e++) po[e] = to_bf(__fmul_rn(__fmul_rn(bf(pr[e]), inv), bf(pw[e])));
            __stcs((uint4 *)(y + row * D) + v, o);
        }
    }
}

extern "C" int invar_cuda_rmsnorm(invar_cuda_ctx *ctx, const uint16_t *x, uint16_t *residual,
                                  const uint16_t *w, uint16_t *y, int M, int D, float eps)
{
    if (M < 0 || D <= 0 || D % 8 || D > NORM_THREADS * 8 * NORM_MAX_VEC)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "rmsnorm: bad D=%d", D);
    if (M == 0) return 0;
    rmsnorm_kernel<<<M, NORM_THREADS, 0, ctx->stream>>>(x, residual, w, y, D, eps,
                                                         ctx->testing_norm_by_rows && (M & 1));
    return invar_cuda_check(ctx, cudaGetLastError(), "rmsnorm launch");
}

/* ---- SiLU(gate) * up ---- */
__global__ void silu_mul_kernel(const uint16_t *__restrict__ gu, uint16_t *__restrict__ out,
                                int F, size_t nvec)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    size_t fv = (size_t)F / 8;
    size_t row = i / fv, v = i % fv;
    uint4 g = __ldcs((const uint4 *)(gu + row * 2 * F) + v);
    uint4 u = __ldcs((const uint4 *)(gu + row * 2 * F + F) + v);
    uint4 o;
    const uint16_t *pg = (const uint16_t *)&g, *pu = (const uint16_t *)&u;
    uint16_t *po = (uint16_t *)&o;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float a = bf(pg[e]);
        float s = __fdiv_rn(a, __fadd_rn(1.0f, expf(-a)));
        po[e] = to_bf(__fmul_rn(s, bf(pu[e])));
    }
    __stcs((uint4 *)(out + row * F) + v, o);
}

extern "C" int invar_cuda_silu_mul(invar_cuda_ctx *ctx, const uint16_t *gu, uint16_t *out, int M, int F)
{
    if (M < 0 || F <= 0 || F % 8) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "silu_mul: bad F=%d", F);
    size_t nvec = (size_t)M * F / 8;
    if (!nvec) return 0;
    silu_mul_kernel<<<(unsigned)((nvec + 255) / 256), 256, 0, ctx->stream>>>(gu, out, F, nvec);
    return invar_cuda_check(ctx, cudaGetLastError(), "silu_mul launch");
}

/* ---- RoPE (rotate-half): a thread takes 8 pairs of one token and turns them in up to
 * ROPE_HEADS heads, so each angle's sine and cosine serve several heads. ---- */
#define ROPE_HEADS 8
__global__ void rope_kernel(uint16_t *__restrict__ x, const int32_t *__restrict__ pos,
                            const float *__restrict__ inv_freq, int H, int D, int row_stride,
                            size_t nwork)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nwork) return;
    int per_tok = D / 16; /* groups of 8 pairs */
    int hgroups = (H + ROPE_HEADS - 1) / ROPE_HEADS;
    int g = (int)(i % per_tok);
    int hg = (int)((i / per_tok) % hgroups);
    size_t m = i / per_tok / hgroups;
    int half = D / 2;
    float p = (float)pos[m];
    float sn[8], cs[8];
#pragma unroll
    for (int e = 0; e < 8; e++) sincosf(__fmul_rn(p, inv_freq[8 * g + e]), &sn[e], &cs[e]);
    uint16_t *row = x + m * row_stride;
    int hend = min(H, (hg + 1) * ROPE_HEADS);
    for (int h0 = hg * ROPE_HEADS; h0 < hend; h0 += 4) {
        uint4 lo[4], hi[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (h0 + k < hend) {
                lo[k] = *((const uint4 *)(row + (size_t)(h0 + k) * D) + g);
                hi[k] = *((const uint4 *)(row + (size_t)(h0 + k) * D + half) + g);
            }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (h0 + k >= hend) break;
            uint16_t *pl = (uint16_t *)&lo[k], *ph = (uint16_t *)&hi[k];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float a = bf(pl[e]), b = bf(ph[e]);
                pl[e] = to_bf(__fsub_rn(__fmul_rn(a, cs[e]), __fmul_rn(b, sn[e])));
                ph[e] = to_bf(__fadd_rn(__fmul_rn(a, sn[e]), __fmul_rn(b, cs[e])));
            }
            *((uint4 *)(row + (size_t)(h0 + k) * D) + g) = lo[k];
            *((uint4 *)(row + (size_t)(h0 + k) * D + half) + g) = hi[k];
        }
    }
}

extern "C" int invar_cuda_rope(invar_cuda_ctx *ctx, uint16_t *x, const int32_t *pos,
                               const float *inv_freq, int M, int H, int D, int row_stride)
{
    if (M < 0 || H <= 0 || D <= 0 || D % 16 || row_stride % 8 || row_stride < H * D)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "rope: bad shape H=%d D=%d", H, D);
    size_t nwork = (size_t)M * ((H + ROPE_HEADS - 1) / ROPE_HEADS) * (D / 16);
    if (!nwork) return 0;
    rope_kernel<<<(unsigned)((nwork + 127) / 128), 128, 0, ctx->stream>>>(x, pos, inv_freq, H, D,
                                                                         row_stride, nwork);
    return invar_cuda_check(ctx, cudaGetLastError(), "rope launch");
}

/* ---- embedding gather: 4 x 16 bytes per thread, loads before stores ---- */
__global__ void embed_kernel(const uint16_t *__restrict__ table, const int32_t *__restrict__ ids,
                             uint16_t *__restrict__ out, int D, int V, size_t nwork)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nwork) return;
    int per_row = D / 32; /* 4 vectors of 8 per thread */
    size_t m = i / per_row;
    int v0 = (int)(i % per_row);
    int id = ids[m];
    bool ok = id >= 0 && id < V;
    const uint4 *src = (const uint4 *)(table + (size_t)(ok ? id : 0) * D);
    uint4 val[4];
#pragma unroll
    for (int k = 0; k < 4; k++) val[k] = ok ? __ldg(src + v0 + k * per_row) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < 4; k++) __stcs((uint4 *)(out + m * D) + v0 + k * per_row, val[k]);
}

extern "C" int invar_cuda_embed(invar_cuda_ctx *ctx, const uint16_t *table, const int32_t *ids,
                                uint16_t *out, int M, int D, int V)
{
    if (M < 0 || D <= 0 || D % 32) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "embed: bad D=%d", D);
    size_t nwork = (size_t)M * D / 32;
    if (!nwork) return 0;
    embed_kernel<<<(unsigned)((nwork + 255) / 256), 256, 0, ctx->stream>>>(table, ids, out, D, V, nwork);
    return invar_cuda_check(ctx, cudaGetLastError(), "embed launch");
}

/* ---- log-softmax over the vocabulary ----
 * A persistent grid (two CTAs per SM) walks the rows; each row is read twice (statistics,
 * then output): 513 KB rows do not fit on chip. */
#define VOCAB_UNROLL 4

static __device__ struct ms row_ms(const float *x, int V, float *sh)
{
    struct ms t = {-INFINITY, 0.0f};
    int nv = V / 4;
    for (int v0 = threadIdx.x; v0 < nv; v0 += VOCAB_THREADS * VOCAB_UNROLL) {
        float4 a[VOCAB_UNROLL];
#pragma unroll
        for (int k = 0; k < VOCAB_UNROLL; k++)
            if (v0 + k * VOCAB_THREADS < nv) a[k] = __ldg((const float4 *)x + v0 + k * VOCAB_THREADS);
#pragma unroll
        for (int k = 0; k < VOCAB_UNROLL; k++)
            if (v0 + k * VOCAB_THREADS < nv) {
                t = ms_add(t, a[k].x);
                t = ms_add(t, a[k].y);
                t = ms_add(t, a[k].z);
                t = ms_add(t, a[k].w);
            }
    }
    return block_ms(t, sh);
}

__global__ void __launch_bounds__(VOCAB_THREADS)
log_softmax_kernel(const float *__restrict__ logits, float *__restrict__ logp, int M, int V)
{
    __shared__ float sh[66];
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const float *x = logits + (size_t)row * V;
        struct ms t = row_ms(x, V, sh);
        float lse = __fadd_rn(t.m, logf(t.s));
        int nv = V / 4;
        for (int v0 = threadIdx.x; v0 < nv; v0 += VOCAB_THREADS * VOCAB_UNROLL) {
            float4 a[VOCAB_UNROLL];
#pragma unroll
            for (int k = 0; k < VOCAB_UNROLL; k++)
                if (v0 + k * VOCAB_THREADS < nv) a[k] = __ldcs((const float4 *)x + v0 + k * VOCAB_THREADS);
#pragma unroll
            for (int k = 0; k < VOCAB_UNROLL; k++)
                if (v0 + k * VOCAB_THREADS < nv) {
                    a[k].x = __fsub_rn(a[k].x, lse);
                    a[k].y = __fsub_rn(a[k].y, lse);
                    a[k].z = __fsub_rn(a[k].z, lse);
                    a[k].w = __fsub_rn(a[k].w, lse);
                    __stcs((float4 *)(logp + (size_t)row * V) + v0 + k * VOCAB_THREADS, a[k]);
                }
        }
    }
}

extern "C" int invar_cuda_log_softmax(invar_cuda_ctx *ctx, const float *logits, float *logp, int M, int V)
{
    if (M < 0 || V <= 0 || V % 4) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "log_softmax: bad V=%d", V);
    if (M == 0) return 0;
    int grid = M < 2 * ctx->sm_count ? M : 2 * ctx->sm_count;
    log_softmax_kernel<<<grid, VOCAB_THREADS, 0, ctx->stream>>>(logits, logp, M, V);
    return invar_cuda_check(ctx, cudaGetLastError(), "log_softmax launch");
}

/* ---- row statistics for the engine's sampler ----
 * Per row of fp32 logits (row stride ld, V <= ld columns used): the log-sum-exp (the same
 * (max, sum) pass and tree as log-softmax), the argmax (lowest id among maxima), and the
 * logprob of a token: tok_in[row], or the argmax when tok_in is NULL. Every logprob the
 * engine reports on the GPU is logit - this lse, one fp32 subtraction. */
__global__ void __launch_bounds__(VOCAB_THREADS)
row_stats_kernel(const float *__restrict__ logits, int ld, int V, int M, const int32_t *__restrict__ tok_in,
                 int32_t *__restrict__ argmax, float *__restrict__ lse_out, float *__restrict__ logprob)
{
    __shared__ float sh[66];
    __shared__ int best;
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const float *x = logits + (size_t)row * ld;
        struct ms t = {-INFINITY, 0.0f};
        int arg = 0x7fffffff;
        for (int v = threadIdx.x; v < V; v += VOCAB_THREADS) { /* ascending per thread: first max kept */
            float xv = __ldg(x + v);
            if (xv > t.m) arg = v;
            t = ms_add(t, xv);
        }
        float my_m = t.m;
        struct ms g = block_ms(t, sh);
        if (threadIdx.x == 0) best = 0x7fffffff;
        __syncthreads();
        if (my_m == g.m) atomicMin(&best, arg);
        __syncthreads();
        if (threadIdx.x == 0) {
            float lse = __fadd_rn(g.m, logf(g.s));
            int tok = tok_in ? tok_in[row] : best;
            if (argmax) argmax[row] = best;
            if (lse_out) lse_out[row] = lse;
            if (logprob) logprob[row] = __fsub_rn(x[tok], lse);
        }
        __syncthreads();
    }
}

extern "C" int invar_cuda_row_stats(invar_cuda_ctx *ctx, const float *logits, int ld, int V, int M,
                                    const int32_t *tok_in, int32_t *argmax, float *lse, float *logprob)
{
    if (M < 0 || V <= 0 || ld < V) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "row_stats: bad V=%d ld=%d", V, ld);
    if (M == 0) return 0;
    int grid = M < 2 * ctx->sm_count ? M : 2 * ctx->sm_count;
    row_stats_kernel<<<grid, VOCAB_THREADS, 0, ctx->stream>>>(logits, ld, V, M, tok_in, argmax, lse, logprob);
    return invar_cuda_check(ctx, cudaGetLastError(), "row_stats launch");
}
