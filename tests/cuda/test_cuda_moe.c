/* Device test of the mixture-of-experts kernels (moe_route.cu, the grouped GEMM, moe.cu):
 *  - routing: each token's k experts distinct and (deepseek2 groups) inside its allowed
 *    groups, weights finite; a token routed alone gets the same experts and weight bits as
 *    inside a batch of T; counts sum to T k, each expert's rows hold its tokens ascending,
 *    the sorted rows are a permutation and xg[slot] is the token's input row;
 *  - grouped GEMM (64- and 128-row work lists, bf16 and fp32 out): every expert's rows equal
 *    invar_cuda_gemm over the same rows and expert weights, bitwise, and a token's rows are
 *    the same alone as in the batch; negative control: the per-expert reference at another
 *    K chunk (a changed order on the real kernel) must differ;
 *  - combine: rank order equals the host's fused multiply-adds in rank order bitwise; the
 *    load-order control sums some token differently. */
#include <math.h>
#include <string.h>
#include "cuda_test_util.h"
#include "invar_cuda.h"
#include "kernels/cuda/invar_cuda_testing.h"

static int failures;
static invar_cuda_ctx *ctx;

enum { E = 64, K_USED = 6, D = 1536, FE = 640 };

typedef struct {
    invar_cuda_moe_bufs b;
    uint16_t *xg;
    int T;
} routed;

static void alloc_routed(routed *r, int T) {
    const size_t tk = (size_t)T * K_USED;
    r->T = T;
    r->b.sel = dmalloc(4 * tk);
    r->b.rel = dmalloc(4 * tk);
    r->b.slot = dmalloc(4 * tk);
    r->b.wts = dmalloc(4 * tk);
    r->b.count = dmalloc(4 * E);
    r->b.start = dmalloc(4 * (E + 1));
    r->b.entries = dmalloc(16 * (size_t)invar_cuda_moe_max_entries(T, K_USED, E, 64));
    r->b.n_entries = dmalloc(4);
    r->b.seen = dmalloc(8 * E);
    CK(cudaMemset(r->b.seen, 0, 8 * E));
    r->xg = dmalloc(2 * tk * D);
}

static void free_routed(routed *r) {
    void *p[] = {r->b.sel, r->b.rel, r->b.slot, r->b.wts, r->b.count, r->b.start, r->b.entries, r->b.n_entries,
                 r->b.seen, r->xg};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) CK(cudaFree(p[i]));
}

/* Routes T rows of logits (stride ld) and xn, work list for bm. */
static void route(const invar_cuda_moe_cfg *cf, const float *logits, int ld, const float *bias, const uint16_t *xn,
                  int T, int bm, routed *r) {
    CKI(invar_cuda_moe_route(ctx, logits, ld, bias, cf, xn, T, D, bm, &r->b, r->xg));
    CK(cudaDeviceSynchronize());
}

/* Host reference of the routing rules (model/moe.c's semantics, written from them): the k
 * best of score = logit (qwen3moe) or p + bias (deepseek2, p = sigmoid or softmax over all)
 * inside the n_group_used best groups (group score: its two best scores summed), ties to the
 * lower id; weights softmax over the chosen (qwen3moe, normalised) or p normalised x scale. */
static int ref_best(const float *v, int n, const char *taken) {
    int b = -1;
    for (int e = 0; e < n; e++)
        if (!taken[e] && (b < 0 || v[e] > v[b])) b = e;
    return b;
}

