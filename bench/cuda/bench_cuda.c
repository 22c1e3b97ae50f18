/* CUDA backend benchmark: ceilings (copy, cuBLAS matmul), invariant GEMM vs cuBLAS on the
 * Llama-3-8B shapes, row kernels, paged attention. Times are medians of CUDA-event timings
 * with the L2 flushed (a 512 MiB memset) before every repetition; inputs random.
 * Usage: bench_cuda OUT.json [narrow] [gemm] [wide] [rows] [attn]   (no section names = all) */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <math.h>
#include <string.h>
#include <time.h>
#include "bench_cuda.h"

static invar_cuda_ctx *ctx;
static void *flush_buf;
static int *flush_sink;
#define FLUSH_BYTES ((size_t)512 << 20)

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of reps runs of fn(arg), each after an L2 flush: a kernel that reads
 * 512 MiB, so the L2 holds only clean lines of another buffer (a memset flush would leave
 * dirty lines whose write-back lands inside the timed region). */
double bench_time_ms(bench_fn fn, void *arg, int reps)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    fn(arg); /* warm-up: module load, handle creation, workspace growth */
    fn(arg);
    CK(cudaDeviceSynchronize());
    float *t = malloc(sizeof(float) * reps);
    for (int i = 0; i < reps; i++) {
        CKI(invar_cuda_read_flush(ctx, flush_buf, FLUSH_BYTES, flush_sink));
        CK(cudaEventRecord(e0, 0));
        fn(arg);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    CK(cudaGetLastError());
    qsort(t, reps, sizeof(float), cmp_f);
    double m = t[reps / 2];
    free(t);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return m;
}

invar_cuda_ctx *bench_ctx(void) { return ctx; }

/* ---- ceilings ---- */
struct copy_arg { void *dst, *src; size_t bytes; };
static void run_copy(void *p)
{
    struct copy_arg *a = p;
    CK(cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, 0));
}

struct gemm_arg { const uint16_t *a, *w; void *c; int M, N, K; int cublas; int kc; };
static void run_gemm(void *p)
{
    struct gemm_arg *g = p;
    int r = g->cublas ? invar_cuda_gemm_cublas(ctx, g->a, g->w, g->c, INVAR_CUDA_BF16, g->M, g->N, g->K)
            : g->kc   ? invar_cuda_gemm_experiment_kc(ctx, g->a, g->w, g->c, INVAR_CUDA_BF16, g->M, g->N, g->K, g->kc)
                      : invar_cuda_gemm(ctx, g->a, g->w, g->c, INVAR_CUDA_BF16, g->M, g->N, g->K);
    if (r) {
        fprintf(stderr, "gemm failed: %s\n", invar_cuda_last_error(ctx));
        exit(2);
    }
}

static double copy_gbs;

static void ceilings(FILE *js)
{
    struct copy_arg c;
    c.bytes = (size_t)1 << 31;
    c.src = dmalloc(c.bytes);
    c.dst = dmalloc(c.bytes);
    CK(cudaMemset(c.src, 1, c.bytes));
    double ms = bench_time_ms(run_copy, &c, 10);
    copy_gbs = 2.0 * (double)c.bytes / (ms * 1e-3) / 1e9;
    CK(cudaFree(c.src));
    CK(cudaFree(c.dst));
    int n = 8192;
    uint16_t *h = malloc((size_t)n * n * 2);
    fill_bf16(h, (size_t)n * n, 7, 1.0f);
    struct gemm_arg g = {upload(h, (size_t)n * n * 2), upload(h, (size_t)n * n * 2),
                         dmalloc((size_t)n * n * 2), n, n, n, 1, 0};
    free(h);
    double gms = bench_time_ms(run_gemm, &g, 10);
    double cub_tf = 2.0 * n * (double)n * n / (gms * 1e-3) / 1e12;
    g.cublas = 0;
    double ims = bench_time_ms(run_gemm, &g, 10);
    double inv_tf = 2.0 * n * (double)n * n / (ims * 1e-3) / 1e12;
    CK(cudaFree((void *)g.a));
    CK(cudaFree((void *)g.w));
    CK(cudaFree(g.c));
    printf("ceilings: D2D copy %.0f GB/s (read+write, 2 GiB); 8192^3 bf16 cuBLAS %.0f TFLOP/s, invar %.0f TFLOP/s\n",
           copy_gbs, cub_tf, inv_tf);
    fprintf(js, "\"ceilings\": {\"copy_GBps\": %.1f, \"cublas_8192_TFLOPs\": %.1f, \"invar_8192_TFLOPs\": %.1f},\n",
            copy_gbs, cub_tf, inv_tf);
}

