/* The engine's sampler (src/sampling/sampler.c) on the device, bit for bit.
 *
 * One CTA per row performs the host sampler's operations in the host sampler's order: the
 * weights w = invar_exp((logit - max) / T) with the CPU's exp (mul and add only, explicit
 * rounding: no FMA contraction), every double sum sequential in the same order (thread 0
 * over values staged in shared memory), the candidate set {w >= cut} collected in id order
 * with the same cut schedule, sorted by (logit desc, id asc) (a total order: any sort gives
 * the same list), and the draw from the same counter-based u(seed, position). So a row's
 * token, logprob and alternatives are those sampler_choose_lse would give for the same
 * logits row and lse, whatever else is in the batch. A candidate set larger than
 * INVAR_CUDA_SAMPLE_CAP is reported (status 1) for the caller to sample on the host. */
#include <math.h>
#include "kernels/cuda/cuda_internal.h"

#define S_THREADS 1024
#define CAP INVAR_CUDA_SAMPLE_CAP
#define STAGE 4096 /* values staged per sequential pass */
static_assert((CAP & (CAP - 1)) == 0, "the bitonic sort takes a power of two");

/* ---- the host's exp, operation for operation (vec16.h invar_exp16, one lane) ---- */
static __device__ __forceinline__ float host_exp(float x)
{
    const float lo = -87.33654475f, hi = 88.72283906f, magic = 12582912.0f;
    float xc = x < lo ? 0.0f : x;
    xc = xc > hi ? hi : xc;
    xc = xc == xc ? xc : 0.0f;
    const float t = __fadd_rn(__fmul_rn(xc, 1.44269504088896341f), magic);
    const float n = __fsub_rn(t, magic);
    const int ni = __float_as_int(t) - __float_as_int(magic);
    float r = __fsub_rn(xc, __fmul_rn(n, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
    float p = __fadd_rn(__fmul_rn(r, 1.9875691500e-4f), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    const float y = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
    const int pos = ni > 0 ? -1 : 0;
    const float e1 = __int_as_float((int)((unsigned)(ni + pos + 127) << 23));
    const float e2 = __int_as_float(0x3f800000 + (pos & 0x00800000));
    float res = __fmul_rn(__fmul_rn(y, e1), e2);
    res = x < lo ? 0.0f : res;
    res = x > hi ? INFINITY : res;
    return x == x ? res : x;
}

/* ---- the host's counter-based uniform (sampling/rng.c) ---- */
static __device__ __forceinline__ unsigned long long mix64(unsigned long long z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static __device__ __forceinline__ double rng_uniform(unsigned long long seed, unsigned long long position)
{
    unsigned long long h = mix64(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ (position * 0xd1b54a32d192ed03ULL + 1));
    return __dmul_rn((double)(h >> 11), 0x1.0p-53);
}

/* a before b in the order (logit desc, id asc) */
static __device__ __forceinline__ bool before(float xa, int ia, float xb, int ib)
{
    return xa > xb || (xa == xb && ia < ib);
}

struct best { float x; int i; };

/* The first element in (logit desc, id asc) order that comes strictly after (px, pi) (pi < 0:
 * no bound), over the row; every thread gets it. */
static __device__ struct best next_best(const float *x, int V, float px, int pi, struct best *sh)
{
    struct best b = {-INFINITY, 0x7fffffff};
    for (int v = threadIdx.x; v < V; v += S_THREADS) {
        float xv = x[v];
        if (pi >= 0 && !before(px, pi, xv, v)) continue;
        if (b.i == 0x7fffffff || before(xv, v, b.x, b.i)) b.x = xv, b.i = v;
    }
    for (int off = 16; off; off >>= 1) {
        float ox = __shfl_xor_sync(0xffffffffu, b.x, off);
        int oi = __shfl_xor_sync(0xffffffffu, b.i, off);
        if (oi != 0x7fffffff && (b.i == 0x7fffffff || before(ox, oi, b.x, b.i))) b.x = ox, b.i = oi;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = b;
    __syncthreads();
    if (threadIdx.x < 32) {
        b = sh[threadIdx.x];
        for (int off = 16; off; off >>= 1) {
            float ox = __shfl_xor_sync(0xffffffffu, b.x, off);
            int oi = __shfl_xor_sync(0xffffffffu, b.i, off);
            if (oi != 0x7fffffff && (b.i == 0x7fffffff || before(ox, oi, b.x, b.i))) b.x = ox, b.i = oi;
        }
        if (threadIdx.x == 0) sh[32] = b;
    }
    __syncthreads();
    b = sh[32];
    __syncthreads();
    return b;
}

/* Sum over i in [0, n) of v(i), in i order, in double: staged through shared memory, added by
 * thread 0 (the result is thread 0's). */
#define SEQ_SUM(result, n, value_of_i)                                                 \
    do {                                                                               \
        double acc_ = 0.0;                                                             \
        for (int base_ = 0; base_ < (n); base_ += STAGE) {                            \
            int len_ = min(STAGE, (n) - base_);                                        \
            for (int j_ = threadIdx.x; j_ < len_; j_ += S_THREADS) {                   \
                int i = base_ + j_;                                                    \
                stage[j_] = (value_of_i);                                              \
            }                                                                          \
            __syncthreads();                                                           \
            if (threadIdx.x == 0)                                                      \
                for (int j_ = 0; j_ < len_; j_++) acc_ = __dadd_rn(acc_, (double)stage[j_]); \
            __syncthreads();                                                           \
        }                                                                              \
        (result) = acc_;                                                               \
    } while (0)

__global__ void __launch_bounds__(S_THREADS)
sample_rows_kernel(const float *__restrict__ logits, int ld, int V, const int32_t *__restrict__ rows,
                   const float *__restrict__ lse, const invar_cuda_sample_params *__restrict__ params,
                   invar_cuda_sample_out *__restrict__ outs, float *__restrict__ work)
{
    extern __shared__ float smem[];
    float *stage = smem;                                  /* [STAGE] */
    int32_t *cid = (int32_t *)(stage + STAGE);            /* [CAP] candidate ids */
    float *ckey = (float *)(cid + CAP);                   /* [CAP] their logits */
    __shared__ struct best bsh[33];
    __shared__ int cnt[S_THREADS];
    __shared__ int s_n, s_tok, s_status;
    __shared__ double s_total, s_mass;
    const int k = blockIdx.x;
    const int row = rows ? rows[k] : k;
    const float *x = logits + (size_t)row * ld;
    float *w = work + (size_t)k * ld;
    const invar_cuda_sample_params P = params[k];
    const float row_lse = lse[row];

    struct best top = next_best(x, V, 0.0f, -1, bsh);     /* the argmax, lowest id on ties */
    if (threadIdx.x == 0) s_status = 0;
    if (P.temperature == 0.0f) {
        if (threadIdx.x == 0) s_tok = top.i;
    } else {
        const float mx = top.x;
        for (int v = threadIdx.x; v < V; v += S_THREADS) w[v] = host_exp(__fdiv_rn(__fsub_rn(x[v], mx), P.temperature));
        __syncthreads();
        double total;
        SEQ_SUM(total, V, w[i]);
        if (threadIdx.x == 0) s_total = total;
        __syncthreads();
        total = s_total;
        const bool truncate = P.top_k > 0 || P.min_p > 0.0f || P.top_p < 1.0f;
        if (!truncate) { /* plain temperature: walk in id order (staged, as the sums) */
            const double u = __dmul_rn(rng_uniform(P.seed, (unsigned long long)P.position), total);
            double cum = 0.0;
            int last = 0;
            if (threadIdx.x == 0) s_tok = -1;
            for (int base = 0; base < V; base += STAGE) {
                const int len = min(STAGE, V - base);
                for (int j = threadIdx.x; j < len; j += S_THREADS) stage[j] = w[base + j];
                __syncthreads();
                if (threadIdx.x == 0)
                    for (int j = 0; j < len; j++) {
                        float wi = stage[j];
                        if (wi <= 0.0f) continue;
                        cum = __dadd_rn(cum, (double)wi);
                        last = base + j;
                        if (u < cum) {
                            s_tok = last;
                            break;
                        }
                    }
                __syncthreads();
                if (s_tok >= 0) break;
            }
            if (threadIdx.x == 0 && s_tok < 0) s_tok = last;
        } else {
            /* Candidate set {w >= c} in id order, the cut lowered until it holds the prefix
             * the truncation needs (the host's schedule). Each thread owns a contiguous run
             * of ids, so a scan of the counts places candidates in id order. */
            const int per = (V + S_THREADS - 1) / S_THREADS, lo = threadIdx.x * per, hi = min(V, lo + per);
            int n = 0;
            double mass = 0.0;
            for (float cut = 0x1p-10f;; cut = __fmul_rn(cut, 0x1p-10f)) {
                const float c = cut > P.min_p ? cut : P.min_p;
                int mine = 0;
                for (int v = lo; v < hi; v++) mine += w[v] >= c;
                cnt[threadIdx.x] = mine;
                __syncthreads();
                if (threadIdx.x == 0) {
                    int acc = 0;
                    for (int t = 0; t < S_THREADS; t++) {
                        int m = cnt[t];
                        cnt[t] = acc;
                        acc += m;
                    }
                    s_n = acc;
                }
                __syncthreads();
                n = s_n;
                if (n > CAP) break; /* too many for shared memory: the host samples this row */
                int at = cnt[threadIdx.x];
                for (int v = lo; v < hi; v++)
                    if (w[v] >= c) cid[at++] = v;
                __syncthreads();
                SEQ_SUM(mass, n, w[cid[i]]);
                if (threadIdx.x == 0) s_mass = mass;
                __syncthreads();
                mass = s_mass;
                if (c == P.min_p || cut == 0.0f) break;
                if (P.top_k > 0 && n >= P.top_k) break;
                if (P.top_k == 0 && P.min_p == 0.0f &&
                    mass >= __dmul_rn(__dmul_rn((double)P.top_p, total), 1.0 + 1e-9))
                    break;
            }
            if (n > CAP) {
                if (threadIdx.x == 0) s_status = 1, s_tok = top.i;
            } else {
                /* Sort (logit desc, id asc): bitonic over the next power of two, padding last. */
                int np = 1;
                while (np < n) np <<= 1;
                for (int i = threadIdx.x; i < np; i += S_THREADS) {
                    if (i < n) ckey[i] = x[cid[i]];
                    else ckey[i] = -INFINITY, cid[i] = 0x7fffffff;
                }
                __syncthreads();
                for (int size = 2; size <= np; size <<= 1)
                    for (int stride = size >> 1; stride > 0; stride >>= 1) {
                        for (int i = threadIdx.x; i < np; i += S_THREADS) {
                            int j = i ^ stride;
                            if (j <= i) continue;
                            bool up = (i & size) == 0;
                            bool pad_i = cid[i] == 0x7fffffff, pad_j = cid[j] == 0x7fffffff;
                            /* padding sorts after every candidate */
                            bool j_first = pad_i ? !pad_j : (!pad_j && before(ckey[j], cid[j], ckey[i], cid[i]));
                            if (up == j_first) {
                                float tk = ckey[i];
                                ckey[i] = ckey[j];
                                ckey[j] = tk;
                                int ti = cid[i];
                                cid[i] = cid[j];
                                cid[j] = ti;
                            }
                        }
                        __syncthreads();
                    }
                /* The sorted candidates' weights, for thread 0's sequential sums. */
                for (int r = threadIdx.x; r < n; r += S_THREADS) ckey[r] = w[cid[r]];
                __syncthreads();
                if (threadIdx.x == 0) {
                    if (P.top_k > 0 && P.top_k < n) n = P.top_k;
                    double kept = total;
                    if (P.top_k > 0 || P.min_p > 0.0f) {
                        kept = 0.0;
                        for (int r = 0; r < n; r++) kept = __dadd_rn(kept, (double)ckey[r]);
                    }
                    double cum = 0.0;
                    int keep = 0;
                    if (P.top_p < 1.0f) {
                        const double target = __dmul_rn((double)P.top_p, kept);
                        while (keep < n) {
                            cum = __dadd_rn(cum, (double)ckey[keep++]);
                            if (cum >= target) break;
                        }
                    } else {
                        keep = n;
                        cum = kept;
                    }
                    const double u = __dmul_rn(rng_uniform(P.seed, (unsigned long long)P.position), cum);
                    double c2 = 0.0;
                    int tok = -1;
                    for (int r = 0; r < keep && tok < 0; r++) {
                        c2 = __dadd_rn(c2, (double)ckey[r]);
                        if (u < c2) tok = cid[r];
                    }
                    s_tok = tok < 0 ? cid[keep - 1] : tok;
                }
            }
        }
    }
    __syncthreads();
    invar_cuda_sample_out *o = outs + k;
    if (threadIdx.x == 0) {
        o->status = s_status;
        o->token = s_tok;
        o->logprob = __fsub_rn(x[s_tok], row_lse);
        o->n_top = P.top_logprobs;
    }
    /* Alternatives: the n best in (logit desc, id asc) order, one after another. */
    struct best prev = top;
    for (int r = 0; r < P.top_logprobs; r++) {
        struct best b = r == 0 ? top : next_best(x, V, prev.x, prev.i, bsh);
        if (threadIdx.x == 0) {
            o->top_ids[r] = b.i;
            o->top_logprobs[r] = __fsub_rn(x[b.i], row_lse);
        }
        prev = b;
    }
}

extern "C" int invar_cuda_sample_rows(invar_cuda_ctx *ctx, const float *logits, int ld, int V, int n,
                                      const int32_t *rows, const float *lse,
                                      const invar_cuda_sample_params *params, invar_cuda_sample_out *out,
                                      float *work)
{
    if (n < 0 || V <= 0 || ld < V) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "sample_rows: bad V=%d ld=%d", V, ld);
    if (n == 0) return 0;
    const size_t smem = sizeof(float) * STAGE + (sizeof(int32_t) + sizeof(float)) * CAP;
    if (invar_cuda_check(ctx,
                         cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem),
                         "sample_rows smem attribute"))
        return INVAR_CUDA_ECUDA;
    sample_rows_kernel<<<n, S_THREADS, smem, ctx->stream>>>(logits, ld, V, rows, lse, params, out, work);
    return invar_cuda_check(ctx, cudaGetLastError(), "sample_rows launch");
}