static void ref_route(const invar_cuda_moe_cfg *cf, const float *l, const float *bias, int *sel, float *w) {
    float p[E], sc[E];
    char taken[E] = {0};
    if (!cf->deepseek) {
        for (int r = 0; r < K_USED; r++) taken[sel[r] = ref_best(l, E, taken)] = 1;
        float mx = l[sel[0]], sum = 0;
        for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int r = 0; r < K_USED; r++) sum += w[r] = expf(l[sel[r]] - mx);
        for (int r = 0; r < K_USED; r++) w[r] /= sum;
        return;
    }
    for (int e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-l[e]));
    for (int e = 0; e < E; e++) sc[e] = p[e] + (bias ? bias[e] : 0.0f);
    const int G = cf->n_group, per = E / G;
    float gs[E];
    char gt[E] = {0};
    for (int g = 0; g < G; g++) {
        char two[E] = {0};
        const int a = ref_best(sc + g * per, per, two);
        two[a] = 1;
        gs[g] = sc[g * per + a] + sc[g * per + ref_best(sc + g * per, per, two)];
    }
    for (int r = 0; r < cf->n_group_used; r++) gt[ref_best(gs, G, gt)] = 1;
    for (int e = 0; e < E; e++) taken[e] = !gt[e / per];
    float sum = 0;
    for (int r = 0; r < K_USED; r++) {
        taken[sel[r] = ref_best(sc, E, taken)] = 1;
        sum += w[r] = p[sel[r]];
    }
    for (int r = 0; r < K_USED; r++) w[r] = w[r] / sum * cf->scale;
}

/* The device's experts equal the reference's for every token, weights within 1e-5. */
static void check_against_ref(const invar_cuda_moe_cfg *cf, const routed *r, const float *lg, const float *bias_h) {
    const int T = r->T;
    int32_t *sel = download(r->b.sel, 4 * (size_t)T * K_USED);
    float *w = download(r->b.wts, 4 * (size_t)T * K_USED);
    int bad_sel = 0;
    double worst = 0;
    for (int t = 0; t < T; t++) {
        int rs[K_USED];
        float rw[K_USED];
        ref_route(cf, lg + (size_t)t * E, bias_h, rs, rw);
        for (int j = 0; j < K_USED; j++) {
            bad_sel += rs[j] != sel[t * K_USED + j];
            const double e = fabs((double)rw[j] - w[t * K_USED + j]) / fabs((double)rw[j]);
            worst = e > worst ? e : worst;
        }
    }
    printf("routing vs host reference (%s): %d of %d choices differ, worst weight error %.1e\n",
           cf->deepseek ? "deepseek2" : "qwen3moe", bad_sel, T * K_USED, worst);
    EXPECT(bad_sel == 0 && worst < 1e-5, "routing differs from the reference");
    free(sel);
    free(w);
}

/* Routing properties on the host copy; returns the pairs' slots. */
static int32_t *check_routing(const invar_cuda_moe_cfg *cf, const routed *r, const uint16_t *xn_h) {
    const int T = r->T, tk = T * K_USED;
    int32_t *sel = download(r->b.sel, 4 * (size_t)tk), *slot = download(r->b.slot, 4 * (size_t)tk);
    int32_t *count = download(r->b.count, 4 * E), *start = download(r->b.start, 4 * (E + 1));
    float *w = download(r->b.wts, 4 * (size_t)tk);
    uint16_t *xg = download(r->xg, 2 * (size_t)tk * D);
    int bad_sel = 0, bad_w = 0, bad_groups = 0, bad_rows = 0, bad_order = 0;
    long total = 0;
    for (int e = 0; e < E; e++) total += count[e];
    char *used = calloc((size_t)tk, 1);
    for (int t = 0; t < T; t++) {
        int groups = 0;
        uint64_t gmask = 0;
        for (int j = 0; j < K_USED; j++) {
            const int e = sel[t * K_USED + j];
            bad_sel += e < 0 || e >= E;
            for (int q = 0; q < j; q++) bad_sel += sel[t * K_USED + q] == e;
            bad_w += !isfinite(w[t * K_USED + j]) || w[t * K_USED + j] < 0;
            if (cf->deepseek && cf->n_group > 1 && e >= 0 && e < E) {
                const int g = e / (E / cf->n_group);
                if (!(gmask >> g & 1)) groups++;
                gmask |= 1ull << g;
            }
            const int s = slot[t * K_USED + j];
            if (s < 0 || s >= tk || used[s]) {
                bad_rows++;
                continue;
            }
            used[s] = 1;
            bad_rows += memcmp(xg + (size_t)s * D, xn_h + (size_t)t * D, 2 * D) != 0;
            bad_order += e >= 0 && e < E && (s < start[e] || s >= start[e] + count[e]);
        }
        bad_groups += cf->deepseek && cf->n_group > 1 && groups > cf->n_group_used;
    }
    /* tokens ascending inside each expert's rows */
    int32_t *tok_of = malloc(4 * (size_t)tk);
    for (int i = 0; i < tk; i++) tok_of[slot[i] >= 0 && slot[i] < tk ? slot[i] : 0] = i / K_USED;
    for (int e = 0; e < E; e++)
        for (int s = start[e] + 1; s < start[e] + count[e]; s++) bad_order += tok_of[s] <= tok_of[s - 1];
    printf("routing T=%4d (%s): total %ld of %d, bad experts %d, weights %d, groups %d, rows %d, order %d\n", T,
           cf->deepseek ? "deepseek2" : "qwen3moe", total, tk, bad_sel, bad_w, bad_groups, bad_rows, bad_order);
    EXPECT(total == tk && start[E] == tk && !bad_sel && !bad_w && !bad_groups && !bad_rows && !bad_order,
           "routing properties (T=%d)", T);
    free(used);
    free(tok_of);
    free(sel);
    free(count);
    free(start);
    free(w);
    free(xg);
    return slot;
}

