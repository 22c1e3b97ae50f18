/* int8 dot-product throughput probe for bench/cpu_bench.py.
 *
 * usage: int8_peak THREADS REPS
 * Like fma_peak.c, but each step is one vpdpbusd (AVX-512 VNNI: 16 lanes x 4 u8*s8
 * products summed into int32, 64 multiply-adds) on 12 independent accumulators. Prints
 * one JSON object with the aggregate GMAC/s (1e9 int8 multiply-adds per second) of every
 * repetition. The quantised matmuls (Q4_0 ... Q6_K) spend their prefill in this
 * instruction, so this is their compute ceiling. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#include <immintrin.h>
#else
#error "int8_peak needs an x86-64 build with AVX-512 VNNI (cc -march=native)"
#endif

#define ITERS 50000000L
#define CHAINS 12
#define MACS_PER_STEP 64 /* 16 lanes x 4 byte products */

typedef struct {
    pthread_barrier_t *start;
    long long sink;
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Named accumulators kept in registers by the empty asm (see fma_peak.c). */
#define EACH(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define DECL(c) __m512i a##c = _mm512_set1_epi32(c);
#define STEP(c) a##c = _mm512_dpbusd_epi32(a##c, u, s);
#define ADD(c) sum += _mm512_reduce_add_epi32(a##c);

static void *run(void *p) {
    job *j = p;
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
    j->sink = sum;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: int8_peak THREADS REPS\n");
        return 2;
    }
    const int threads = atoi(argv[1]), reps = atoi(argv[2]);
    if (threads < 1 || threads > 256 || reps < 1) return 2;
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_barrier_t start;
    long long sink = 0;
    printf("{\"threads\": %d, \"instruction\": \"vpdpbusd zmm\", \"gmacs\": [", threads);
    for (int r = 0; r < reps; r++) {
        pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
        for (int t = 0; t < threads; t++) {
            jobs[t].start = &start;
            pthread_create(&tid[t], NULL, run, &jobs[t]);
        }
        pthread_barrier_wait(&start);
        const double t0 = now();
        for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
        const double dt = now() - t0;
        for (int t = 0; t < threads; t++) sink += jobs[t].sink;
        pthread_barrier_destroy(&start);
        printf("%s%.2f", r ? ", " : "", (double)threads * ITERS * CHAINS * MACS_PER_STEP / dt / 1e9);
    }
    printf("], \"sink\": %lld}\n", sink);
    free(tid);
    free(jobs);
    return 0;
}
