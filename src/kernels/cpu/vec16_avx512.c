/* The vec16 kernels built for avx512 (same source and bits as the other builds). */
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/rowops_kernel.h"
#include "kernels/cpu/vec16_kernels.h"

const vec16_kernels vec16_kernels_avx512 = {attn_tile_any, silu_mul_any, expf_n_any, argmax_any, logsumexp_any,
                                            attn_tile_split};
