/* The invariant GEMM's configurations and the rules that keep them batch-invariant.
 *
 * An output element C[m][n] is computed as
 *     total = 0; for chunk c = 0, 1, ...: total = total + P_c
 * where P_c is the sum over k in [c*KC, (c+1)*KC) formed by the SAME wgmma sequence in every
 * configuration: K-tiles of BK = 64 (one 128-byte swizzle row), each issued as four
 * wgmma.m64nNk16 k16 steps in k order, starting from zero at the chunk's first step. An output
 * element of wgmma.m64nNk16 does not depend on N (the tile width only says how many columns
 * one instruction covers), so tiles of different widths give the same bits. Chunk
 * boundaries are absolute multiples of KC, so they do not move with M. What may change with
 * M is only the CTA tile (1 or 2 consumer warpgroups of 64 rows; the tile width), the grid,
 * and where a tile's chunks run:
 *  - wide kernel (gemm_invariant.cu, 64 x 128, 128 x 128 and 128 x 192 tiles): the chunks one after the
 *    other in one CTA (the fold happens in registers), or each on its own CTA (each P_c goes
 *    to a workspace and a fold kernel adds them in the same order);
 *  - narrow kernel (gemm_narrow.cu, M <= GEMM_NARROW_MAX_M, 64 x BN tiles with BN in
 *    GEMM_NARROW_WIDTHS): G chunks at once in one warpgroup, each in its own accumulator set
 *    (independent wgmma chains, so the chain latency is hidden without splitting K over
 *    CTAs), folded into the total in chunk order once the G chunks are done. */
#ifndef INVAR_GEMM_CONFIG_CUH
#define INVAR_GEMM_CONFIG_CUH
#include "invar_cuda.h"

#define GEMM_BK 64          /* K elements per tile = 128 bytes of bf16 = one swizzle row */
#define GEMM_MMA_M 64       /* wgmma.m64nNk16: the only MMA instructions used */
#define GEMM_MMA_K 16
#define GEMM_KC 1024        /* absolute K chunk at which partial sums restart */
#define GEMM_BN 128         /* wide kernel's default tile width: one wgmma covers the tile's N */
/* Large configuration at 192 columns: each SM pulls 24% fewer L2 bytes per multiply-add
 * than at 128 (the 128 x 128 tiles are L2-to-SM bound, notes_gemm.md). Its chunk
 * accumulators and total take 96 + 96 fp32 registers of the 240 a consumer gets. */
#define GEMM_WIDE_BN 192
#define GEMM_WIDE_STAGES 5

/* Config "small": 1 consumer warpgroup, 64-row tiles, deep pipeline (memory-bound shapes). */
#define GEMM_SMALL_CONSUMERS 1
#define GEMM_SMALL_BM (GEMM_SMALL_CONSUMERS * GEMM_MMA_M)
#define GEMM_SMALL_BK GEMM_BK
#define GEMM_SMALL_STAGES 8
/* Config "large": 2 consumer warpgroups, 128-row tiles (compute-bound shapes). */
#define GEMM_LARGE_CONSUMERS 2
#define GEMM_LARGE_BM (GEMM_LARGE_CONSUMERS * GEMM_MMA_M)
#define GEMM_LARGE_BK GEMM_BK
#define GEMM_LARGE_STAGES 6

#define GEMM_MAX_CONSUMERS 2
#define GEMM_THREADS ((GEMM_MAX_CONSUMERS + 1) * 128)

static_assert(GEMM_SMALL_BK == GEMM_BK && GEMM_LARGE_BK == GEMM_BK,
              "every configuration uses the same K-tile");
static_assert(GEMM_BN == 128 && GEMM_WIDE_BN % 16 == 0 && GEMM_WIDE_BN <= 256,
              "wide kernel: one m64nNk16 per warpgroup and k16 step (N a wgmma width)");
static_assert(GEMM_WIDE_BN / 2 * 2 <= 200, "chunk accumulators + total + addressing fit in 240 registers");
static_assert(GEMM_WIDE_BN / 2 * GEMM_BK * 2 % 1024 == 0,
              "a cluster rank's half of the B tile keeps the 1 KB swizzle alignment");
static_assert(GEMM_SMALL_BM % GEMM_MMA_M == 0 && GEMM_LARGE_BM % GEMM_MMA_M == 0,
              "M tiles are whole warpgroups of the same instruction");
static_assert(GEMM_BK % GEMM_MMA_K == 0 && GEMM_BK / GEMM_MMA_K == 4,
              "each K-tile is exactly four k16 steps, in k order");
static_assert(GEMM_KC % GEMM_BK == 0, "chunk boundaries fall on K-tile boundaries");
static_assert(GEMM_KC == INVAR_CUDA_GEMM_K_CHUNK, "the chunk the API promises tensor parallelism");
static_assert(GEMM_BK * 2 == 128, "a K-tile row is one 128-byte swizzle atom row");
static_assert(GEMM_SMALL_CONSUMERS <= GEMM_MAX_CONSUMERS &&
              GEMM_LARGE_CONSUMERS <= GEMM_MAX_CONSUMERS, "block size");


/* Narrow kernel (small M: weight streaming). One consumer warpgroup (64-row tiles), one
 * producer warp. (BN, G) pairs it is built for; G chains of BN/2 + the total's BN/2 fp32
 * registers per thread stay within the 255 a 256-thread CTA allows. */
#define GEMM_NARROW_MAX_M 128
#define GEMM_NARROW_BM GEMM_MMA_M
#define GEMM_NARROW_THREADS 256
#define GEMM_NARROW_MAX_STAGES 48
#define GEMM_NARROW_STAGE_B_BYTES 16384 /* weight bytes a pipeline stage aims at (data movement only) */
#define GEMM_NARROW_CONFIGS(X) X(32, 4) X(48, 4) X(64, 4) X(64, 2) X(96, 2) X(112, 2) X(128, 2) X(128, 1)
#define GEMM_NARROW_CHECK(bn, g)                                                                  \
    static_assert((bn) % 16 == 0 && (bn) <= 256, "wgmma.m64nNk16 width (a multiple of 16 here)"); \
    static_assert(((g) + 1) * (bn) / 2 <= 192, "accumulators + total fit the register file");    \
    static_assert((bn) * GEMM_BK * 2 % 1024 == 0, "B tiles keep the 1 KB swizzle alignment");
GEMM_NARROW_CONFIGS(GEMM_NARROW_CHECK)
static_assert(GEMM_KC / GEMM_BK % 4 == 0, "stages of 1, 2 or 4 K-tiles never straddle a chunk");
static_assert(GEMM_NARROW_BM == GEMM_MMA_M, "narrow tiles are one warpgroup of the same instruction");
static_assert(GEMM_NARROW_MAX_M <= 2 * GEMM_LARGE_BM, "narrow kernel only for decode-sized M");

#endif
