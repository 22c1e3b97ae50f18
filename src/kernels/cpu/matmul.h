/* y = x W^T straight on the model's (quantised) weights.
 *
 * Invariance contract: y[i][j] is computed by one fixed sequence of operations that
 * depends only on x row i, W row j and K: never on m, the other rows, the thread
 * count or how rows/columns are blocked. Tests sweep m and threads and compare bits. */
#ifndef INVAR_MATMUL_H
#define INVAR_MATMUL_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/cpu/threadpool.h"

typedef struct {
    uint32_t type;       /* ggml type id (formats/quant.h) */
    int64_t n, k;        /* W has n rows of k elements, rows stored contiguously */
    const void *data;    /* original rows (e.g. in the mmap'd file) */
    size_t row_bytes;
    void *packed;        /* kernel-private repacked copy, or NULL; owned */
    size_t packed_bytes;
} cpu_weight;

/* True if the matmul has kernels for this ggml type id (its row in matmul_traits.c). */
int cpu_matmul_supports(uint32_t type);

/* Validates type and shape (k a multiple of the block size) without repacking: a view
 * that other backends read (the CUDA backend uploads from it). Returns 0 or non-zero. */
int cpu_weight_view(cpu_weight *w, uint32_t type, int64_t n, int64_t k, const void *data,
                    char *err, size_t errlen);
/* Builds the kernels' repacked copy of a view (once; the CPU matmul needs it). */
int cpu_weight_pack(cpu_weight *w, char *err, size_t errlen);
/* cpu_weight_view + cpu_weight_pack. */
int cpu_weight_init(cpu_weight *w, uint32_t type, int64_t n, int64_t k, const void *data,
                    char *err, size_t errlen);
void cpu_weight_free(cpu_weight *w);

/* Scratch bytes cpu_matmul needs for m rows (activation quantisation etc.). */
size_t cpu_matmul_scratch_bytes(const cpu_weight *w, int64_t m);

/* y[i*ldy + j] = sum_k x[i*ldx + k] * W[j][k] for i < m, j < n. */
void cpu_matmul(threadpool *tp, const cpu_weight *w, const float *x, int64_t m, int64_t ldx,
                float *y, int64_t ldy, void *scratch);

/* cpu_matmul for up to CPU_MATMUL_MAX_MULTI weights over the same x (q/k/v, gate/up):
 * y[w][i*ldy[w] + j] = sum_k x[i*ldx + k] * W_w[j][k]. Each output gets exactly the
 * bits cpu_matmul gives; the activations are quantised once when the weights share type
 * and K, and all column tasks go to the pool in one run. */
#define CPU_MATMUL_MAX_MULTI 4
void cpu_matmul_multi(threadpool *tp, int nw, const cpu_weight *const *w, const float *x, int64_t m,
                      int64_t ldx, float *const *y, const int64_t *ldy, void *scratch);

/* Independent matmuls, each with its own weight, activations and output (the experts of
 * an MoE layer, the heads of MLA's absorbed projections), in one pool run: the column
 * tasks of every group in turn. Each output gets exactly the bits cpu_matmul gives it
 * alone; a group with m 0 is skipped. A group whose x, m, ldx, type and k equal the
 * previous group's reuses its quantised activations. */
typedef struct {
    const cpu_weight *w;
    const float *x;
    int64_t m, ldx;
    float *y;
    int64_t ldy;
} cpu_matmul_group;
#define CPU_MATMUL_MAX_GROUPS 512
void cpu_matmul_grouped(threadpool *tp, int n, const cpu_matmul_group *g, void *scratch);
/* Scratch for n groups of w's type and k holding total_m rows in all. */
size_t cpu_matmul_grouped_scratch_bytes(const cpu_weight *w, int64_t total_m, int64_t n);

/* NEGATIVE CONTROL, tests only: splits K into a number of partial sums that grows with
 * m and adds them in float. Same maths, different rounding per m: NOT batch-invariant. */
void cpu_matmul_splitk_by_m(threadpool *tp, const cpu_weight *w, const float *x, int64_t m,
                            int64_t ldx, float *y, int64_t ldy, void *scratch);

#endif
