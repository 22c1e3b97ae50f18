/* Batch-invariant GEMM for Hopper: TMA loads, an mbarrier pipeline, wgmma.m64nNk16 (N = the
 * tile width, 128 or 192), persistent CTAs. C[M,N] = A[M,K] . W[N,K]^T; the arithmetic per output element is fixed
 * by gemm_config.cuh and does not depend on M. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/gemm_config.cuh"
#include "kernels/cuda/gemm_internal.h"
#include "kernels/cuda/gemm_store.cuh"
#include "kernels/cuda/hopper_ptx.cuh"
#include "kernels/cuda/wgmma_bf16.cuh"

struct gemm_params {
    int M, N, K;
    int tiles_m, tiles_n;
    int n_chunks;       /* ceil(K / kc) */
    int kc_tiles;       /* K-tiles per chunk: GEMM_KC / GEMM_BK (other values only in experiments) */
    int k_tiles;        /* ceil(K / GEMM_BK) */
    int split;          /* 1: unit = (tile, chunk); 0: unit = tile */
    int units;
    int group_m;        /* tile raster: group_m M-tiles share consecutive N-tiles */
    int consumers;      /* consumer warpgroups = BM / 64 */
    int stages;
    int out_f32;
    int cluster;        /* 1: CTA pairs along M share each B tile through TMA multicast */
    int bn;             /* tile width (the kernel's template argument) */
    void *out;
    float *ws;          /* [n_chunks][M][N] partials (split only) */
    /* Grouped mode (mixture of experts, invar_cuda_gemm_grouped): the A rows are the experts'
     * sorted rows, W is [E][N][K] viewed as [E N][K], and the units are (entry, N tile) for the
     * *n_entries entries {first row, end row, expert, 0} a device kernel wrote. NULL: plain. */
    const int4 *entries;
    const int *n_entries;
};

/* Where a unit's tile reads and writes: first A row, end of its valid rows (stores stop
 * there), first W row. */
struct unit_rows {
    int a_row, m_end, w_row;
};

static __device__ __forceinline__ void unit_tile(const struct gemm_params *p, int u, int *tm,
                                                 int *tn, int *chunk)
{
    int t = u;
    *chunk = -1;
    if (p->entries) { /* grouped: entry-major, consecutive units walk one expert's N tiles */
        *tm = u / p->tiles_n;
        *tn = u % p->tiles_n;
        return;
    }
    if (p->split) {
        *chunk = u % p->n_chunks;
        t = u / p->n_chunks;
    }
    int group = p->group_m * p->tiles_n;
    int g = t / group;
    int first_m = g * p->group_m;
    int gm = p->tiles_m - first_m;
    if (gm > p->group_m) gm = p->group_m;
    int r = t % group;
    *tm = first_m + r % gm;
    *tn = r / gm;
}

static __device__ __forceinline__ struct unit_rows unit_rows_of(const struct gemm_params *p, int tm, int tn, int bm,
                                                                int bn)
{
    struct unit_rows r;
    if (p->entries) {
        const int4 en = p->entries[tm];
        r.a_row = en.x;
        r.m_end = en.y;
        r.w_row = en.z * p->N + tn * bn;
    } else {
        r.a_row = tm * bm;
        r.m_end = p->M;
        r.w_row = tn * bn;
    }
    return r;
}

/* With p.cluster, CTA pairs (cluster ranks 0, 1) take M tiles 2t and 2t+1 of one N tile; rank r
 * loads rows [64r, 64r+64) of the B tile and multicasts them to both CTAs, halving the B bytes
 * each SM pulls from L2. Only data movement changes: the MMA sequence is the same. */
/* Gives a consumed stage back to the producer(s): every consumer thread arrives locally, or
 * in cluster mode lane 0 of each consumer warp arrives on both CTAs' barrier (the peer's
 * multicast also wrote this stage). */
