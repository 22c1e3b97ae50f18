/* Attention benchmark: decode (one query token per sequence) over batch x context, and
 * single-sequence causal prefill; Llama-3-8B heads (32 query, 8 KV, head_dim 128). The
 * default kernels with the plan's KV split and with the other one, and the previous mma.sync
 * kernel (plan's split) in the same run; for decode (default: the TMA producer kernel) also
 * its one-consumer variant, and the wgmma kernel's cp.async rings (the previous default),
 * split and not, in runs of 1, 2, 4 and 8 splits per CTA, with the 6-stage ring, and split
 * with the merge in the kernel against the merge kernel after it; for prefill the TMA kernel
 * with consumer turns, the cp.async kernel and the persistent grid. */
#include <math.h>
#include <string.h>
#include "bench_cuda.h"

#define HQ 32
#define HKV 8
#define HD 128
#define PG INVAR_CUDA_PAGE

struct attn_arg {
    invar_cuda_attn_plan *plan;
    uint16_t *q, *kc, *vc, *out;
    int32_t *bt;
};

static void run_attn(void *p)
{
    struct attn_arg *a = p;
    invar_cuda_ctx *ctx = bench_ctx();
    if (invar_cuda_attention(ctx, a->plan, a->q, a->kc, a->vc, a->bt, a->out, 1.0f / sqrtf((float)HD))) {
        fprintf(stderr, "attention failed: %s\n", invar_cuda_last_error(ctx));
        exit(2);
    }
}

/* One case: B sequences of context ctx_len, each with q_len query tokens at the end. */
/* force: -1 the plan's own choice of KV split, else forced off (0) or on (1). mma: 1 runs the
 * previous mma.sync kernel. */
static double one(int B, int ctx_len, int q_len, int force, int mma, int *split)
{
    invar_cuda_ctx *ctx = bench_ctx();
    int was = invar_cuda_testing_attn_mma(ctx, mma);
    int gw = mma ? invar_cuda_testing_attn_split_group(1) : -1; /* its work list as it was */
    int pages = (ctx_len + PG - 1) / PG;
    size_t page_elems = (size_t)HKV * PG * HD;
    size_t kv = (size_t)B * pages * page_elems;
    struct attn_arg a;
    a.kc = dmalloc(kv * 2);
    a.vc = dmalloc(kv * 2);
    a.q = dmalloc((size_t)B * q_len * HQ * HD * 2);
    a.out = dmalloc((size_t)B * q_len * HQ * HD * 2);
    CKI(invar_cuda_fill_random_bf16(ctx, a.kc, kv, 11, 2.0f));
    CKI(invar_cuda_fill_random_bf16(ctx, a.vc, kv, 12, 1.0f));
    CKI(invar_cuda_fill_random_bf16(ctx, a.q, (size_t)B * q_len * HQ * HD, 13, 2.0f));
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)B * pages);
    int32_t *qs = malloc(4 * B), *ql = malloc(4 * B), *cl = malloc(4 * B);
    for (int b = 0; b < B; b++) {
        for (int p = 0; p < pages; p++) bt[(size_t)b * pages + p] = b * pages + p;
        qs[b] = b * q_len;
        ql[b] = q_len;
        cl[b] = ctx_len;
    }
    a.bt = upload(bt, sizeof(int32_t) * (size_t)B * pages);
    CKI(invar_cuda_attn_plan_create(ctx, &a.plan, B, qs, ql, cl, HQ, HKV, HD, pages));
    invar_cuda_attn_plan_force_split(a.plan, force);
    invar_cuda_attn_plan_cache_pages(a.plan, (int64_t)B * pages);
    *split = invar_cuda_attn_plan_split(a.plan);
    double ms = bench_time_ms(run_attn, &a, 10);
    invar_cuda_testing_attn_mma(ctx, was);
    if (mma) invar_cuda_testing_attn_split_group(gw);
    invar_cuda_attn_plan_free(a.plan);
    free(bt); free(qs); free(ql); free(cl);
    CK(cudaFree(a.kc)); CK(cudaFree(a.vc)); CK(cudaFree(a.q)); CK(cudaFree(a.out)); CK(cudaFree(a.bt));
    return ms;
}

/* BENCH_ATTN_DECODE="16x4096,1x32768" / BENCH_ATTN_PREFILL="8192" run only the cases listed
 * (an empty list none), for a profiler run on one case; unset: every case. */
