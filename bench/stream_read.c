/* Streaming-read bandwidth probe for bench/cpu_bench.py.
 *
 * usage: stream_read SIZE_MIB THREADS REPS
 * Reads a SIZE_MIB buffer split evenly over THREADS threads, REPS times, and prints one
 * JSON object with the GB/s (1e9 bytes/s) of every repetition.  Decode is bound by reading
 * the weights once per token, so this read-only sweep is the ceiling it is measured against.
 * Each repetition starts all threads at a barrier and ends when the last one finishes,
 * so the figure is aggregate bandwidth, not the fastest thread's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *p;
    size_t n;                 /* 64-bit words of this thread's slice */
    uint64_t sink;
    pthread_barrier_t *start;
} slice;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Eight independent accumulators so the adds never serialise; the compiler vectorises
 * this into full-width loads, which is what a weight stream looks like. */
static uint64_t read_words(const uint64_t *p, size_t n) {
    uint64_t a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += p[i + (size_t)k];
    for (; i < n; i++) a[0] += p[i];
    uint64_t s = 0;
    for (int k = 0; k < 8; k++) s ^= a[k];
    return s;
}

static void *worker(void *arg) {
    slice *s = arg;
    pthread_barrier_wait(s->start);
    s->sink = read_words(s->p, s->n);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: stream_read SIZE_MIB THREADS REPS\n");
        return 2;
    }
    size_t mib = (size_t)strtoul(argv[1], NULL, 10);
    int nt = atoi(argv[2]), reps = atoi(argv[3]);
    if (mib == 0 || nt < 1 || nt > 256 || reps < 1) return 2;
    size_t bytes = mib << 20, words = bytes / 8;
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, bytes)) return 1;
    for (size_t i = 0; i < words; i++) buf[i] = i * 0x9E3779B97F4A7C15ull; /* touch every page */
    pthread_t th[256];
    slice sl[256];
    uint64_t sink = 0;
    printf("{\"size_mib\": %zu, \"threads\": %d, \"gbps\": [", mib, nt);
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
        size_t per = words / (size_t)nt;
        for (int t = 0; t < nt; t++) {
            sl[t] = (slice){buf + per * (size_t)t, t == nt - 1 ? words - per * (size_t)t : per, 0, &bar};
            pthread_create(&th[t], NULL, worker, &sl[t]);
        }
        double t0 = now();
        pthread_barrier_wait(&bar);
        for (int t = 0; t < nt; t++) {
            pthread_join(th[t], NULL);
            sink ^= sl[t].sink;
        }
        double dt = now() - t0;
        pthread_barrier_destroy(&bar);
        printf("%s%.3f", r ? ", " : "", (double)bytes / dt / 1e9);
    }
    printf("], \"sink\": %llu}\n", (unsigned long long)(sink & 1));
    free(buf);
    return 0;
}
