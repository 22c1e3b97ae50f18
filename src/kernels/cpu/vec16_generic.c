/* The vec16 kernels built for generic (same source and bits as the other builds). */
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/rowops_kernel.h"
#include "kernels/cpu/vec16_kernels.h"

const vec16_kernels vec16_kernels_generic = {attn_tile_any, silu_mul_any, expf_n_any, argmax_any, logsumexp_any,
                                             attn_tile_split};

/* Tests only (vec16_kernels.h). */
int vec16_testing_flip_isa = -1;

const vec16_kernels *vec16_for(cpu_isa isa) {
    if ((int)isa == vec16_testing_flip_isa) /* tests only */
        return isa == CPU_ISA_AVX512 ? &vec16_kernels_avx512_flip
               : isa == CPU_ISA_AVX2 ? &vec16_kernels_avx2_flip
                                     : &vec16_kernels_generic_flip;
    return isa == CPU_ISA_AVX512 ? &vec16_kernels_avx512 : isa == CPU_ISA_AVX2 ? &vec16_kernels_avx2 : &vec16_kernels_generic;
}
