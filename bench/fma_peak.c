/* Float32 fused multiply-add throughput probe for bench/cpu_bench.py.
 *
 * usage: fma_peak THREADS REPS
 * Each repetition starts THREADS threads at a barrier; each runs a fixed number of
 * independent FMA chains (12 vector accumulators: more than FMA latency x ports, so the
 * chains never wait on each other) and the repetition ends when the last thread is done.
 * Prints one JSON object with the aggregate GMAC/s (1e9 multiply-adds per second) of every
 * repetition, for the widest vectors the build targets (-march=native).  An F16 or F32
 * model's prefill is a chain of float32 FMAs per output, so this is its compute ceiling. */
#define _GNU_SOURCE
#include "peak_probe.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define VEC __m512
#define LANES 16
#define SPLAT _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define SUM _mm512_reduce_add_ps
#define WIDTH "zmm"
#elif defined(__FMA__)
#include <immintrin.h>
#define VEC __m256
#define LANES 8
#define SPLAT _mm256_set1_ps
#define FMA _mm256_fmadd_ps
static float SUM(__m256 v) {
    float f[8], s = 0;
    _mm256_storeu_ps(f, v);
    for (int i = 0; i < 8; i++) s += f[i];
    return s;
}
#define WIDTH "ymm"
#else
#error "fma_peak needs an x86-64 build with FMA (cc -march=native)"
#endif

#define ITERS 50000000L
#define CHAINS 12 /* accumulators in run() */

#define DECL(c) VEC a##c = SPLAT((float)(c));
#define STEP(c) a##c = FMA(a##c, x, y);
#define ADD(c) s += SUM(a##c);

static void *run(void *p) {
    peak_job *j = p;
    const VEC x = SPLAT(0.999999f), y = SPLAT(1e-7f);
    EACH(DECL)
    pthread_barrier_wait(j->start);
    for (long i = 0; i < ITERS; i++) {
        EACH(STEP)
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                         "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    float s = 0;
    EACH(ADD)
    j->sink = s;
    return NULL;
}

int main(int argc, char **argv) {
    return peak_main(argc, argv, "fma_peak", "\"vector\": \"" WIDTH "\"", run, (double)ITERS * CHAINS * LANES);
}
