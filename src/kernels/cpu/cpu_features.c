/* ISA detection (cpuid + xgetbv) and the process-wide ISA selection.
 * The selection is read by every kernel call, so one process uses one code path:
 * a request's bits never depend on which path its batch happened to take. */
#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* XCR0: which register states the OS saves on context switch. Without OS support the
 * instructions fault even if cpuid advertises them. */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static cpu_isa detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return CPU_ISA_SCALAR;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    const int fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return CPU_ISA_SCALAR;
    const uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return CPU_ISA_SCALAR; /* XMM + YMM state */
    if (__get_cpuid_max(0, NULL) < 7) return CPU_ISA_SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1;
    const int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1;
    const int avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    const int avx512vnni = (c >> 11) & 1;
    if (!(avx2 && fma && f16c)) return CPU_ISA_SCALAR;
    /* opmask, upper halves of ZMM0-15, ZMM16-31 */
    const int zmm_os = (xcr0 & 0xe0) == 0xe0;
    if (zmm_os && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni) return CPU_ISA_AVX512;
    return CPU_ISA_AVX2;
}

static atomic_int g_supported = -1;
static atomic_int g_active = -1;

cpu_isa cpu_isa_supported(void) {
    int s = atomic_load_explicit(&g_supported, memory_order_relaxed);
    if (s < 0) {
        s = (int)detect();
        atomic_store_explicit(&g_supported, s, memory_order_relaxed);
    }
    return (cpu_isa)s;
}

static cpu_isa clamp(cpu_isa want) {
    cpu_isa s = cpu_isa_supported();
    return want < s ? want : s;
}

static cpu_isa from_env(void) {
    cpu_isa s = cpu_isa_supported();
    const char *e = getenv("INVAR_ISA");
    if (!e || !*e) return s;
    if (!strcmp(e, "scalar")) return CPU_ISA_SCALAR;
    if (!strcmp(e, "avx2")) return clamp(CPU_ISA_AVX2);
    if (!strcmp(e, "avx512")) return clamp(CPU_ISA_AVX512);
    fprintf(stderr, "invar: ignoring unknown INVAR_ISA=%s (use scalar|avx2|avx512)\n", e);
    return s;
}

cpu_isa cpu_isa_active(void) {
    int a = atomic_load_explicit(&g_active, memory_order_relaxed);
    if (a < 0) {
        /* Racing first calls compute the same value, so a plain store is enough. */
        a = (int)from_env();
        atomic_store_explicit(&g_active, a, memory_order_relaxed);
    }
    return (cpu_isa)a;
}

cpu_isa cpu_isa_set(cpu_isa isa) {
    if ((int)isa < 0) isa = CPU_ISA_SCALAR;
    cpu_isa a = clamp(isa);
    atomic_store_explicit(&g_active, (int)a, memory_order_relaxed);
    return a;
}

static int is_amd(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" */
}

static atomic_int g_kq_pf = -1; /* 3 bits per cpu_kq: AVX-512 in bits 0..11, AVX2 in 12..23 */

#define KQ_PF(q4, q5, q6, dec) ((q4) | (q5) << 3 | (q6) << 6 | (dec) << 9)
static int kq_prefetch_profile(void) {
    const int amd = is_amd(), B = CPU_PF_BURST, R = CPU_PF_ROW, S = CPU_PF_SPREAD;
    const int avx512 = amd ? KQ_PF(0, S, 0, B) : KQ_PF(R, R, R | S, B);
    const int avx2 = KQ_PF(S, S, S, B);
    int p = avx512 | avx2 << 12;
    const char *e = getenv("INVAR_KQ_PREFETCH");
    if (e && *e && strcmp(e, "auto") != 0) {
        int all = -1;
        if (!strcmp(e, "none")) all = 0;
        else if (!strcmp(e, "row")) all = R;
        else if (!strcmp(e, "spread")) all = S;
        else if (!strcmp(e, "both")) all = R | S;
        else if (!strcmp(e, "burst")) all = B;
        else fprintf(stderr, "invar: ignoring unknown INVAR_KQ_PREFETCH=%s (use auto|row|spread|both|burst|none)\n", e);
        if (all >= 0) p = KQ_PF(all, all, all, all) * (1 | 1 << 12);
    }
    return p;
}
#undef KQ_PF

int cpu_kq_prefetch(cpu_isa isa, cpu_kq type) {
    int p = atomic_load_explicit(&g_kq_pf, memory_order_relaxed);
    if (p < 0) {
        p = kq_prefetch_profile(); /* racing first calls compute the same value */
        atomic_store_explicit(&g_kq_pf, p, memory_order_relaxed);
    }
    return (p >> ((isa == CPU_ISA_AVX2 ? 12 : 0) + 3 * (int)type)) & 7;
}

const char *cpu_isa_name(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_SCALAR: return "scalar";
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    }
    return "unknown";
}
