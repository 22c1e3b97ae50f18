/* Matmul microbenchmark: cpu_matmul at 1 thread on the SmolLM2-135M shapes.
 *
 * Build (after building libinvar_kernels_cpu and libinvar_formats in build-mm):
 *   gcc -O2 -I/work/main/src -I/work/main/include bench/matmul_bench.c \
 *       build-mm/libinvar_kernels_cpu.a build-mm/libinvar_formats.a -lpthread -lm \
 *       -o build-mm/matmul_bench
 * usage: matmul_bench [-t q4_1,q8_0,f16] [-m 1,16,64,512] [-s 576x576,...] [-r reps]
 *                     [-T min_ms]
 * Prints one line per (type, shape, m): median ns per call and GMAC/s (m*n*k / time)
 * over `reps` repetitions; each repetition runs the call enough times to last at least
 * min_ms (default 20). Weights and activations are random (seeded, so runs compare).
 * Time is this thread's CPU time (the calls run on the calling thread): on a shared
 * machine, wall time also counts the slices other processes take from this core.
 * Comparing builds on a shared box: run them alternately, several rounds, and compare
 * the best of the rounds (other tenants only ever make a run slower). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)(rnd() & 0xFFFFFF) / 8388608.0f - 1.0f; }

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Random valid weights: n rows of k, quants random, scales moderate. */
static void *make_weights(uint32_t type, int64_t n, int64_t k) {
    const size_t rb = quant_row_bytes(type, k);
    uint8_t *W = malloc(rb * (size_t)n);
    for (size_t i = 0; i < rb * (size_t)n; i++) W[i] = (uint8_t)rnd();
    for (int64_t j = 0; j < n; j++) {
        uint8_t *row = W + rb * (size_t)j;
        if (type == INVAR_T_F16) {
            for (int64_t i = 0; i < k; i++) {
                uint16_t h = f32_to_fp16(rndf());
                memcpy(row + 2 * i, &h, 2);
            }
        } else if (type == INVAR_T_Q8_0) {
            for (int64_t b = 0; b < k / 32; b++) ((block_q8_0 *)row)[b].d = f32_to_fp16(0.005f);
        } else if (type == INVAR_T_Q4_1) {
            for (int64_t b = 0; b < k / 32; b++) {
                ((block_q4_1 *)row)[b].d = f32_to_fp16(0.01f);
                ((block_q4_1 *)row)[b].m = f32_to_fp16(-0.08f);
            }
        } else if (type == INVAR_T_Q4_0) {
            for (int64_t b = 0; b < k / 32; b++) ((block_q4_0 *)row)[b].d = f32_to_fp16(0.01f);
        }
    }
    return W;
}

typedef struct { const char *name; uint32_t type; } tname;
static const tname TYPES[] = {{"q4_1", INVAR_T_Q4_1}, {"q8_0", INVAR_T_Q8_0}, {"f16", INVAR_T_F16},
                              {"q4_0", INVAR_T_Q4_0}, {"bf16", INVAR_T_BF16}, {"f32", INVAR_T_F32}};

static int parse_list(const char *s, int64_t *out, int max) {
    int n = 0;
    while (*s && n < max) {
        out[n++] = strtoll(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

int main(int argc, char **argv) {
    const char *types = "q4_1,q8_0,f16";
    int64_t ms[16] = {1, 16, 64, 512};
    int nm = 4;
    int64_t shapes[16][2] = {{576, 576}, {576, 192}, {576, 1536}, {1536, 576}, {576, 49152}};
    int ns = 5, reps = 7;
    double min_ms = 20.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) types = argv[i + 1];
        else if (!strcmp(argv[i], "-m")) nm = parse_list(argv[i + 1], ms, 16);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-T")) min_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-s")) {
            const char *s = argv[i + 1];
            ns = 0;
            while (*s && ns < 16) {
                shapes[ns][0] = strtoll(s, (char **)&s, 10);
                if (*s == 'x') s++;
                shapes[ns][1] = strtoll(s, (char **)&s, 10);
                ns++;
                if (*s == ',') s++;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    printf("%-5s %6s %6s %4s %12s %8s\n", "type", "k", "n", "m", "ns/call", "GMAC/s");
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        if (!strstr(types, TYPES[t].name)) continue;
        for (int s = 0; s < ns; s++) {
            const int64_t k = shapes[s][0], n = shapes[s][1];
            void *wd = make_weights(TYPES[t].type, n, k);
            cpu_weight w;
            char err[200];
            if (cpu_weight_init(&w, TYPES[t].type, n, k, wd, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            for (int mi = 0; mi < nm; mi++) {
                const int64_t m = ms[mi];
                float *x = malloc(sizeof(float) * (size_t)(m * k));
                float *y = malloc(sizeof(float) * (size_t)(m * n));
                for (int64_t i = 0; i < m * k; i++) x[i] = rndf();
                void *scratch = malloc(cpu_matmul_scratch_bytes(&w, m) + 64);
                /* Calibrate calls per repetition (also warms caches and pages). */
                double t0 = now_ns();
                cpu_matmul(NULL, &w, x, m, k, y, n, scratch);
                double one = now_ns() - t0;
                int64_t calls = (int64_t)(min_ms * 1e6 / (one > 1 ? one : 1)) + 1;
                double *res = malloc(sizeof(double) * (size_t)reps);
                for (int r = 0; r < reps; r++) {
                    t0 = now_ns();
                    for (int64_t c = 0; c < calls; c++) cpu_matmul(NULL, &w, x, m, k, y, n, scratch);
                    res[r] = (now_ns() - t0) / (double)calls;
                }
                qsort(res, (size_t)reps, sizeof(double), cmp_d);
                const double med = res[reps / 2];
                printf("%-5s %6lld %6lld %4lld %12.0f %8.2f\n", TYPES[t].name, (long long)k,
                       (long long)n, (long long)m, med, (double)m * (double)n * (double)k / med);
                fflush(stdout);
                free(res);
                free(scratch);
                free(x);
                free(y);
            }
            cpu_weight_free(&w);
            free(wd);
        }
    }
    return 0;
}
