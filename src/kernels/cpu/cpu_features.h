/* Runtime ISA dispatch. Within one process every kernel call uses the ISA selected
 * here, so a request's bits never depend on which path a batch happened to take. */
#ifndef INVAR_CPU_FEATURES_H
#define INVAR_CPU_FEATURES_H

typedef enum { CPU_ISA_SCALAR = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 } cpu_isa;

/* Best ISA the processor supports (AVX512 = F+BW+VL+DQ+VNNI, AVX2 = AVX2+FMA+F16C). */
cpu_isa cpu_isa_supported(void);
/* Selected ISA: the supported one, lowered by env INVAR_ISA=scalar|avx2|avx512 if set. */
cpu_isa cpu_isa_active(void);
/* Tests: select an ISA (clamped to what is supported); returns the one now active. */
cpu_isa cpu_isa_set(cpu_isa isa);
const char *cpu_isa_name(cpu_isa isa);

#endif
