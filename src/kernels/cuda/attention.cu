/* Paged, ragged, grouped-query attention with a batch-invariant KV reduction, on tensor
 * cores: wgmma m64n64k16 (attention_wgmma_body.cuh, the default), or the previous mma.sync
 * m16n8k16 kernel (attention_mma_body.cuh, INVAR_CUDA_ATTN=mma); bf16 inputs, fp32
 * accumulation.
 *
 * For a query row (token, head) the keys are cut into splits at absolute positions
 * [S c, S c + S) (S = INVAR_CUDA_KV_SPLIT), and each split into blocks of 64 at absolute
 * positions. A split is
 * reduced block by block in position order (online softmax from a fresh state; positions past
 * the token's or the cache end get weight exactly 0), giving (m_c = max score in log2 units,
 * l_c = sum 2^(s - m_c), o_c = sum 2^(s - m_c) v). Splits are then folded in order c = 0, 1, ...
 * by fold_scales/fold_val, either inside the CTA (one CTA walks all splits of its tokens) or by
 * merge_row over partials that separate CTAs wrote (in the wgmma kernel's last CTA of a tile,
 * or in attn_merge_kernel after the launch): the same functions on the same fp32 values, so
 * the bits do not depend on which path ran, on how many tokens a CTA holds, on
 * where in an MMA tile a row sits, nor on what else is in the batch. Decode runs the same
 * kernel as prefill: its few rows (the query heads of a KV head) padded into a 64-row tile. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/hopper_ptx.cuh"
#include "kernels/cuda/mma_sync_ptx.cuh"
#include "kernels/cuda/wgmma_m64n64k16.cuh"

#define SPLIT INVAR_CUDA_KV_SPLIT
#define PAGE INVAR_CUDA_PAGE
#define KB 64                  /* keys per block: one K and one V tile in shared memory */
#define ATT_MAX_ROWS 128       /* query rows (tokens x heads of one KV head) per CTA */
#define ATT_SMALL_ROWS 16      /* items up to this many rows run on the one-warp variant */
static_assert(ATT_MAX_ROWS % 16 == 0 && ATT_MAX_ROWS / 16 == 8, "the wide variant: 8 warps of 16 rows");
static_assert(ATT_SMALL_ROWS == 16, "the narrow variant: one warp of 16 rows");
/* K/V buffers: the 8-warp variant double-buffers; the one-warp variant keeps one, so that
 * several of its CTAs share an SM and overlap each other's copies. */
#define ATT_STAGES(w) ((w) == 1 ? 1 : 2)
/* Shared memory of a W-warp CTA: Q tile, K and V tiles (bf16), the running outputs (fp32). */
#define ATT_SMEM(w, hd) ((size_t)(16 * (w) + 2 * ATT_STAGES(w) * KB) * (hd) * 2 + (size_t)(32 * (w)) * ((hd) / 2) * 4)
static_assert(SPLIT % KB == 0, "splits are whole blocks: a split's reduction is the same in every item");
/* The wgmma kernel: NWG consumer warpgroups of 64 rows; 1 for items of up to 64 rows
 * (decode: 2 CTAs per SM), 2 for wider ones (ATT_MAX_ROWS); ST copy stages; RUN: room for
 * the running output of whole (unsplit) items. Variants (NWG, ST, RUN): (2, 3, 1) wide,
 * (1, 2, 1) narrow unsplit, (1, 3, 0) narrow split: each at most 114 KB (hd 128) where two
 * CTAs share an SM. */
#define WG_ROWS 64
/* Shared memory: 1 KB alignment slack, Q, ST stages of K and V (bf16), running outputs (fp32). */
#define WG_SMEM(nwg, st, run, hd) \
    (1024 + (size_t)(WG_ROWS * (nwg) + 2 * (st) * KB) * (hd) * 2 + (run) * (size_t)(128 * (nwg)) * ((hd) / 2) * 4)
static_assert(WG_SMEM(1, 2, 1, 128) <= 115 * 1024 && WG_SMEM(1, 3, 0, 128) <= 115 * 1024,
              "two one-warpgroup CTAs per SM (228 KB, 1 KB reserved per CTA)");
/* The split-only narrow variant with a deep ring, one CTA per SM (invar_cuda_testing_attn_
 * decode_ring): 209 KB at hd 128. */
#define WG_DEEP_STAGES 6
static_assert(WG_SMEM(1, WG_DEEP_STAGES, 0, 128) <= 227 * 1024, "the deep ring fits one CTA per SM");
/* The warp-specialised kernel (attention_ws_body.cuh) for items of more than 64 rows: 2
 * consumer warpgroups + a producer warpgroup, WS_STAGES-stage TMA ring, the running outputs,
 * 2 x WS_STAGES mbarriers. One CTA per SM. */
#define WS_STAGES 4
/* attn_decode_ring's value that puts launches of up to 64 rows on this kernel (one consumer
 * warpgroup idle: its fast path only passes the ring's stages on). */
#define WS_DECODE 4
#define WS_SMEM(nwg, st, hd) \
    (1024 + (size_t)((nwg) * WG_ROWS + 2 * (st) * KB) * (hd) * 2 + (size_t)128 * (nwg) * ((hd) / 2) * 4 + 16 * (size_t)(st))
