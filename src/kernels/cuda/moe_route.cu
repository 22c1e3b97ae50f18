/* Mixture of experts on the device: routing and grouping, so a routed layer needs no host
 * round trip (and a decode step can be a CUDA graph). The same semantics as the CPU's
 * model/moe.c, each step a function of the token's own row or of exact integer counts:
 *   route   one warp per token: top-k of the router's fp32 logits (ties: the lower id),
 *           deepseek2's softmax / sigmoid scores, score-correction bias, group-limited
 *           selection, normalisation and scale; qwen3moe's softmax over all or the chosen;
 *   count   one CTA per expert: its tokens in token order (a block scan of flags), so a
 *           pair's place among the expert's rows is the number of earlier tokens routed
 *           there, never an arrival order;
 *   plan    exclusive scans of the counts: each expert's first sorted row, and the grouped
 *           GEMM's work list (one entry per BM rows of an expert);
 *   gather  each (token, rank) pair's input row to its sorted row. */
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_internal.h"

#define ROUTE_MAX_E 256 /* experts a device-routed layer may have (DeepSeek-V3: 256) */
#define ROUTE_WORDS (ROUTE_MAX_E / 32)

static __device__ __forceinline__ bool is_taken(const uint32_t *t, int e) { return t[e >> 5] >> (e & 31) & 1u; }
static __device__ __forceinline__ void take(uint32_t *t, int e) { t[e >> 5] |= 1u << (e & 31); }

/* The best free entry of v[0..n) (ties: lower index; NaN never beats a number). */
static __device__ int best_free(const float *v, int n, const uint32_t *taken)
{
    int best = -1;
    for (int e = 0; e < n; e++)
        if (!is_taken(taken, e) && (best < 0 || v[e] > v[best] || (v[best] != v[best] && v[e] == v[e]))) best = e;
    return best;
}

#define ROUTE_WARPS 4                 /* tokens per routing CTA: one warp each */
#define ROUTE_PER_LANE (ROUTE_MAX_E / 32)

/* best_free's order as a strict total order on candidates (value, id): a number beats NaN,
 * a larger number beats a smaller, else the lower id. The warp's best is unique, so the
 * shuffle tree's shape cannot change it. id < 0: no candidate. */
static __device__ __forceinline__ bool beats(float va, int ia, float vb, int ib)
{
    if (ia < 0 || ib < 0) return ib < 0 && ia >= 0;
    const bool na = va != va, nb = vb != vb;
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return ia < ib;
}

/* The best free expert of the token (lane holds experts lane + 32 j); -1 if none is free. */
static __device__ int warp_best(const float *v, const bool *fr, int E, int lane)
{
    float bv = 0.0f;
    int bi = -1;
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++) {
        const int e = lane + 32 * j;
        if (e < E && fr[j] && beats(v[j], e, bv, bi)) bv = v[j], bi = e;
    }
    for (int o = 16; o; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (beats(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    return bi;
}

/* Expert e's value of the lane-distributed array v (every lane gets it). */
static __device__ __forceinline__ float lane_value(const float *v, int e)
{
    float x = 0.0f;
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++) {
        const float y = __shfl_sync(0xffffffffu, v[j], e & 31);
        if (j == e >> 5) x = y;
    }
    return x;
}

static __device__ __forceinline__ void drop(bool *fr, int e, int lane)
{
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++)
        if (lane + 32 * j == e) fr[j] = false;
}

/* The max the CPU's scan `m = v[first]; m = v[e] > m ? v[e] : m` finds: NaN if v[first] is
 * NaN (nothing beats it), else the largest number (exact in any order). */
static __device__ float scan_max(const float *v, int E, float first)
{
    float m = first;
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++)
        if (threadIdx.x % 32 + 32 * j < E) m = fmaxf(m, v[j]);
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return first != first ? first : m;
}

/* sum over e < E of buf[e] in id order (one lane's chain; every lane computes the same). */
static __device__ float id_order_sum(const float *buf, int E)
{
    float s = 0.0f;
    for (int e = 0; e < E; e++) s = __fadd_rn(s, buf[e]);
    return s;
}

/* One warp per token: the CPU's route_token / route_token_deepseek (model/moe.c) with the
 * expert loops spread over the lanes, every selection the unique best of beats' order and
 * every sum a chain in the CPU's order. */
