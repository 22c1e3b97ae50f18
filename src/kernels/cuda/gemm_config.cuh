/* The invariant GEMM's configurations and the rules that keep them batch-invariant.
 *
 * An output element C[m][n] is computed as
 *     total = 0; for chunk c = 0, 1, ...: total = total + P_c
 * where P_c is the sum over k in [c*KC, (c+1)*KC) formed by the SAME wgmma sequence in every
 * configuration: K-tiles of BK = 64 (one 128-byte swizzle row), each issued as four
 * wgmma.m64n128k16 steps in k order, starting from zero at the chunk's first step. Chunk
 * boundaries are absolute multiples of KC, so they do not move with M. What may change with
 * M is only the CTA tile in M (1 or 2 consumer warpgroups of 64 rows), the grid, and whether a
 * tile's chunks run in one CTA (the fold happens in registers) or in several (each chunk's
 * P_c goes to a workspace and the last CTA to finish folds them in the same order). */
#ifndef INVAR_GEMM_CONFIG_CUH
#define INVAR_GEMM_CONFIG_CUH

#define GEMM_BK 64          /* K elements per tile = 128 bytes of bf16 = one swizzle row */
#define GEMM_MMA_M 64       /* wgmma.m64n128k16: the only MMA instruction used */
#define GEMM_MMA_N 128
#define GEMM_MMA_K 16
#define GEMM_KC 1024        /* absolute K chunk at which partial sums restart */
#define GEMM_BN 128         /* every config: one wgmma covers the tile's N */

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
static_assert(GEMM_BN == GEMM_MMA_N, "one m64n128k16 per warpgroup and k16 step in every config");
static_assert(GEMM_SMALL_BM % GEMM_MMA_M == 0 && GEMM_LARGE_BM % GEMM_MMA_M == 0,
              "M tiles are whole warpgroups of the same instruction");
static_assert(GEMM_BK % GEMM_MMA_K == 0 && GEMM_BK / GEMM_MMA_K == 4,
              "each K-tile is exactly four k16 steps, in k order");
static_assert(GEMM_KC % GEMM_BK == 0, "chunk boundaries fall on K-tile boundaries");
static_assert(GEMM_KC == INVAR_CUDA_GEMM_K_CHUNK, "the chunk the API promises tensor parallelism");
static_assert(GEMM_BK * 2 == 128, "a K-tile row is one 128-byte swizzle atom row");
static_assert(GEMM_SMALL_CONSUMERS <= GEMM_MAX_CONSUMERS &&
              GEMM_LARGE_CONSUMERS <= GEMM_MAX_CONSUMERS, "block size");

#endif