static_assert(WS_SMEM(2, WS_STAGES, 128) <= 227 * 1024, "the warp-specialised kernel fits one CTA per SM");
/* Its one-consumer variant (decode): the second warpgroup's Q tile and outputs hold a fifth stage. */
#define WS1_STAGES 5
#define WS_DECODE1 5
static_assert(WS_SMEM(1, WS1_STAGES, 128) <= 227 * 1024, "the one-consumer variant fits one CTA per SM");
static_assert(ATT_MAX_ROWS == 2 * WG_ROWS, "the wide wgmma variant: 2 warpgroups of 64 rows");
static_assert(KB == 64, "a block is one m64n64 S tile: 64 keys, 4 k16 steps of P V");
static_assert(KB % PAGE == 0 && KB % 16 == 0, "blocks are whole pages and whole MMA k-steps");

struct invar_cuda_attn_plan {
    invar_cuda_attn_shape sh;
    int n_seqs, n_heads, n_kv_heads, head_dim, max_pages;
    int force;                 /* -1 auto, 0, 1 */
    int64_t cache_pages;       /* pages of the caches it runs on (0: unknown, no TMA kernel) */
    invar_cuda_attn_item *d_items_tile, *d_items_split;
    int32_t *d_ctx_len;        /* [n_seqs] */
    int32_t *d_tok_pos;        /* [n_tokens] */
    int32_t *d_tok_pbase;      /* [n_tokens] first partial of the token */
};

/* 2^x on the special-function unit: one instruction, the same on every path (the block
 * softmax, the in-CTA fold and the merge kernel all use it); ex2(-inf) = 0. */
static __device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Fixed pairwise trees over N register values, v[i] (op) v[i + N/2] at every level (written
 * as template recursion so the values stay in registers): the same order for every row,
 * whatever its place in a tile. */
struct op_add { static __device__ __forceinline__ float f(float a, float b) { return __fadd_rn(a, b); } };
struct op_max { static __device__ __forceinline__ float f(float a, float b) { return fmaxf(a, b); } };
template <int N, class Op> struct tree {
    static __device__ __forceinline__ void fold(float *t)
    {
#pragma unroll
        for (int i = 0; i < N / 2; i++) t[i] = Op::f(t[i], t[i + N / 2]);
        tree<N / 2, Op>::fold(t);
    }
};
template <class Op> struct tree<1, Op> {
    static __device__ __forceinline__ void fold(float *) {}
};
template <int N, class Op> static __device__ __forceinline__ float tree_reduce(const float *v)
{
    float t[N];
#pragma unroll
    for (int i = 0; i < N; i++) t[i] = v[i];
    tree<N, Op>::fold(t);
    return t[0];
}

/* The max a row's online state moves to after a block whose largest scaled score is mb:
 * mb only once it exceeds the current max mc by more than RESCALE_LOG2 (the lazy rescale of
 * FlashAttention-4). Below that, mc stays: the block's weights 2^(s - mc) reach at most
 * 2^RESCALE_LOG2 (fp32 l and O, and P in bf16, which keeps its relative precision at any
 * magnitude, hold them), alpha is exactly 1 and O's rescale (64 multiplies a thread and block
 * at head_dim 128) is skipped where no row of the warp moved. A function of the row's own
 * scores at fixed absolute blocks, on every path alike, so no bit depends on the batch;
 * 0 rescales on any increase (the rule before 2026-12-05, kept for the benchmark's peer build). */
#ifndef INVAR_CUDA_ATTN_RESCALE_LOG2
#define INVAR_CUDA_ATTN_RESCALE_LOG2 8
#endif
static_assert(INVAR_CUDA_ATTN_RESCALE_LOG2 >= 0 && INVAR_CUDA_ATTN_RESCALE_LOG2 <= 16,
              "weights up to 2^16 keep l and O far from fp32's range at any context");
static __device__ __forceinline__ float next_max(float mc, float mb)
{
    return mb > __fadd_rn(mc, (float)INVAR_CUDA_ATTN_RESCALE_LOG2) ? mb : mc;
}

/* One fold step: (m, l, o) <- (m, l, o) (+) (mc, lc, oc), m in log2 units. The caller applies
 * it only for splits that hold at least one key of the row, so mc is finite. */
static __device__ __forceinline__ void fold_scales(float m, float mc, float *mn, float *a, float *b)
{
    *mn = fmaxf(m, mc);
    *a = ex2(__fsub_rn(m, *mn));
    *b = ex2(__fsub_rn(mc, *mn));
}
static __device__ __forceinline__ float fold_val(float x, float xc, float a, float b)
{
    return __fadd_rn(__fmul_rn(x, a), __fmul_rn(xc, b));
}

/* One fold step of a running value; fold_ctl (a negative control, never in real use) fuses it. */
static __device__ __forceinline__ float fold_pick(float x, float xc, float a, float b, bool fold_ctl)
{
    return fold_ctl ? __fmaf_rn(x, a, __fmul_rn(xc, b)) : fold_val(x, xc, a, b);
}

