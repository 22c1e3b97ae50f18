/* Device test of the invariant GEMM:
 *  - batch invariance: for M from 1 to 8192 (odd sizes too), every row of the M-row result
 *    is bitwise equal to the same row of the largest call, and sampled rows (every position
 *    inside a 128-row tile, plus random ones) equal the M=1 call on that row alone;
 *  - accuracy against an fp64 reference on random data, bf16 and fp32 outputs;
 *  - every output element written (output poisoned with NaN first), run-to-run equality;
 *  - the narrow small-M kernel: every (tile width, chain count) it is built for gives the wide
 *    kernel's bits at the same M;
 *  - the wide kernel's two large tile widths (128, 192 columns), with and without clusters,
 *    give the same bits; the same comparison against another K chunk must differ;
 *  - negative controls: cuBLAS on the same check must show differing rows on some shape, and
 *    so must the narrow kernel with its chunk fold reversed. */
#include <math.h>
#include <string.h>
#include "cuda_test_util.h"
#include "invar_cuda.h"
#include "kernels/cuda/invar_cuda_testing.h"

static int failures;
typedef int (*gemm_fn)(invar_cuda_ctx *, const uint16_t *, const uint16_t *, void *,
                       invar_cuda_dtype, int, int, int);

static invar_cuda_ctx *ctx;

static void run(gemm_fn f, const uint16_t *a, const uint16_t *w, void *c, invar_cuda_dtype t,
                int M, int N, int K)
{
    CK(cudaMemset(c, 0xFF, (size_t)M * N * (t == INVAR_CUDA_F32 ? 4 : 2))); /* NaN poison */
    CKI(f(ctx, a, w, c, t, M, N, K));
    CK(cudaDeviceSynchronize());
}

/* fp64 reference for row r of A . W^T. */
static void ref_row(const uint16_t *A, const uint16_t *W, int r, int N, int K, double *out)
{
    double *ar = malloc(sizeof(double) * K);
    for (int k = 0; k < K; k++) ar[k] = bf2f(A[(size_t)r * K + k]);
    for (int n = 0; n < N; n++) {
        const uint16_t *wr = W + (size_t)n * K;
        double s = 0;
        for (int k = 0; k < K; k++) s += ar[k] * (double)bf2f(wr[k]);
        out[n] = s;
    }
    free(ar);
}

static int count_nan_bf16(const uint16_t *c, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += (c[i] & 0x7f80) == 0x7f80 && (c[i] & 0x7f);
    return bad;
}

/* Invariance of one implementation on one shape. Returns the number of differing rows
 * (prefix check + M=1 check). */
static long invariance(gemm_fn f, const char *name, const uint16_t *dA, const uint16_t *dW,
                       int N, int K, const int *Ms, int nM, int verbose)
{
    int Mmax = Ms[nM - 1];
    size_t row_bytes = (size_t)N * 2;
    uint16_t *dC = dmalloc((size_t)Mmax * row_bytes);
    uint16_t *dC1 = dmalloc(row_bytes);
    run(f, dA, dW, dC, INVAR_CUDA_BF16, Mmax, N, K);
    uint16_t *full = download(dC, (size_t)Mmax * row_bytes);
    long bad_rows = 0;
    EXPECT(count_nan_bf16(full, (size_t)Mmax * N) == 0, "%s N=%d K=%d: unwritten/NaN outputs",
           name, N, K);
    /* Run-to-run. */
    run(f, dA, dW, dC, INVAR_CUDA_BF16, Mmax, N, K);
    uint16_t *again = download(dC, (size_t)Mmax * row_bytes);
    long r2r = memcmp(full, again, (size_t)Mmax * row_bytes) != 0;
    free(again);
    for (int i = 0; i < nM - 1; i++) {
        int M = Ms[i];
        run(f, dA, dW, dC, INVAR_CUDA_BF16, M, N, K);
        uint16_t *cm = download(dC, (size_t)M * row_bytes);
        long diff = 0;
        for (int r = 0; r < M; r++) diff += memcmp(cm + (size_t)r * N, full + (size_t)r * N, row_bytes) != 0;
        if (diff && verbose) printf("  %s N=%d K=%d M=%d: %ld/%d rows differ from M=%d\n", name, N, K, M, diff, M, Mmax);
        bad_rows += diff;
        free(cm);
    }
    /* M=1 on every row position of a 128-row tile, plus rows near the end. */
    uint64_t s = 1234 + (uint64_t)N * 7 + (uint64_t)K;
    long diff1 = 0;
    int nsamp = 0;
    for (int t = 0; t < 160 && t < Mmax; t++) {
        int r = t < 128 ? t : (int)(rng_next(&s) % (uint64_t)Mmax);
        if (t == 128) r = Mmax - 1;
        run(f, dA + (size_t)r * K, dW, dC1, INVAR_CUDA_BF16, 1, N, K);
        uint16_t *c1 = download(dC1, row_bytes);
        diff1 += memcmp(c1, full + (size_t)r * N, row_bytes) != 0;
        nsamp++;
        free(c1);
    }
    if (diff1 && verbose) printf("  %s N=%d K=%d: %ld/%d sampled rows differ between M=1 and M=%d\n", name, N, K, diff1, nsamp, Mmax);
    printf("%-7s N=%6d K=%6d Mmax=%5d: prefix-diff rows %ld, M=1-diff rows %ld/%d, run-to-run %s\n",
           name, N, K, Mmax, bad_rows, diff1, nsamp, r2r ? "DIFFERS" : "equal");
    free(full);
    CK(cudaFree(dC));
    CK(cudaFree(dC1));
    if (r2r) bad_rows++;
    return bad_rows + diff1;
}