static __device__ __forceinline__ void release_stage(const int cl, uint32_t bar, int lane, uint32_t rank)
{
    if (!cl) {
        mbar_arrive(bar);
    } else if (lane == 0) {
        mbar_arrive(bar);
        mbar_arrive_cluster(bar, rank ^ 1u);
    }
}

template <int BN>
static __device__ __forceinline__ void gemm_body(const CUtensorMap *tmap_a, const CUtensorMap *tmap_b,
                                                 const struct gemm_params &p, const int cl)
{
    constexpr uint32_t B_TILE_BYTES = BN * GEMM_BK * 2;
    constexpr int NACC = BN / 2; /* fp32 accumulator registers per thread of a 64 x BN tile */
    extern __shared__ uint8_t smem_raw[];
    /* 128B-swizzled tiles need 1024-byte alignment; the host asked for 1 KB of slack. */
    uint32_t raw = smem_u32(smem_raw);
    uint32_t base = (raw + 1023u) & ~1023u;
    uint8_t *sbase = smem_raw + (base - raw);
    const uint32_t a_bytes = (uint32_t)p.consumers * GEMM_MMA_M * GEMM_BK * 2;
    const uint32_t stage_bytes = a_bytes + B_TILE_BYTES;
    uint64_t *bars = (uint64_t *)(sbase + (size_t)p.stages * stage_bytes);
    uint32_t full0 = smem_u32(bars), empty0 = smem_u32(bars + p.stages);

    const int wg = threadIdx.x / 128;
    const int tid = threadIdx.x % 128;
    /* Cluster mode: units are M-tile pairs; rank picks the tile of the pair. */
    const uint32_t rank = cl ? cluster_ctarank() : 0;
    const int u0 = cl ? (int)(blockIdx.x / 2) : (int)blockIdx.x;
    const int ustep = cl ? (int)(gridDim.x / 2) : (int)gridDim.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < p.stages; s++) {
            mbar_init(full0 + 8 * s, 1);
            /* Released per consumer thread, or in cluster mode per consumer warp of both CTAs. */
            mbar_init(empty0 + 8 * s, cl ? 2 * p.consumers * 4 : p.consumers * 128);
        }
        mbar_fence_init();
        tma_prefetch_desc(tmap_a);
        tma_prefetch_desc(tmap_b);
    }
    if (cl)
        cluster_sync(); /* both CTAs' barriers exist before any multicast or remote arrive */
    else
        __syncthreads();
    /* Programmatic dependent launch: let the fold kernel (or the next layer) get scheduled,
     * and wait here for the previous kernel's results before touching global memory. */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");

    const int bm = p.consumers * GEMM_MMA_M;
    /* Grouped mode learns its unit count from the routing kernel's output (after the wait). */
    const int n_units = p.entries ? *p.n_entries * p.tiles_n : p.units;
    if (wg == 0) {
        /* Producer warpgroup: one thread issues every TMA load. */
        SETMAXNREG_DEC(24);
        if (tid == 0) {
        uint32_t it = 0;
        for (int u = u0; u < n_units; u += ustep) {
            int tm, tn, chunk;
            unit_tile(&p, u, &tm, &tn, &chunk);
            if (cl) tm = 2 * tm + (int)rank;
            const struct unit_rows ur = unit_rows_of(&p, tm, tn, bm, BN);
            int kt0 = 0, kt1 = p.k_tiles;
            if (chunk >= 0) {
                kt0 = chunk * p.kc_tiles;
                kt1 = min(kt0 + p.kc_tiles, p.k_tiles);
            }
            for (int kt = kt0; kt < kt1; kt++, it++) {
                uint32_t s = it % (uint32_t)p.stages;
                uint32_t ph = (it / (uint32_t)p.stages) & 1u;
                mbar_wait(empty0 + 8 * s, ph ^ 1u);
                uint32_t fb = full0 + 8 * s;
                mbar_arrive_expect_tx(fb, stage_bytes);
                uint32_t sa = base + s * stage_bytes;
                tma_load_2d(sa, tmap_a, kt * GEMM_BK, ur.a_row, fb);
                if (cl)
                    tma_load_2d_multicast(sa + a_bytes + rank * (B_TILE_BYTES / 2), tmap_b, kt * GEMM_BK,
                                          ur.w_row + (int)rank * (BN / 2), fb, (uint16_t)3);
                else
                    tma_load_2d(sa + a_bytes, tmap_b, kt * GEMM_BK, ur.w_row, fb);
            }
        }
        if (cl) cluster_sync(); /* the peer may still arrive on our barriers */
        }
    } else {
    /* Consumer warpgroups: consumer c owns rows [64c, 64c+64) of the tile. */
    SETMAXNREG_INC(240);
    const int c = wg - 1;
    const int warp = tid / 32, lane = tid % 32;
    const int lane_row = warp * 16 + lane / 4;
    const int lane_col = 2 * (lane % 4);
    float acc[NACC];
    float total[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
    uint32_t it = 0;
    for (int u = u0; u < n_units; u += ustep) {
        int tm, tn, chunk;
        unit_tile(&p, u, &tm, &tn, &chunk);
        if (cl) tm = 2 * tm + (int)rank;
        const struct unit_rows ur = unit_rows_of(&p, tm, tn, bm, BN);
        int c0 = 0, c1 = p.n_chunks;
        if (chunk >= 0) {
            c0 = chunk;
            c1 = chunk + 1;
        }
#pragma unroll
        for (int i = 0; i < NACC; i++) total[i] = 0.0f;
        for (int ch = c0; ch < c1; ch++) {
            int kt0 = ch * p.kc_tiles;
            int kt1 = min(kt0 + p.kc_tiles, p.k_tiles);
            uint32_t prev_s = 0;
            for (int kt = kt0; kt < kt1; kt++, it++) {
                uint32_t s = it % (uint32_t)p.stages;
                uint32_t ph = (it / (uint32_t)p.stages) & 1u;
                mbar_wait(full0 + 8 * s, ph);
                uint32_t sa = base + s * stage_bytes + (uint32_t)c * (GEMM_MMA_M * GEMM_BK * 2);
                uint32_t sb = base + s * stage_bytes + a_bytes;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < GEMM_BK / GEMM_MMA_K; kk++) {
                    wgmma_bf16<BN>(acc, smem_desc_sw128(sa + 32 * kk),
                                          smem_desc_sw128(sb + 32 * kk),
                                          (kt == kt0 && kk == 0) ? 0 : 1);
                }
                wgmma_commit();
                if (kt > kt0) {
                    /* The previous K-tile's wgmmas are done: give its stage back. */
                    wgmma_wait1();
                    release_stage(cl, empty0 + 8 * prev_s, lane, rank);
                }
                prev_s = s;
            }
            wgmma_wait0();
            release_stage(cl, empty0 + 8 * prev_s, lane, rank);
            if (chunk < 0) {
#pragma unroll
                for (int i = 0; i < NACC; i++) total[i] = __fadd_rn(total[i], acc[i]);
            }
        }
        const int row0 = ur.a_row + c * GEMM_MMA_M;
        const int col0 = tn * BN;
        if (chunk < 0) {
            gemm_store_frag<BN>(p.out, p.out_f32, ur.m_end, p.N, total, row0, col0, lane_row, lane_col);
            continue;
        }
        /* Split: publish this chunk's partial sums; gemm_fold_kernel adds the chunks of
         * every element in chunk order (the same fold as the in-register path above). */
        float *part = p.ws + (size_t)chunk * p.M * p.N;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            int col = col0 + 8 * j + lane_col;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int row = row0 + lane_row + 8 * h;
                if (row < p.M && col < p.N)
                    __stcg((float2 *)(part + (size_t)row * p.N + col),
                           make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]));
            }
        }
    }
    if (cl) cluster_sync();
    }
}

