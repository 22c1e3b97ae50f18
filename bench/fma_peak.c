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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

typedef struct {
    pthread_barrier_t *start;
    float sink;
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Twelve named accumulators (an array would be kept in memory and stored every
 * iteration, which measures the store port instead). The empty asm makes each one live
 * in a register every iteration, so the compiler can neither fold the chains nor drop
 * them. */
#define EACH(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define DECL(c) VEC a##c = SPLAT((float)(c));
#define STEP(c) a##c = FMA(a##c, x, y);
#define ADD(c) s += SUM(a##c);

static void *run(void *p) {
    job *j = p;
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
    if (argc != 3) {
        fprintf(stderr, "usage: fma_peak THREADS REPS\n");
        return 2;
    }
    const int threads = atoi(argv[1]), reps = atoi(argv[2]);
    if (threads < 1 || threads > 256 || reps < 1) return 2;
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_barrier_t start;
    float sink = 0;
    printf("{\"threads\": %d, \"vector\": \"%s\", \"gmacs\": [", threads, WIDTH);
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
        printf("%s%.2f", r ? ", " : "", (double)threads * ITERS * CHAINS * LANES / dt / 1e9);
    }
    printf("], \"sink\": %g}\n", (double)sink);
    free(tid);
    free(jobs);
    return 0;
}
