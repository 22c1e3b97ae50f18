/* Tensor parallelism's layout of a dense transformer over TP GPUs (docs/tensor-parallel.md):
 * which query / KV heads, FFN columns and vocabulary rows each rank holds, and how each
 * K-reducing product (attention output, FFN down) is split so that every output element
 * goes through the additions it goes through on one GPU:
 *   TP_ROW_CHUNKS   K is split at absolute chunk boundaries (INVAR_CUDA_GEMM_K_CHUNK), the
 *                   first n_chunks % TP ranks one chunk more; the ranks' per-chunk partials
 *                   are gathered and folded in chunk order;
 *   TP_COLUMN_GATHER fewer chunks than ranks (a chunk's sum is one sequential accumulation
 *                   and cannot be split): the product's input is all-gathered and each rank
 *                   computes its share of the output columns over the whole K.
 * Pure host arithmetic: the multi-GPU engine and the CPU tests both read it. */
#ifndef INVAR_TP_PLAN_H
#define INVAR_TP_PLAN_H
#include <stddef.h>
#include <stdint.h>
#include "model/config.h"

#define TP_MAX 8
#define TP_K_CHUNK 1024 /* the invariant GEMM's absolute K chunk (INVAR_CUDA_GEMM_K_CHUNK) */

typedef struct {
    int64_t lo, hi; /* [lo, hi) */
} tp_range;

typedef enum { TP_ROW_CHUNKS, TP_COLUMN_GATHER } tp_split;

typedef struct {
    int tp;
    tp_range heads[TP_MAX];    /* query heads of each rank (QKV is column-parallel by heads) */
    tp_range kv_heads[TP_MAX]; /* KV heads each rank holds: those its query heads read (shared
                                  by neighbouring ranks when n_head_kv < TP) */
    tp_split attn_out;         /* attn_output, K = n_head head_dim */
    tp_range attn_out_cols[TP_MAX]; /* TP_COLUMN_GATHER: the output columns of each rank */
    tp_split ffn_down;         /* ffn_down, K = n_ff */
    tp_range ffn_cols[TP_MAX]; /* gate / up output columns of each rank = its K range of down */
    tp_range down_cols[TP_MAX];     /* TP_COLUMN_GATHER: down's output columns of each rank */
    tp_range vocab[TP_MAX];    /* output-head rows of each rank (column-parallel) */
} tp_plan;

/* The first n % tp ranks one unit more: rank r's units [lo, hi) of n. */
tp_range tp_share(int64_t n, int tp, int r);
/* The plan for a dense model (no MoE, no MLA) at degree tp (1..TP_MAX); -1 with a message
 * when the shapes cannot be split (heads not divisible, head_dim not dividing the chunk). */
int tp_plan_make(const model_config *c, int tp, tp_plan *p, char *err, size_t errlen);
/* Bytes one GPU sends for one K-reducing product of M rows and N outputs: the invariant fold
 * (each rank's per-chunk fp32 partials of the others' 1 / TP of the outputs, then the folded
 * bf16 outputs all-gathered), and, for comparison, an NCCL all-reduce of bf16 outputs
 * (reduce-scatter + all-gather). */
double tp_fold_bytes(int tp, int64_t M, int64_t N, int64_t n_chunks);
double tp_allreduce_bytes(int tp, int64_t M, int64_t N);

#endif
