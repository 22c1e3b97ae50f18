/* Tests only: the vec16 kernels built for avx2 with the lowest bit of lane 5 of every exp
 * flipped (vec16.h: v16_kernel_exp), the negative control of the cross-ISA comparisons
 * (vec16_kernels.h: vec16_testing_flip_isa). The real kernels are vec16_avx2.c. */
#define VEC16_TESTING_FLIP 1
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/rowops_kernel.h"
#include "kernels/cpu/vec16_kernels.h"

const vec16_kernels vec16_kernels_avx2_flip = {attn_tile_any, silu_mul_any, expf_n_any, argmax_any, logsumexp_any,
                                               attn_tile_split};