__global__ void __launch_bounds__(32 * ROUTE_WARPS)
moe_route_kernel(const float *__restrict__ logits, int ld, const float *__restrict__ bias, invar_cuda_moe_cfg cf,
                 int T, int32_t *__restrict__ sel, float *__restrict__ wts)
{
    __shared__ float sbuf[ROUTE_WARPS][ROUTE_MAX_E];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, t = blockIdx.x * ROUTE_WARPS + wi;
    if (t >= T) return; /* the whole warp */
    const int E = cf.n_expert, k = cf.k;
    float *buf = sbuf[wi];
    const float *lrow = logits + (size_t)t * ld;
    float l[ROUTE_PER_LANE], p[ROUTE_PER_LANE];
    bool fr[ROUTE_PER_LANE];
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++) {
        const int e = lane + 32 * j;
        l[j] = e < E ? lrow[e] : 0.0f;
        fr[j] = e < E;
    }
    int32_t *s = sel + (size_t)t * k;
    float *w = wts + (size_t)t * k;
    if (!cf.deepseek) { /* qwen3moe: top-k by logit (a NaN at the first free id keeps it), softmax */
        int chosen[64];
        for (int r = 0; r < k; r++) {
            int first = E;
#pragma unroll
            for (int j = 0; j < ROUTE_PER_LANE; j++)
                if (fr[j] && lane + 32 * j < first) first = lane + 32 * j;
            for (int o = 16; o; o >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
            const float lf = lane_value(l, first);
            const int e = lf != lf ? first : warp_best(l, fr, E, lane);
            drop(fr, e, lane);
            chosen[r] = e;
        }
        const float max = scan_max(l, E, lane_value(l, chosen[0]));
        float sum = 0.0f, wr[64];
        for (int r = 0; r < k; r++) {
            wr[r] = expf(__fsub_rn(lane_value(l, chosen[r]), max));
            if (cf.normalise) sum = __fadd_rn(sum, wr[r]);
        }
        if (!cf.normalise) {
#pragma unroll
            for (int j = 0; j < ROUTE_PER_LANE; j++)
                if (lane + 32 * j < E) buf[lane + 32 * j] = expf(__fsub_rn(l[j], max));
            __syncwarp();
            sum = id_order_sum(buf, E);
        }
        if (lane == 0)
            for (int r = 0; r < k; r++) {
                s[r] = chosen[r];
                w[r] = __fdiv_rn(wr[r], sum);
            }
        return;
    }
    if (cf.sigmoid) {
#pragma unroll
        for (int j = 0; j < ROUTE_PER_LANE; j++) p[j] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-l[j])));
    } else {
        const float max = scan_max(l, E, lane_value(l, 0));
#pragma unroll
        for (int j = 0; j < ROUTE_PER_LANE; j++) {
            p[j] = expf(__fsub_rn(l[j], max));
            if (lane + 32 * j < E) buf[lane + 32 * j] = p[j];
        }
        __syncwarp();
        const float sum = id_order_sum(buf, E);
#pragma unroll
        for (int j = 0; j < ROUTE_PER_LANE; j++) p[j] = __fdiv_rn(p[j], sum);
    }
    float ss[ROUTE_PER_LANE];
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++) {
        const int e = lane + 32 * j;
        ss[j] = bias && e < E ? __fadd_rn(p[j], bias[e]) : p[j];
    }
    const int G = cf.n_group;
    if (G > 1) { /* group scores in one lane, the CPU's scans; the groups left out are taken */
        __syncwarp();
#pragma unroll
        for (int j = 0; j < ROUTE_PER_LANE; j++)
            if (lane + 32 * j < E) buf[lane + 32 * j] = ss[j];
        __syncwarp();
        const int per = E / G;
        uint32_t gt[ROUTE_WORDS] = {0};
        if (lane == 0) {
            float gs[ROUTE_MAX_E];
            for (int g = 0; g < G; g++) {
                uint32_t two[ROUTE_WORDS] = {0};
                const int a = best_free(buf + g * per, per, two);
                take(two, a);
                gs[g] = buf[g * per + a];
                if (!cf.group_max) gs[g] = __fadd_rn(gs[g], buf[g * per + best_free(buf + g * per, per, two)]);
            }
            for (int r = 0; r < cf.n_group_used; r++) take(gt, best_free(gs, G, gt));
        }
#pragma unroll
        for (int i = 0; i < ROUTE_WORDS; i++) gt[i] = __shfl_sync(0xffffffffu, gt[i], 0);
#pragma unroll
        for (int j = 0; j < ROUTE_PER_LANE; j++) {
            const int e = lane + 32 * j;
            if (e < E && !is_taken(gt, e / per)) fr[j] = false;
        }
    }
    float sum = 0.0f, wr[64];
    int chosen[64];
    for (int r = 0; r < k; r++) {
        const int e = warp_best(ss, fr, E, lane);
        drop(fr, e, lane);
        chosen[r] = e;
        wr[r] = lane_value(p, e);
        sum = __fadd_rn(sum, wr[r]);
    }
    if (lane == 0)
        for (int r = 0; r < k; r++) {
            s[r] = chosen[r];
            w[r] = __fmul_rn(cf.normalise ? __fdiv_rn(wr[r], sum) : wr[r], cf.scale);
        }
}

