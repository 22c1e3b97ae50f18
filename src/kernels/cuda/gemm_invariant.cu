/* Batch-invariant GEMM for Hopper: TMA loads, an mbarrier pipeline, wgmma.m64n128k16,
 * persistent CTAs. C[M,N] = A[M,K] . W[N,K]^T; the arithmetic per output element is fixed
 * by gemm_config.cuh and does not depend on M. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include "cuda_internal.h"
#include "gemm_config.cuh"
#include "hopper_ptx.cuh"
#include "wgmma_m64n128k16.cuh"

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
    void *out;
    float *ws;          /* [n_chunks][M][N] partials (split only) */
    unsigned *counters; /* [tiles_m * tiles_n] chunks finished per tile; zero between calls */
};

#define B_TILE_BYTES (GEMM_BN * GEMM_BK * 2)

static __device__ __forceinline__ void unit_tile(const struct gemm_params *p, int u, int *tm,
                                                 int *tn, int *chunk)
{
    int t = u;
    *chunk = -1;
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

static __device__ __forceinline__ void store_pair(const struct gemm_params *p, size_t off, float x0,
                                                  float x1)
{
    if (p->out_f32)
        *(float2 *)((float *)p->out + off) = make_float2(x0, x1);
    else
        *(__nv_bfloat162 *)((__nv_bfloat16 *)p->out + off) = __floats2bfloat162_rn(x0, x1);
}

/* Stores this thread's 64 accumulator values of a 64x128 block at (row0, col0). */
static __device__ __forceinline__ void store_frag(const struct gemm_params *p, const float *v,
                                                  int row0, int col0, int lane_row, int lane_col)
{
#pragma unroll
    for (int j = 0; j < GEMM_BN / 8; j++) {
        int col = col0 + 8 * j + lane_col;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = row0 + lane_row + 8 * h;
            if (row < p->M && col < p->N)
                store_pair(p, (size_t)row * p->N + col, v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
        }
    }
}

__global__ void __launch_bounds__(GEMM_THREADS, 1)
gemm_invariant_kernel(const __grid_constant__ CUtensorMap tm_a,
                      const __grid_constant__ CUtensorMap tm_b, const struct gemm_params p)
{
    extern __shared__ uint8_t smem_raw[];
    /* 128B-swizzled tiles need 1024-byte alignment; the host asked for 1 KB of slack. */
    uint32_t raw = smem_u32(smem_raw);
    uint32_t base = (raw + 1023u) & ~1023u;
    uint8_t *sbase = smem_raw + (base - raw);
    const uint32_t a_bytes = (uint32_t)p.consumers * GEMM_MMA_M * GEMM_BK * 2;
    const uint32_t stage_bytes = a_bytes + B_TILE_BYTES;
    uint64_t *bars = (uint64_t *)(sbase + (size_t)p.stages * stage_bytes);
    uint32_t full0 = smem_u32(bars), empty0 = smem_u32(bars + p.stages);
    volatile int *last_flag = (volatile int *)(bars + 2 * p.stages);

    const int wg = threadIdx.x / 128;
    const int tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < p.stages; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, p.consumers * 128);
        }
        mbar_fence_init();
        tma_prefetch_desc(&tm_a);
        tma_prefetch_desc(&tm_b);
    }
    __syncthreads();
    /* Programmatic dependent launch: let the next kernel get scheduled early, and wait here
     * for the previous kernel's results before touching global memory. */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");

    const int bm = p.consumers * GEMM_MMA_M;
    if (wg == 0) {
        /* Producer warpgroup: one thread issues every TMA load. */
        SETMAXNREG_DEC(24);
        if (tid == 0) {
        uint32_t it = 0;
        for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
            int tm, tn, chunk;
            unit_tile(&p, u, &tm, &tn, &chunk);
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
                tma_load_2d(sa, &tm_a, kt * GEMM_BK, tm * bm, fb);
                tma_load_2d(sa + a_bytes, &tm_b, kt * GEMM_BK, tn * GEMM_BN, fb);
            }
        }
        }
    } else {
    /* Consumer warpgroups: consumer c owns rows [64c, 64c+64) of the tile. */
    SETMAXNREG_INC(240);
    const int c = wg - 1;
    const int warp = tid / 32, lane = tid % 32;
    const int lane_row = warp * 16 + lane / 4;
    const int lane_col = 2 * (lane % 4);
    float acc[64];
    float total[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    uint32_t it = 0;
    for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
        int tm, tn, chunk;
        unit_tile(&p, u, &tm, &tn, &chunk);
        int c0 = 0, c1 = p.n_chunks;
        if (chunk >= 0) {
            c0 = chunk;
            c1 = chunk + 1;
        }
#pragma unroll
        for (int i = 0; i < 64; i++) total[i] = 0.0f;
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
                    wgmma_m64n128k16_bf16(acc, smem_desc_sw128(sa + 32 * kk),
                                          smem_desc_sw128(sb + 32 * kk),
                                          (kt == kt0 && kk == 0) ? 0 : 1);
                }
                wgmma_commit();
                if (kt > kt0) {
                    /* The previous K-tile's wgmmas are done: give its stage back. */
                    wgmma_wait1();
                    mbar_arrive(empty0 + 8 * prev_s);
                }
                prev_s = s;
            }
            wgmma_wait0();
            mbar_arrive(empty0 + 8 * prev_s);
            if (chunk < 0) {
#pragma unroll
                for (int i = 0; i < 64; i++) total[i] = __fadd_rn(total[i], acc[i]);
            }
        }
        const int row0 = tm * bm + c * GEMM_MMA_M;
        const int col0 = tn * GEMM_BN;
        if (chunk < 0) {
            store_frag(&p, total, row0, col0, lane_row, lane_col);
            continue;
        }
        /* Split: publish this chunk's partial sums; the last CTA of the tile to finish adds
         * the chunks of every element in chunk order (the same fold as the in-register path
         * above), whichever CTA that is. */
        float *part = p.ws + (size_t)chunk * p.M * p.N;