/* ---- warp-level tensor-core and copy primitives ---- */
/* A shared-memory descriptor as two words, so that a descriptor at a byte offset inside the
 * same tile is one 32-bit add: the start-address field (bits 0-13, address / 16) never carries,
 * as shared addresses stay below 2^18. */
struct sdesc {
    uint32_t lo, hi;
};
static __device__ __forceinline__ sdesc sdesc_of(uint64_t d)
{
    return sdesc{(uint32_t)d, (uint32_t)(d >> 32)};
}
static __device__ __forceinline__ uint64_t sdesc_at(sdesc d, uint32_t off)
{
    return ((uint64_t)d.hi << 32) | (uint64_t)(d.lo + (off >> 4));
}
/* Pins registers that wgmma reads or writes asynchronously: the compiler may not move their
 * other uses across this point (between the wgmma issue and its wait). */
template <int N> static __device__ __forceinline__ void fence_regs(float *r)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> static __device__ __forceinline__ void fence_regs_u(uint32_t *r)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}
#define HD 128
#define AT(name) name##_hd128
#include "kernels/cuda/attention_merge_body.cuh"
#include "kernels/cuda/attention_mma_body.cuh"
#include "kernels/cuda/attention_wgmma_body.cuh"
#include "kernels/cuda/attention_ws_body.cuh"
#undef HD
#undef AT
#define HD 64
#define AT(name) name##_hd64
#include "kernels/cuda/attention_merge_body.cuh"
#include "kernels/cuda/attention_mma_body.cuh"
#include "kernels/cuda/attention_wgmma_body.cuh"
#include "kernels/cuda/attention_ws_body.cuh"
#undef HD
#undef AT

/* ---- host side ---- */

extern "C" int invar_cuda_kv_write(invar_cuda_ctx *ctx, const uint16_t *k, const uint16_t *v,
                                   uint16_t *k_cache, uint16_t *v_cache, const int32_t *slot,
                                   int T, int n_kv_heads, int head_dim)
{
    if ((head_dim != 64 && head_dim != 128) || T < 0 || n_kv_heads <= 0)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "kv_write: head_dim must be 64 or 128");
    size_t nvec = (size_t)T * n_kv_heads * head_dim / 8;
    if (!nvec) return 0;
    unsigned grid = (unsigned)((nvec + 255) / 256);
    if (head_dim == 128)
        kv_write_kernel_hd128<<<grid, 256, 0, ctx->stream>>>(k, v, k_cache, v_cache, slot, n_kv_heads, nvec);
    else
        kv_write_kernel_hd64<<<grid, 256, 0, ctx->stream>>>(k, v, k_cache, v_cache, slot, n_kv_heads, nvec);
    return invar_cuda_check(ctx, cudaGetLastError(), "kv_write launch");
}

static void *to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess) return NULL;
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* ---- work lists ---- */

/* Split items of one tile are runs of `group` consecutive splits: a CTA walks a run with one
 * continuous copy ring (no prologue per split, more KV in flight) and writes every split's
 * partial as a one-split item would (each split still starts from a fresh state), so the
 * grouping changes the speed, never the bits. Chosen from the batch alone (measure and fill
 * agree): the largest of 1, 2, 4, 8 that leaves at least WG_SPLIT_CTAS CTAs (one wave of two
 * per SM on 132 SMs). Measured on the H200 (bench_attention, 2026-12-03, split forced, runs of
 * 1/2/4/8): 1 x 32k 68.1 / 62.0 / 57.5 / 73.0 us, 16 x 4k 94.7 / 88.5 / 82.7 / 78.4, 1 x 8k
 * best at 1, 16 x 32k and 64 x 4k at 8: the longest runs that still fill the chip.
 * g_split_group_force (tests, benchmarks): > 0 fixes it. */
#define WG_SPLIT_CTAS 256
#define WG_WHOLE_KEYS 4096 /* decode tiles at least this long run whole where they fill the chip */
static int g_split_group_force;

static size_t tile_splits(int q_len, int ctx_len, int t0, int qt)
{
    int n = q_len - t0 < qt ? q_len - t0 : qt;
    return (size_t)((ctx_len - q_len + t0 + n - 1) / SPLIT + 1);
}

/* Read once (cuda_internal.h lists the values). The plans' decode split rule follows this
 * setting, the ring the process runs; the testing switch of ctx->attn_decode_ring changes the
 * kernel only, which gives the same bits under either split. */
int invar_cuda_attn_decode_ring_env(void)
{
    static int ring = -1;
    if (ring < 0) {
        const char *e = getenv("INVAR_CUDA_ATTN_DECODE_RING");
        ring = !e || !strcmp(e, "tma") ? WS_DECODE
               : !strcmp(e, "tma1")    ? WS_DECODE1
               : !strcmp(e, "6")       ? WG_DEEP_STAGES
               : !strcmp(e, "wg")      ? 0
                                       : WS_DECODE;
    }
    return ring;
}

/* INVAR_CUDA_ATTN=mma: the mma.sync kernel's work lists stay as they were measured for it.
 * The same value on every call (a benign race). */