/* Expert blockIdx.x's tokens in token order: rel[t k + r] = its place among them. */
__global__ void __launch_bounds__(256) moe_count_kernel(const int32_t *__restrict__ sel, int k, int T,
                                                        int32_t *__restrict__ rel, int32_t *__restrict__ count,
                                                        unsigned long long *__restrict__ seen)
{
    __shared__ int wc[8];
    const int e = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int base = 0;
    for (int t0 = 0; t0 < T; t0 += 256) {
        const int t = t0 + tid;
        int hit = -1;
        if (t < T)
            for (int r = 0; r < k; r++)
                if (sel[(size_t)t * k + r] == e) hit = r;
        const unsigned m = __ballot_sync(0xffffffffu, hit >= 0);
        if (lane == 0) wc[warp] = __popc(m);
        __syncthreads();
        int before = 0, all = 0;
        for (int w = 0; w < 8; w++) {
            before += w < warp ? wc[w] : 0;
            all += wc[w];
        }
        if (hit >= 0) rel[(size_t)t * k + hit] = base + before + __popc(m & ((1u << lane) - 1u));
        base += all;
        __syncthreads();
    }
    if (tid == 0) {
        count[e] = base;
        if (seen && base) seen[e] |= 1ull << (base >= 64 ? 63 : base - 1);
    }
}

/* One CTA of ROUTE_MAX_E threads: start[e] (first sorted row of expert e, start[E] = T k) and
 * the work list: for expert e, entries {start + i bm, start + count, e, 0}, i < ceil(count / bm),
 * experts in id order; *n_entries their number. */
__global__ void __launch_bounds__(ROUTE_MAX_E) moe_plan_kernel(const int32_t *__restrict__ count, int E, int bm,
                                                               int32_t *__restrict__ start, int4 *__restrict__ entries,
                                                               int32_t *__restrict__ n_entries)
{
    __shared__ int sc[ROUTE_MAX_E], st[ROUTE_MAX_E];
    const int e = threadIdx.x;
    const int c = e < E ? count[e] : 0, tiles = (c + bm - 1) / bm;
    sc[e] = c;
    st[e] = tiles;
    __syncthreads();
    for (int off = 1; off < ROUTE_MAX_E; off <<= 1) { /* inclusive scans (integers: exact) */
        const int a = e >= off ? sc[e - off] : 0, b = e >= off ? st[e - off] : 0;
        __syncthreads();
        sc[e] += a;
        st[e] += b;
        __syncthreads();
    }
    const int s0 = sc[e] - c, t0 = st[e] - tiles;
    if (e < E) start[e] = s0;
    if (e == E - 1) {
        start[E] = sc[e];
        *n_entries = st[e];
    }
    for (int i = 0; i < tiles; i++) entries[t0 + i] = make_int4(s0 + i * bm, s0 + c, e, 0);
}

/* Pair (t, r): its sorted row slot[t k + r] = start[expert] + rel, and that row of xg = xn[t]. */
__global__ void moe_gather_kernel(const uint16_t *__restrict__ xn, const int32_t *__restrict__ sel,
                                  const int32_t *__restrict__ rel, const int32_t *__restrict__ start, int k, int D,
                                  int32_t *__restrict__ slot, uint16_t *__restrict__ xg)
{
    const int i = blockIdx.x, t = i / k;
    const int sl = start[sel[i]] + rel[i];
    if (threadIdx.x == 0) slot[i] = sl;
    const uint4 *src = (const uint4 *)(xn + (size_t)t * D);
    uint4 *dst = (uint4 *)(xg + (size_t)sl * D);
    for (int j = threadIdx.x; j < D / 8; j += blockDim.x) dst[j] = src[j];
}

extern "C" int invar_cuda_moe_route(invar_cuda_ctx *ctx, const float *logits, int ld, const float *bias,
                                    const invar_cuda_moe_cfg *cf, const uint16_t *xn, int T, int D, int bm,
                                    const invar_cuda_moe_bufs *b, uint16_t *xg)
{
    const int E = cf->n_expert, k = cf->k;
    if (T < 0 || E <= 0 || E > ROUTE_MAX_E || k <= 0 || k > E || k > 64 || ld < E || D <= 0 || D % 8 || bm <= 0 ||
        (cf->deepseek && cf->n_group > 1 && (E % cf->n_group || cf->n_group_used <= 0 || cf->n_group_used > cf->n_group)))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "moe_route: bad configuration (%d experts, %d used)", E, k);
    if (T == 0) return 0;
    cudaStream_t st = ctx->stream;
    moe_route_kernel<<<(T + ROUTE_WARPS - 1) / ROUTE_WARPS, 32 * ROUTE_WARPS, 0, st>>>(logits, ld, bias, *cf, T,
                                                                                  b->sel, b->wts);
    moe_count_kernel<<<E, 256, 0, st>>>(b->sel, k, T, b->rel, b->count, b->seen);
    moe_plan_kernel<<<1, ROUTE_MAX_E, 0, st>>>(b->count, E, bm, b->start, (int4 *)b->entries, b->n_entries);
    moe_gather_kernel<<<T * k, 128, 0, st>>>(xn, b->sel, b->rel, b->start, k, D, b->slot, xg);
    return invar_cuda_check(ctx, cudaGetLastError(), "moe_route launch");
}

extern "C" int invar_cuda_moe_max_entries(int T, int k, int E, int bm)
{
    const int tk = T * k;
    return tk / bm + (tk < E ? tk : E);
}
