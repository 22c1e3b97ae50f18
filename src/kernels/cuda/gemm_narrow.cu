/* The invariant GEMM for small M (decode: weight streaming). The wide kernel walks a tile's
 * 1024-chunks one after the other, and at M <= 64 one walk is a chain of dependent wgmmas
 * (each waits for the previous one's accumulator, ~120 clocks per k16 step) that streams the
 * weights far below the DRAM rate; splitting the chunks over CTAs costs a workspace round
 * trip and a second launch. Here one warpgroup runs G chunks of its tile at once, each in its
 * own accumulator set, so G chains are in flight; when the G chunks end their sums are added
 * to the total in chunk order. Per element this is exactly the wide kernel's arithmetic
 * (gemm_config.cuh): each P_c the same k16 steps from zero, total = 0 + P_0 + P_1 + ... */
#include <cuda.h>
#include <cuda_bf16.h>
#include "kernels/cuda/gemm_config.cuh"
#include "kernels/cuda/gemm_internal.h"
#include "kernels/cuda/gemm_store.cuh"
#include "kernels/cuda/hopper_ptx.cuh"
#include "kernels/cuda/wgmma_bf16.cuh"

struct narrow_params {
    int M, N;
    int tiles_m, units;
    int n_chunks, kc_tiles;  /* K = n_chunks * kc_tiles * GEMM_BK exactly (whole chunks) */
    int stages;
    uint32_t a_slot;         /* bytes of one A K-tile slot: its box's rows (M rounded up to 8, <= 64) x 128 */
    uint32_t a_ring;         /* bytes of the A ring (stages x KT slots; KT K-tiles per stage, consecutive in k), the B ring follows */
    int out_f32;
    int fold_reversed;       /* negative control only: the G chunks of a group fold last first */
    void *out;
};

/* Units are tiles, N-major (the M tiles of one weight tile run side by side and share it in
 * L2); a group is G consecutive chunks; inside a group the stages cycle over the chunks, one
 * K-tile of each in turn: (chunk g0, kt 0), (g0 + 1, kt 0), ..., (g0, kt 1), ... Chunks past
 * the last (when G does not divide n_chunks) get an empty stage and are never folded. */
template <int BN, int G, int KT>
__global__ void __launch_bounds__(GEMM_NARROW_THREADS, 1)
gemm_narrow_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                   const narrow_params p)
{
    extern __shared__ uint8_t smem_raw[];
    uint32_t raw = smem_u32(smem_raw);
    uint32_t base = (raw + 1023u) & ~1023u; /* 128-byte swizzled tiles: 1 KB alignment */
    const uint32_t b_slot = BN * GEMM_BK * 2, kts = KT;
    const uint32_t b_ring = base + p.a_ring;
    const uint32_t full0 = b_ring + (uint32_t)p.stages * kts * b_slot, empty0 = full0 + 8u * (uint32_t)p.stages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < p.stages; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 128); /* every consumer thread gives the stage back */
        }
        mbar_fence_init();
        tma_prefetch_desc(&tm_a);
        tma_prefetch_desc(&tm_b);
    }
    __syncthreads();
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");

    if (threadIdx.x >= 128) {
        /* Producer: one thread issues every load. */
        if (threadIdx.x != 128) return;
        uint32_t it = 0;
        for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
            const int tm = u % p.tiles_m, tn = u / p.tiles_m;
            for (int g0 = 0; g0 < p.n_chunks; g0 += G)
                for (int kl = 0; kl < p.kc_tiles; kl += KT)
#pragma unroll
                    for (int q = 0; q < G; q++, it++) {
                        uint32_t s = it % (uint32_t)p.stages, ph = (it / (uint32_t)p.stages) & 1u;
                        mbar_wait(empty0 + 8 * s, ph ^ 1u);
                        uint32_t fb = full0 + 8 * s;
                        if (g0 + q >= p.n_chunks) {
                            mbar_arrive(fb); /* nothing to load: the chain's sum is dropped */
                            continue;
                        }
                        mbar_arrive_expect_tx(fb, kts * (p.a_slot + b_slot));
                        for (uint32_t j = 0; j < kts; j++) {
                            int kx = ((g0 + q) * p.kc_tiles + kl + (int)j) * GEMM_BK;
                            tma_load_2d(base + (s * kts + j) * p.a_slot, &tm_a, kx, tm * GEMM_NARROW_BM, fb);
                            tma_load_2d(b_ring + (s * kts + j) * b_slot, &tm_b, kx, tn * BN, fb);
                        }
                    }
        }
        return;
    }

    /* Consumer warpgroup. wgmma reads 64 rows of A from a slot's start; the slot holds only
     * the box's rows, the rest are whatever follows in shared memory (other slots, or the B
     * ring): they only reach output rows >= M, which are never stored (a row of D depends on
     * its row of A only). */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int lane_row = warp * 16 + lane / 4, lane_col = 2 * (lane % 4);
    float acc[G][BN / 2];
    float total[BN / 2];
    uint32_t it = 0;
    for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
        const int tm = u % p.tiles_m, tn = u / p.tiles_m;
