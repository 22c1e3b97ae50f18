/* Row kernels. Each row is reduced by one CTA of a fixed size with a fixed tree, and
 * elementwise kernels touch each element once, so no result depends on the number of rows or
 * on a row's place in the batch. Arithmetic that a CPU or another kernel must match is written
 * with explicit rounding intrinsics (no contraction into FMA left to the compiler). */
#include <cuda_bf16.h>
#include <math.h>
#include "cuda_internal.h"

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
static __device__ __forceinline__ struct ms ms_add(struct ms a, float x)
{
    struct ms b = {x, 1.0f};
    return ms_merge(a, b);
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
               const uint16_t *__restrict__ w, uint16_t *__restrict__ y, int D, float eps)
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
    ss = block_sum(ss, sh);
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
    rmsnorm_kernel<<<M, NORM_THREADS, 0, ctx->stream>>>(x, residual, w, y, D, eps);
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

/* ---- RoPE (rotate-half), 8 pairs per thread ---- */
__global__ void rope_kernel(uint16_t *__restrict__ x, const int32_t *__restrict__ pos,
                            const float *__restrict__ inv_freq, int H, int D, int row_stride,
                            size_t nwork)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nwork) return;
    int per_head = D / 16; /* groups of 8 pairs */
    int g = (int)(i % per_head);
    size_t mh = i / per_head;
    int h = (int)(mh % H);
    size_t m = mh / H;
    uint16_t *base = x + m * row_stride + (size_t)h * D;
    int half = D / 2;
    uint4 lo = *((uint4 *)(base) + g), hi = *((uint4 *)(base + half) + g);
    uint16_t *pl = (uint16_t *)&lo, *ph = (uint16_t *)&hi;
    float p = (float)pos[m];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float ang = __fmul_rn(p, inv_freq[8 * g + e]);
        float s, c;
        sincosf(ang, &s, &c);
        float a = bf(pl[e]), b = bf(ph[e]);
        pl[e] = to_bf(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        ph[e] = to_bf(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
    }
    *((uint4 *)(base) + g) = lo;
    *((uint4 *)(base + half) + g) = hi;
}

extern "C" int invar_cuda_rope(invar_cuda_ctx *ctx, uint16_t *x, const int32_t *pos,
                               const float *inv_freq, int M, int H, int D, int row_stride)
{
    if (M < 0 || H <= 0 || D <= 0 || D % 16 || row_stride % 8 || row_stride < H * D)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "rope: bad shape H=%d D=%d", H, D);
    size_t nwork = (size_t)M * H * (D / 16);
    if (!nwork) return 0;
    rope_kernel<<<(unsigned)((nwork + 255) / 256), 256, 0, ctx->stream>>>(x, pos, inv_freq, H, D,
                                                                         row_stride, nwork);
    return invar_cuda_check(ctx, cudaGetLastError(), "rope launch");
}

/* ---- embedding gather ---- */
__global__ void embed_kernel(const uint16_t *__restrict__ table, const int32_t *__restrict__ ids,
                             uint16_t *__restrict__ out, int D, int V, size_t nvec)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    size_t dv = (size_t)D / 8;
    size_t m = i / dv, v = i % dv;
    int id = ids[m];
    uint4 z = make_uint4(0, 0, 0, 0);
    uint4 val = (id >= 0 && id < V) ? __ldg((const uint4 *)(table + (size_t)id * D) + v) : z;
    __stcs((uint4 *)(out + m * D) + v, val);
}

extern "C" int invar_cuda_embed(invar_cuda_ctx *ctx, const uint16_t *table, const int32_t *ids,
                                uint16_t *out, int M, int D, int V)
{
    if (M < 0 || D <= 0 || D % 8) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "embed: bad D=%d", D);
    size_t nvec = (size_t)M * D / 8;
    if (!nvec) return 0;
    embed_kernel<<<(unsigned)((nvec + 255) / 256), 256, 0, ctx->stream>>>(table, ids, out, D, V, nvec);
    return invar_cuda_check(ctx, cudaGetLastError(), "embed launch");
}

/* ---- log-softmax over the vocabulary ---- */
static __device__ struct ms row_ms(const float *x, int V, float *sh)
{
    struct ms t = {-INFINITY, 0.0f};
    int nv = V / 4;
    for (int v = threadIdx.x; v < nv; v += VOCAB_THREADS) {
        float4 a = __ldg((const float4 *)x + v);
        t = ms_add(t, a.x);
        t = ms_add(t, a.y);
        t = ms_add(t, a.z);
        t = ms_add(t, a.w);
    }
    return block_ms(t, sh);
}

__global__ void __launch_bounds__(VOCAB_THREADS)
log_softmax_kernel(const float *__restrict__ logits, float *__restrict__ logp, int V)
{
    __shared__ float sh[66];
    size_t row = blockIdx.x;
    const float *x = logits + row * V;
    struct ms t = row_ms(x, V, sh);
    float lse = __fadd_rn(t.m, logf(t.s));
    int nv = V / 4;
    for (int v = threadIdx.x; v < nv; v += VOCAB_THREADS) {
        float4 a = __ldg((const float4 *)x + v);
        a.x = __fsub_rn(a.x, lse);
        a.y = __fsub_rn(a.y, lse);
        a.z = __fsub_rn(a.z, lse);
        a.w = __fsub_rn(a.w, lse);
        __stcs((float4 *)(logp + row * V) + v, a);
    }
}

