/* End-to-end GPU benchmark of the engine (invar_engine_step: scheduling, forward, sampling,
 * host traffic included), invariant GEMMs against the engine's own cuBLAS mode.
 *   prefill: one sequence of T tokens in one step, T = 512, 2048, 8192 (tokens/s)
 *   decode:  B sequences at context 1024 (up to 1024 + B/8 for the first admitted, which
 *            decode while the last prefill), one token each per step, B = 1..256 (tokens/s)
 *            and one sequence at context 16384 (invariant mode: the long-context decode)
 * Medians of repeated steps; device-to-device copy bandwidth measured in the same run gives
 * the memory bound of one-sequence decode (weight bytes / copy bandwidth).
 * Usage: bench_engine MODEL.gguf OUT.json */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_testing.h"
#include "invar.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static invar_model *g_model;
static uint64_t g_rng = 88172645463325252ULL;

static int32_t *random_ids(int64_t n) {
    int32_t *p = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        p[i] = (int32_t)(g_rng % 32000);
    }
    return p;
}

/* One engine for every measurement (the weights are uploaded once); the GEMM mode is
 * switched between runs. Sized for 256 sequences of 1024 + decode, 8192-token steps. */
#define MAX_B 256
#define CTX 1024
#define CTX_LONG 16384 /* one long sequence's decode (invariant mode) */
#define STEPS 24
#define PREFILL_STEPS_MAX (MAX_B * CTX / 8192 + 1)
static invar_engine *make_engine(bool graphs) {
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.cuda_no_graphs = !graphs;
    c.device = INVAR_DEVICE_CUDA;
    c.n_threads = 8;
    c.max_batch = MAX_B;
    c.max_batch_tokens = 8192;
    c.kv_blocks = (int64_t)MAX_B * ((CTX + PREFILL_STEPS_MAX + STEPS + 16) / 16 + 1) + 8;
    c.no_prefix_cache = true;
    char err[256];
    invar_engine *e;
    if (invar_engine_create(g_model, &c, &e, err, sizeof err)) {
        fprintf(stderr, "engine: %s\n", err);
        exit(strstr(err, "no usable") ? 77 : 1);
    }
    return e;
}

static void step_ok(invar_engine *e) {
    if (invar_engine_step(e) < 0) {
        fprintf(stderr, "step: %s\n", invar_engine_error(e));
        exit(1);
    }
}

static double prefill_tok_s(invar_engine *e, int T) {
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = 1;
    int32_t *ids = random_ids(T);
    double t[6];
    for (int r = 0; r < 6; r++) {
        int64_t id = invar_engine_submit(e, ids, T, &s);
        double t0 = now();
        step_ok(e); /* the whole prompt in one forward, then its first token */
        t[r] = now() - t0;
        invar_engine_release(e, id);
    }
    free(ids);
    return T / median(t + 1, 5); /* the first is a warm-up */
}

/* Every sequence's first token; the earliest may have decoded a few more meanwhile. */
/* Every sequence has its first token. A request the engine refused (finished with an error,
 * e.g. a prompt past the model's context) ends the benchmark instead of being waited on. */
static bool all_started(invar_engine *e, const int64_t *ids, int B) {
    for (int b = 0; b < B; b++) {
        invar_result r;
        if (invar_engine_result(e, ids[b], &r)) return false;
        if (r.finish == INVAR_FINISH_ERROR) {
            fprintf(stderr, "request refused: %s\n", r.error ? r.error : "(no message)");
            exit(1);
        }
        if (r.n_tokens == 0) return false;
    }
    return true;
}

static double decode_tok_s(invar_engine *e, int B, int ctx) {
    const int steps = STEPS;
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = PREFILL_STEPS_MAX + steps + 2; /* none finishes before the timed steps end */
    s.ignore_eos = true;
    int64_t ids[MAX_B];
    for (int b = 0; b < B; b++) {
        int32_t *p = random_ids(ctx);
        ids[b] = invar_engine_submit(e, p, ctx, &s);
        free(p);
    }
    do step_ok(e); /* prefills (8 sequences a step) until every sequence decodes */
    while (!all_started(e, ids, B));
    step_ok(e); /* warm-up decode step */
    double t[STEPS];
    for (int r = 0; r < steps; r++) {
        double t0 = now();
        step_ok(e);
        t[r] = now() - t0;
    }
    for (int b = 0; b < B; b++) invar_engine_cancel(e, ids[b]); /* the next run starts empty */
    for (int b = 0; b < B; b++) invar_engine_release(e, ids[b]);
    return B / median(t, steps);
}