/* total = 0; total += P_c for c = 0, 1, ... (same rounding steps as the in-register fold). */
__global__ void gemm_fold_kernel(const float *ws, int n_chunks, size_t mn, void *out, int out_f32)
{
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* the GEMM's partials are complete */
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i >= mn) return;
    float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int c = 0; c < n_chunks; c++) {
        float4 v = __ldcs((const float4 *)(ws + (size_t)c * mn + i));
        t.x = __fadd_rn(t.x, v.x);
        t.y = __fadd_rn(t.y, v.y);
        t.z = __fadd_rn(t.z, v.z);
        t.w = __fadd_rn(t.w, v.w);
    }
    if (out_f32) {
        *(float4 *)((float *)out + i) = t;
    } else {
        __nv_bfloat162 *o = (__nv_bfloat162 *)((__nv_bfloat16 *)out + i);
        o[0] = __floats2bfloat162_rn(t.x, t.y);
        o[1] = __floats2bfloat162_rn(t.z, t.w);
    }
}

template <int BN>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
gemm_invariant_kernel(const __grid_constant__ CUtensorMap tm_a,
                      const __grid_constant__ CUtensorMap tm_b, const struct gemm_params p)
{
    gemm_body<BN>(&tm_a, &tm_b, p, 0);
}

/* The same body on 2-CTA clusters (B multicast); a separate kernel so the single-CTA one
 * carries no cluster branches. */
