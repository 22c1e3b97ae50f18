/* Device test of the row kernels (RMSNorm + residual, SiLU-and-mul, RoPE, embedding,
 * log-softmax): for M from 1 to 8192 (odd sizes too) row i of an M-row call equals the same
 * row of the 8192-row call bitwise, sampled rows equal the M=1 call on that row alone (at every
 * offset), and sampled rows match an fp64 reference on random data. The engine's device sampler
 * has its own test (engine/test_cuda_sampler.c). */
#include <math.h>
#include <string.h>
#include "cuda_test_util.h"
#include "invar_cuda.h"
#include "kernels/cuda/invar_cuda_testing.h"

static int failures;
static invar_cuda_ctx *ctx;
/* Rows of the full call; INVAR_CUDA_TEST_SMALL=1 (compute-sanitizer runs) takes 512. */
static int g_mmax = 8192;
#define MMAX g_mmax
static const int Ms[] = {1, 2, 3, 7, 31, 64, 127, 128, 129, 1000, 1023, 1024, 2047, 4097, 8191};
#define NMS ((int)(sizeof Ms / sizeof *Ms))
#define NSAMP 24

/* Runs the kernel on input rows [r0, r0+M), writing output row 0 at out. */
typedef void (*runner)(size_t r0, int M, void *out);

static int sample_row(int i) { return i < 8 ? i : (int)(((uint64_t)i * 2654435761u) % MMAX); }

/* want_zero 0: a negative control, which must find differing rows. */
static void check_invariance(const char *name, runner run, void *out_full, void *out_tmp, size_t row_bytes,
                             int want_zero)
{
    run(0, MMAX, out_full);
    CK(cudaDeviceSynchronize());
    long bad = 0, bad1 = 0;
    for (int i = 0; i < NMS; i++) {
        if (Ms[i] > MMAX) continue;
        CK(cudaMemset(out_tmp, 0xFF, (size_t)Ms[i] * row_bytes));
        run(0, Ms[i], out_tmp);
        long d = invar_cuda_rows_differ(ctx, out_tmp, out_full, (size_t)Ms[i], row_bytes);
        if (d) printf("  %s: M=%d: %ld rows differ from M=%d\n", name, Ms[i], d, MMAX);
        bad += d;
    }
    for (int i = 0; i < NSAMP; i++) {
        int r = sample_row(i);
        CK(cudaMemset(out_tmp, 0xFF, row_bytes));
        run((size_t)r, 1, out_tmp);
        long d = invar_cuda_rows_differ(ctx, out_tmp, (char *)out_full + (size_t)r * row_bytes, 1, row_bytes);
        bad1 += d;
    }
    /* Run to run. */
    run(0, MMAX, out_tmp);
    long r2r = invar_cuda_rows_differ(ctx, out_tmp, out_full, MMAX, row_bytes);
    printf("%-12s prefix-diff rows %ld, M=1-diff rows %ld/%d, run-to-run diff rows %ld%s\n", name, bad,
           bad1, NSAMP, r2r, want_zero ? "" : " (negative control: must differ)");
    if (want_zero) EXPECT(bad == 0 && bad1 == 0 && r2r == 0, "%s is not batch-invariant", name);
    else EXPECT(bad > 0 && r2r == 0, "negative control %s: the check found no difference", name);
}

static void invariance(const char *name, runner run, void *out_full, void *out_tmp, size_t row_bytes)
{
    check_invariance(name, run, out_full, out_tmp, row_bytes, 1);
}

/* ---- RMSNorm ---- */
#define D_NORM 4096
static uint16_t *n_x, *n_res0, *n_res, *n_w;
static void run_norm(size_t r0, int M, void *out)
{
    CK(cudaMemcpy(n_res + r0 * D_NORM, n_res0 + r0 * D_NORM, (size_t)M * D_NORM * 2, cudaMemcpyDeviceToDevice));
    CKI(invar_cuda_rmsnorm(ctx, n_x + r0 * D_NORM, n_res + r0 * D_NORM, n_w, out, M, D_NORM, 1e-5f));
}

