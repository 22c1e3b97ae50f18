/* The vec16 kernels (attention tile, SiLU, exp over an array, argmax, log-sum-exp), built once per ISA from
 * one source each (attention_kernel.h, rowops_kernel.h) and picked at run time by the
 * process-wide ISA selection. All builds give the same bits; tests compare them. */
#ifndef INVAR_VEC16_KERNELS_H
#define INVAR_VEC16_KERNELS_H
#include <stdint.h>

#include "attention.h"
#include "cpu_features.h"

#define ATTN_TILE_QUERIES 8 /* = ATTN_QMAX of attention_kernel.h */

typedef struct {
    /* Query heads h0 .. h0+G-1 (all of KV head kvh) of n_jobs jobs that share one
     * sequence's KV cache; G * n_jobs <= ATTN_TILE_QUERIES. */
    void (*attn_tile)(const attn_shape *sh, const attn_job *jobs, int n_jobs, int64_t kvh, int64_t h0, int G);
    void (*silu_mul)(const float *gate, const float *up, float *out, int64_t n);
    void (*expf_n)(const float *x, float sub, float *y, int64_t n);
    int64_t (*argmax)(const float *x, int64_t n);
    float (*logsumexp)(const float *x, int64_t n);
} vec16_kernels;

extern const vec16_kernels vec16_kernels_generic, vec16_kernels_avx2, vec16_kernels_avx512;

/* The build for an ISA; vec16_active() for the selected one (cpu_isa_active()). */
const vec16_kernels *vec16_for(cpu_isa isa);
static inline const vec16_kernels *vec16_active(void) { return vec16_for(cpu_isa_active()); }

#endif