/* Every expert's rows of the grouped product vs invar_cuda_gemm (kc 0) or the K-chunk
 * experiment (kc > 0) on the same rows. Returns differing rows. */
static long grouped_vs_plain(const routed *r, const uint16_t *w, int N, int K, const uint16_t *a, const void *c,
                             int f32, int kc) {
    const int tk = r->T * K_USED;
    const size_t es = f32 ? 4 : 2;
    int32_t *count = download(r->b.count, 4 * E), *start = download(r->b.start, 4 * (E + 1));
    void *ref = dmalloc((size_t)tk * N * es);
    for (int e = 0; e < E; e++) {
        if (!count[e]) continue;
        const uint16_t *ae = a + (size_t)start[e] * K, *we = w + (size_t)e * N * K;
        void *ce = (char *)ref + (size_t)start[e] * N * es;
        const invar_cuda_dtype t = f32 ? INVAR_CUDA_F32 : INVAR_CUDA_BF16;
        if (kc) CKI(invar_cuda_gemm_experiment_kc(ctx, ae, we, ce, t, count[e], N, K, kc));
        else CKI(invar_cuda_gemm(ctx, ae, we, ce, t, count[e], N, K));
    }
    CK(cudaDeviceSynchronize());
    long d = invar_cuda_rows_differ(ctx, ref, c, (size_t)tk, (size_t)N * es);
    CK(cudaFree(ref));
    free(count);
    free(start);
    return d;
}

static void grouped_run(const routed *r, const uint16_t *w, int N, int K, const uint16_t *a, void *c, int f32, int bm) {
    const int tk = r->T * K_USED;
    CK(cudaMemset(c, 0xFF, (size_t)tk * N * (f32 ? 4 : 2)));
    CKI(invar_cuda_gemm_grouped(ctx, a, w, c, f32 ? INVAR_CUDA_F32 : INVAR_CUDA_BF16, tk, N, K, E, r->b.entries,
                                r->b.n_entries, invar_cuda_moe_max_entries(r->T, K_USED, E, bm), bm));
    CK(cudaDeviceSynchronize());
}

/* Token t's rows (its k slots) of c in the batch vs the lone run (slots of 0..k-1). */
static long token_rows_differ(const void *cb, const int32_t *slot_b, const void *c1, const int32_t *slot_1, int t,
                              size_t row_bytes) {
    long d = 0;
    for (int j = 0; j < K_USED; j++) {
        void *x = download((const char *)cb + (size_t)slot_b[t * K_USED + j] * row_bytes, row_bytes);
        void *y = download((const char *)c1 + (size_t)slot_1[j] * row_bytes, row_bytes);
        d += memcmp(x, y, row_bytes) != 0;
        free(x);
        free(y);
    }
    return d;
}