static int attn_mma_env(void)
{
    static int mma_env = -1;
    if (mma_env < 0) {
        const char *e = getenv("INVAR_CUDA_ATTN");
        mma_env = e && strcmp(e, "mma") == 0;
    }
    return mma_env;
}

static int split_group(int n_seqs, const int32_t *q_len, const int32_t *ctx_len, int qt, int n_kv_heads)
{
    if (g_split_group_force > 0) return g_split_group_force;
    if (attn_mma_env()) return 1; /* its one-buffer decode CTAs gain nothing from runs */
    size_t n = 0;
    for (int s = 0; s < n_seqs; s++)
        for (int t0 = 0; t0 < q_len[s]; t0 += qt) n += tile_splits(q_len[s], ctx_len[s], t0, qt);
    n *= (size_t)n_kv_heads;
    int g = 1;
    while (g < 8 && n / (size_t)(2 * g) >= WG_SPLIT_CTAS) g *= 2;
    return g;
}

extern "C" int invar_cuda_testing_attn_split_group(int group)
{
    int was = g_split_group_force;
    if (group >= 0) g_split_group_force = group;
    return was;
}

extern "C" int invar_cuda_attn_measure(int n_seqs, const int32_t *q_start, const int32_t *q_len,
                                       const int32_t *ctx_len, int n_heads, int n_kv_heads, int head_dim,
                                       int max_pages, int sm_count, invar_cuda_attn_shape *out)
{
    memset(out, 0, sizeof *out);
    if ((head_dim != 64 && head_dim != 128) || n_kv_heads <= 0 || n_heads % n_kv_heads || n_seqs <= 0 ||
        n_heads / n_kv_heads > ATT_MAX_ROWS)
        return INVAR_CUDA_EARG;
    const int G = n_heads / n_kv_heads, qt = ATT_MAX_ROWS / G; /* tokens per CTA tile */
    int T = 0, maxtok = 1;
    size_t ni_tile = 0, ni_split = 0, ni_split1 = 0, np = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (q_len[s] < 0 || q_start[s] < 0 || ctx_len[s] < q_len[s] || ctx_len[s] > max_pages * PAGE)
            return INVAR_CUDA_EARG;
    }
    const int group = split_group(n_seqs, q_len, ctx_len, qt, n_kv_heads);
    for (int s = 0; s < n_seqs; s++) {
        if (q_start[s] + q_len[s] > T) T = q_start[s] + q_len[s];
        if (q_len[s] > maxtok) maxtok = q_len[s] < qt ? q_len[s] : qt;
        ni_tile += (size_t)((q_len[s] + qt - 1) / qt);
        for (int t0 = 0; t0 < q_len[s]; t0 += qt) {
            size_t ns = tile_splits(q_len[s], ctx_len[s], t0, qt);
            ni_split1 += ns;
            ni_split += (ns + (size_t)group - 1) / (size_t)group;
        }
        for (int j = 0; j < q_len[s]; j++) np += (size_t)((ctx_len[s] - q_len[s] + j) / SPLIT + 1);
    }
    if (ni_split > (size_t)INT32_MAX) return INVAR_CUDA_EARG;
    out->n_tokens = T;
    out->n_items_tile = (int)ni_tile;
    out->n_items_split = (int)ni_split;
    out->n_partials = np;
    out->rows_max = maxtok * G;
    /* Speed only (either way gives the same bits). Measured on the H200 (bench_attention,
     * 2026-12-02, wgmma kernel): decode tiles were faster split except where whole tiles fill
     * the chip (two CTAs per SM) and are long (4096 keys or more each: 64 x 4k, 64 x 16k,
     * 256 x 4k, 1.07-1.17x whole), where the in-CTA fold saves the partials' round trip and
     * the merge launch (the mma.sync kernel's decode was faster split everywhere); prefill
     * tiles were faster whole down to one wave of CTAs, so they split only when whole tiles
     * would leave most SMs idle. */
    const int ring = invar_cuda_attn_decode_ring_env();
    if (ni_split1 <= ni_tile) out->auto_split = 0;
    else if (out->rows_max <= ATT_SMALL_ROWS && !attn_mma_env() && (ring == WS_DECODE || ring == WS_DECODE1))
        /* The TMA decode kernels (one CTA per SM, persistent): whole tiles ran faster from
         * about one wave of them (H100, bench_attention 2026-12-07: 16 x 4k 95.0 us whole vs
         * 100.5 split, 16 x 32k 681 vs 733, 256 x 1k 369 vs 368), split below it (1 x 1k 16.6
         * vs 22.5, 1 x 8k 22.0 vs 122, 1 x 32k 58 vs 476). */
        out->auto_split = 4 * ni_tile * (size_t)n_kv_heads < 3 * (size_t)sm_count;
    else if (out->rows_max <= ATT_SMALL_ROWS)
        out->auto_split = attn_mma_env() ||
                          !(ni_tile * (size_t)n_kv_heads >= 2 * (size_t)sm_count &&
                            ni_split1 * SPLIT >= (size_t)WG_WHOLE_KEYS * ni_tile);
    else out->auto_split = 2 * ni_tile * (size_t)n_kv_heads < (size_t)sm_count;
    return 0;
}