/* Device-to-device copy of 2 GiB, bytes read + written per second (median of 5). */
static double copy_bandwidth(void) {
    size_t n = (size_t)2 << 30;
    void *a, *b;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) return 0;
    cudaMemset(a, 1, n);
    double t[6];
    for (int r = 0; r < 6; r++) {
        cudaDeviceSynchronize();
        double t0 = now();
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
        cudaDeviceSynchronize();
        t[r] = now() - t0;
    }
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)n / median(t + 1, 5);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_engine MODEL.gguf OUT.json\n");
        return 2;
    }
    char err[256];
    if (invar_model_load(argv[1], &g_model, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "w");
    if (!f) return 1;
    double bw = copy_bandwidth();
    printf("device copy bandwidth %.0f GB/s\n", bw / 1e9);
    fprintf(f, "{\"model\":\"%s\",\"copy_GBps\":%.1f", argv[1], bw / 1e9);
    static const int Ts[] = {512, 2048, 8192}, Bs[] = {1, 8, 32, 128, 256};
    double t0 = now();
    invar_engine *e = make_engine(true);
    printf("engine created (weights uploaded) in %.1f s\n%s\n", now() - t0, invar_engine_device_info(e));
    fprintf(f, ",\"device_info\":\"%s\"", invar_engine_device_info(e));
    for (int mode = 0; mode < 2; mode++) {
        const char *tag = mode ? "cublas" : "invariant";
        if (invar_engine_testing_set_cuda_gemm(e, mode)) return 1; /* 0 invariant, 1 cuBLAS */
        fprintf(f, ",\"%s\":{", tag);
        for (int i = 0; i < 3; i++) {
            double v = prefill_tok_s(e, Ts[i]);
            printf("%-9s prefill T=%-5d %8.0f tok/s\n", tag, Ts[i], v);
            fprintf(f, "%s\"prefill_T%d_tok_s\":%.1f", i ? "," : "", Ts[i], v);
            fflush(stdout);
        }
        for (int i = 0; i < 5; i++) {
            double v = decode_tok_s(e, Bs[i], CTX);
            printf("%-9s decode  B=%-5d %8.0f tok/s  (%.2f ms/step)\n", tag, Bs[i], v, 1e3 * Bs[i] / v);
            fprintf(f, ",\"decode_B%d_tok_s\":%.1f", Bs[i], v);
            fflush(stdout);
        }
        if (!mode) {
            /* The long context within the model's (the prompt plus the tokens decoded). */
            int n_ctx = invar_model_n_ctx(g_model), lc = CTX_LONG;
            if (n_ctx > 0 && lc > n_ctx - (PREFILL_STEPS_MAX + STEPS + 4)) lc = n_ctx - (PREFILL_STEPS_MAX + STEPS + 4);
            double v = decode_tok_s(e, 1, lc);
            printf("%-9s decode  B=1 ctx=%d %6.0f tok/s  (%.2f ms/step)\n", tag, lc, v, 1e3 / v);
            fprintf(f, ",\"decode_B1_ctx%d_tok_s\":%.1f", lc, v);
            fflush(stdout);
        }
        fprintf(f, "}");
    }
    invar_engine_free(e);
    /* Decode without graphs: what the captured graphs save at small batches. */
    e = make_engine(false);
    fprintf(f, ",\"invariant_eager\":{");
    for (int i = 0; i < 3; i++) {
        double v = decode_tok_s(e, Bs[i], CTX);
        printf("%-9s decode  B=%-5d %8.0f tok/s  (%.2f ms/step, graphs off)\n", "invariant", Bs[i], v,
               1e3 * Bs[i] / v);
        fprintf(f, "%s\"decode_B%d_tok_s\":%.1f", i ? "," : "", Bs[i], v);
        fflush(stdout);
    }
    fprintf(f, "}}\n");
    fclose(f);
    invar_engine_free(e);
    invar_model_free(g_model);
    return 0;
}