static void accuracy(const uint16_t *A, const uint16_t *W, const uint16_t *dA, const uint16_t *dW,
                     int M, int N, int K)
{
    int rows[4] = {0, M / 3, M / 2 + 1, M - 1};
    int nr = M >= 4 ? 4 : 1;
    double *ref = malloc(sizeof(double) * N * nr);
    double *got = malloc(sizeof(double) * N * nr);
    for (int i = 0; i < nr; i++) ref_row(A, W, rows[i], N, K, ref + (size_t)i * N);
    for (int t = 0; t < 2; t++) {
        invar_cuda_dtype ty = t ? INVAR_CUDA_F32 : INVAR_CUDA_BF16;
        size_t es = t ? 4 : 2;
        void *dC = dmalloc((size_t)M * N * es);
        run(invar_cuda_gemm, dA, dW, dC, ty, M, N, K);
        uint8_t *h = download(dC, (size_t)M * N * es);
        for (int i = 0; i < nr; i++)
            for (int n = 0; n < N; n++) {
                size_t idx = (size_t)rows[i] * N + n;
                got[(size_t)i * N + n] = t ? ((float *)h)[idx] : bf2f(((uint16_t *)h)[idx]);
            }
        double e = rel_err(got, ref, (size_t)N * nr);
        double tol = t ? 1e-5 : 8e-3; /* fp32 accumulation; bf16 output rounding (2^-9) */
        printf("accuracy M=%5d N=%6d K=%6d out=%s: rel err %.3e (tol %.0e)\n", M, N, K,
               t ? "f32 " : "bf16", e, tol);
        EXPECT(e < tol, "accuracy M=%d N=%d K=%d out=%s err %.3e", M, N, K, t ? "f32" : "bf16", e);
        free(h);
        CK(cudaFree(dC));
    }
    free(ref);
    free(got);
}

/* The large configuration at 128 and at 192 columns (cluster on and off): the same bytes.
 * Control: 192 columns with a 512 K chunk (the same kernel, another fixed order) must differ
 * from 128 columns at the shipped 1024, so the comparison sees a changed order. */
static void wide_widths(const uint16_t *dA, const uint16_t *dW, int small)
{
    static const int shp[][3] = {{257, 1000, 3072}, {1000, 328, 1096}, {2048, 4096, 4096}, {300, 6144, 4096},
                                 {640, 4096, 14336}};
    int nshape = small ? 2 : 5, runs = 0, differ = 0;
    long ctrl = 0;
    for (int s = 0; s < nshape; s++) {
        int M = shp[s][0], N = shp[s][1], K = shp[s][2];
        size_t bytes = (size_t)M * N * 2;
        uint16_t *ref = dmalloc(bytes), *got = dmalloc(bytes);
        for (int cl = 1; cl >= 0; cl--) {
            invar_cuda_gemm_experiment_cluster(ctx, cl);
            invar_cuda_gemm_experiment_wide_bn(ctx, 128);
            run(invar_cuda_gemm, dA, dW, ref, INVAR_CUDA_BF16, M, N, K);
            invar_cuda_gemm_experiment_wide_bn(ctx, 192);
            invar_cuda_gemm_plan pl;
            invar_cuda_gemm_describe(ctx, M, N, K, &pl);
            run(invar_cuda_gemm, dA, dW, got, INVAR_CUDA_BF16, M, N, K);
            long d = invar_cuda_rows_differ(ctx, ref, got, (size_t)M, (size_t)N * 2);
            printf("M=%5d N=%6d K=%6d cluster=%d: BN %d vs 128: %ld rows differ\n", M, N, K, pl.cluster, pl.bn, d);
            EXPECT(pl.bn == 192, "forced 192 columns not taken (M=%d N=%d K=%d)", M, N, K);
            runs++;
            differ += d != 0;
            if (cl) {
                CKI(invar_cuda_gemm_experiment_kc(ctx, dA, dW, got, INVAR_CUDA_BF16, M, N, K, 512));
                CK(cudaDeviceSynchronize());
                ctrl += invar_cuda_rows_differ(ctx, ref, got, (size_t)M, (size_t)N * 2);
            }
        }
        CK(cudaFree(ref));
        CK(cudaFree(got));
    }
    invar_cuda_gemm_experiment_wide_bn(ctx, 0);
    invar_cuda_gemm_experiment_cluster(ctx, 1); /* the defaults */
    printf("wide widths: %d of %d forced runs differ from 128 columns\n", differ, runs);
    printf("negative control: 192 columns at a 512 K chunk differ on %ld rows\n", ctrl);
    EXPECT(differ == 0, "%d wide-width runs differ", differ);
    EXPECT(ctrl > 0, "the K-chunk control did not differ: the width comparison proves nothing");
}