extern "C" void invar_cuda_attn_fill(int n_seqs, const int32_t *q_start, const int32_t *q_len,
                                     const int32_t *ctx_len, int n_heads, int n_kv_heads,
                                     invar_cuda_attn_item *items_tile, invar_cuda_attn_item *items_split,
                                     int32_t *tok_pos, int32_t *tok_pbase)
{
    const int qt = ATT_MAX_ROWS / (n_heads / n_kv_heads);
    const int group = items_split ? split_group(n_seqs, q_len, ctx_len, qt, n_kv_heads) : 1;
    size_t a = 0, b = 0;
    int T = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int t0 = 0; t0 < q_len[s]; t0 += qt) {
            int n = q_len[s] - t0 < qt ? q_len[s] - t0 : qt;
            invar_cuda_attn_item w = {s, q_start[s] + t0, n, ctx_len[s] - q_len[s] + t0, -1, 0};
            if (items_tile) items_tile[a++] = w;
            const int nsplit = (w.pos0 + n - 1) / SPLIT + 1;
            for (int c = 0; items_split && c < nsplit; c += group) {
                w.chunk = c;
                w.nchunk = nsplit - c < group ? nsplit - c : group;
                items_split[b++] = w;
            }
        }
        for (int j = 0; j < q_len[s]; j++) tok_pos[q_start[s] + j] = ctx_len[s] - q_len[s] + j;
        if (q_start[s] + q_len[s] > T) T = q_start[s] + q_len[s];
    }
    int32_t np = 0;
    for (int t = 0; t < T; t++) {
        tok_pbase[t] = np;
        np += tok_pos[t] / SPLIT + 1;
    }
}

extern "C" size_t invar_cuda_attn_ws_bytes(size_t n_partials, int n_heads, int head_dim)
{
    return n_partials * (size_t)n_heads * (size_t)(head_dim + 4) * sizeof(float);
}

typedef void (*attn_kernel_fn)(const invar_cuda_attn_item *, const uint16_t *, const uint16_t *, const uint16_t *,
                               const int32_t *, const int32_t *, const int32_t *, uint16_t *, float *, int, int,
                               int, float, const int32_t *);
typedef void (*attn_merge_fn)(const float *, const int32_t *, const int32_t *, uint16_t *, int, int, int);
/* The wgmma kernel's: attn_kernel_fn's arguments, then the merge's tile counters (NULL: the
 * merge kernel runs after it) and the merge control's flag. */
typedef void (*wg_kernel_fn)(const invar_cuda_attn_item *, const uint16_t *, const uint16_t *, const uint16_t *,
                             const int32_t *, const int32_t *, const int32_t *, uint16_t *, float *, int, int, int,
                             float, const int32_t *, int32_t *, int);

template <int NWG, int ST, bool RUN> static wg_kernel_fn wg_pick(int hd, bool pv128)
{
    return hd == 128 ? (pv128 ? wg_attn_kernel_hd128<NWG, ST, RUN, true> : wg_attn_kernel_hd128<NWG, ST, RUN, false>)
                     : wg_attn_kernel_hd64<NWG, ST, RUN, false>;
}

typedef void (*ws_kernel_fn)(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                             const invar_cuda_attn_item *, int, const uint16_t *, const uint16_t *,
                             const uint16_t *, const int32_t *, const int32_t *, const int32_t *, uint16_t *,
                             float *, int, int, int, float, const int32_t *, int);

template <int NWG, int ST, bool PP> static ws_kernel_fn ws_pick(int hd, bool pv128)
{
    return hd == 128 ? (pv128 ? ws_attn_kernel_hd128<NWG, ST, PP, true> : ws_attn_kernel_hd128<NWG, ST, PP, false>)
                     : ws_attn_kernel_hd64<NWG, ST, PP, false>;
}

/* A 2-D view of one layer's cache for TMA: rows of head_dim bf16 ([page][kv head][16] rows),
 * boxes of 16 rows x 64 elements (one page of one KV head, one 128-byte swizzle atom wide). */
static int cache_map(invar_cuda_ctx *ctx, CUtensorMap *m, const uint16_t *cache, int64_t rows, int hd)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = (PFN_cuTensorMapEncodeTiled_v12000)ctx->encode_tiled;
    cuuint64_t dims[2] = {(cuuint64_t)hd, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)hd * 2};
    cuuint32_t box[2] = {64, PAGE};
    cuuint32_t estr[2] = {1, 1};
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)cache, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return invar_cuda_fail(ctx, INVAR_CUDA_ECUDA, "attention: cuTensorMapEncodeTiled failed (%d)", (int)r);
    return 0;
}

/* Items of more than 64 rows on the warp-specialised kernel: a TMA producer warp feeding two
 * consumer warpgroups (ctx->attn_prefill 0: free-running, the default, 2-3% faster than 1:
 * taking turns on the tensor cores, bench_attention 2026-12-02; 3: as 0 on a persistent grid
 * of one CTA per SM striding over the items). */
