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

/* Software prefetch of the weight stream in the decode kernels of `isa` (CPU_ISA_AVX2 or
 * CPU_ISA_AVX512; CPU_KQ_DECODED: the AVX2 kernel of the decoded types): speed only, the
 * same bits whichever is chosen. CPU_PF_ROW: the next column group's record into L2,
 * spread over the current record's steps; CPU_PF_SPREAD: the current record PF_DIST ahead
 * into L1, spread the same way; CPU_PF_BURST: all of its lines PF_DIST ahead at once
 * (CPU_KQ_DECODED only). What is fastest depends on the core's own prefetchers
 * (bench/README.md, 2026-12-07): AVX-512 on an Intel Xeon ROW for Q4_K / Q5_K and both for
 * Q6_K, on an AMD Zen 4 none for Q4_K and Q6_K (ROW cost Q6_K a third of its rate) and
 * SPREAD for Q5_K (none halved it); AVX2 SPREAD, the decoded types BURST. Default by CPU
 * vendor; env INVAR_KQ_PREFETCH=row|spread|both|burst|none sets every type of both ISAs. */
enum { CPU_PF_ROW = 1, CPU_PF_SPREAD = 2, CPU_PF_BURST = 4 };
typedef enum { CPU_KQ_Q4_K = 0, CPU_KQ_Q5_K = 1, CPU_KQ_Q6_K = 2, CPU_KQ_DECODED = 3 } cpu_kq;
int cpu_kq_prefetch(cpu_isa isa, cpu_kq type);

#endif