template <int BN>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
gemm_cluster_kernel(const __grid_constant__ CUtensorMap tm_a,
                    const __grid_constant__ CUtensorMap tm_b, const struct gemm_params p)
{
    gemm_body<BN>(&tm_a, &tm_b, p, 1);
}

typedef void (*gemm_kernel_fn)(const CUtensorMap, const CUtensorMap, const struct gemm_params);
static gemm_kernel_fn wide_kernel(int bn, int cl)
{
    if (bn == GEMM_WIDE_BN) return cl ? gemm_cluster_kernel<GEMM_WIDE_BN> : gemm_invariant_kernel<GEMM_WIDE_BN>;
    return cl ? gemm_cluster_kernel<GEMM_BN> : gemm_invariant_kernel<GEMM_BN>;
}

/* Shared memory of a wide configuration: 1 KB alignment slack, the stages, their barriers. */
static size_t wide_smem(int bm, int bn, int stages)
{
    return 1024 + (size_t)stages * ((size_t)bm * GEMM_BK * 2 + (size_t)bn * GEMM_BK * 2) +
           2 * (size_t)stages * sizeof(uint64_t) + 16;
}

/* ---- host side ------------------------------------------------------------------------ */

static double wave_eff(long units, int sms)
{
    long waves = (units + sms - 1) / sms;
    return (double)units / (double)(waves * sms);
}

/* The large configuration's tile width: 192 columns cut the L2 bytes per multiply-add, 128
 * fill the last wave better on some shapes. Estimated time per width = waves x width / its
 * relative speed (GEMM_WIDE_SPEED: 192 columns' per-column rate over 128's, measured on the
 * H200 sweep); both widths give the same bits, so only speed rides on this. */
#define GEMM_WIDE_SPEED 1.05 /* median over the 35-point sweep of 2026-12-03 (notes_gemm.md) */
static int wide_bn(const invar_cuda_ctx *ctx, int M, int N)
{
    if (ctx->gemm_wide_bn == GEMM_BN || ctx->gemm_wide_bn == GEMM_WIDE_BN) return ctx->gemm_wide_bn;
    long tm = (M + GEMM_LARGE_BM - 1) / GEMM_LARGE_BM, sms = ctx->sm_count;
    long w128 = (tm * ((N + GEMM_BN - 1) / GEMM_BN) + sms - 1) / sms;
    long w192 = (tm * ((N + GEMM_WIDE_BN - 1) / GEMM_WIDE_BN) + sms - 1) / sms;
    return (double)w192 * GEMM_WIDE_BN / GEMM_WIDE_SPEED < (double)w128 * GEMM_BN ? GEMM_WIDE_BN : GEMM_BN;
}