static int launch_ws(invar_cuda_ctx *ctx, const invar_cuda_attn_launch *a, const uint16_t *q,
                     const uint16_t *k_cache, const uint16_t *v_cache, uint16_t *out, float scale)
{
    const int hd = a->head_dim;
    const int64_t rows = a->cache_pages * a->n_kv_heads * PAGE;
    if (rows > INT32_MAX) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "attention: cache too large for TMA rows");
    CUtensorMap tmk, tmv;
    if (cache_map(ctx, &tmk, k_cache, rows, hd) || cache_map(ctx, &tmv, v_cache, rows, hd)) return INVAR_CUDA_ECUDA;
    const int m = ctx->attn_prefill;
    const bool pv = hd == 128 && ctx->attn_pv128;
    /* Items of at most 64 rows (decode) on one consumer warpgroup with a deeper ring. */
    const bool one = a->rows_max <= WG_ROWS && ctx->attn_decode_ring == WS_DECODE1;
    ws_kernel_fn kern = one ? ws_pick<1, WS1_STAGES, false>(hd, pv)
                        : m == 1 ? ws_pick<2, WS_STAGES, true>(hd, pv) : ws_pick<2, WS_STAGES, false>(hd, pv);
    const size_t smem = one ? WS_SMEM(1, WS1_STAGES, hd) : WS_SMEM(2, WS_STAGES, hd);
    if (smem > ctx->smem_optin)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "attention: %zu bytes of shared memory exceed the device's %zu",
                               smem, ctx->smem_optin);
    if (invar_cuda_check(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                         "attn smem attribute"))
        return INVAR_CUDA_ECUDA;
    if (a->n_tokens == 0 || a->grid == 0) return 0;
    int gx = a->grid;
    /* Persistent grids stride over the items: the producer's ring runs on across them. */
    if (!a->counts && (ctx->attn_prefill == 3 || a->rows_max <= WG_ROWS)) {
        /* One CTA per SM: rounding up left a few CTAs for a second round (the persistent
         * prefill ran at half speed). */
        const int per_head = ctx->sm_count / a->n_kv_heads > 0 ? ctx->sm_count / a->n_kv_heads : 1;
        gx = gx < per_head ? gx : per_head;
    }
    dim3 grid(gx, a->n_kv_heads);
    kern<<<grid, one ? 256 : 384, smem, ctx->stream>>>(tmk, tmv, a->items, a->grid, q, k_cache, v_cache, a->block_table,
                                           a->ctx_len, a->tok_pbase, out, a->split ? a->ws : NULL, a->n_heads,
                                           a->n_kv_heads, a->max_pages, scale, a->counts, ctx->testing_fold_by_rows);
    return invar_cuda_check(ctx, cudaGetLastError(), "attention launch");
}

/* The merge control (testing only): the fold runs last split first in launches of an odd
 * number of tokens, so a row's bits follow the batch. */
static int merge_reverse(const invar_cuda_ctx *ctx, const invar_cuda_attn_launch *a)
{
    return ctx->testing_merge_by_batch && (a->n_tokens & 1);
}

static int launch_merge(invar_cuda_ctx *ctx, const invar_cuda_attn_launch *a, uint16_t *out)
{
    /* Fewer rows than 8 warps an SM: a warp per 32 dims; else a warp per row. Same bits. */
    const size_t rows = (size_t)a->n_tokens * a->n_heads;
    const bool narrow = rows < (size_t)8 * ctx->sm_count;
    attn_merge_fn merge = a->head_dim == 128 ? (narrow ? attn_merge_kernel_hd128<1> : attn_merge_kernel_hd128<4>)
                                             : (narrow ? attn_merge_kernel_hd64<1> : attn_merge_kernel_hd64<2>);
    const size_t warps = narrow ? rows * (a->head_dim / 32) : rows;
    merge<<<(unsigned)((warps * 32 + 127) / 128), 128, 0, ctx->stream>>>(a->ws, a->tok_pos, a->tok_pbase, out,
                                                                         a->n_tokens, a->n_heads, merge_reverse(ctx, a));
    return invar_cuda_check(ctx, cudaGetLastError(), "attention merge launch");
}

/* The tile counters of the in-kernel merge for a split launch of the wgmma kernel's
 * split-only variants (items of up to 64 rows), or NULL where the merge kernel runs instead
 * (wider items, counters too few for the launch's tiles, INVAR_CUDA_ATTN_MERGE=kernel, by default
 * block tables past INVAR_CUDA_ATTN_MERGE_CTA_MAX_CTX positions). A
 * tile's counter is indexed by its first token, so n_tokens x n_kv_heads slots cover every tile. */
static int32_t *merge_counters(const invar_cuda_ctx *ctx, const invar_cuda_attn_launch *a)
{
    if (!a->split || a->rows_max > WG_ROWS || ctx->attn_merge_kernel == 1 || !ctx->attn_done ||
        (ctx->attn_merge_kernel == 2 && (int64_t)a->max_pages * PAGE > INVAR_CUDA_ATTN_MERGE_CTA_MAX_CTX) ||
        (size_t)a->n_tokens * (size_t)a->n_kv_heads > (size_t)INVAR_CUDA_ATTN_DONE_SLOTS)
        return NULL;
    return ctx->attn_done;
}