static void test_norm(void *out_full, void *out_tmp)
{
    size_t n = (size_t)MMAX * D_NORM;
    n_x = dmalloc(n * 2);
    n_res0 = dmalloc(n * 2);
    n_res = dmalloc(n * 2);
    n_w = dmalloc(D_NORM * 2);
    CKI(invar_cuda_fill_random_bf16(ctx, n_x, n, 101, 1.0f));
    CKI(invar_cuda_fill_random_bf16(ctx, n_res0, n, 102, 2.0f));
    CKI(invar_cuda_fill_random_bf16(ctx, n_w, D_NORM, 103, 1.0f));
    invariance("rmsnorm+res", run_norm, out_full, out_tmp, D_NORM * 2);
    /* The same check on RMSNorm with its reduction order following M's parity. */
    invar_cuda_testing_norm_by_rows(ctx, 1);
    check_invariance("rmsnorm+res [control: order follows M]", run_norm, out_full, out_tmp, D_NORM * 2, 0);
    invar_cuda_testing_norm_by_rows(ctx, 0);
    /* Accuracy on sampled rows of the full call (residual now holds x + res). */
    run_norm(0, MMAX, out_full);
    uint16_t *x = download(n_x, n * 2), *r0 = download(n_res0, n * 2), *r = download(n_res, n * 2);
    uint16_t *w = download(n_w, D_NORM * 2), *y = download(out_full, n * 2);
    double *got = malloc(sizeof(double) * D_NORM * NSAMP), *ref = malloc(sizeof(double) * D_NORM * NSAMP);
    long res_bad = 0;
    for (int i = 0; i < NSAMP; i++) {
        size_t row = (size_t)sample_row(i) * D_NORM;
        double ss = 0;
        float rr[D_NORM];
        for (int d = 0; d < D_NORM; d++) {
            volatile float s = bf2f(x[row + d]) + bf2f(r0[row + d]);
            rr[d] = bf2f(f2bf(s));
            res_bad += f2bf(s) != r[row + d];
            ss += (double)rr[d] * rr[d];
        }
        double inv = 1.0 / sqrt(ss / D_NORM + 1e-5);
        for (int d = 0; d < D_NORM; d++) {
            ref[(size_t)i * D_NORM + d] = rr[d] * inv * bf2f(w[d]);
            got[(size_t)i * D_NORM + d] = bf2f(y[row + d]);
        }
    }
    double e = rel_err(got, ref, (size_t)D_NORM * NSAMP);
    printf("rmsnorm: rel err %.2e vs fp64 (tol 8e-3); residual mismatches %ld\n", e, res_bad);
    EXPECT(e < 8e-3 && res_bad == 0, "rmsnorm accuracy %.2e, residual mismatches %ld", e, res_bad);
    free(x); free(r0); free(r); free(w); free(y); free(got); free(ref);
    CK(cudaFree(n_x)); CK(cudaFree(n_res0)); CK(cudaFree(n_res)); CK(cudaFree(n_w));
}

/* ---- SiLU and mul ---- */
#define F_FFN 14336
static uint16_t *s_gu;
static void run_silu(size_t r0, int M, void *out)
{
    CKI(invar_cuda_silu_mul(ctx, s_gu + r0 * 2 * F_FFN, out, M, F_FFN));
}