static int describe_kc(const invar_cuda_ctx *ctx, int M, int N, int K, int kc, int force_split,
                       invar_cuda_gemm_plan *o)
{
    if (M <= 0 || N <= 0 || K <= 0 || N % 8 || K % 8 || kc <= 0 || kc % GEMM_BK) return INVAR_CUDA_EARG;
    int sms = ctx->sm_count;
    int tn = (N + GEMM_BN - 1) / GEMM_BN;
    int n_chunks = (K + kc - 1) / kc;
    long tiles_large = (long)((M + GEMM_LARGE_BM - 1) / GEMM_LARGE_BM) * tn;
    long tiles_small = (long)((M + GEMM_SMALL_BM - 1) / GEMM_SMALL_BM) * tn;
    o->bn = GEMM_BN;
    o->chains = 0;
    o->bk = GEMM_BK;
    o->k_chunk = kc;
    o->n_chunks = n_chunks;
    o->split = 0;
    /* 64-row tiles for M <= 64 (weight streaming), 128-row tiles above (measured: 64-row
     * tiles lose even where they fill the last wave better). */
    int large = M > GEMM_SMALL_BM;
    long tiles = large ? tiles_large : tiles_small;
    o->bm = large ? GEMM_LARGE_BM : GEMM_SMALL_BM;
    o->stages = large ? GEMM_LARGE_STAGES : GEMM_SMALL_STAGES;
    o->units = (int)tiles;
    /* Too few tiles to fill the chip: run the chunks of each tile on separate CTAs. The fp32
     * partials cost 8 M bytes per weight byte and chunk, so: for M <= 64 whenever the last wave
     * is poorly filled, for M <= 256 only when one partial wave is all there is. */
    int want = M <= 64 ? wave_eff(tiles, sms) < 0.9 : (M <= 256 && tiles < sms);
    if (force_split || (n_chunks > 1 && want && wave_eff(tiles * n_chunks, sms) > wave_eff(tiles, sms))) {
        o->split = 1;
        o->units = (int)(tiles * n_chunks);
    }
    if (large && !o->split && wide_bn(ctx, M, N) != GEMM_BN) {
        o->bn = GEMM_WIDE_BN;
        o->stages = GEMM_WIDE_STAGES;
        tiles = (long)((M + GEMM_LARGE_BM - 1) / GEMM_LARGE_BM) * ((N + GEMM_WIDE_BN - 1) / GEMM_WIDE_BN);
        o->units = (int)tiles;
    }
    o->grid = o->units < sms ? o->units : sms;
    o->cluster = 0;
    int tiles_m = (M + o->bm - 1) / o->bm;
    if (ctx->gemm_cluster && large && !o->split && tiles_m % 2 == 0 && ctx->gemm_max_clusters > 0) {
        /* Units become M-tile pairs on 2-CTA clusters; the persistent grid holds only as many
         * clusters as can be resident at once. */
        o->cluster = 1;
        o->units = (int)(tiles / 2);
        int pairs = ctx->gemm_max_clusters;
        o->grid = 2 * (o->units < pairs ? o->units : pairs);
    }
    return 0;
}

static void query_clusters(invar_cuda_ctx *ctx);

extern "C" int invar_cuda_gemm_describe(const invar_cuda_ctx *ctx, int M, int N, int K,
                                        invar_cuda_gemm_plan *o)
{
    query_clusters((invar_cuda_ctx *)ctx); /* cached device fact; the context is not const */
    if (gemm_narrow_plan(ctx, M, N, K, o)) return 0;
    return describe_kc(ctx, M, N, K, GEMM_KC, 0, o);
}

int gemm_make_map(invar_cuda_ctx *ctx, CUtensorMap *m, const void *ptr, int rows, int K, int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = (PFN_cuTensorMapEncodeTiled_v12000)ctx->encode_tiled;
    cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)K * 2};
    cuuint32_t box[2] = {GEMM_BK, (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)ptr, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return invar_cuda_fail(ctx, INVAR_CUDA_ECUDA, "cuTensorMapEncodeTiled failed (%d)", (int)r);
    return 0;
}

