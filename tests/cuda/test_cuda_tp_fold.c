/* Device test of the tensor-parallel fold (docs/tensor-parallel.md), emulated on one GPU with
 * the real GEMM kernel: a row-parallel product whose K is split over TP ranks at absolute
 * chunk boundaries (rank r holds chunks [c0, c1): A's and W's columns of those chunks, copied
 * to the rank's own dense buffers as a real shard would hold them) gives, once every rank's
 * per-chunk partials are gathered and folded in chunk order, invar_cuda_gemm's bits over the
 * whole K, at TP = 1, 2, 4, 8 (uneven splits included: 14 chunks over 4 or 8 ranks; a K of
 * fewer chunks than ranks is not split this way, docs/tensor-parallel.md).
 * Negative control: each rank folds its own chunks first and the rank sums are then added in
 * rank order (what a reduce or all-reduce of per-rank results does): must differ wherever a
 * rank after the first holds two chunks or more (before that the two orders coincide). */
#include <string.h>
#include "cuda_test_util.h"
#include "invar_cuda.h"

static int failures;
static invar_cuda_ctx *ctx;

/* The first n_chunks % tp ranks hold one chunk more (docs/tensor-parallel.md). */
static void rank_chunks(int n_chunks, int tp, int r, int *c0, int *c1)
{
    int base = n_chunks / tp, extra = n_chunks % tp;
    *c0 = r * base + (r < extra ? r : extra);
    *c1 = *c0 + base + (r < extra);
}

/* Columns [k0, k1) of a row-major [rows][K] bf16 matrix into a dense [rows][k1 - k0] one. */
static uint16_t *shard_cols(const uint16_t *d, int rows, int K, int k0, int k1)
{
    uint16_t *s = dmalloc((size_t)rows * (size_t)(k1 - k0) * 2);
    CK(cudaMemcpy2D(s, (size_t)(k1 - k0) * 2, d + k0, (size_t)K * 2, (size_t)(k1 - k0) * 2, rows,
                    cudaMemcpyDeviceToDevice));
    return s;
}

static size_t count_diff(const void *a, const void *b, size_t n, size_t elem)
{
    unsigned char *x = download(a, n * elem), *y = download(b, n * elem);
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(x + i * elem, y + i * elem, elem) != 0;
    free(x);
    free(y);
    return d;
}

/* One shape at one TP degree, both output types. Returns the differing elements of the
 * gathered-partials fold (must be 0) and stores the control's in *control. */
static size_t check(const uint16_t *dA, const uint16_t *dW, int M, int N, int K, int tp, size_t *control,
                    int *control_must_differ)
{
    const int C = INVAR_CUDA_GEMM_K_CHUNK, n_chunks = (K + C - 1) / C;
    const size_t mn = (size_t)M * N;
    float *all = dmalloc((size_t)n_chunks * mn * 4), *rank_sum = dmalloc((size_t)tp * mn * 4);
    for (int r = 0; r < tp; r++) {
        int c0, c1;
        rank_chunks(n_chunks, tp, r, &c0, &c1);
        /* rank 0's own sum is the fold's prefix; a later rank's sum of two chunks or more
         * is added to the total in one step where TP = 1 adds its chunks one by one */
        if (r == 0) *control_must_differ = 0;
        if (r > 0 && c1 - c0 >= 2) *control_must_differ = 1;
        int k0 = c0 * C, k1 = c1 * C < K ? c1 * C : K;
        uint16_t *a = shard_cols(dA, M, K, k0, k1), *w = shard_cols(dW, N, K, k0, k1);
        /* the rank's partials land where the gather puts them: chunk c at all + c*mn */
        CKI(invar_cuda_gemm_partials(ctx, a, w, all + (size_t)c0 * mn, M, N, k1 - k0));
        CKI(invar_cuda_gemm_fold(ctx, all + (size_t)c0 * mn, c1 - c0, rank_sum + (size_t)r * mn, INVAR_CUDA_F32, M, N));
        CK(cudaDeviceSynchronize());
        CK(cudaFree(a));
        CK(cudaFree(w));
    }
    size_t diff = 0, ctl = 0;
    for (int t = 0; t < 2; t++) {
        invar_cuda_dtype ty = t ? INVAR_CUDA_F32 : INVAR_CUDA_BF16;
        size_t es = t ? 4 : 2;
        void *full = dmalloc(mn * es), *tpo = dmalloc(mn * es), *bad = dmalloc(mn * es);
        CK(cudaMemset(tpo, 0xFF, mn * es));
        CKI(invar_cuda_gemm(ctx, dA, dW, full, ty, M, N, K));
        CKI(invar_cuda_gemm_fold(ctx, all, n_chunks, tpo, ty, M, N));
        CKI(invar_cuda_gemm_fold(ctx, rank_sum, tp, bad, ty, M, N));
        CK(cudaDeviceSynchronize());
        diff += count_diff(full, tpo, mn, es);
        ctl += count_diff(full, bad, mn, es);
        CK(cudaFree(full));
        CK(cudaFree(tpo));
        CK(cudaFree(bad));
    }
    CK(cudaFree(all));
    CK(cudaFree(rank_sum));
    *control = ctl;
    return diff;
}