#pragma unroll
        for (int j = 0; j < GEMM_BN / 8; j++) {
            int col = col0 + 8 * j + lane_col;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int row = row0 + lane_row + 8 * h;
                if (row < p.M && col < p.N)
                    __stcg((float2 *)(part + (size_t)row * p.N + col),
                           make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]));
            }
        }
        const int nthr = p.consumers * 128;
        named_barrier(1, nthr);
        if (threadIdx.x == 128) {
            unsigned *ctr = p.counters + (size_t)tm * p.tiles_n + tn;
            __threadfence(); /* release: every consumer thread's partial, ordered by the barrier */
            unsigned prev = atomicAdd(ctr, 1u);
            int last = prev == (unsigned)(p.n_chunks - 1);
            if (last) *ctr = 0; /* ready for the next call */
            *last_flag = last;
        }
        named_barrier(1, nthr);
        if (!*last_flag) continue;
        __threadfence(); /* acquire: the other CTAs' partials */
        const int tr0 = tm * bm;
        for (int idx = threadIdx.x - 128; idx < bm * (GEMM_BN / 4); idx += nthr) {
            int row = tr0 + idx / (GEMM_BN / 4), col = col0 + 4 * (idx % (GEMM_BN / 4));
            if (row >= p.M || col >= p.N) continue;
            const float *q = p.ws + (size_t)row * p.N + col;
            const size_t cs = (size_t)p.M * p.N;
            float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
            for (int ch = 0; ch < p.n_chunks; ch++) {
                float4 v = __ldcg((const float4 *)(q + ch * cs));
                t.x = __fadd_rn(t.x, v.x);
                t.y = __fadd_rn(t.y, v.y);
                t.z = __fadd_rn(t.z, v.z);
                t.w = __fadd_rn(t.w, v.w);
            }
            size_t off = (size_t)row * p.N + col;
            store_pair(&p, off, t.x, t.y);
            store_pair(&p, off + 2, t.z, t.w);
        }
    }
    }
}

/* ---- host side ------------------------------------------------------------------------ */

static double wave_eff(long units, int sms)
{
    long waves = (units + sms - 1) / sms;
    return (double)units / (double)(waves * sms);
}

