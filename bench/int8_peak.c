/* int8 dot-product throughput probe for bench/cpu_bench.py.
 *
 * usage: int8_peak THREADS REPS
 * Like fma_peak.c, but each step is one vpdpbusd (AVX-512 VNNI: 16 lanes x 4 u8*s8
 * products summed into int32, 64 multiply-adds) on 12 independent accumulators. Prints
 * one JSON object with the aggregate GMAC/s (1e9 int8 multiply-adds per second) of every
 * repetition. The quantised matmuls (Q4_0 ... Q6_K) spend their prefill in this
 * instruction, so this is their compute ceiling. */
#define _GNU_SOURCE
#include "peak_probe.h"

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#include <immintrin.h>
#else
#error "int8_peak needs an x86-64 build with AVX-512 VNNI (cc -march=native)"
#endif

#define ITERS 50000000L
#define CHAINS 12
#define MACS_PER_STEP 64 /* 16 lanes x 4 byte products */

/* Named accumulators kept in registers by the empty asm (see peak_probe.h). */
#define DECL(c) __m512i a##c = _mm512_set1_epi32(c);
#define STEP(c) a##c = _mm512_dpbusd_epi32(a##c, u, s);
#define ADD(c) sum += _mm512_reduce_add_epi32(a##c);

static void *run(void *p) {
    peak_job *j = p;
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-1);
    EACH(DECL)
    pthread_barrier_wait(j->start);
    for (long i = 0; i < ITERS; i++) {
        EACH(STEP)
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                         "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    long long sum = 0;
    EACH(ADD)
    j->sink = (double)sum;
    return NULL;
}

int main(int argc, char **argv) {
    return peak_main(argc, argv, "int8_peak", "\"instruction\": \"vpdpbusd zmm\"", run,
                     (double)ITERS * CHAINS * MACS_PER_STEP);
}
