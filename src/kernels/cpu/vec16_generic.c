/* The vec16 kernels built for generic (same source and bits as the other builds). */
#include "attention_kernel.h"
#include "rowops_kernel.h"
#include "vec16_kernels.h"

const vec16_kernels vec16_kernels_generic = {attn_tile_any, silu_mul_any, expf_n_any, argmax_any, logsumexp_any};

const vec16_kernels *vec16_for(cpu_isa isa) {
    return isa == CPU_ISA_AVX512 ? &vec16_kernels_avx512 : isa == CPU_ISA_AVX2 ? &vec16_kernels_avx2 : &vec16_kernels_generic;
}