/* How many 2-CTA clusters of the large configuration fit on the device at once (0: none, or
 * fewer than 90% of the SMs, so clusters would not pay). */
static void query_clusters(invar_cuda_ctx *ctx)
{
    if (ctx->gemm_max_clusters >= 0) return;
    ctx->gemm_max_clusters = 0;
    /* The 192-wide configuration needs a little more shared memory; one CTA per SM either way,
     * so the count holds for both. */
    size_t smem = wide_smem(GEMM_LARGE_BM, GEMM_BN, GEMM_LARGE_STAGES);
    if (cudaFuncSetAttribute(gemm_cluster_kernel<GEMM_BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
        return;
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = 2;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2 * (ctx->sm_count / 2));
    cfg.blockDim = dim3((GEMM_LARGE_CONSUMERS + 1) * 128);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, gemm_cluster_kernel<GEMM_BN>, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    ctx->gemm_max_clusters_raw = n;
    if (2 * n >= (int)(0.9 * ctx->sm_count)) ctx->gemm_max_clusters = n;
}

/* partials: NULL for the product; else the split path's per-chunk sums go there and are
 * not folded (invar_cuda_gemm_partials). */
static int gemm_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                   invar_cuda_dtype c_type, int M, int N, int K, int kc, float *partials)
{
    invar_cuda_gemm_plan pl;
    query_clusters(ctx);
    if (((uintptr_t)a | (uintptr_t)w | (uintptr_t)c) & 15)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: pointers must be 16-byte aligned");
    if (!partials && kc == GEMM_KC && gemm_narrow_plan(ctx, M, N, K, &pl))
        return gemm_narrow_run(ctx, &pl, a, w, c, c_type == INVAR_CUDA_F32, M, N, K);
    if (describe_kc(ctx, M, N, K, kc, partials != NULL, &pl))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: bad shape M=%d N=%d K=%d", M, N, K);
    struct gemm_params p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.tiles_m = (M + pl.bm - 1) / pl.bm;
    p.cluster = pl.cluster;
    if (pl.cluster) p.tiles_m /= 2; /* the raster walks pairs */
    p.tiles_n = (N + pl.bn - 1) / pl.bn;
    p.bn = pl.bn;
    p.n_chunks = pl.n_chunks;
    p.kc_tiles = kc / GEMM_BK;
    p.k_tiles = (K + GEMM_BK - 1) / GEMM_BK;
    p.split = pl.split;
    p.units = pl.units;
    p.group_m = 16;
    p.consumers = pl.bm / GEMM_MMA_M;
    p.stages = pl.stages;
    p.out_f32 = c_type == INVAR_CUDA_F32;
    p.out = c;
    p.ws = partials;
    p.entries = NULL;
    p.n_entries = NULL;
    if (pl.split && !partials) {
        size_t need = (size_t)pl.n_chunks * M * N * sizeof(float);
        int rc = invar_cuda_grow(ctx, (void **)&ctx->gemm_ws, &ctx->gemm_ws_bytes, need, 0);
        if (rc) return rc;
        p.ws = ctx->gemm_ws;
    }
    CUtensorMap ma, mb;
    if (gemm_make_map(ctx, &ma, a, M, K, pl.bm) || gemm_make_map(ctx, &mb, w, N, K, pl.cluster ? pl.bn / 2 : pl.bn))
        return INVAR_CUDA_ECUDA;
    size_t smem = wide_smem(pl.bm, pl.bn, pl.stages);
    const gemm_kernel_fn kern = wide_kernel(pl.bn, pl.cluster);
    if (smem > ctx->smem_optin)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: %zu bytes of smem > %zu", smem,
                               ctx->smem_optin);
    if (invar_cuda_check(ctx,
                         cudaFuncSetAttribute(kern,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem),
                         "gemm smem attribute"))
        return INVAR_CUDA_ECUDA;
    int threads = (p.consumers + 1) * 128;
    cudaLaunchAttribute attrs[2];
    attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[0].val.programmaticStreamSerializationAllowed = 1;
    attrs[1].id = cudaLaunchAttributeClusterDimension;
    attrs[1].val.clusterDim.x = pl.cluster ? 2 : 1;
    attrs[1].val.clusterDim.y = 1;
    attrs[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(pl.grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = attrs;
    cfg.numAttrs = 2;
    if (invar_cuda_check(ctx, cudaLaunchKernelEx(&cfg, kern, ma, mb, p),
                         "gemm launch"))
        return INVAR_CUDA_ECUDA;
    if (pl.split && !partials) {
        size_t mn = (size_t)M * N;
        cfg.gridDim = dim3((unsigned)((mn / 4 + 255) / 256));
        cfg.blockDim = dim3(256);
        cfg.dynamicSmemBytes = 0;
        cfg.numAttrs = 1;
        if (invar_cuda_check(ctx, cudaLaunchKernelEx(&cfg, gemm_fold_kernel, (const float *)p.ws,
                                                     pl.n_chunks, mn, c, p.out_f32),
                             "gemm fold launch"))
            return INVAR_CUDA_ECUDA;
    }
    return 0;
}

/* The experts' products in one launch (mixture of experts): the wide kernel in its small (64
 * rows, 1 consumer) or large (128 rows, 2 consumers) configuration at 128 columns, no split,
 * no cluster, its units the device work list's entries times the N tiles. The per-element
 * arithmetic is the plain kernel's, so a row's bits are what invar_cuda_gemm gives it. */
static int gemm_grouped_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c, invar_cuda_dtype c_type,
                           int rows, int N, int K, int E, const int32_t *entries, const int32_t *n_entries,
                           int max_entries, int bm, int kc)
{
    if (rows <= 0 || N <= 0 || K <= 0 || E <= 0 || N % 8 || K % 8 || max_entries <= 0 || kc <= 0 || kc % GEMM_BK ||
        (bm != GEMM_SMALL_BM && bm != GEMM_LARGE_BM) || (long)E * N > INT32_MAX || !entries || !n_entries)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm grouped: bad shape rows=%d N=%d K=%d E=%d bm=%d", rows, N,
                               K, E, bm);
    if (((uintptr_t)a | (uintptr_t)w | (uintptr_t)c | (uintptr_t)entries) & 15)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm grouped: pointers must be 16-byte aligned");
    struct gemm_params p = {};
    p.M = rows;
    p.N = N;
    p.K = K;
    p.tiles_n = (N + GEMM_BN - 1) / GEMM_BN;
    p.n_chunks = (K + kc - 1) / kc;
    p.kc_tiles = kc / GEMM_BK;
    p.k_tiles = (K + GEMM_BK - 1) / GEMM_BK;
    p.consumers = bm / GEMM_MMA_M;
    p.stages = bm == GEMM_SMALL_BM ? GEMM_SMALL_STAGES : GEMM_LARGE_STAGES;
    p.out_f32 = c_type == INVAR_CUDA_F32;
    p.out = c;
    p.bn = GEMM_BN;
    p.entries = (const int4 *)entries;
    p.n_entries = n_entries;
    CUtensorMap ma, mb;
    if (gemm_make_map(ctx, &ma, a, rows, K, bm) || gemm_make_map(ctx, &mb, w, E * N, K, GEMM_BN))
        return INVAR_CUDA_ECUDA;
    const size_t smem = wide_smem(bm, GEMM_BN, p.stages);
    const gemm_kernel_fn kern = wide_kernel(GEMM_BN, 0);
    if (invar_cuda_check(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                         "gemm grouped smem attribute"))
        return INVAR_CUDA_ECUDA;
    const long units = (long)max_entries * p.tiles_n;
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(units < ctx->sm_count ? units : ctx->sm_count));
    cfg.blockDim = dim3((p.consumers + 1) * 128);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    return invar_cuda_check(ctx, cudaLaunchKernelEx(&cfg, kern, ma, mb, p), "gemm grouped launch") ? INVAR_CUDA_ECUDA
                                                                                                    : 0;
}

