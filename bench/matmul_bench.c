/* Matmul microbenchmark: cpu_matmul at 1 thread on the SmolLM2-135M shapes.
 *
 * Build (after building libinvar_kernels_cpu and libinvar_formats in build-mm):
 *   gcc -O2 -I/work/main/src -I/work/main/include bench/matmul_bench.c \
 *       build-mm/libinvar_kernels_cpu.a build-mm/libinvar_formats.a -lpthread -lm \
 *       -o build-mm/matmul_bench
 * usage: matmul_bench [-t q4_1,q8_0,f16,q4_K,q5_K,q6_K,q5_0,q5_1,q2_K,q3_K,iq4_nl,iq4_xs,mxfp4] [-m 1,16,64,512] [-s 576x576,...] [-r reps]
 *                     [-T min_ms] [-P heap|file|huge] [-C MiB] [-j threads]
 * Prints one line per (type, shape, m): median ns per call, GMAC/s (m*n*k / time) and
 * GB/s (bytes of weights the kernel streams per call: the packed copy, or the rows read
 * in place / copied by cpu_weight_init / time) over `reps` repetitions; each repetition
 * runs the call enough times to last at least min_ms (default 20). Weights and
 * activations are random (seeded, so runs compare).
 * -P places the weight rows given to cpu_weight_init: heap (malloc, default), file (a
 * read-only mmap of a temporary file: 4 KiB page-cache pages, as the GGUF loader's
 * mapping), huge (2 MiB-aligned, MADV_HUGEPAGE). -C cycles the calls over enough
 * copies of the weight to cover that many MiB, so that a DRAM-sized footprint is
 * streamed instead of one matrix staying in cache (decode reads each weight once per
 * token); compare the GB/s with bench/stream_read at the same size and threads.
 * -j > 1 runs the calls on a thread pool of that size and times them by the wall
 * clock (noisier on a shared machine).
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
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threadpool.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)(rnd() & 0xFFFFFF) / 8388608.0f - 1.0f; }

static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;
static double now_ns(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Random valid weights: n rows of k, quants random, scales moderate, float types
 * ordinary numbers (random bytes would give NaNs and subnormals, whose slow paths
 * would be measured instead of the kernel). */
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
        } else if (type == INVAR_T_F32) {
            for (int64_t i = 0; i < k; i++) {
                float f = rndf();
                memcpy(row + 4 * i, &f, 4);
            }
        } else if (type == INVAR_T_BF16) {
            for (int64_t i = 0; i < k; i++) {
                float f = rndf();
                uint32_t u;
                memcpy(&u, &f, 4);
                uint16_t h = (uint16_t)(u >> 16);
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
        } else if (type == INVAR_T_Q4_K) {
            for (int64_t b = 0; b < k / 256; b++) {
                ((block_q4_K *)row)[b].d = f32_to_fp16(0.01f);
                ((block_q4_K *)row)[b].dmin = f32_to_fp16(0.02f);
            }
        } else if (type == INVAR_T_Q5_K) {
            for (int64_t b = 0; b < k / 256; b++) {
                ((block_q5_K *)row)[b].d = f32_to_fp16(0.005f);
                ((block_q5_K *)row)[b].dmin = f32_to_fp16(0.02f);
            }
        } else if (type == INVAR_T_Q6_K) {
            for (int64_t b = 0; b < k / 256; b++) ((block_q6_K *)row)[b].d = f32_to_fp16(0.001f);
        } else { /* other types: each block's fp16 scales (offsets in ggml's block layouts) */
            static const struct { uint32_t type; int16_t off[2]; } SCALES[] = {
                {INVAR_T_Q5_0, {0, -1}},  {INVAR_T_Q5_1, {0, 2}},   {INVAR_T_Q2_K, {80, 82}},
                {INVAR_T_Q3_K, {108, -1}}, {INVAR_T_IQ4_NL, {0, -1}}, {INVAR_T_IQ4_XS, {0, -1}}};
            size_t be = 0, bb = 0;
            quant_type_info(type, &be, &bb, NULL);
            for (size_t i = 0; i < sizeof SCALES / sizeof SCALES[0]; i++)
                if (SCALES[i].type == type)
                    for (int64_t b = 0; b < k / (int64_t)be; b++)
                        for (int o = 0; o < 2; o++)
                            if (SCALES[i].off[o] >= 0) {
                                const uint16_t h = f32_to_fp16(0.01f);
                                memcpy(row + (size_t)b * bb + SCALES[i].off[o], &h, 2);
                            }
            if (type == INVAR_T_MXFP4) /* E8M0 exponents near 1 */
                for (int64_t b = 0; b < k / 32; b++) row[(size_t)b * 17] = (uint8_t)(120 + rnd() % 8);
        }
    }
    return W;
}

/* A copy of W's rows placed as -P says; *map_bytes > 0 when it must be munmap'ed. */
static void *place_weights(const void *src, size_t bytes, char where, size_t *map_bytes) {
    *map_bytes = 0;
    if (where == 'f') {
        char path[] = "/tmp/matmul_bench_XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0) return NULL;
        unlink(path);
        size_t done = 0;
        while (done < bytes) {
            ssize_t w = write(fd, (const uint8_t *)src + done, bytes - done);
            if (w <= 0) { close(fd); return NULL; }
            done += (size_t)w;
        }
        void *p = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (p == MAP_FAILED) return NULL;
        *map_bytes = bytes;
        return p;
    }
    const size_t huge = (size_t)2 << 20;
    void *p = where == 'h' ? aligned_alloc(huge, (bytes + huge - 1) / huge * huge) : malloc(bytes);
    if (!p) return NULL;
    if (where == 'h') madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);
    memcpy(p, src, bytes);
    return p;
}