extern "C" int invar_cuda_attention_launch(invar_cuda_ctx *ctx, const invar_cuda_attn_launch *a,
                                           const uint16_t *q, const uint16_t *k_cache,
                                           const uint16_t *v_cache, uint16_t *out, float scale)
{
    const int hd = a->head_dim;
    if ((hd != 64 && hd != 128) || a->rows_max <= 0 || a->rows_max > ATT_MAX_ROWS || a->grid < 0 ||
        (a->split && !a->ws) || a->cache_pages < 0)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "attention: bad launch description");
    if (!ctx->attn_mma &&
        (a->rows_max > WG_ROWS || ctx->attn_decode_ring == WS_DECODE || ctx->attn_decode_ring == WS_DECODE1) &&
        ctx->attn_prefill != 2 &&
        a->cache_pages > 0) {
        int rc = launch_ws(ctx, a, q, k_cache, v_cache, out, scale);
        if (rc || !a->split || a->n_tokens == 0 || a->grid == 0) return rc;
        return launch_merge(ctx, a, out);
    }
    attn_kernel_fn kern = NULL;
    wg_kernel_fn wkern = NULL;
    size_t smem;
    unsigned threads;
    if (ctx->attn_mma) {
        /* Items of up to 16 rows (decode, short speculation chunks) run on one warp per CTA,
         * several CTAs per SM; wider ones on 8 warps sharing each K/V tile. Same bits. */
        const int narrow = a->rows_max <= ATT_SMALL_ROWS;
        const int W = narrow ? 1 : ATT_MAX_ROWS / 16;
        kern = hd == 128 ? (narrow ? attn_kernel_hd128<1> : attn_kernel_hd128<ATT_MAX_ROWS / 16>)
                         : (narrow ? attn_kernel_hd64<1> : attn_kernel_hd64<ATT_MAX_ROWS / 16>);
        smem = ATT_SMEM(W, hd);
        threads = 32 * W;
    } else {
        /* Items of up to 64 rows (decode, short chunks) run on one warpgroup, 2 CTAs per SM
         * (split launches: a deeper ring in place of the running outputs); wider ones on 2
         * warpgroups sharing each K/V tile. Same bits. */
        const bool pv = hd == 128 && ctx->attn_pv128;
        if (a->rows_max > WG_ROWS) {
            wkern = wg_pick<2, 3, true>(hd, pv);
            smem = WG_SMEM(2, 3, 1, hd);
            threads = 256;
        } else if (a->split && ctx->attn_decode_ring == WG_DEEP_STAGES) {
            /* One CTA per SM with a deep ring: five blocks in flight per SM, not four. */
            wkern = wg_pick<1, WG_DEEP_STAGES, false>(hd, pv);
            smem = WG_SMEM(1, WG_DEEP_STAGES, 0, hd);
            threads = 128;
        } else if (a->split) {
            wkern = wg_pick<1, 3, false>(hd, pv);
            smem = WG_SMEM(1, 3, 0, hd);
            threads = 128;
        } else {
            wkern = wg_pick<1, 2, true>(hd, pv);
            smem = WG_SMEM(1, 2, 1, hd);
            threads = 128;
        }
    }
    if (smem > ctx->smem_optin)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "attention: %zu bytes of shared memory exceed the device's %zu",
                               smem, ctx->smem_optin);
    const void *fn = kern ? (const void *)kern : (const void *)wkern;
    if (invar_cuda_check(ctx, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                         "attn smem attribute") ||
        invar_cuda_check(ctx, cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, 100),
                         "attn carveout attribute")) /* two 114 KB one-warpgroup CTAs per SM */
        return INVAR_CUDA_ECUDA;
    if (a->n_tokens == 0 || a->grid == 0) return 0;
    dim3 grid(a->grid, a->n_kv_heads);
    int32_t *done = NULL;
    if (kern) {
        kern<<<grid, threads, smem, ctx->stream>>>(a->items, q, k_cache, v_cache, a->block_table, a->ctx_len,
                                                  a->tok_pbase, out, a->split ? a->ws : NULL, a->n_heads,
                                                  a->n_kv_heads, a->max_pages, scale, a->counts);
    } else {
        done = merge_counters(ctx, a);
        wkern<<<grid, threads, smem, ctx->stream>>>(a->items, q, k_cache, v_cache, a->block_table, a->ctx_len,
                                                   a->tok_pbase, out, a->split ? a->ws : NULL, a->n_heads,
                                                   a->n_kv_heads, a->max_pages, scale, a->counts, done,
                                                   merge_reverse(ctx, a));
    }
    if (invar_cuda_check(ctx, cudaGetLastError(), "attention launch")) return INVAR_CUDA_ECUDA;
    return a->split && !done ? launch_merge(ctx, a, out) : 0;
}

/* ---- plans: the work lists in device memory of their own (kernel tests, benchmarks) ---- */

extern "C" void invar_cuda_attn_plan_free(invar_cuda_attn_plan *p)
{
    if (!p) return;
    cudaFree(p->d_items_tile);
    cudaFree(p->d_items_split);
    cudaFree(p->d_ctx_len);
    cudaFree(p->d_tok_pos);
    cudaFree(p->d_tok_pbase);
    free(p);
}