extern "C" int invar_cuda_gemm_grouped(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                                       invar_cuda_dtype c_type, int rows, int N, int K, int E,
                                       const int32_t *entries, const int32_t *n_entries, int max_entries, int bm)
{
    return gemm_grouped_kc(ctx, a, w, c, c_type, rows, N, K, E, entries, n_entries, max_entries, bm, GEMM_KC);
}

extern "C" int invar_cuda_gemm_grouped_experiment_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w,
                                                     void *c, invar_cuda_dtype c_type, int rows, int N, int K,
                                                     int E, const int32_t *entries, const int32_t *n_entries,
                                                     int max_entries, int bm, int k_chunk)
{
    return gemm_grouped_kc(ctx, a, w, c, c_type, rows, N, K, E, entries, n_entries, max_entries, bm, k_chunk);
}

extern "C" int invar_cuda_gemm(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                               invar_cuda_dtype c_type, int M, int N, int K)
{
    return gemm_kc(ctx, a, w, c, c_type, M, N, K, GEMM_KC, NULL);
}

extern "C" int invar_cuda_gemm_partials(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w,
                                        float *partials, int M, int N, int K)
{
    if (!partials || ((uintptr_t)partials & 15))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm partials: a 16-byte aligned buffer is needed");
    return gemm_kc(ctx, a, w, NULL, INVAR_CUDA_F32, M, N, K, GEMM_KC, partials);
}

