/* What the CUDA kernels offer tests, benchmarks and negative controls only: experiments,
 * plan descriptions, data helpers and deliberately non-invariant switches. Not part of the
 * public API (include/invar_cuda.h); include paths: src/kernels/cuda. */
#ifndef INVAR_CUDA_TESTING_H
#define INVAR_CUDA_TESTING_H
#include "invar_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GEMM experiments and plans ---- */
/* Benchmark experiment only: the same kernel with another absolute K chunk (a multiple of
 * 64). Results are invariant for a fixed k_chunk but differ between k_chunk values. */
int invar_cuda_gemm_experiment_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                                  invar_cuda_dtype c_type, int M, int N, int K, int k_chunk);

/* The grouped expert GEMM at another absolute K chunk (engine negative control). */
int invar_cuda_gemm_grouped_experiment_kc(invar_cuda_ctx *ctx, const uint16_t *a, const uint16_t *w, void *c,
                                          invar_cuda_dtype c_type, int rows, int N, int K, int E,
                                          const int32_t *entries, const int32_t *n_entries, int max_entries, int bm,
                                          int k_chunk);

/* Benchmark experiment only: 0 turns the 2-CTA cluster path off (same results, other speed). */
void invar_cuda_gemm_experiment_cluster(invar_cuda_ctx *ctx, int on);
/* Benchmark experiment and test: bn = 128 or 192 pins the large configuration's tile width
 * wherever it runs unsplit (0: the planner's choice). Same results, other speed. */
void invar_cuda_gemm_experiment_wide_bn(invar_cuda_ctx *ctx, int bn);
/* 2-CTA clusters of the large GEMM configuration that can be resident at once. */
int invar_cuda_gemm_max_clusters(invar_cuda_ctx *ctx);

/* Benchmark experiment only: on = 0 runs small M on the wide kernel too; force = BN * 16 + G
 * pins the narrow kernel's tile width and chain count where it runs (0: the planner's
 * choice). Same results, other speed. */
void invar_cuda_gemm_experiment_narrow(invar_cuda_ctx *ctx, int on, int force);
/* Benchmark experiment only: the narrow kernel's data movement. kt_stage K-tiles per stage
 * (1, 2, 4, 8, 16; 0 the default), pack_a 1 sizes A slots to the A box (the default), 0 to 64
 * rows; max_stages caps the ring (0 the default). Same results, other speed. */
void invar_cuda_gemm_experiment_narrow_layout(invar_cuda_ctx *ctx, int kt_stage, int pack_a, int max_stages);
/* Negative control: the narrow kernel adds each group's chunk sums last first, so rows of
 * small-M products no longer match the same rows computed at large M. */
void invar_cuda_testing_gemm_narrow_reversed(invar_cuda_ctx *ctx, int on);

/* How invar_cuda_gemm would run a shape (for tests and benchmarks). */
typedef struct {
    int bm, bn, bk;        /* tile; bk and the per-element MMA arithmetic are the same for every shape */
    int chains;            /* narrow kernel: chunks in flight at once per tile (0: the wide kernel) */
    int k_chunk;           /* absolute K chunk: partial sums restart at every multiple of it */
    int n_chunks;
    int split;             /* 1: chunks of one tile run on different CTAs */
    int units, grid, stages;
    int cluster;           /* 1: 2-CTA clusters share B tiles by TMA multicast (same arithmetic) */
} invar_cuda_gemm_plan;
int invar_cuda_gemm_describe(const invar_cuda_ctx *ctx, int M, int N, int K,
                             invar_cuda_gemm_plan *out);

/* ---- attention kernels ---- */
/* on = 1: the previous mma.sync attention kernel, 0: the wgmma kernel (the default; also
 * INVAR_CUDA_ATTN=mma in the environment picks the old one at init); -1 only asks. Returns
 * the previous setting. Both are invariant; their bits differ from each other's. */
int invar_cuda_testing_attn_mma(invar_cuda_ctx *ctx, int on);
/* Items of more than 64 rows (prefill tiles): 0 the TMA kernel (the default), 1 the same with
 * its consumer warpgroups taking turns on the tensor cores, 2 the cp.async kernel
 * (all threads copy), 3 the TMA kernel on a persistent grid (one CTA per SM striding over the
 * items); other values only ask. Returns the previous setting. Same bits in every mode. */
int invar_cuda_testing_attn_prefill(invar_cuda_ctx *ctx, int mode);
/* Negative control: the TMA kernel folds a tile's KV splits with a fused multiply-add when the
 * tile holds an odd number of tokens, so a row's bits follow the tile it landed in. */
void invar_cuda_testing_attn_fold_by_rows(invar_cuda_ctx *ctx, int on);
/* The copy ring of launches of up to 64 rows (decode): 3 stages, two CTAs per SM (the
 * default; split launches, unsplit ones 2 stages), 6 stages, one CTA per SM (split launches),
 * 4: every such launch on the TMA producer kernel (4 stages, one CTA per SM, a persistent
 * grid, its second consumer warpgroup idle), 5: the same on its one-consumer variant (5
 * stages); other values only ask. Returns the previous setting. Same bits either way (the ring
 * changes when copies are issued, not what a row computes). */
int invar_cuda_testing_attn_decode_ring(invar_cuda_ctx *ctx, int stages);
/* Split items are runs of this many consecutive KV splits (one CTA walks a run, writing each
 * split's partial); 0: chosen from the batch (the default), -1 only asks. Process-wide (the
 * work lists are built without a context). Returns the previous setting. Same bits. */
int invar_cuda_testing_attn_split_group(int group);
/* 1: split launches of the wgmma kernel merge their partials in the merge kernel after it;
 * 0: in the kernel's last CTA of each tile; 2: by context (the default, cuda_internal.h); -1
 * only asks. Returns the previous setting. Same bits either way (the same fold of the same
 * partials). */
int invar_cuda_testing_attn_merge_kernel(invar_cuda_ctx *ctx, int on);

/* ---- helpers for tests and benchmarks ------------------------------------------------ */
/* Fills n values with uniform random numbers in [-scale, scale) from (seed, index). */
int invar_cuda_fill_random_bf16(invar_cuda_ctx *ctx, uint16_t *p, size_t n, uint64_t seed, float scale);
int invar_cuda_fill_random_f32(invar_cuda_ctx *ctx, float *p, size_t n, uint64_t seed, float scale);
/* Reads `bytes` of buf (a multiple of 16) on the context's stream, leaving the L2 full of
 * clean lines from it: a cache flush for timing that leaves no dirty lines to write back. */
int invar_cuda_read_flush(invar_cuda_ctx *ctx, const void *buf, size_t bytes, int *sink);
/* Counts rows (of row_bytes each, row_bytes % 4 == 0) where a and b differ in any bit;
 * synchronises and returns the count, or a negative error. */
long invar_cuda_rows_differ(invar_cuda_ctx *ctx, const void *a, const void *b, size_t rows,
                            size_t row_bytes);

/* ---- negative controls: each makes a real kernel's reduction depend on the batch ---- */
/* on: RMSNorm adds its warps' partial sums serially, last warp first, when the call has an
 * odd number of rows, so a row's bits depend on M (test_cuda_rows shows its check then fails). */
void invar_cuda_testing_norm_by_rows(invar_cuda_ctx *ctx, int on);
/* on: attention's merge folds a token's KV splits last to first when the launch holds an odd
 * number of tokens, so a token's bits depend on what it is batched with (test_cuda_attention). */
void invar_cuda_testing_merge_by_batch(invar_cuda_ctx *ctx, int on);

#ifdef __cplusplus
}
#endif
#endif
