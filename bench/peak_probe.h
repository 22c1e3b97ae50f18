/* The harness of the compute-peak probes (fma_peak.c, int8_peak.c): usage, threads started
 * at a barrier, one repetition timed from the barrier to the last join, one JSON line. The
 * includer defines CHAINS, ITERS, MACS_PER_STEP and `static void *run(void *)` (taking a
 * peak_job) before calling peak_main. */
#ifndef INVAR_BENCH_PEAK_PROBE_H
#define INVAR_BENCH_PEAK_PROBE_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    pthread_barrier_t *start;
    double sink; /* the accumulators' sum, so that the chains cannot be dropped */
} peak_job;

static double peak_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Twelve named accumulators (an array would be kept in memory and stored every iteration,
 * which measures the store port instead); the includer's empty asm keeps each live in a
 * register every iteration, so the compiler can neither fold the chains nor drop them. */
#define EACH(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)

/* label: the JSON field naming what was measured, e.g. "\"vector\": \"zmm\"". */
static int peak_main(int argc, char **argv, const char *name, const char *label, void *(*run)(void *),
                     double macs_per_rep_thread) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s THREADS REPS\n", name);
        return 2;
    }
    const int threads = atoi(argv[1]), reps = atoi(argv[2]);
    if (threads < 1 || threads > 256 || reps < 1) return 2;
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    peak_job *jobs = calloc((size_t)threads, sizeof *jobs);
    if (!tid || !jobs) return 1;
    pthread_barrier_t start;
    double sink = 0;
    printf("{\"threads\": %d, %s, \"gmacs\": [", threads, label);
    for (int r = 0; r < reps; r++) {
        pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
        for (int t = 0; t < threads; t++) {
            jobs[t].start = &start;
            pthread_create(&tid[t], NULL, run, &jobs[t]);
        }
        pthread_barrier_wait(&start);
        const double t0 = peak_now();
        for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
        const double dt = peak_now() - t0;
        for (int t = 0; t < threads; t++) sink += jobs[t].sink;
        pthread_barrier_destroy(&start);
        printf("%s%.2f", r ? ", " : "", (double)threads * macs_per_rep_thread / dt / 1e9);
    }
    printf("], \"sink\": %g}\n", sink);
    free(tid);
    free(jobs);
    return 0;
}
#endif