static int describe_kc(const invar_cuda_ctx *ctx, int M, int N, int K, int kc, invar_cuda_gemm_plan *o)
{
    if (M <= 0 || N <= 0 || K <= 0 || N % 8 || K % 8 || kc <= 0 || kc % GEMM_BK) return INVAR_CUDA_EARG;
    int sms = ctx->sm_count;
    int tn = (N + GEMM_BN - 1) / GEMM_BN;
    int n_chunks = (K + kc - 1) / kc;
    long tiles_large = (long)((M + GEMM_LARGE_BM - 1) / GEMM_LARGE_BM) * tn;
    long tiles_small = (long)((M + GEMM_SMALL_BM - 1) / GEMM_SMALL_BM) * tn;
    o->bn = GEMM_BN;
    o->bk = GEMM_BK;
    o->k_chunk = kc;
    o->n_chunks = n_chunks;
    o->split = 0;
    /* 64-row tiles for M <= 64 (weight streaming); 128-row tiles above, except when they
     * would leave a poorly filled last wave that 64-row tiles fill better. */
    int large = M > GEMM_SMALL_BM;
    if (large && M > 256 && wave_eff(tiles_large, sms) < 0.8 &&
        wave_eff(tiles_small, sms) > wave_eff(tiles_large, sms) + 0.1)
        large = 0;
    long tiles = large ? tiles_large : tiles_small;
    o->bm = large ? GEMM_LARGE_BM : GEMM_SMALL_BM;
    o->stages = large ? GEMM_LARGE_STAGES : GEMM_SMALL_STAGES;
    o->units = (int)tiles;
    /* Too few tiles to fill the chip: run the chunks of each tile on separate CTAs. The fp32
     * partials cost 8 M bytes per weight byte and chunk, so: for M <= 64 whenever the last wave
     * is poorly filled, for M <= 256 only when one partial wave is all there is. */
    int want = M <= 64 ? wave_eff(tiles, sms) < 0.9 : (M <= 256 && tiles < sms);
    if (n_chunks > 1 && want && wave_eff(tiles * n_chunks, sms) > wave_eff(tiles, sms)) {
        o->split = 1;
        o->units = (int)(tiles * n_chunks);
    }
    o->grid = o->units < sms ? o->units : sms;
    return 0;
}

extern "C" int invar_cuda_gemm_describe(const invar_cuda_ctx *ctx, int M, int N, int K,
                                        invar_cuda_gemm_plan *o)
{
    return describe_kc(ctx, M, N, K, GEMM_KC, o);
}

static int make_map(invar_cuda_ctx *ctx, CUtensorMap *m, const void *ptr, int rows, int K,
                    int box_rows)
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

static int gemm_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                   invar_cuda_dtype c_type, int M, int N, int K, int kc)
{
    invar_cuda_gemm_plan pl;
    if (describe_kc(ctx, M, N, K, kc, &pl))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: bad shape M=%d N=%d K=%d", M, N, K);
    if (((uintptr_t)a | (uintptr_t)w | (uintptr_t)c) & 15)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: pointers must be 16-byte aligned");
    struct gemm_params p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.tiles_m = (M + pl.bm - 1) / pl.bm;
    p.tiles_n = (N + GEMM_BN - 1) / GEMM_BN;
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
    p.ws = NULL;
    p.counters = NULL;
    if (pl.split) {
        size_t need = (size_t)pl.n_chunks * M * N * sizeof(float);
        int rc = invar_cuda_grow(ctx, (void **)&ctx->gemm_ws, &ctx->gemm_ws_bytes, need, 0);
        if (rc) return rc;
        size_t have = ctx->gemm_counters_n * sizeof(unsigned);
        size_t tiles = (size_t)p.tiles_m * p.tiles_n;
        rc = invar_cuda_grow(ctx, (void **)&ctx->gemm_counters, &have, tiles * sizeof(unsigned), 1);
        if (rc) return rc;
        ctx->gemm_counters_n = have / sizeof(unsigned);
        p.ws = ctx->gemm_ws;
        p.counters = ctx->gemm_counters;
    }
    CUtensorMap ma, mb;
    if (make_map(ctx, &ma, a, M, K, pl.bm) || make_map(ctx, &mb, w, N, K, GEMM_BN))
        return INVAR_CUDA_ECUDA;
    size_t smem = 1024 + (size_t)pl.stages * (pl.bm * GEMM_BK * 2 + B_TILE_BYTES) +
                  2 * pl.stages * sizeof(uint64_t) + 16;
    if (smem > ctx->smem_optin)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: %zu bytes of smem > %zu", smem,
                               ctx->smem_optin);
    if (invar_cuda_check(ctx,
                         cudaFuncSetAttribute(gemm_invariant_kernel,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem),
                         "gemm smem attribute"))
        return INVAR_CUDA_ECUDA;
    int threads = (p.consumers + 1) * 128;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(pl.grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    if (invar_cuda_check(ctx, cudaLaunchKernelEx(&cfg, gemm_invariant_kernel, ma, mb, p), "gemm launch"))
        return INVAR_CUDA_ECUDA;
    return 0;
}

extern "C" int invar_cuda_gemm(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                               invar_cuda_dtype c_type, int M, int N, int K)
{
    return gemm_kc(ctx, a, w, c, c_type, M, N, K, GEMM_KC);
}

extern "C" int invar_cuda_gemm_experiment_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w,
                                             void *c, invar_cuda_dtype c_type, int M, int N, int K,
                                             int k_chunk)
{
    return gemm_kc(ctx, a, w, c, c_type, M, N, K, k_chunk);
}