extern "C" int invar_cuda_attn_plan_create(invar_cuda_ctx *ctx, invar_cuda_attn_plan **out,
                                           int n_seqs, const int32_t *q_start, const int32_t *q_len,
                                           const int32_t *ctx_len, int n_heads, int n_kv_heads,
                                           int head_dim, int max_pages)
{
    *out = NULL;
    invar_cuda_attn_shape sh;
    if (invar_cuda_attn_measure(n_seqs, q_start, q_len, ctx_len, n_heads, n_kv_heads, head_dim, max_pages,
                                ctx->sm_count, &sh))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "attn plan: unsupported heads/head_dim or bad lengths");
    const int T = sh.n_tokens;
    invar_cuda_attn_plan *p = (invar_cuda_attn_plan *)calloc(1, sizeof *p);
    invar_cuda_attn_item *it_t = (invar_cuda_attn_item *)malloc(sizeof *it_t * ((size_t)sh.n_items_tile + 1));
    invar_cuda_attn_item *it_s = (invar_cuda_attn_item *)malloc(sizeof *it_s * ((size_t)sh.n_items_split + 1));
    int32_t *pos = (int32_t *)calloc((size_t)T + 1, 4), *pbase = (int32_t *)calloc((size_t)T + 1, 4);
    if (!p || !it_t || !it_s || !pos || !pbase) {
        free(p); free(it_t); free(it_s); free(pos); free(pbase);
        return invar_cuda_fail(ctx, INVAR_CUDA_ENOMEM, "attn plan: out of host memory");
    }
    invar_cuda_attn_fill(n_seqs, q_start, q_len, ctx_len, n_heads, n_kv_heads, it_t, it_s, pos, pbase);
    p->sh = sh;
    p->n_seqs = n_seqs;
    p->n_heads = n_heads;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->max_pages = max_pages;
    p->force = -1;
    p->d_items_tile = (invar_cuda_attn_item *)to_dev(it_t, sizeof *it_t * sh.n_items_tile);
    p->d_items_split = (invar_cuda_attn_item *)to_dev(it_s, sizeof *it_s * sh.n_items_split);
    p->d_ctx_len = (int32_t *)to_dev(ctx_len, 4 * (size_t)n_seqs);
    p->d_tok_pos = (int32_t *)to_dev(pos, 4 * (size_t)T);
    p->d_tok_pbase = (int32_t *)to_dev(pbase, 4 * (size_t)T);
    free(it_t); free(it_s); free(pos); free(pbase);
    if (!p->d_items_tile || !p->d_items_split || !p->d_ctx_len || !p->d_tok_pos || !p->d_tok_pbase) {
        invar_cuda_attn_plan_free(p);
        return invar_cuda_fail(ctx, INVAR_CUDA_ENOMEM, "attn plan: device allocation failed");
    }
    *out = p;
    return 0;
}

extern "C" int invar_cuda_attn_plan_split(const invar_cuda_attn_plan *p)
{
    return p->force >= 0 ? p->force : p->sh.auto_split;
}

extern "C" void invar_cuda_attn_plan_force_split(invar_cuda_attn_plan *p, int force)
{
    p->force = force < 0 ? -1 : (force ? 1 : 0);
}

extern "C" void invar_cuda_attn_plan_cache_pages(invar_cuda_attn_plan *p, int64_t pages)
{
    p->cache_pages = pages > 0 ? pages : 0;
}

extern "C" int invar_cuda_attention(invar_cuda_ctx *ctx, const invar_cuda_attn_plan *p,
                                    const uint16_t *q, const uint16_t *k_cache,
                                    const uint16_t *v_cache, const int32_t *block_table,
                                    uint16_t *out, float scale)
{
    const int split = invar_cuda_attn_plan_split(p);
    invar_cuda_attn_launch a = {};
    a.items = split ? p->d_items_split : p->d_items_tile;
    a.grid = split ? p->sh.n_items_split : p->sh.n_items_tile;
    a.counts = NULL;
    a.max_pages = p->max_pages;
    a.split = split;
    a.rows_max = p->sh.rows_max;
    a.n_tokens = p->sh.n_tokens;
    a.n_heads = p->n_heads;
    a.n_kv_heads = p->n_kv_heads;
    a.head_dim = p->head_dim;
    a.ctx_len = p->d_ctx_len;
    a.tok_pos = p->d_tok_pos;
    a.tok_pbase = p->d_tok_pbase;
    a.block_table = block_table;
    a.cache_pages = p->cache_pages;
    if (split && p->sh.n_tokens) {
        size_t need = invar_cuda_attn_ws_bytes(p->sh.n_partials, p->n_heads, p->head_dim);
        int rc = invar_cuda_grow(ctx, (void **)&ctx->attn_ws, &ctx->attn_ws_bytes, need, 0);
        if (rc) return rc;
        a.ws = ctx->attn_ws;
    }
    return invar_cuda_attention_launch(ctx, &a, q, k_cache, v_cache, out, scale);
}