static int wanted(const char *env, int a, int b)
{
    const char *s = getenv(env);
    if (!s) return 1;
    char want[32];
    int n = b ? snprintf(want, sizeof want, "%dx%d", a, b) : snprintf(want, sizeof want, "%d", a);
    for (const char *p = s; (p = strstr(p, want)) != NULL; p += n)
        if ((p == s || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

void bench_attention(FILE *js)
{
    static const int dec[][2] = {{1, 1024}, {1, 8192}, {1, 32768}, {16, 4096}, {16, 32768},
                                 {64, 4096}, {64, 16384}, {256, 1024}, {256, 4096}};
    static const int pre[] = {512, 1024, 2048, 4096, 8192, 16384};
    printf("== attention decode (KV TB/s = K+V bytes read / time) ==\n");
    fprintf(js, "\"attention\": [\n");
    int first = 1;
    invar_cuda_ctx *ctx = bench_ctx();
    for (size_t i = 0; i < sizeof dec / sizeof *dec; i++) {
        if (!wanted("BENCH_ATTN_DECODE", dec[i][0], dec[i][1])) continue;
        int split, other, s_mma, s1, s6;
        one(dec[i][0], dec[i][1], 1, -1, 0, &split); /* the first run of a case was up to 10% slow */
        double ms = one(dec[i][0], dec[i][1], 1, -1, 0, &split);
        double ms_other = one(dec[i][0], dec[i][1], 1, !split, 0, &other);
        double ms_mma = one(dec[i][0], dec[i][1], 1, -1, 1, &s_mma);
        /* The TMA kernel's one-consumer variant (5 stages), the plan's split and the other. */
        int st1, st2, st3;
        int rw = invar_cuda_testing_attn_decode_ring(ctx, 5);
        double ms_t1 = one(dec[i][0], dec[i][1], 1, -1, 0, &st1);
        double ms_t1_other = one(dec[i][0], dec[i][1], 1, !st1, 0, &st3);
        /* The wgmma kernel's cp.async rings (the default decode until 2026-12-07), the plan's
         * split and the other; its alternatives (same bits): split forced, in runs of 1 (the v3
         * work list), 2, 4 and 8 splits per CTA, and the 6-stage ring at one CTA per SM. */
        invar_cuda_testing_attn_decode_ring(ctx, 3);
        double ms_wg = one(dec[i][0], dec[i][1], 1, -1, 0, &st1);
        double ms_wg_other = one(dec[i][0], dec[i][1], 1, !st1, 0, &st2);
        static const int runs[4] = {1, 2, 4, 8};
        double ms_g[4];
        int gw = invar_cuda_testing_attn_split_group(1);
        for (int r = 0; r < 4; r++) {
            invar_cuda_testing_attn_split_group(runs[r]);
            ms_g[r] = one(dec[i][0], dec[i][1], 1, 1, 0, &s1);
        }
        invar_cuda_testing_attn_split_group(gw);
        /* Split forced, merged in the kernel's last CTA of each tile and by the merge kernel
         * after it, alternating twice: the better of each. */
        double ms_in = 1e30, ms_mk = 1e30;
        int mk = invar_cuda_testing_attn_merge_kernel(ctx, -1);
        for (int r = 0; r < 2; r++) {
            invar_cuda_testing_attn_merge_kernel(ctx, 0);
            double t = one(dec[i][0], dec[i][1], 1, 1, 0, &s1);
            ms_in = t < ms_in ? t : ms_in;
            invar_cuda_testing_attn_merge_kernel(ctx, 1);
            t = one(dec[i][0], dec[i][1], 1, 1, 0, &s1);
            ms_mk = t < ms_mk ? t : ms_mk;
        }
        invar_cuda_testing_attn_merge_kernel(ctx, mk);
        invar_cuda_testing_attn_decode_ring(ctx, 6);
        double ms_r6 = one(dec[i][0], dec[i][1], 1, -1, 0, &s6);
        invar_cuda_testing_attn_decode_ring(ctx, rw);
        double bytes = (double)dec[i][0] * dec[i][1] * HKV * HD * 2 * 2;
        printf("decode B=%3d ctx=%6d: %9.1f us  %.2f TB/s  split=%d   (split=%d: %.1f us; one-consumer TMA %.1f us "
               "(%.2f TB/s), split=%d: %.1f us; mma.sync kernel %.1f us, %.2fx; wgmma cp.async rings %.1f us "
               "(%.2f TB/s), split=%d: %.1f us; its split in runs of 1/2/4/8: %.1f / %.1f / %.1f / %.1f us, "
               "6-stage ring %.1f us, split with in-kernel merge %.1f us, merge kernel %.1f us)\n",
               dec[i][0], dec[i][1], ms * 1e3, bytes / (ms * 1e-3) / 1e12, split, other, ms_other * 1e3, ms_t1 * 1e3,
               bytes / (ms_t1 * 1e-3) / 1e12, st3, ms_t1_other * 1e3, ms_mma * 1e3, ms_mma / ms, ms_wg * 1e3,
               bytes / (ms_wg * 1e-3) / 1e12, st2, ms_wg_other * 1e3, ms_g[0] * 1e3, ms_g[1] * 1e3, ms_g[2] * 1e3,
               ms_g[3] * 1e3, ms_r6 * 1e3, ms_in * 1e3, ms_mk * 1e3);
        fprintf(js, "%s  {\"kind\": \"decode\", \"B\": %d, \"ctx\": %d, \"us\": %.2f, \"kv_TBps\": %.3f, \"split\": %d, "
                "\"us_other_split\": %.2f, \"us_tma1\": %.2f, \"us_tma1_other_split\": %.2f, \"us_mma\": %.2f, "
                "\"us_wg\": %.2f, \"us_wg_other_split\": %.2f, \"us_runs1\": %.2f, \"us_runs2\": %.2f, "
                "\"us_runs4\": %.2f, \"us_runs8\": %.2f, \"us_ring6\": %.2f, \"us_split_merge_in_kernel\": %.2f, "
                "\"us_split_merge_kernel\": %.2f}",
                first ? "" : ",\n", dec[i][0], dec[i][1], ms * 1e3, bytes / (ms * 1e-3) / 1e12, split, ms_other * 1e3,
                ms_t1 * 1e3, ms_t1_other * 1e3, ms_mma * 1e3, ms_wg * 1e3, ms_wg_other * 1e3, ms_g[0] * 1e3,
                ms_g[1] * 1e3, ms_g[2] * 1e3, ms_g[3] * 1e3, ms_r6 * 1e3, ms_in * 1e3, ms_mk * 1e3);
        first = 0;
        fflush(stdout);
    }
    printf("== attention prefill (one sequence, causal) ==\n");
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) {
        if (!wanted("BENCH_ATTN_PREFILL", pre[i], 0)) continue;
        int split, other, s_mma, sv[4];
        double ms = one(1, pre[i], pre[i], -1, 0, &split);
        double ms_other = one(1, pre[i], pre[i], !split, 0, &other);
        double ms_mma = one(1, pre[i], pre[i], -1, 1, &s_mma);
        /* The prefill variants (same bits): TMA with consumer turns, cp.async (v3), persistent. */
        double ms_v[4] = {ms, 0, 0, 0};
        for (int mode = 1; mode <= 3; mode++) {
            int pw = invar_cuda_testing_attn_prefill(ctx, mode);
            ms_v[mode] = one(1, pre[i], pre[i], -1, 0, &sv[mode]);
            invar_cuda_testing_attn_prefill(ctx, pw);
        }
        double fl = 4.0 * HQ * HD * (double)pre[i] * (pre[i] + 1) / 2;
#define TF(t) (fl / ((t) * 1e-3) / 1e12)
        printf("prefill L=%5d: %9.1f us  %.1f TFLOP/s (causal FLOPs)  split=%d   (split=%d: %.1f us; mma.sync kernel "
               "%.1f us, %.1f; TMA turns %.1f us, %.1f; cp.async kernel %.1f us, %.1f; persistent %.1f us, %.1f)\n",
               pre[i], ms * 1e3, TF(ms), split, other, ms_other * 1e3, ms_mma * 1e3, TF(ms_mma), ms_v[1] * 1e3,
               TF(ms_v[1]), ms_v[2] * 1e3, TF(ms_v[2]), ms_v[3] * 1e3, TF(ms_v[3]));
        fprintf(js, "%s  {\"kind\": \"prefill\", \"L\": %d, \"us\": %.2f, \"TFLOPs\": %.2f, \"split\": %d, "
                "\"us_other_split\": %.2f, \"us_mma\": %.2f, \"us_tma_turns\": %.2f, \"us_cp_async\": %.2f, "
                "\"us_persistent\": %.2f}",
                first ? "" : ",\n", pre[i], ms * 1e3, TF(ms), split, ms_other * 1e3, ms_mma * 1e3, ms_v[1] * 1e3,
                ms_v[2] * 1e3, ms_v[3] * 1e3);
        first = 0;
#undef TF
        fflush(stdout);
    }
    fprintf(js, "\n],\n");
}