static void run_cfg(const invar_cuda_moe_cfg *cf, int T, const float *logits, const float *bias, const float *lg_h,
                    const float *bias_h, const uint16_t *xn, const uint16_t *xn_h, const uint16_t *wgu,
                    const uint16_t *wdown) {
    const int tk = T * K_USED, N1 = 2 * FE;
    for (int bm = 64; bm <= 128; bm += 64) {
        routed rb, r1;
        alloc_routed(&rb, T);
        alloc_routed(&r1, 1);
        route(cf, logits, E, bias, xn, T, bm, &rb);
        int32_t *slot_b = check_routing(cf, &rb, xn_h);
        if (bm == 64) check_against_ref(cf, &rb, lg_h, bias_h);
        const int t1 = T / 2 + 1; /* one token alone */
        route(cf, logits + (size_t)t1 * E, E, bias, xn + (size_t)t1 * D, 1, bm, &r1);
        int32_t *slot_1 = check_routing(cf, &r1, xn_h + (size_t)t1 * D);
        {
            int32_t *sb = download(rb.b.sel, 4 * (size_t)tk), *s1 = download(r1.b.sel, 4 * K_USED);
            float *wb = download(rb.b.wts, 4 * (size_t)tk), *w1 = download(r1.b.wts, 4 * K_USED);
            const int same = !memcmp(sb + t1 * K_USED, s1, 4 * K_USED) && !memcmp(wb + t1 * K_USED, w1, 4 * K_USED);
            printf("routing: token %d alone vs in the batch of %d: %s\n", t1, T, same ? "same bits" : "DIFFERS");
            EXPECT(same, "routing of a token depends on the batch");
            free(sb);
            free(s1);
            free(wb);
            free(w1);
        }
        uint16_t *gu = dmalloc(2 * (size_t)tk * N1), *gu1 = dmalloc(2 * (size_t)K_USED * N1);
        float *y = dmalloc(4 * (size_t)tk * D), *y1 = dmalloc(4 * (size_t)K_USED * D);
        grouped_run(&rb, wgu, N1, D, rb.xg, gu, 0, bm);
        grouped_run(&r1, wgu, N1, D, r1.xg, gu1, 0, bm);
        /* down over the first FE columns of gate|up as its input rows (any bf16 rows do) */
        uint16_t *h = dmalloc(2 * (size_t)tk * FE), *h1 = dmalloc(2 * (size_t)K_USED * FE);
        CK(cudaMemcpy2D(h, 2 * FE, gu, 2 * (size_t)N1, 2 * FE, (size_t)tk, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpy2D(h1, 2 * FE, gu1, 2 * (size_t)N1, 2 * FE, K_USED, cudaMemcpyDeviceToDevice));
        grouped_run(&rb, wdown, D, FE, h, y, 1, bm);
        grouped_run(&r1, wdown, D, FE, h1, y1, 1, bm);
        const long d_gu = grouped_vs_plain(&rb, wgu, N1, D, rb.xg, gu, 0, 0);
        const long d_dn = grouped_vs_plain(&rb, wdown, D, FE, h, y, 1, 0);
        const long c_gu = grouped_vs_plain(&rb, wgu, N1, D, rb.xg, gu, 0, 512);
        const long c_dn = grouped_vs_plain(&rb, wdown, D, FE, h, y, 1, 512);
        const long d_alone = token_rows_differ(gu, slot_b, gu1, slot_1, t1, 2 * (size_t)N1) +
                             token_rows_differ(y, slot_b, y1, slot_1, t1, 4 * (size_t)D);
        printf("grouped bm=%3d T=%4d: vs per-expert invar_cuda_gemm: gate|up %ld, down %ld of %d rows differ; "
               "token alone vs batch %ld rows; control (K chunk 512): %ld / %ld rows differ\n",
               bm, T, d_gu, d_dn, tk, d_alone, c_gu, c_dn);
        EXPECT(d_gu == 0 && d_dn == 0, "grouped GEMM differs from the plain GEMM (bm %d)", bm);
        EXPECT(d_alone == 0, "grouped GEMM rows depend on the batch (bm %d)", bm);
        EXPECT(c_gu > 0 && c_dn > 0, "the K-chunk control did not differ: the comparison proves nothing");
        if (bm == 64) { /* combine: rank order vs the host; the load-order control */
            int32_t *slot = slot_b;
            float *wts = download(rb.b.wts, 4 * (size_t)tk), *yh = download(y, 4 * (size_t)tk * D);
            uint16_t *o = dmalloc(2 * (size_t)T * D);
            CKI(invar_cuda_moe_combine(ctx, y, rb.b.slot, rb.b.wts, K_USED, NULL, o, T, D));
            CK(cudaDeviceSynchronize());
            uint16_t *oh = download(o, 2 * (size_t)T * D);
            long bad = 0;
            for (int t = 0; t < T; t++)
                for (int dd = 0; dd < D; dd++) {
                    float acc = 0.0f;
                    for (int j = 0; j < K_USED; j++)
                        acc = fmaf(wts[t * K_USED + j], yh[(size_t)slot[t * K_USED + j] * D + dd], acc);
                    bad += f2bf(acc) != oh[(size_t)t * D + dd];
                }
            CKI(invar_cuda_moe_combine_by_load(ctx, y, rb.b.slot, rb.b.wts, K_USED, NULL, o, T, D, rb.b.sel,
                                               rb.b.count));
            CK(cudaDeviceSynchronize());
            uint16_t *oc = download(o, 2 * (size_t)T * D);
            long rows_ctrl = 0;
            for (int t = 0; t < T; t++) rows_ctrl += memcmp(oc + (size_t)t * D, oh + (size_t)t * D, 2 * D) != 0;
            printf("combine: %ld elements differ from the host's rank-order sum; load-order control: %ld of %d "
                   "tokens differ\n", bad, rows_ctrl, T);
            EXPECT(bad == 0, "combine differs from the rank-order sum");
            EXPECT(T < 16 || rows_ctrl > 0, "the load-order control changed nothing");
            free(wts);
            free(yh);
            free(oh);
            free(oc);
            CK(cudaFree(o));
        }
        CK(cudaFree(gu));
        CK(cudaFree(gu1));
        CK(cudaFree(y));
        CK(cudaFree(y1));
        CK(cudaFree(h));
        CK(cudaFree(h1));
        free(slot_b);
        free(slot_1);
        free_routed(&rb);
        free_routed(&r1);
    }
}

int main(void) {
    if (invar_cuda_init(&ctx, 0)) {
        printf("no sm_90 device\n");
        return SKIP_CODE;
    }
    const int small = getenv("INVAR_CUDA_TEST_SMALL") != NULL;
    const int T = small ? 40 : 600;
    uint64_t s = 99;
    float *lg = malloc(sizeof(float) * (size_t)T * E), bias_h[E];
    for (size_t i = 0; i < (size_t)T * E; i++) lg[i] = 2.0f * rng_uniform(&s);
    for (int e = 0; e < E; e++) bias_h[e] = 0.05f * rng_uniform(&s);
    float *logits = upload(lg, sizeof(float) * (size_t)T * E), *bias = upload(bias_h, sizeof bias_h);
    uint16_t *xn_h = malloc(2 * (size_t)T * D), *wg = malloc(2 * (size_t)E * 2 * FE * D);
    fill_bf16(xn_h, (size_t)T * D, 5, 1.0f);
    uint16_t *xn = upload(xn_h, 2 * (size_t)T * D);
    fill_bf16(wg, (size_t)E * 2 * FE * D, 6, 0.05f);
    uint16_t *wgu = upload(wg, 2 * (size_t)E * 2 * FE * D);
    fill_bf16(wg, (size_t)E * D * FE, 7, 0.05f);
    uint16_t *wdown = upload(wg, 2 * (size_t)E * D * FE);
    const invar_cuda_moe_cfg ds = {.n_expert = E, .k = K_USED, .deepseek = 1, .sigmoid = 1, .n_group = 8,
                                   .n_group_used = 3, .group_max = 0, .normalise = 1, .scale = 2.5f};
    const invar_cuda_moe_cfg qw = {.n_expert = E, .k = K_USED, .deepseek = 0, .normalise = 1, .scale = 1.0f};
    run_cfg(&ds, T, logits, bias, lg, bias_h, xn, xn_h, wgu, wdown);
    run_cfg(&qw, T, logits, NULL, lg, NULL, xn, xn_h, wgu, wdown);
    printf("test_cuda_moe: %d failure(s)\n", failures);
    free(lg);
    free(xn_h);
    free(wg);
    void *dev[] = {logits, bias, xn, wgu, wdown};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) CK(cudaFree(dev[i]));
    invar_cuda_free(ctx);
    return failures ? 1 : 0;
}
