/* The vec16 kernels (attention tile, SiLU, exp over an array, argmax, log-sum-exp), built once per ISA from
 * one source each (attention_kernel.h, rowops_kernel.h) and picked at run time by the
 * process-wide ISA selection. All builds give the same bits; tests compare them. */
#ifndef INVAR_VEC16_KERNELS_H
#define INVAR_VEC16_KERNELS_H
#include <stdint.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"

#define ATTN_TILE_QUERIES 8 /* = ATTN_QMAX of attention_kernel.h */

typedef struct {
    /* Query heads h0 .. h0+G-1 (all of KV head kvh) of n_jobs jobs that share one
     * sequence's KV cache; G * n_jobs <= ATTN_TILE_QUERIES. */
    void (*attn_tile)(const attn_shape *sh, const attn_job *jobs, int n_jobs, int64_t kvh, int64_t h0, int G);
    void (*silu_mul)(const float *gate, const float *up, float *out, int64_t n);
    void (*expf_n)(const float *x, float sub, float *y, int64_t n);
    int64_t (*argmax)(const float *x, int64_t n);
    float (*logsumexp)(const float *x, int64_t n);
    /* Tests only: attn_tile with `split` keys per split (the negative control
     * ATTN_SPLIT_BY_BATCH, attention.h); a separate instance, so attn_tile is untouched. */
    void (*attn_tile_split)(const attn_shape *sh, const attn_job *jobs, int n_jobs, int64_t kvh, int64_t h0, int G,
                            int64_t split);
} vec16_kernels;

extern const vec16_kernels vec16_kernels_generic, vec16_kernels_avx2, vec16_kernels_avx512;
/* Tests only (vec16_flip_*.c): each build's kernels with the lowest bit of lane 5 of every
 * exp flipped (vec16.h: v16_kernel_exp), so its exp, SiLU, log-sum-exp and attention give
 * other bits (argmax, which has no exp, is the real one). */
extern const vec16_kernels vec16_kernels_generic_flip, vec16_kernels_avx2_flip, vec16_kernels_avx512_flip;

/* NEGATIVE CONTROL of the cross-ISA comparisons, tests only: when set to an ISA (a cpu_isa
 * value), vec16_for returns that ISA's flipped kernels, as if that build alone computed
 * one lane differently; -1 (the default): the real kernels everywhere. */
extern int vec16_testing_flip_isa;

/* The build for an ISA; vec16_active() for the selected one (cpu_isa_active()). */
const vec16_kernels *vec16_for(cpu_isa isa);
static inline const vec16_kernels *vec16_active(void) { return vec16_for(cpu_isa_active()); }

#endif