typedef struct { const char *name; uint32_t type; } tname;
static const tname TYPES[] = {{"q4_1", INVAR_T_Q4_1}, {"q8_0", INVAR_T_Q8_0}, {"f16", INVAR_T_F16},
                              {"q4_0", INVAR_T_Q4_0}, {"bf16", INVAR_T_BF16}, {"f32", INVAR_T_F32},
                              {"q4_K", INVAR_T_Q4_K}, {"q5_K", INVAR_T_Q5_K},
                              {"q6_K", INVAR_T_Q6_K}, {"q5_0", INVAR_T_Q5_0}, {"q5_1", INVAR_T_Q5_1},
                              {"q2_K", INVAR_T_Q2_K}, {"q3_K", INVAR_T_Q3_K}, {"iq4_nl", INVAR_T_IQ4_NL},
                              {"iq4_xs", INVAR_T_IQ4_XS}, {"mxfp4", INVAR_T_MXFP4}};

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
    double min_ms = 20.0, cycle_mib = 0.0;
    char where = 'p'; /* heap */
    int nthreads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) types = argv[i + 1];
        else if (!strcmp(argv[i], "-m")) nm = parse_list(argv[i + 1], ms, 16);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-T")) min_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-C")) cycle_mib = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-j")) nthreads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-P")) where = argv[i + 1][0] == 'f' ? 'f' : argv[i + 1][0] == 'h' ? 'h' : 'p';
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
    threadpool *tp = NULL;
    if (nthreads > 1) {
        tp = threadpool_create(nthreads);
        clock_id = CLOCK_MONOTONIC;
    }
    printf("%-6s %6s %6s %4s %12s %8s %8s\n", "type", "k", "n", "m", "ns/call", "GMAC/s", "GB/s");
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        if (!strstr(types, TYPES[t].name)) continue;
        for (int s = 0; s < ns; s++) {
            const int64_t k = shapes[s][0], n = shapes[s][1];
            void *wd = make_weights(TYPES[t].type, n, k);
            const size_t src_bytes = quant_row_bytes(TYPES[t].type, k) * (size_t)n;
            int nw = 1;
            if (cycle_mib > 0) {
                nw = (int)(cycle_mib * 1048576.0 / (double)src_bytes) + 1;
                if (nw > 4096) nw = 4096;
            }
            cpu_weight *w = calloc((size_t)nw, sizeof *w);
            void **wp = calloc((size_t)nw, sizeof *wp);
            size_t *wmap = calloc((size_t)nw, sizeof *wmap);
            for (int c = 0; c < nw; c++) {
                char err[200];
                wp[c] = place_weights(wd, src_bytes, where, &wmap[c]);
                if (!wp[c]) {
                    fprintf(stderr, "cannot place %zu bytes of weights\n", src_bytes);
                    return 1;
                }
                if (cpu_weight_init(&w[c], TYPES[t].type, n, k, wp[c], err, sizeof err)) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
            }
            const size_t wbytes = w[0].packed ? w[0].packed_bytes : src_bytes;
            for (int mi = 0; mi < nm; mi++) {
                const int64_t m = ms[mi];
                float *x = malloc(sizeof(float) * (size_t)(m * k));
                float *y = malloc(sizeof(float) * (size_t)(m * n));
                for (int64_t i = 0; i < m * k; i++) x[i] = rndf();
                void *scratch = malloc(cpu_matmul_scratch_bytes(&w[0], m) + 64);
                /* Calibrate calls per repetition (also warms caches and pages). */
                for (int c = 0; c < nw; c++) cpu_matmul(tp, &w[c], x, m, k, y, n, scratch);
                double t0 = now_ns();
                for (int c = 0; c < nw; c++) cpu_matmul(tp, &w[c], x, m, k, y, n, scratch);
                double one = (now_ns() - t0) / nw;
                int64_t calls = (int64_t)(min_ms * 1e6 / (one > 1 ? one : 1)) + 1;
                double *res = malloc(sizeof(double) * (size_t)reps);
                for (int r = 0; r < reps; r++) {
                    t0 = now_ns();
                    for (int64_t c = 0; c < calls; c++)
                        cpu_matmul(tp, &w[c % nw], x, m, k, y, n, scratch);
                    res[r] = (now_ns() - t0) / (double)calls;
                }
                qsort(res, (size_t)reps, sizeof(double), cmp_d);
                const double med = res[reps / 2];
                printf("%-6s %6lld %6lld %4lld %12.0f %8.2f %8.2f\n", TYPES[t].name, (long long)k,
                       (long long)n, (long long)m, med, (double)m * (double)n * (double)k / med,
                       (double)wbytes / med);
                fflush(stdout);
                free(res);
                free(scratch);
                free(x);
                free(y);
            }
            for (int c = 0; c < nw; c++) {
                cpu_weight_free(&w[c]);
                if (wmap[c]) munmap(wp[c], wmap[c]);
                else free(wp[c]);
            }
            free(w);
            free(wp);
            free(wmap);
            free(wd);
        }
    }
    if (tp) threadpool_destroy(tp);
    return 0;
}