static void test_silu(void *out_full, void *out_tmp)
{
    size_t n = (size_t)MMAX * 2 * F_FFN;
    s_gu = dmalloc(n * 2);
    CKI(invar_cuda_fill_random_bf16(ctx, s_gu, n, 201, 4.0f));
    invariance("silu_mul", run_silu, out_full, out_tmp, F_FFN * 2);
    run_silu(0, MMAX, out_full);
    double *got = malloc(sizeof(double) * F_FFN * NSAMP), *ref = malloc(sizeof(double) * F_FFN * NSAMP);
    for (int i = 0; i < NSAMP; i++) {
        size_t row = (size_t)sample_row(i);
        uint16_t *gu = download(s_gu + row * 2 * F_FFN, (size_t)2 * F_FFN * 2);
        uint16_t *o = download((uint16_t *)out_full + row * F_FFN, (size_t)F_FFN * 2);
        for (int f = 0; f < F_FFN; f++) {
            double g = bf2f(gu[f]), u = bf2f(gu[F_FFN + f]);
            ref[(size_t)i * F_FFN + f] = g / (1.0 + exp(-g)) * u;
            got[(size_t)i * F_FFN + f] = bf2f(o[f]);
        }
        free(gu);
        free(o);
    }
    double e = rel_err(got, ref, (size_t)F_FFN * NSAMP);
    printf("silu_mul: rel err %.2e vs fp64 (tol 8e-3)\n", e);
    EXPECT(e < 8e-3, "silu_mul accuracy %.2e", e);
    free(got); free(ref); CK(cudaFree(s_gu));
}

/* ---- RoPE ---- */
#define R_H 32
#define R_D 128
static uint16_t *r_x;
static int32_t *r_pos;
static float *r_freq;
static void run_rope(size_t r0, int M, void *out)
{
    size_t rb = (size_t)R_H * R_D * 2;
    CK(cudaMemcpy(out, (char *)r_x + r0 * rb, (size_t)M * rb, cudaMemcpyDeviceToDevice));
    CKI(invar_cuda_rope(ctx, out, r_pos + r0, r_freq, M, R_H, R_D, R_H * R_D));
}

static void test_rope(void *out_full, void *out_tmp)
{
    size_t n = (size_t)MMAX * R_H * R_D;
    r_x = dmalloc(n * 2);
    CKI(invar_cuda_fill_random_bf16(ctx, r_x, n, 301, 1.0f));
    int32_t *pos = malloc(sizeof(int32_t) * MMAX);
    uint64_t s = 77;
    for (int i = 0; i < MMAX; i++) pos[i] = (int32_t)(rng_next(&s) % 32768);
    float freq[R_D / 2];
    for (int j = 0; j < R_D / 2; j++) freq[j] = (float)pow(500000.0, -2.0 * j / R_D);
    r_pos = upload(pos, sizeof(int32_t) * MMAX);
    r_freq = upload(freq, sizeof freq);
    invariance("rope", run_rope, out_full, out_tmp, (size_t)R_H * R_D * 2);
    run_rope(0, MMAX, out_full);
    size_t rl = (size_t)R_H * R_D;
    double *got = malloc(sizeof(double) * rl * NSAMP), *ref = malloc(sizeof(double) * rl * NSAMP);
    for (int i = 0; i < NSAMP; i++) {
        size_t row = (size_t)sample_row(i);
        uint16_t *x = download(r_x + row * rl, rl * 2), *o = download((uint16_t *)out_full + row * rl, rl * 2);
        for (int h = 0; h < R_H; h++)
            for (int j = 0; j < R_D / 2; j++) {
                volatile float ang = (float)pos[row] * freq[j]; /* the angle is formed in fp32 */
                double c = cos((double)ang), sn = sin((double)ang);
                double a = bf2f(x[h * R_D + j]), b = bf2f(x[h * R_D + j + R_D / 2]);
                ref[i * rl + h * R_D + j] = a * c - b * sn;
                ref[i * rl + h * R_D + j + R_D / 2] = a * sn + b * c;
                got[i * rl + h * R_D + j] = bf2f(o[h * R_D + j]);
                got[i * rl + h * R_D + j + R_D / 2] = bf2f(o[h * R_D + j + R_D / 2]);
            }
        free(x);
        free(o);
    }
    double e = rel_err(got, ref, rl * NSAMP);
    printf("rope: rel err %.2e vs fp64 (tol 8e-3)\n", e);
    EXPECT(e < 8e-3, "rope accuracy %.2e", e);
    free(got); free(ref); free(pos);
    CK(cudaFree(r_x)); CK(cudaFree(r_pos)); CK(cudaFree(r_freq));
}