extern "C" int invar_cuda_log_softmax(invar_cuda_ctx *ctx, const float *logits, float *logp, int M, int V)
{
    if (M < 0 || V <= 0 || V % 4) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "log_softmax: bad V=%d", V);
    if (M == 0) return 0;
    log_softmax_kernel<<<M, VOCAB_THREADS, 0, ctx->stream>>>(logits, logp, V);
    return invar_cuda_check(ctx, cudaGetLastError(), "log_softmax launch");
}

/* ---- sampling ----
 * Inverse-CDF sampling over a fixed order of the vocabulary: thread-major (thread t owns
 * float4 slots t, t + 1024, ...), which is a fixed permutation, so the draw is exactly
 * softmax(logits / T) and depends only on the row and u. */
__global__ void __launch_bounds__(VOCAB_THREADS)
sample_kernel(const float *__restrict__ logits, const float *__restrict__ temperature,
              const float *__restrict__ u, int32_t *__restrict__ token, float *__restrict__ logprob,
              int V)
{
    __shared__ float sh[66];
    __shared__ float prefix[VOCAB_THREADS];
    __shared__ int pick;
    size_t row = blockIdx.x;
    const float *x = logits + row * V;
    int nv = V / 4;
    struct ms t = row_ms(x, V, sh);
    float lse = __fadd_rn(t.m, logf(t.s));
    float T = temperature[row];
    int tok;
    if (!(T > 0.0f)) {
        /* Greedy: the lowest index holding the maximum. */
        int best = 0x7fffffff;
        for (int v = threadIdx.x; v < nv; v += VOCAB_THREADS) {
            float4 a = __ldg((const float4 *)x + v);
            float e[4] = {a.x, a.y, a.z, a.w};
            for (int k = 0; k < 4; k++)
                if (e[k] == t.m && 4 * v + k < best) best = 4 * v + k;
        }
        for (int o = 16; o; o >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, o));
        if (threadIdx.x == 0) pick = 0x7fffffff;
        __syncthreads();
        if ((threadIdx.x & 31) == 0) atomicMin(&pick, best);
        __syncthreads();
        tok = pick;
    } else {
        float invT = 1.0f / T;
        float s = 0.0f;
        for (int v = threadIdx.x; v < nv; v += VOCAB_THREADS) {
            float4 a = __ldg((const float4 *)x + v);
            s = __fadd_rn(s, expf(__fmul_rn(__fsub_rn(a.x, t.m), invT)));
            s = __fadd_rn(s, expf(__fmul_rn(__fsub_rn(a.y, t.m), invT)));
            s = __fadd_rn(s, expf(__fmul_rn(__fsub_rn(a.z, t.m), invT)));
            s = __fadd_rn(s, expf(__fmul_rn(__fsub_rn(a.w, t.m), invT)));
        }
        prefix[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            /* Sequential exclusive scan over thread sums: fixed order, once per row. */
            float run = 0.0f;
            for (int i = 0; i < VOCAB_THREADS; i++) {
                float v = prefix[i];
                prefix[i] = run;
                run = __fadd_rn(run, v);
            }
            sh[0] = run;
            pick = -1;
        }
        __syncthreads();
        float total = sh[0];
        float thr = __fmul_rn(u[row], total);
        float lo = prefix[threadIdx.x];
        float hi = threadIdx.x + 1 < VOCAB_THREADS ? prefix[threadIdx.x + 1] : total;
        if (thr >= lo && thr < hi) {
            float run = lo;
            int found = -1, last_pos = -1;
            for (int v = threadIdx.x; v < nv && found < 0; v += VOCAB_THREADS) {
                float4 a = __ldg((const float4 *)x + v);
                float e[4] = {a.x, a.y, a.z, a.w};
                for (int k = 0; k < 4 && found < 0; k++) {
                    float p = expf(__fmul_rn(__fsub_rn(e[k], t.m), invT));
                    run = __fadd_rn(run, p);
                    if (p > 0.0f) last_pos = 4 * v + k;
                    if (thr < run) found = 4 * v + k;
                }
            }
            if (found < 0) found = last_pos; /* rounding left thr at the segment's end */
            atomicMax(&pick, found);
        }
        __syncthreads();
        tok = pick;
        if (tok < 0) { /* thr beyond the total by rounding: take the top token */
            __syncthreads();
            if (threadIdx.x == 0) pick = 0x7fffffff;
            __syncthreads();
            for (int v = threadIdx.x; v < nv; v += VOCAB_THREADS) {
                float4 a = __ldg((const float4 *)x + v);
                float e[4] = {a.x, a.y, a.z, a.w};
                for (int k = 0; k < 4; k++)
                    if (e[k] == t.m) atomicMin(&pick, 4 * v + k);
            }
            __syncthreads();
            tok = pick;
        }
    }
    if (threadIdx.x == 0) {
        token[row] = tok;
        logprob[row] = __fsub_rn(x[tok], lse);
    }
}

extern "C" int invar_cuda_sample(invar_cuda_ctx *ctx, const float *logits, const float *temperature,
                                 const float *u, int32_t *token, float *logprob, int M, int V)
{
    if (M < 0 || V <= 0 || V % 4) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "sample: bad V=%d", V);
    if (M == 0) return 0;
    sample_kernel<<<M, VOCAB_THREADS, 0, ctx->stream>>>(logits, temperature, u, token, logprob, V);
    return invar_cuda_check(ctx, cudaGetLastError(), "sample launch");
}