#pragma unroll
        for (int i = 0; i < BN / 2; i++) total[i] = 0.0f;
        for (int g0 = 0; g0 < p.n_chunks; g0 += G) {
            /* KT K-tiles of each of the G chunks per step, issued k16 step by k16 step
             * across the chains (A0 B0 .. A1 B1 ..): the tensor core takes wgmmas in order, so
             * consecutive instructions do not depend on each other. */
            for (int kl = 0; kl < p.kc_tiles; kl += KT, it += G) {
                uint32_t sa[G], sb[G];
#pragma unroll
                for (int q = 0; q < G; q++) {
                    uint32_t t = it + q, s = t % (uint32_t)p.stages;
                    mbar_wait(full0 + 8 * s, (t / (uint32_t)p.stages) & 1u);
                    sa[q] = base + s * kts * p.a_slot;
                    sb[q] = b_ring + s * kts * b_slot;
                }
                wgmma_fence();
#pragma unroll
                for (int j = 0; j < KT; j++) {
#pragma unroll
                    for (int kk = 0; kk < GEMM_BK / GEMM_MMA_K; kk++)
#pragma unroll
                        for (int q = 0; q < G; q++)
                            wgmma_bf16<BN>(acc[q], smem_desc_sw128(sa[q] + j * p.a_slot + 32 * kk),
                                           smem_desc_sw128(sb[q] + j * b_slot + 32 * kk),
                                           (kl == 0 && j == 0 && kk == 0) ? 0 : 1);
                }
                wgmma_commit();
                if (kl > 0) {
                    /* The previous step's wgmmas are done: its G stages go back. */
                    wgmma_wait1();
                    for (int q = 0; q < G; q++) mbar_arrive(empty0 + 8 * ((it - G + q) % (uint32_t)p.stages));
                }
            }
            wgmma_wait0();
            for (int q = 0; q < G; q++) mbar_arrive(empty0 + 8 * ((it - G + q) % (uint32_t)p.stages));
            /* The group's chunk sums, in chunk order (reversed only in the negative control). */
#pragma unroll
            for (int q = 0; q < G; q++) {
                const int qq = p.fold_reversed ? G - 1 - q : q;
                if (g0 + qq < p.n_chunks) {
#pragma unroll
                    for (int i = 0; i < BN / 2; i++) total[i] = __fadd_rn(total[i], acc[qq][i]);
                }
            }
        }
        gemm_store_frag<BN>(p.out, p.out_f32, p.M, p.N, total, tm * GEMM_NARROW_BM, tn * BN, lane_row, lane_col);
    }
}

/* ---- host side ------------------------------------------------------------------------ */

struct narrow_config {
    int bn, g, kt;
    const void *fn;
};

#define NARROW_ENTRY(bn, g) {bn, g, 1, (const void *)gemm_narrow_kernel<bn, g, 1>}, \
                            {bn, g, 2, (const void *)gemm_narrow_kernel<bn, g, 2>}, \
                            {bn, g, 4, (const void *)gemm_narrow_kernel<bn, g, 4>},
static const narrow_config narrow_configs[] = {GEMM_NARROW_CONFIGS(NARROW_ENTRY)};
#define N_NARROW (int)(sizeof narrow_configs / sizeof narrow_configs[0])