/* For a few shapes and small M: the wide kernel's result, then every narrow configuration
 * forced in turn; each must give the same bytes. */
static void narrow_configs(const uint16_t *dA, const uint16_t *dW, int small)
{
    static const int cfg[][2] = {{32, 4}, {48, 4}, {64, 4}, {64, 2}, {96, 2}, {112, 2}, {128, 2}, {128, 1}};
    static const int NK_full[][2] = {{4096, 4096}, {4096, 14336}, {6144, 4096}, {1000, 3072}};
    static const int Ms[] = {1, 8, 33, 64, 100, 128};
    int nshape = small ? 1 : 4, ncfg = sizeof cfg / sizeof *cfg, runs = 0, differ = 0;
    for (int s = 0; s < nshape; s++)
        for (int m = 0; m < (int)(sizeof Ms / sizeof *Ms); m++) {
            int N = small ? 1000 : NK_full[s][0], K = small ? 3072 : NK_full[s][1], M = Ms[m];
            size_t bytes = (size_t)M * N * 2;
            uint16_t *ref = dmalloc(bytes), *got = dmalloc(bytes);
            invar_cuda_gemm_experiment_narrow(ctx, 0, 0);
            run(invar_cuda_gemm, dA, dW, ref, INVAR_CUDA_BF16, M, N, K);
            for (int c = 0; c < ncfg; c++) {
                invar_cuda_gemm_experiment_narrow(ctx, 1, cfg[c][0] * 16 + cfg[c][1]);
                invar_cuda_gemm_plan pl;
                invar_cuda_gemm_describe(ctx, M, N, K, &pl);
                EXPECT(pl.chains == cfg[c][1] && pl.bn == cfg[c][0], "narrow %dx%d not taken at M=%d", cfg[c][0],
                       cfg[c][1], M);
                run(invar_cuda_gemm, dA, dW, got, INVAR_CUDA_BF16, M, N, K);
                long d = invar_cuda_rows_differ(ctx, ref, got, (size_t)M, (size_t)N * 2);
                if (d) printf("  narrow BN=%d G=%d N=%d K=%d M=%d: %ld of %d rows differ from the wide kernel\n",
                              cfg[c][0], cfg[c][1], N, K, M, d, M);
                differ += d != 0;
                runs++;
            }
            CK(cudaFree(ref));
            CK(cudaFree(got));
        }
    /* Data movement variants (K-tiles per stage, A slots of 64 rows): same bits again. */
    static const int lay[][2] = {{2, 1}, {4, 1}, {1, 0}, {4, 0}};
    static const int lay_cfg[][2] = {{32, 4}, {64, 2}, {128, 1}};
    static const int lay_M[] = {1, 9, 64, 128};
    int N = small ? 1000 : 4096, K = small ? 3072 : 14336;
    for (int m = 0; m < 4; m++) {
        int M = lay_M[m];
        size_t bytes = (size_t)M * N * 2;
        uint16_t *ref = dmalloc(bytes), *got = dmalloc(bytes);
        invar_cuda_gemm_experiment_narrow(ctx, 0, 0);
        run(invar_cuda_gemm, dA, dW, ref, INVAR_CUDA_BF16, M, N, K);
        for (int l = 0; l < 4; l++)
            for (int c = 0; c < 3; c++) {
                invar_cuda_gemm_experiment_narrow(ctx, 1, lay_cfg[c][0] * 16 + lay_cfg[c][1]);
                invar_cuda_gemm_experiment_narrow_layout(ctx, lay[l][0], lay[l][1], 0);
                run(invar_cuda_gemm, dA, dW, got, INVAR_CUDA_BF16, M, N, K);
                long d = invar_cuda_rows_differ(ctx, ref, got, (size_t)M, (size_t)N * 2);
                if (d) printf("  narrow BN=%d G=%d KT=%d pack_a=%d M=%d: %ld of %d rows differ\n", lay_cfg[c][0],
                              lay_cfg[c][1], lay[l][0], lay[l][1], M, d, M);
                differ += d != 0;
                runs++;
            }
        CK(cudaFree(ref));
        CK(cudaFree(got));
    }
    invar_cuda_gemm_experiment_narrow_layout(ctx, 0, 1, 0);
    invar_cuda_gemm_experiment_narrow(ctx, 1, 0); /* the default */
    printf("narrow configurations: %d of %d forced runs differ from the wide kernel\n", differ, runs);
    EXPECT(differ == 0, "narrow configurations differ from the wide kernel (%d runs)", differ);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    /* INVAR_CUDA_TEST_SMALL=1 (compute-sanitizer runs): the shapes with N <= 1024 only. */
    const int small = getenv("INVAR_CUDA_TEST_SMALL") != NULL;
    if (small) quick = 1;
    int rc = invar_cuda_init(&ctx, 0);
    if (rc == INVAR_CUDA_ENODEV) {
        printf("no sm_90 device: skipped\n");
        return SKIP_CODE;
    }
    if (rc) return 2;
    const int Mmax = 8192;
    const int Kmax = 14336;
    size_t na = (size_t)Mmax * Kmax, nw = (size_t)4096 * 14336;
    uint16_t *A = malloc(na * 2), *W = malloc((size_t)128256 * 4096 * 2);
    fill_bf16(A, na, 1, 1.0f);
    fill_bf16(W, (size_t)128256 * 4096, 2, 1.0f);
    (void)nw;
    uint16_t *dA = upload(A, na * 2);
    uint16_t *dW = upload(W, (size_t)128256 * 4096 * 2);

    static const int Ms_full[] = {1, 2, 3, 7, 8, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
                                  257, 511, 512, 513, 1000, 1023, 1024, 2047, 2048, 2049, 4095,
                                  4097, 8191, 8192};
    static const int Ms_mid[] = {1, 3, 33, 64, 129, 257, 513, 1025, 2048};
    static const int Ms_big[] = {1, 7, 64, 129, 600};
    static const int Ms_odd[] = {1, 5, 64, 65, 127, 129, 300, 1001};
    struct { int N, K; const int *Ms; int nM; } shapes[] = {
        {4096, 4096, Ms_full, sizeof Ms_full / sizeof *Ms_full},
        {4096, 14336, Ms_full, sizeof Ms_full / sizeof *Ms_full},
        {6144, 4096, Ms_mid, sizeof Ms_mid / sizeof *Ms_mid},
        {28672, 4096, Ms_mid, sizeof Ms_mid / sizeof *Ms_mid},
        {128256, 4096, Ms_big, sizeof Ms_big / sizeof *Ms_big},
        {200, 328, Ms_odd, sizeof Ms_odd / sizeof *Ms_odd},     /* partial tiles in N and K */
        {136, 8, Ms_odd, sizeof Ms_odd / sizeof *Ms_odd},       /* K smaller than one tile */
        {1024, 1096, Ms_odd, sizeof Ms_odd / sizeof *Ms_odd},   /* last chunk partial */
        {1000, 3072, Ms_odd, sizeof Ms_odd / sizeof *Ms_odd},   /* narrow kernel, 3 chunks, N partial */
    };
    int nshapes = sizeof shapes / sizeof *shapes;
    if (small) {
        int k = 0;
        for (int i = 0; i < nshapes; i++)
            if (shapes[i].N <= 1024) shapes[k++] = shapes[i];
        nshapes = k;
    }
    printf("== plans ==\n");
    for (int i = 0; i < nshapes; i++) {
        int ms[] = {1, 32, 128, 512, 2048, 8192};
        for (int j = 0; j < 6; j++) {
            invar_cuda_gemm_plan pl;
            if (invar_cuda_gemm_describe(ctx, ms[j], shapes[i].N, shapes[i].K, &pl)) continue;
            printf("N=%6d K=%6d M=%5d: BM=%d BN=%d chains=%d BK=%d KC=%d chunks=%d split=%d units=%d grid=%d stages=%d cluster=%d\n",
                   shapes[i].N, shapes[i].K, ms[j], pl.bm, pl.bn, pl.chains, pl.bk, pl.k_chunk, pl.n_chunks,
                   pl.split, pl.units, pl.grid, pl.stages, pl.cluster);
        }
    }
    printf("== accuracy vs fp64 ==\n");
    for (int i = 0; i < nshapes; i++) {
        int N = shapes[i].N, K = shapes[i].K;
        /* Weights for this shape: first N rows of W re-read with stride K. */
        int Ms_acc[] = {1, 129, 2048};
        for (int j = 0; j < 3; j++) {
            if (quick && j) continue;
            if (N > 30000 && j == 2) continue;
            accuracy(A, W, dA, dW, Ms_acc[j], N, K);
        }
    }
    printf("== batch invariance (invar) ==\n");
    for (int i = 0; i < nshapes; i++) {
        long bad = invariance(invar_cuda_gemm, "invar", dA, dW, shapes[i].N, shapes[i].K,
                              shapes[i].Ms, quick ? 4 : shapes[i].nM, 1);
        EXPECT(bad == 0, "invar GEMM N=%d K=%d is not batch-invariant (%ld rows)", shapes[i].N,
               shapes[i].K, bad);
    }
    printf("== 2-CTA cluster path vs single-CTA path (same bits expected) ==\n");
    if (!small) {
        int M = 2048, N = 4096, K = 4096;
        size_t bytes = (size_t)M * N * 2;
        uint16_t *c1 = dmalloc(bytes), *c2 = dmalloc(bytes);
        invar_cuda_gemm_plan pl;
        invar_cuda_gemm_experiment_cluster(ctx, 1);
        run(invar_cuda_gemm, dA, dW, c1, INVAR_CUDA_BF16, M, N, K);
        invar_cuda_gemm_describe(ctx, M, N, K, &pl);
        printf("resident 2-CTA clusters: %d\n", invar_cuda_gemm_max_clusters(ctx));
        invar_cuda_gemm_experiment_cluster(ctx, 0);
        run(invar_cuda_gemm, dA, dW, c2, INVAR_CUDA_BF16, M, N, K);
        invar_cuda_gemm_experiment_cluster(ctx, 1); /* the default */
        long d = invar_cuda_rows_differ(ctx, c1, c2, (size_t)M, (size_t)N * 2);
        printf("cluster=%d vs cluster=0: %ld of %d rows differ\n", pl.cluster, d, M);
        EXPECT(d == 0, "cluster path differs (%ld rows)", d);
        CK(cudaFree(c1));
        CK(cudaFree(c2));
    }
    printf("== wide kernel: 192 vs 128 columns (same bits expected) ==\n");
    wide_widths(dA, dW, small);
    printf("== narrow kernel: every configuration vs the wide kernel (same bits expected) ==\n");
    narrow_configs(dA, dW, small);
    printf("== negative control (narrow kernel, chunk fold reversed; same check) ==\n");
    {
        invar_cuda_testing_gemm_narrow_reversed(ctx, 1);
        int N = small ? 1000 : 4096, K = small ? 3072 : 4096;
        static const int Ms_rev[] = {1, 5, 64, 100, 129, 300}; /* narrow up to 128, wide above */
        long bad = invariance(invar_cuda_gemm, "reversd", dA, dW, N, K, Ms_rev, 6, 0);
        invar_cuda_testing_gemm_narrow_reversed(ctx, 0);
        printf("negative control: the reversed narrow fold gives %ld differing rows\n", bad);
        EXPECT(bad > 0, "negative control: the reversed narrow fold passed the invariance check");
    }
    printf("== negative control (cuBLAS, same check) ==\n");
    static const int Ms_ctl[] = {1, 8, 32, 128, 512, 2048};
    long ctl = small; /* the control's shapes are Llama widths: not in the small mode */
    for (int i = 0; i < 2 && !small; i++) {
        long bad = invariance(invar_cuda_gemm_cublas, "cublas", dA, dW, shapes[i].N, shapes[i].K,
                              Ms_ctl, 6, 1);
        ctl += bad > 0;
    }
    printf("negative control: cuBLAS failed the invariance check on %ld of 2 shapes\n", ctl);
    EXPECT(ctl > 0, "negative control: cuBLAS passed everywhere, so the check shows nothing");
    CK(cudaFree(dA));
    CK(cudaFree(dW));
    free(A);
    free(W);
    invar_cuda_free(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