int main(void)
{
    int rc = invar_cuda_init(&ctx, 0);
    if (rc == INVAR_CUDA_ENODEV) {
        printf("no sm_90 device: skipped\n");
        return SKIP_CODE;
    }
    if (rc) return 2;
    const int small = getenv("INVAR_CUDA_TEST_SMALL") != NULL;
    /* Row-parallel shapes: Llama-3-8B's attention output (K 4096, 4 chunks) and FFN down
     * projection (K 14336, 14 chunks: uneven over 4 and 8 ranks), and a K with a short last chunk. */
    const int shapes[][3] = {{1, 1024, 4096}, {37, 1024, 14336}, {300, 512, 4096}, {64, 256, 3000}, {8, 4096, 14336}};
    const int n_shapes = small ? 2 : (int)(sizeof shapes / sizeof *shapes);
    const int Kmax = 14336, Mmax = 300, Nmax = 4096;
    uint16_t *A = malloc((size_t)Mmax * Kmax * 2), *W = malloc((size_t)Nmax * Kmax * 2);
    for (int s = 0; s < n_shapes; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        fill_bf16(A, (size_t)M * K, 11 + s, 1.0f);
        fill_bf16(W, (size_t)N * K, 21 + s, 1.0f);
        uint16_t *dA = upload(A, (size_t)M * K * 2), *dW = upload(W, (size_t)N * K * 2);
        for (int tp = 1; tp <= 8; tp *= 2) {
            if (tp > (K + INVAR_CUDA_GEMM_K_CHUNK - 1) / INVAR_CUDA_GEMM_K_CHUNK) {
                printf("M=%4d N=%5d K=%5d TP=%d: fewer chunks than ranks (the layer runs column-parallel on a "
                       "gathered input instead)\n", M, N, K, tp);
                continue;
            }
            size_t ctl;
            int must = 0;
            size_t diff = check(dA, dW, M, N, K, tp, &ctl, &must);
            printf("M=%4d N=%5d K=%5d TP=%d: gathered partials folded in chunk order: %zu of %zu elements differ "
                   "from TP=1; [control: per-rank sums added in rank order] %zu differ%s\n",
                   M, N, K, tp, diff, (size_t)2 * M * N, ctl, must ? " (must differ)" : "");
            if (diff) failures++;
            if (must && ctl == 0) {
                printf("FAIL: the control did not differ\n");
                failures++;
            }
        }
        CK(cudaFree(dA));
        CK(cudaFree(dW));
    }
    free(A);
    free(W);
    invar_cuda_free(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