/* Shared-memory layout of a launch: A slots hold only the A box's rows (M <= 64: M rounded up
 * to 8), so the ring carries more weight bytes; wgmma's 64-row read from the last A slot runs
 * at most 7 KB into the B ring that follows, inside the allocation. */
struct narrow_layout {
    int stages, kt_stage;
    uint32_t a_slot, a_ring;
    size_t smem;
};

static narrow_layout narrow_layout_at(const invar_cuda_ctx *ctx, int M, int bn, int g, int kt)
{
    narrow_layout l;
    l.kt_stage = kt;
    int a_rows = M < GEMM_NARROW_BM ? (M + 7) / 8 * 8 : GEMM_NARROW_BM;
    if (!ctx->gemm_narrow_pack_a) a_rows = GEMM_NARROW_BM;
    l.a_slot = (uint32_t)a_rows * GEMM_BK * 2;
    size_t per_stage = (size_t)kt * (l.a_slot + (size_t)bn * GEMM_BK * 2) + 16;
    size_t fixed = 1024; /* alignment slack */
    int cap = ctx->gemm_narrow_max_stages > 0 ? ctx->gemm_narrow_max_stages : GEMM_NARROW_MAX_STAGES;
    int st = (int)((ctx->smem_optin - fixed) / per_stage);
    if (st > cap) st = cap;
    /* The consumer holds two steps (2G stages); the producer needs at least two more. */
    if (st < 2 * g + 2) st = 0;
    l.stages = st;
    l.a_ring = (uint32_t)st * (uint32_t)kt * l.a_slot;
    l.smem = fixed + (size_t)st * per_stage;
    return l;
}

/* K-tiles per stage: about GEMM_NARROW_STAGE_B_BYTES of weights per stage, i.e. runs of 512
 * (BN = 32), 256 (48, 64) or 128 bytes (wider) along each weight row (measured: 15.1 us against
 * 19.5 for one K-tile per stage at 4096 x 4096, M = 1, 32 x 4), fewer where the ring would
 * then be too short for G chains. stages = 0: the configuration does not fit. */
static narrow_layout narrow_layout_for(const invar_cuda_ctx *ctx, int M, int bn, int g)
{
    if (ctx->gemm_narrow_kt > 0) return narrow_layout_at(ctx, M, bn, g, ctx->gemm_narrow_kt);
    int kt = 1;
    while (kt < 4 && 2 * kt * bn * GEMM_BK * 2 <= GEMM_NARROW_STAGE_B_BYTES) kt *= 2;
    narrow_layout l = narrow_layout_at(ctx, M, bn, g, kt);
    while (l.stages == 0 && kt > 1) l = narrow_layout_at(ctx, M, bn, g, kt /= 2);
    return l;
}

/* Score of a (BN, G) choice: how full the SMs are in the last round of tiles, a small cost per
 * round (a tile's fold, store and pipeline refill), and the tensor-core slots spent on chunks
 * past the last. Chains: G x BN >= 128 keeps G x BN x 32 bytes per ~120-clock chain step
 * above twice an SM's share of the DRAM rate. */
static double narrow_score(const invar_cuda_ctx *ctx, int M, int N, int n_chunks, int bn, int g)
{
    if (g * bn < 128) return -1;
    /* Above 32 rows an A slot is 40-64 rows: four chains' stages crowd the ring (measured:
     * 4096 x 14336 at M = 64, 32 x 4 56 us, 64 x 2 43 us). */
    if (M > 32 && g > 2) return -1;
    long units = (long)((M + GEMM_NARROW_BM - 1) / GEMM_NARROW_BM) * ((N + bn - 1) / bn);
    long sms = ctx->sm_count;
    long rounds = (units + sms - 1) / sms;
    double fill = (double)units / (double)(rounds * sms);
    double slots = (double)n_chunks / (double)(((n_chunks + g - 1) / g) * g);
    return fill * (1.0 - 0.004 * (double)rounds) * (0.9 + 0.1 * slots);
}