/* The sweeps' operands: weights and activations as large as the largest point (random
 * bf16, the activations a prefix of the same data), and the output. */
struct gemm_bufs { uint16_t *w, *a; void *c; };
static struct gemm_bufs gemm_bufs_make(void)
{
    size_t amax = (size_t)8192 * 14336, wmax = (size_t)128256 * 4096;
    uint16_t *h = malloc(wmax * 2);
    fill_bf16(h, wmax, 11, 1.0f);
    struct gemm_bufs g = {upload(h, wmax * 2), upload(h, amax * 2), dmalloc((size_t)8192 * 128256 * 2)};
    free(h);
    return g;
}

static void bench_gemm(FILE *js)
{
    static const int NK[5][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
    static const int Ms[7] = {1, 8, 32, 128, 512, 2048, 8192};
    struct gemm_bufs g0 = gemm_bufs_make();
    uint16_t *dW = g0.w, *dA = g0.a;
    void *dC = g0.c;
    double logsum = 0;
    int npts = 0, below09 = 0;
    /* BENCH_GEMM_PAUSE_MS: the GPU idles that long before each point (do a point's times
     * depend on the heavy products timed just before it, through clocks or power?). */
    const char *pause_env = getenv("BENCH_GEMM_PAUSE_MS");
    const long pause_ms = pause_env ? atol(pause_env) : 0;
    printf("== GEMM bf16 (us; TF = TFLOP/s; wTB = weight bytes / time)%s ==\n", pause_ms ? ", idle pause before each point" : "");
    printf("     N      K     M |  cuBLAS us     TF   wTB |   invar us     TF   wTB | ratio | plan\n");
    fprintf(js, "\"gemm\": [\n");
    for (int s = 0; s < 5; s++)
        for (int m = 0; m < 7; m++) {
            int N = NK[s][0], K = NK[s][1], M = Ms[m];
            struct gemm_arg g = {dA, dW, dC, M, N, K, 1, 0};
            int reps = (double)M * N * K > 1e12 ? 10 : 30;
            if (pause_ms > 0) {
                CK(cudaDeviceSynchronize());
                struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            double tc = bench_time_ms(run_gemm, &g, reps);
            g.cublas = 0;
            double ti = bench_time_ms(run_gemm, &g, reps);
            double fl = 2.0 * M * (double)N * K, wb = 2.0 * N * (double)K;
            double ratio = tc / ti;
            invar_cuda_gemm_plan pl;
            invar_cuda_gemm_describe(ctx, M, N, K, &pl);
            logsum += log(ratio);
            npts++;
            below09 += ratio < 0.9;
            printf("%6d %6d %5d | %10.1f %6.0f %5.2f | %10.1f %6.0f %5.2f | %5.2f | BM=%d BN=%d split=%d grid=%d cluster=%d\n",
                   N, K, M, tc * 1e3, fl / tc / 1e9, wb / tc / 1e9, ti * 1e3, fl / ti / 1e9,
                   wb / ti / 1e9, ratio, pl.bm, pl.bn, pl.split, pl.grid, pl.cluster);
            fprintf(js,
                    "  {\"N\": %d, \"K\": %d, \"M\": %d, \"cublas_us\": %.2f, \"invar_us\": %.2f, "
                    "\"cublas_TFLOPs\": %.1f, \"invar_TFLOPs\": %.1f, \"cublas_weight_TBps\": %.3f, "
                    "\"invar_weight_TBps\": %.3f, \"ratio\": %.3f, \"bm\": %d, \"split\": %d, \"grid\": %d}%s\n",
                    N, K, M, tc * 1e3, ti * 1e3, fl / tc / 1e9, fl / ti / 1e9, wb / tc / 1e9,
                    wb / ti / 1e9, ratio, pl.bm, pl.split, pl.grid, (s == 4 && m == 6) ? "" : ",");
            fflush(stdout);
        }
    double gm = exp(logsum / npts);
    printf("GEMM invar/cuBLAS speed ratio: geometric mean %.3f, points below 0.9: %d of %d\n", gm,
           below09, npts);
    fprintf(js, "],\n\"gemm_geomean_ratio\": %.4f, \"gemm_points_below_0.9\": %d,\n", gm, below09);
    /* Experiment: cost of the fixed K chunk (a register fold and a pipeline drain per chunk). */
    printf("== K-chunk experiment (invar kernel, other chunk sizes; not the shipped config) ==\n");
    fprintf(js, "\"gemm_kc_experiment\": [\n");
    static const int kcs[2] = {512, 1024};
    static const int kshape[5][3] = {{8192, 4096, 4096}, {1, 4096, 4096}, {32, 6144, 4096},
                                     {8, 4096, 14336}, {1, 28672, 4096}};
    int firstx = 1;
    for (int s = 0; s < 5; s++)
        for (int rep = 0; rep < 2; rep++)
            for (int i = 0; i < 2; i++) {
                struct gemm_arg g = {dA, dW, dC, kshape[s][0], kshape[s][1], kshape[s][2], 0, kcs[i]};
                double t = bench_time_ms(run_gemm, &g, 20);
                double fl = 2.0 * g.M * (double)g.N * g.K;
                printf("M=%5d N=%6d K=%5d KC=%5d (rep %d): %8.1f us %6.0f TFLOP/s\n", g.M, g.N, g.K, kcs[i], rep,
                       t * 1e3, fl / t / 1e9);
                fprintf(js, "%s  {\"M\": %d, \"N\": %d, \"K\": %d, \"kc\": %d, \"us\": %.2f}", firstx ? "" : ",\n",
                        g.M, g.N, g.K, kcs[i], t * 1e3);
                firstx = 0;
            }
    fprintf(js, "\n],\n\"gemm_cluster_experiment\": [\n");
    printf("== 2-CTA cluster (B multicast) on/off; resident clusters: %d ==\n", invar_cuda_gemm_max_clusters(ctx));
    static const int cshape[3][3] = {{8192, 4096, 4096}, {8192, 28672, 4096}, {2048, 128256, 4096}};
    for (int s = 0; s < 3; s++)
        for (int on = 1; on >= 0; on--) {
            invar_cuda_gemm_experiment_cluster(ctx, on);
            struct gemm_arg g = {dA, dW, dC, cshape[s][0], cshape[s][1], cshape[s][2], 0, 0};
            double t = bench_time_ms(run_gemm, &g, 10);
            double fl = 2.0 * g.M * (double)g.N * g.K;
            printf("M=%5d N=%6d K=%5d cluster=%d: %8.1f us %6.0f TFLOP/s\n", g.M, g.N, g.K, on, t * 1e3, fl / t / 1e9);
            fprintf(js, "  {\"M\": %d, \"N\": %d, \"K\": %d, \"cluster\": %d, \"us\": %.2f}%s\n", g.M, g.N,
                    g.K, on, t * 1e3, (s == 2 && on == 0) ? "" : ",");
        }
    invar_cuda_gemm_experiment_cluster(ctx, 1); /* the shipped default */
    fprintf(js, "],\n");
    CK(cudaFree(dA));
    CK(cudaFree(dW));
    CK(cudaFree(dC));
}

/* The large configuration's two tile widths (128 and 192 columns) forced, beside the
 * planner's pick and cuBLAS, on the Llama-3-8B shapes at M where the large tiles run. */
static void bench_gemm_wide(FILE *js)
{
    static const int NK[5][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
    static const int Ms[7] = {256, 512, 1024, 2048, 3072, 4096, 8192};
    struct gemm_bufs g0 = gemm_bufs_make();
    uint16_t *dW = g0.w, *dA = g0.a;
    void *dC = g0.c;
    double lg[3] = {0, 0, 0};
    int npts = 0;
    printf("== GEMM large tiles: 128 vs 192 columns forced (us; ratio = cuBLAS / ours) ==\n");
    printf("     N      K     M | cuBLAS us |  BN128 us ratio |  BN192 us ratio |   auto us ratio BN\n");
    fprintf(js, "\"gemm_wide\": [\n");
    for (int s = 0; s < 5; s++)
        for (int m = 0; m < 7; m++) {
            int N = NK[s][0], K = NK[s][1], M = Ms[m];
            struct gemm_arg g = {dA, dW, dC, M, N, K, 1, 0};
            int reps = (double)M * N * K > 1e12 ? 10 : 20;
            double tc = bench_time_ms(run_gemm, &g, reps), t[3];
            g.cublas = 0;
            static const int bns[3] = {128, 192, 0};
            for (int b = 0; b < 3; b++) {
                invar_cuda_gemm_experiment_wide_bn(ctx, bns[b]);
                t[b] = bench_time_ms(run_gemm, &g, reps);
                lg[b] += log(tc / t[b]);
            }
            npts++;
            invar_cuda_gemm_plan pl;
            invar_cuda_gemm_describe(ctx, M, N, K, &pl);
            printf("%6d %6d %5d | %9.1f | %8.1f %5.2f | %8.1f %5.2f | %8.1f %5.2f %d\n", N, K, M, tc * 1e3,
                   t[0] * 1e3, tc / t[0], t[1] * 1e3, tc / t[1], t[2] * 1e3, tc / t[2], pl.bn);
            fprintf(js,
                    "  {\"N\": %d, \"K\": %d, \"M\": %d, \"cublas_us\": %.2f, \"bn128_us\": %.2f, "
                    "\"bn192_us\": %.2f, \"auto_us\": %.2f, \"auto_bn\": %d}%s\n",
                    N, K, M, tc * 1e3, t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, pl.bn, (s == 4 && m == 6) ? "" : ",");
            fflush(stdout);
        }
    printf("geomean cuBLAS/ours over %d points: BN128 %.3f, BN192 %.3f, auto %.3f\n", npts, exp(lg[0] / npts),
           exp(lg[1] / npts), exp(lg[2] / npts));
    fprintf(js, "],\n\"gemm_wide_geomean\": {\"bn128\": %.4f, \"bn192\": %.4f, \"auto\": %.4f},\n",
            exp(lg[0] / npts), exp(lg[1] / npts), exp(lg[2] / npts));
    CK(cudaFree(dA));
    CK(cudaFree(dW));
    CK(cudaFree(dC));
}

/* The narrow small-M kernel beside the wide one and cuBLAS, and every narrow configuration
 * forced, on the Llama-3-8B shapes (same run, same data). */
static void bench_gemm_narrow(FILE *js)
{
    static const int NK[5][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
    static const int Ms[5] = {1, 8, 32, 64, 128};
    static const int cfg[][2] = {{32, 4}, {48, 4}, {64, 4}, {64, 2}, {96, 2}, {112, 2}, {128, 2}, {128, 1}};
    const int ncfg = sizeof cfg / sizeof *cfg;
    /* BENCH_NARROW_BIG=1: A and C as large as the gemm section's (placement experiment). */
    const int big = getenv("BENCH_NARROW_BIG") != NULL;
    size_t amax = (size_t)(big ? 8192 : 128) * 14336, wmax = (size_t)128256 * 4096;
    uint16_t *h = malloc(wmax * 2);
    fill_bf16(h, wmax, 11, 1.0f);
    uint16_t *dW = upload(h, wmax * 2);
    uint16_t *dA = upload(h, amax * 2);
    free(h);
    void *dC = dmalloc((size_t)(big ? 8192 : 128) * 128256 * 2);
    printf("== GEMM small M: narrow kernel vs wide kernel vs cuBLAS (us; wTB = weight TB/s) ==\n");
    printf("     N      K    M | cuBLAS  wTB |   wide  wTB | narrow  wTB (BNxG) | n/cuB n/wide | forced:");
    for (int c = 0; c < ncfg; c++) printf(" %dx%d", cfg[c][0], cfg[c][1]);
    printf("\n");
    fprintf(js, "\"gemm_narrow\": [\n");
    double lw = 0, lc = 0;
    int np = 0;
    for (int s = 0; s < 5; s++)
        for (int m = 0; m < 5; m++) {
            int N = NK[s][0], K = NK[s][1], M = Ms[m];
            double wb = 2.0 * N * (double)K;
            struct gemm_arg g = {dA, dW, dC, M, N, K, 1, 0};
            double tc = bench_time_ms(run_gemm, &g, 20);
            g.cublas = 0;
            invar_cuda_gemm_experiment_narrow(ctx, 0, 0);
            double tw = bench_time_ms(run_gemm, &g, 20);
            invar_cuda_gemm_experiment_narrow(ctx, 1, 0);
            double tn = bench_time_ms(run_gemm, &g, 20);
            invar_cuda_gemm_plan pl;
            invar_cuda_gemm_describe(ctx, M, N, K, &pl);
            printf("%6d %6d %4d | %6.1f %4.2f | %6.1f %4.2f | %6.1f %4.2f (%3dx%d) | %5.2f %6.2f |", N, K, M,
                   tc * 1e3, wb / tc / 1e9, tw * 1e3, wb / tw / 1e9, tn * 1e3, wb / tn / 1e9, pl.bn, pl.chains,
                   tc / tn, tw / tn);
            fprintf(js, "%s  {\"N\": %d, \"K\": %d, \"M\": %d, \"cublas_us\": %.2f, \"wide_us\": %.2f, "
                        "\"narrow_us\": %.2f, \"bn\": %d, \"chains\": %d, \"forced_us\": [",
                    np ? ",\n" : "", N, K, M, tc * 1e3, tw * 1e3, tn * 1e3, pl.bn, pl.chains);
            for (int c = 0; c < ncfg; c++) {
                invar_cuda_gemm_experiment_narrow(ctx, 1, cfg[c][0] * 16 + cfg[c][1]);
                double t = bench_time_ms(run_gemm, &g, 10);
                printf(" %6.1f", t * 1e3);
                fprintf(js, "%s%.2f", c ? ", " : "", t * 1e3);
            }
            invar_cuda_gemm_experiment_narrow(ctx, 1, 0);
            fprintf(js, "]}");
            printf("\n");
            fflush(stdout);
            if (pl.chains) {
                lw += log(tw / tn);
                lc += log(tc / tn);
                np++;
            }
        }
    if (np)
        printf("narrow points: %d; geomean narrow/cuBLAS speed %.3f, narrow/wide speed %.3f\n", np, exp(lc / np),
               exp(lw / np));
    fprintf(js, "\n],\n\"gemm_narrow_layout\": [\n");
    /* Data movement: K-tiles per stage (KT), A slots sized to the box or 64 rows, ring cap. */
    static const int pts[][3] = {{4096, 4096, 1}, {4096, 14336, 1}, {6144, 4096, 8}, {28672, 4096, 1}, {128256, 4096, 1}, {4096, 14336, 64}};
    static const int lcfg[][2] = {{32, 4}, {48, 4}, {64, 2}, {112, 2}, {128, 1}};
    static const int lay[][3] = {{0, 1, 0}, {1, 1, 0}, {2, 1, 0}, {4, 1, 0}, {0, 0, 0}, {0, 1, 16}};
    printf("== narrow layouts (us): KT/packA/cap ");
    for (int l = 0; l < 6; l++) printf(" %d/%d/%d", lay[l][0], lay[l][1], lay[l][2]);
    printf(" ==\n");
    int first = 1;
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < 5; c++) {
            struct gemm_arg g = {dA, dW, dC, pts[i][2], pts[i][0], pts[i][1], 0, 0};
            printf("N=%6d K=%5d M=%3d %3dx%d:", g.N, g.K, g.M, lcfg[c][0], lcfg[c][1]);
            invar_cuda_gemm_experiment_narrow(ctx, 1, lcfg[c][0] * 16 + lcfg[c][1]);
            for (int l = 0; l < 6; l++) {
                invar_cuda_gemm_experiment_narrow_layout(ctx, lay[l][0], lay[l][1], lay[l][2]);
                double t = bench_time_ms(run_gemm, &g, 10);
                printf(" %6.1f", t * 1e3);
                fprintf(js, "%s  {\"N\": %d, \"K\": %d, \"M\": %d, \"bn\": %d, \"chains\": %d, \"kt\": %d, "
                            "\"pack_a\": %d, \"cap\": %d, \"us\": %.2f}",
                        first ? "" : ",\n", g.N, g.K, g.M, lcfg[c][0], lcfg[c][1], lay[l][0], lay[l][1], lay[l][2],
                        t * 1e3);
                first = 0;
            }
            printf("\n");
            fflush(stdout);
        }
    invar_cuda_gemm_experiment_narrow_layout(ctx, 0, 1, 0);
    invar_cuda_gemm_experiment_narrow(ctx, 1, 0);
    fprintf(js, "\n],\n");
    CK(cudaFree(dA));
    CK(cudaFree(dW));
    CK(cudaFree(dC));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT.json [gemm] [rows] [attn]\n", argv[0]);
        return 2;
    }
    int all = argc == 2, do_gemm = all, do_rows = all, do_attn = all, only_cluster = 0, do_narrow = all,
        do_wide = all;
    for (int i = 2; i < argc; i++) {
        only_cluster |= !strcmp(argv[i], "cluster");
        do_gemm |= !strcmp(argv[i], "gemm");
        do_narrow |= !strcmp(argv[i], "narrow");
        do_wide |= !strcmp(argv[i], "wide");
        do_rows |= !strcmp(argv[i], "rows");
        do_attn |= !strcmp(argv[i], "attn");
    }
    int rc = invar_cuda_init(&ctx, 0);
    if (rc) {
        printf("no sm_90 device (%d)\n", rc);
        return SKIP_CODE;
    }
    flush_buf = dmalloc(FLUSH_BYTES);
    flush_sink = dmalloc(sizeof(int));
    CK(cudaMemset(flush_buf, 1, FLUSH_BYTES));
    FILE *js = fopen(argv[1], "w");
    if (!js) return 2;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    fprintf(js, "{\n\"device\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %d,\n", prop.name,
            prop.multiProcessorCount, prop.l2CacheSize);
    printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    if (only_cluster) {
        /* Profiling aid: the 8192^3 product on the 2-CTA cluster path, 3 launches. */
        int n = 8192;
        struct gemm_arg g = {dmalloc((size_t)n * n * 2), dmalloc((size_t)n * n * 2), dmalloc((size_t)n * n * 2), n, n, n, 0, 0};
        CKI(invar_cuda_fill_random_bf16(ctx, (uint16_t *)g.a, (size_t)n * n, 1, 1.0f));
        CKI(invar_cuda_fill_random_bf16(ctx, (uint16_t *)g.w, (size_t)n * n, 2, 1.0f));
        invar_cuda_gemm_experiment_cluster(ctx, 1);
        for (int i = 0; i < 3; i++) run_gemm(&g);
        CK(cudaDeviceSynchronize());
        printf("cluster path ran\n");
        return 0;
    }
    ceilings(js);
    if (do_narrow) bench_gemm_narrow(js);
    if (do_wide) bench_gemm_wide(js);
    if (do_gemm) bench_gemm(js);
    if (do_rows) bench_rows(js, copy_gbs);
    if (do_attn) bench_attention(js);
    fprintf(js, "\"end\": true\n}\n");
    fclose(js);
    invar_cuda_free(ctx);
    return 0;
}