extern "C" int invar_cuda_gemm_fold(invar_cuda_ctx *ctx, const float *partials, int n_chunks, void *c,
                                    invar_cuda_dtype c_type, int M, int N)
{
    if (M <= 0 || N <= 0 || N % 8 || n_chunks <= 0 || ((uintptr_t)partials | (uintptr_t)c) & 15)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm fold: bad shape M=%d N=%d chunks=%d", M, N, n_chunks);
    size_t mn = (size_t)M * N;
    gemm_fold_kernel<<<(unsigned)((mn / 4 + 255) / 256), 256, 0, ctx->stream>>>(partials, n_chunks, mn, c,
                                                                               c_type == INVAR_CUDA_F32);
    return invar_cuda_check(ctx, cudaGetLastError(), "gemm fold launch") ? INVAR_CUDA_ECUDA : 0;
}

extern "C" int invar_cuda_gemm_experiment_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w,
                                             void *c, invar_cuda_dtype c_type, int M, int N, int K,
                                             int k_chunk)
{
    return gemm_kc(ctx, a, w, c, c_type, M, N, K, k_chunk, NULL);
}

extern "C" void invar_cuda_gemm_experiment_narrow(invar_cuda_ctx *ctx, int on, int force)
{
    ctx->gemm_narrow = on != 0;
    ctx->gemm_narrow_force = force;
}

extern "C" void invar_cuda_gemm_experiment_narrow_layout(invar_cuda_ctx *ctx, int kt_stage, int pack_a,
                                                        int max_stages)
{
    ctx->gemm_narrow_kt = kt_stage;
    ctx->gemm_narrow_pack_a = pack_a != 0;
    ctx->gemm_narrow_max_stages = max_stages;
}

extern "C" void invar_cuda_testing_gemm_narrow_reversed(invar_cuda_ctx *ctx, int on)
{
    ctx->testing_gemm_narrow_reversed = on != 0;
}

extern "C" void invar_cuda_gemm_experiment_wide_bn(invar_cuda_ctx *ctx, int bn)
{
    ctx->gemm_wide_bn = bn;
}

extern "C" void invar_cuda_gemm_experiment_cluster(invar_cuda_ctx *ctx, int on)
{
    ctx->gemm_cluster = on != 0;
}

extern "C" int invar_cuda_gemm_max_clusters(invar_cuda_ctx *ctx)
{
    query_clusters(ctx);
    return ctx->gemm_max_clusters_raw;
}