int gemm_narrow_plan(const invar_cuda_ctx *ctx, int M, int N, int K, invar_cuda_gemm_plan *o)
{
    if (!ctx->gemm_narrow || M <= 0 || N <= 0 || K <= 0 || N % 8 || M > GEMM_NARROW_MAX_M || K % GEMM_KC) return 0;
    /* 65..128 rows: only where the wide kernel's 128 x 128 tiles leave SMs idle (measured:
     * 28672 x 4096 at M = 128, wide 70 us, narrow 76; 6144 x 4096, wide 28, narrow 21). */
    if (M > GEMM_NARROW_BM && !ctx->gemm_narrow_force && (N + GEMM_BN - 1) / GEMM_BN >= ctx->sm_count) return 0;
    int n_chunks = K / GEMM_KC, best = -1;
    double best_score = -1;
    for (int i = 0; i < N_NARROW; i++) {
        const narrow_config *c = &narrow_configs[i];
        if (c->kt != 1) continue; /* (BN, G) is chosen here; KT by the layout */
        if (ctx->gemm_narrow_force && ctx->gemm_narrow_force != c->bn * 16 + c->g) continue;
        if (narrow_layout_for(ctx, M, c->bn, c->g).stages == 0) continue;
        double sc = ctx->gemm_narrow_force ? 1.0 : narrow_score(ctx, M, N, n_chunks, c->bn, c->g);
        if (sc > best_score + 1e-9) {
            best_score = sc;
            best = i;
        }
    }
    if (best < 0 || best_score < 0) return 0;
    const narrow_config *c = &narrow_configs[best];
    o->bm = GEMM_NARROW_BM;
    o->bn = c->bn;
    o->chains = c->g;
    o->bk = GEMM_BK;
    o->k_chunk = GEMM_KC;
    o->n_chunks = n_chunks;
    o->split = 0;
    o->cluster = 0;
    o->units = ((M + GEMM_NARROW_BM - 1) / GEMM_NARROW_BM) * ((N + c->bn - 1) / c->bn);
    o->grid = o->units < ctx->sm_count ? o->units : ctx->sm_count;
    o->stages = narrow_layout_for(ctx, M, c->bn, c->g).stages;
    return o->stages > 0;
}

int gemm_narrow_run(invar_cuda_ctx *ctx, const invar_cuda_gemm_plan *pl, const uint16_t *a,
                    const uint16_t *w, void *c, int out_f32, int M, int N, int K)
{
    narrow_layout l = narrow_layout_for(ctx, M, pl->bn, pl->chains);
    const void *fn = NULL;
    for (int i = 0; i < N_NARROW; i++)
        if (narrow_configs[i].bn == pl->bn && narrow_configs[i].g == pl->chains && narrow_configs[i].kt == l.kt_stage)
            fn = narrow_configs[i].fn;
    if (!fn)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: no narrow kernel %dx%d", pl->bn, pl->chains);
    if (l.stages != pl->stages || GEMM_KC / GEMM_BK % l.kt_stage)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "gemm: narrow layout changed since the plan");
    narrow_params p;
    p.M = M;
    p.N = N;
    p.tiles_m = (M + GEMM_NARROW_BM - 1) / GEMM_NARROW_BM;
    p.units = pl->units;
    p.n_chunks = K / GEMM_KC;
    p.kc_tiles = GEMM_KC / GEMM_BK;
    p.stages = l.stages;
    p.a_slot = l.a_slot;
    p.a_ring = l.a_ring;
    p.out_f32 = out_f32;
    p.fold_reversed = ctx->testing_gemm_narrow_reversed;
    p.out = c;
    CUtensorMap ma, mb;
    if (gemm_make_map(ctx, &ma, a, M, K, (int)(l.a_slot / (GEMM_BK * 2))) ||
        gemm_make_map(ctx, &mb, w, N, K, pl->bn))
        return INVAR_CUDA_ECUDA;
    size_t smem = l.smem;
    if (invar_cuda_check(ctx, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                         "gemm narrow smem attribute"))
        return INVAR_CUDA_ECUDA;
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(pl->grid);
    cfg.blockDim = dim3(GEMM_NARROW_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    void *args[] = {&ma, &mb, &p};
    return invar_cuda_check(ctx, cudaLaunchKernelExC(&cfg, fn, args), "gemm narrow launch") ? INVAR_CUDA_ECUDA : 0;
}
