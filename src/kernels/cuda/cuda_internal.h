/* Internal state of the CUDA backend, shared by its .cu files. */
#ifndef INVAR_CUDA_INTERNAL_H
#define INVAR_CUDA_INTERNAL_H
#include <cuda_runtime.h>
#include <stdio.h>
#include "invar_cuda.h"
#include "kernels/cuda/invar_cuda_testing.h"

struct invar_cuda_ctx {
    int device;
    int sm_count;
    size_t smem_optin;          /* max dynamic shared memory per block */
    cudaStream_t stream;
    void *cublas;               /* cublasHandle_t, created on first use */
    void *cublas_ws;            /* its workspace: ours, so that graph capture allocates nothing */
    void *encode_tiled;         /* cuTensorMapEncodeTiled, from the driver entry point */
    float *gemm_ws;             /* split-K partials [chunk][M][N] */
    size_t gemm_ws_bytes;
    int gemm_cluster;           /* use 2-CTA clusters with B multicast where the plan allows */
    int gemm_max_clusters;      /* resident 2-CTA clusters usable (-1: not asked yet, 0: off) */
    int gemm_max_clusters_raw;  /* what the occupancy query said */
    int gemm_wide_bn;           /* experiments: 0 the planner's choice, 128 or 192 forced (large tiles) */
    int gemm_narrow;            /* 1: small M runs on the narrow multi-chain kernel (gemm_narrow.cu) */
    int gemm_narrow_force;      /* experiments: 0 the planner's choice, else BN * 16 + G */
    int gemm_narrow_kt;         /* experiments: K-tiles per stage (0: GEMM_NARROW_KT_STAGE) */
    int gemm_narrow_pack_a;     /* 1: A slots sized to the A box (the default), 0: 64 rows */
    int gemm_narrow_max_stages; /* experiments: ring depth cap (0: GEMM_NARROW_MAX_STAGES) */
    int testing_gemm_narrow_reversed; /* negative control: the narrow kernel folds a group last first */
    int testing_norm_by_rows;   /* negative controls (invar_cuda_testing.h), 0 in real use */
    int testing_merge_by_batch;
    int attn_mma;               /* 1: the previous mma.sync attention kernel (INVAR_CUDA_ATTN=mma) */
    int attn_prefill;           /* items of > 64 rows: 0 TMA kernel, 1 with turns, 2 cp.async kernel, 3 persistent */
    int attn_pv128;             /* head_dim 128: P V as one m64n128k16 per k16 step (else two m64n64k16) */
    int testing_fold_by_rows;   /* negative control: the TMA kernel's in-CTA fold follows the tile */
    int attn_decode_ring;       /* 4 (default): every decode launch on the TMA kernel (persistent), 5: on
                                 * its one-consumer variant (5 stages); 0: the wgmma kernel's cp.async
                                 * rings (2 CTAs/SM); 6: its split ones with 6 stages, 1 CTA/SM */
    int attn_merge_kernel;      /* split launches' merge: 0 last CTA, 1 merge kernel, 2 by context */
    int32_t *attn_done;         /* the in-kernel merge's tile counters, zero between launches */
    float *attn_ws;             /* split-KV partials */
    size_t attn_ws_bytes;
    char err[256];
};

/* Tile counters of the in-kernel attention merge (one per first token and KV head of a
 * launch; larger launches use the merge kernel): 512 KB. */
#define INVAR_CUDA_ATTN_DONE_SLOTS (1 << 17)
/* attn_merge_kernel: 0 split decode launches merge in each tile's last CTA (INVAR_CUDA_ATTN_MERGE
 * =cta), 1 in the merge kernel (=kernel), 2 (default) in the last CTA while the launch's block
 * table holds at most INVAR_CUDA_ATTN_MERGE_CTA_MAX_CTX positions a sequence. Measured on an
 * H100 (bench/results/cuda_attention_merge_cta_*): the last CTA saves the merge launch (1 x 1k
 * -14%, 1 x 8k -5%, 16 x 4k -2%, 256 x 1k -1%), at 32k contexts its tail walk of 64 splits was
 * +2% (1 x 32k, 16 x 32k). Speed only: same bits either way. */
#define INVAR_CUDA_ATTN_MERGE_KERNEL_DEFAULT 2
#define INVAR_CUDA_ATTN_MERGE_CTA_MAX_CTX 16384

/* INVAR_CUDA_ATTN_DECODE_RING, read once (speed only, same bits): unset or "tma" 4, the TMA
 * producer kernel on a persistent grid for every decode launch; "tma1" 5, its one-consumer
 * variant; "wg" 0, the wgmma kernel's cp.async rings (the default until 2026-12-07); "6" 6, as
 * "wg" with split launches on a 6-stage one-CTA-per-SM ring. */
int invar_cuda_attn_decode_ring_env(void);

/* Records a message and returns code. */
int invar_cuda_fail(invar_cuda_ctx *ctx, int code, const char *fmt, ...);
/* Checks a runtime status; on failure records it with `what` and returns ECUDA. */
int invar_cuda_check(invar_cuda_ctx *ctx, cudaError_t st, const char *what);
/* Ensures *buf holds at least `bytes` (synchronising and reallocating when it grows). */
int invar_cuda_grow(invar_cuda_ctx *ctx, void **buf, size_t *have, size_t bytes, int zero);

#endif