/* ---- embedding ---- */
#define E_V 128256
#define E_D 4096
static uint16_t *e_tab;
static int32_t *e_ids;
static void run_embed(size_t r0, int M, void *out)
{
    CKI(invar_cuda_embed(ctx, e_tab, e_ids + r0, out, M, E_D, E_V));
}

static void test_embed(void *out_full, void *out_tmp)
{
    e_tab = dmalloc((size_t)E_V * E_D * 2);
    CKI(invar_cuda_fill_random_bf16(ctx, e_tab, (size_t)E_V * E_D, 401, 1.0f));
    int32_t *ids = malloc(sizeof(int32_t) * MMAX);
    uint64_t s = 99;
    for (int i = 0; i < MMAX; i++) ids[i] = (int32_t)(rng_next(&s) % E_V);
    e_ids = upload(ids, sizeof(int32_t) * MMAX);
    invariance("embed", run_embed, out_full, out_tmp, E_D * 2);
    run_embed(0, MMAX, out_full);
    long bad = 0;
    for (int i = 0; i < NSAMP; i++) {
        size_t row = (size_t)sample_row(i);
        bad += invar_cuda_rows_differ(ctx, (uint16_t *)out_full + row * E_D, e_tab + (size_t)ids[row] * E_D, 1, E_D * 2);
    }
    printf("embed: %ld of %d sampled rows differ from the table row\n", bad, NSAMP);
    EXPECT(bad == 0, "embed gathered wrong rows");
    free(ids);
    CK(cudaFree(e_tab)); CK(cudaFree(e_ids));
}

/* ---- log-softmax over the vocabulary ---- */
#define V 128256
static float *l_logits;
static void run_lsm(size_t r0, int M, void *out)
{
    CKI(invar_cuda_log_softmax(ctx, l_logits + r0 * V, out, M, V));
}

static void test_vocab(void)
{
    size_t n = (size_t)MMAX * V;
    l_logits = dmalloc(n * 4);
    float *full = dmalloc(n * 4), *tmp = dmalloc(n * 4);
    CKI(invar_cuda_fill_random_f32(ctx, l_logits, n, 501, 8.0f));
    invariance("log_softmax", run_lsm, full, tmp, (size_t)V * 4);
    run_lsm(0, MMAX, full);
    double *got = malloc(sizeof(double) * V), *ref = malloc(sizeof(double) * V);
    double worst = 0;
    for (int i = 0; i < NSAMP; i++) {
        size_t row = (size_t)sample_row(i);
        float *x = download(l_logits + row * V, (size_t)V * 4), *o = download(full + row * V, (size_t)V * 4);
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
        for (int v = 0; v < V; v++) s += exp(x[v] - mx);
        for (int v = 0; v < V; v++) {
            ref[v] = x[v] - mx - log(s);
            got[v] = o[v];
        }
        double e = rel_err(got, ref, V);
        worst = e > worst ? e : worst;
        free(x);
        free(o);
    }
    printf("log_softmax: worst row rel err %.2e vs fp64 (tol 1e-5)\n", worst);
    EXPECT(worst < 1e-5, "log_softmax accuracy %.2e", worst);
    CK(cudaFree(full));
    CK(cudaFree(tmp));
    CK(cudaFree(l_logits));
    free(got);
    free(ref);
}

int main(void)
{
    int rc = invar_cuda_init(&ctx, 0);
    if (rc == INVAR_CUDA_ENODEV) {
        printf("no sm_90 device: skipped\n");
        return SKIP_CODE;
    }
    if (rc) return 2;
    if (getenv("INVAR_CUDA_TEST_SMALL")) g_mmax = 512;
    size_t maxrow = (size_t)F_FFN * 2; /* widest bf16 output row */
    void *full = dmalloc(MMAX * maxrow), *tmp = dmalloc(MMAX * maxrow);
    test_norm(full, tmp);
    test_silu(full, tmp);
    test_rope(full, tmp);
    test_embed(full, tmp);
    CK(cudaFree(full));
    CK(cudaFree(tmp));
    test_vocab();
    invar_cuda_free(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
