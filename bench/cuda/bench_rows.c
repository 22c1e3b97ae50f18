/* Row-kernel benchmark: median time and achieved bandwidth (fewest bytes each kernel must
 * move: inputs read once, outputs written once) against the measured copy ceiling. */
#include <math.h>
#include "bench_cuda.h"

enum { K_NORM, K_SILU, K_ROPE, K_EMBED, K_LSM, K_COUNT };
static const char *names[K_COUNT] = {"rmsnorm_residual_4096", "silu_mul_14336", "rope_q32k8_128",
                                     "embed_4096", "log_softmax_128256"};

struct row_arg {
    int kind, M, set; /* set: which block of M rows of the (larger) buffers to use */
    uint16_t *a, *b, *c, *w;
    float *f, *g;
    int32_t *ids;
    float *freq;
};

#define D 4096
#define F 14336
#define HR 40
#define V 128256

static void run_row(void *p)
{
    struct row_arg *r = p;
    invar_cuda_ctx *ctx = bench_ctx();
    int rc = 0;
    size_t o = (size_t)r->set * r->M; /* row offset */
    switch (r->kind) {
    case K_NORM: rc = invar_cuda_rmsnorm(ctx, r->a + o * D, r->b + o * D, r->w, r->c + o * D, r->M, D, 1e-5f); break;
    case K_SILU: rc = invar_cuda_silu_mul(ctx, r->a + o * 2 * F, r->c + o * F, r->M, F); break;
    case K_ROPE: rc = invar_cuda_rope(ctx, r->a + o * HR * 128, r->ids + o, r->freq, r->M, HR, 128, HR * 128); break;
    case K_EMBED: rc = invar_cuda_embed(ctx, r->w, r->ids + o, r->c + o * D, r->M, D, V); break;
    case K_LSM: rc = invar_cuda_log_softmax(ctx, r->f + o * V, r->g + o * V, r->M, V); break;
    }
    if (rc) {
        fprintf(stderr, "%s failed: %s\n", names[r->kind], invar_cuda_last_error(ctx));
        exit(2);
    }
}

static double bytes_of(int kind, int M)
{
    switch (kind) {
    case K_NORM: return 4.0 * M * D * 2;        /* x, residual in; residual, y out */
    case K_SILU: return 3.0 * M * F * 2;        /* gate+up in, out */
    case K_ROPE: return 2.0 * M * HR * 128 * 2; /* in place */
    case K_EMBED: return 2.0 * M * D * 2;       /* gathered rows in, out */
    default: return 2.0 * M * (double)V * 4;    /* log-softmax: logits in, logp out */
    }
}

/* Per-launch time of back-to-back launches: a CUDA graph of 32 launches cycling through
 * min(8192 / M, 32) disjoint row blocks (so successive launches do not find their data in the
 * L2), replayed; the median replay over 32. Launch latency overlaps the previous kernel, as in
 * a model's forward pass. */
static double graph_us(struct row_arg *r)
{
    invar_cuda_ctx *ctx = bench_ctx();
    int sets = 8192 / r->M;
    if (sets > 32) sets = 32;
    const int R = 32;
    cudaStream_t st;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    invar_cuda_set_stream(ctx, st);
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < R; i++) {
        r->set = i % sets;
        run_row(r);
    }
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[5];
    for (int i = 0; i < 5; i++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (t[j] < t[i]) {
                float x = t[i];
                t[i] = t[j];
                t[j] = x;
            }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    invar_cuda_set_stream(ctx, NULL);
    CK(cudaStreamDestroy(st));
    r->set = 0;
    return 1e3 * t[2] / R;
}

void bench_rows(FILE *js, double copy_gbs)
{
    invar_cuda_ctx *ctx = bench_ctx();
    static const int Ms[] = {1, 8, 32, 128, 512, 1024, 2048, 4096, 8192};
    int nM = sizeof Ms / sizeof *Ms, Mmax = 8192;
    struct row_arg r = {0};
    size_t big = (size_t)Mmax * 2 * F; /* largest bf16 input */
    r.a = dmalloc(big * 2);
    r.b = dmalloc((size_t)Mmax * D * 2);
    r.c = dmalloc((size_t)Mmax * F * 2);
    r.w = dmalloc((size_t)V * D * 2);
    r.f = dmalloc((size_t)Mmax * V * 4);
    r.g = dmalloc((size_t)Mmax * V * 4);
    r.ids = dmalloc(4 * Mmax);
    r.freq = dmalloc(4 * 64);
    CKI(invar_cuda_fill_random_bf16(ctx, r.a, big, 1, 1.0f));
    CKI(invar_cuda_fill_random_bf16(ctx, r.b, (size_t)Mmax * D, 2, 1.0f));
    CKI(invar_cuda_fill_random_bf16(ctx, r.w, (size_t)V * D, 3, 1.0f));
    CKI(invar_cuda_fill_random_f32(ctx, r.f, (size_t)Mmax * V, 4, 8.0f));
    int32_t *ids = malloc(4 * Mmax);
    float fr[64];
    uint64_t s = 3;
    for (int i = 0; i < Mmax; i++) ids[i] = (int32_t)(rng_next(&s) % V);
    for (int j = 0; j < 64; j++) fr[j] = (float)pow(500000.0, -j / 64.0);
    CK(cudaMemcpy(r.ids, ids, 4 * Mmax, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(r.freq, fr, sizeof fr, cudaMemcpyHostToDevice));
    free(ids);
    printf("== row kernels (us; GB/s = fewest bytes / time; %% of the %.0f GB/s copy; cold = one launch after an L2 flush, b2b = per launch in a graph of 32) ==\n", copy_gbs);
    fprintf(js, "\"rows\": [\n");
    int first = 1;
    for (int k = 0; k < K_COUNT; k++)
        for (int i = 0; i < nM; i++) {
            r.kind = k;
            r.M = Ms[i];
            r.set = 0;
            double ms = bench_time_ms(run_row, &r, 20);
            double gbs = bytes_of(k, Ms[i]) / (ms * 1e-3) / 1e9;
            double bus = graph_us(&r);
            double bgbs = bytes_of(k, Ms[i]) / (bus * 1e-6) / 1e9;
            printf("%-24s M=%5d cold %9.1f us %7.0f GB/s %5.1f%% | b2b %9.1f us %7.0f GB/s %5.1f%%\n",
                   names[k], Ms[i], ms * 1e3, gbs, 100 * gbs / copy_gbs, bus, bgbs, 100 * bgbs / copy_gbs);
            fprintf(js, "%s  {\"kernel\": \"%s\", \"M\": %d, \"us\": %.2f, \"GBps\": %.1f, \"frac_copy\": %.3f, "
                    "\"b2b_us\": %.2f, \"b2b_GBps\": %.1f, \"b2b_frac_copy\": %.3f}",
                    first ? "" : ",\n", names[k], Ms[i], ms * 1e3, gbs, gbs / copy_gbs, bus, bgbs, bgbs / copy_gbs);
            first = 0;
            fflush(stdout);
        }
    fprintf(js, "\n],\n");
    CK(cudaFree(r.a)); CK(cudaFree(r.b)); CK(cudaFree(r.c)); CK(cudaFree(r.w)); CK(cudaFree(r.f));
    CK(cudaFree(r.g)); CK(cudaFree(r.ids)); CK(cudaFree(r.freq));
}
