/* int8 dot-product throughput probe for bench/cpu_bench.py.
 *
 * usage: int8_peak THREADS REPS
 * Like fma_peak.c, but each step is one int8 dot-product instruction on 12 independent
 * accumulators: vpdpbusd (AVX-512 VNNI: 16 lanes x 4 u8*s8 products summed into int32,
 * 64 multiply-adds), or on a build without it vpmaddubsw (AVX2: 16 lanes x 2 u8*s8
 * products into int16, 32 multiply-adds; the AVX2 kernels' dot instruction). Prints one
 * JSON object with the aggregate GMAC/s (1e9 int8 multiply-adds per second) of every
 * repetition. The quantised matmuls (Q4_0 ... Q6_K) spend their prefill in this
 * instruction, so this is their compute ceiling. */
#define _GNU_SOURCE
#include "peak_probe.h"

#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#define VEC __m512i
#define MACS_PER_STEP 64 /* 16 lanes x 4 byte products */
#define INSN "vpdpbusd zmm"
#define SET1_8 _mm512_set1_epi8
#define SET1_32 _mm512_set1_epi32
#define DOT(a, u, s) _mm512_dpbusd_epi32(a, u, s)
#define HSUM(a) _mm512_reduce_add_epi32(a)
#elif defined(__AVX2__)
#define VEC __m256i
#define MACS_PER_STEP 32 /* 16 lanes x 2 byte products */
#define INSN "vpmaddubsw ymm"
#define SET1_8 _mm256_set1_epi8
#define SET1_32 _mm256_set1_epi32
/* The chain runs through the unsigned operand, so no step can be hoisted. */
#define DOT(a, u, s) ((void)(u), _mm256_maddubs_epi16(a, s))
#define HSUM(a) _mm256_extract_epi32(a, 0)
#else
#error "int8_peak needs an x86-64 build with AVX-512 VNNI or AVX2 (cc -march=native)"
#endif

#define ITERS 50000000L
#define CHAINS 12

/* Named accumulators kept in registers by the empty asm (see peak_probe.h). */
#define DECL(c) VEC a##c = SET1_32(c);
#define STEP(c) a##c = DOT(a##c, u, s);
#define ADD(c) sum += HSUM(a##c);

static void *run(void *p) {
    peak_job *j = p;
    const VEC u = SET1_8(3), s = SET1_8(-1);
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
    return peak_main(argc, argv, "int8_peak", "\"instruction\": \"" INSN "\"", run,
                     (double)ITERS * CHAINS * MACS_PER_STEP);
}
