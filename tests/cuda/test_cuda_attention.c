/* Device test of paged attention, for three head layouts (Llama-3-8B: 32 query, 8 KV heads,
 * head_dim 128; 32 query, 4 KV heads, head_dim 64; 14 query, 2 KV heads, head_dim 64):
 * every (token, head) output must be bitwise the same whether the token is computed in a full
 * prefill, one token at a time (decode), in chunked prefill with chunks not aligned to the
 * KV splits (INVAR_CUDA_KV_SPLIT positions), in ragged batches that mix decode and prefill of
 * other sequences in any order, and with the KV split across CTAs or folded inside one; and
 * it must match an fp64 reference on random data (with spiked keys that move the running max).
 * Pages are assigned in a shuffled order. The kernel is the default (wgmma) one: prefill tiles
 * on its TMA (warp-specialised) variant, decode on its cp.async one, and the other prefill
 * variants must give the same bits; the previous mma.sync kernel's accuracy is reported beside
 * it, as a diagnosis aid.
 *
 * Debugging a first run: INVAR_CUDA_TEST_TINY=1 runs short sequences only, one layout
 * (INVAR_CUDA_TEST_HD=64 or 128 picks the head_dim; default 128), checks every token against fp64 and
 * prints the worst elements; every failing comparison prints its first differing values. */
#include <math.h>
#include <string.h>
#include "cuda_test_util.h"
#include "invar_cuda.h"
#include "kernels/cuda/invar_cuda_testing.h"

static int HQ, HKV, HDIM; /* the layout under test */
#define PG INVAR_CUDA_PAGE
#define NSEQ 7
#define SP INVAR_CUDA_KV_SPLIT /* lengths around split boundaries */
static const int L_FULL[NSEQ] = {1, 17, SP - 1, SP, SP + 1, 1000, 2100};
static int L[NSEQ];
/* INVAR_CUDA_TEST_SMALL=1 (compute-sanitizer runs): the two longest are 300 and 600 (the
 * one-token-per-step runs dominate the time, and the prefix-hit case needs > 512). */
static const int L_SMALL[NSEQ] = {1, 17, SP - 1, SP, SP + 1, 300, 600};
/* INVAR_CUDA_TEST_SMALL=2 (racecheck, ~100x slower per launch): shorter still, and the
 * one-token-per-step decode runs once (forced split) instead of three times. */
static const int L_RACE[NSEQ] = {1, 17, 64, 129, 257, 300, SP + 44};
static const int L_TINY[NSEQ] = {1, 3, 17, 64, 130, 300, SP + 44};
_Static_assert(600 > SP && SP % 64 == 0, "every length set crosses a split boundary");
static int race_mode, tiny_mode, short_mode; /* short_mode: any of the short-sequence modes */
/* INVAR_CUDA_TEST_TAIL=1: after the canonical prefill, only tail_decode's one-token steps (on
 * whatever decode kernel is the default): the racecheck run of the decode path, which the
 * full modes' one-token-per-step walks make too long under the sanitizer. */
static int tail_mode;

static int failures;
static invar_cuda_ctx *ctx;
static uint16_t *hq[NSEQ], *hk[NSEQ], *hv[NSEQ]; /* host Q [L][HQ][D], K/V [L][HKV][D] */
static int32_t *pages[NSEQ];                      /* page of each 16-position block */
static int max_pages, cache_pages;
static uint16_t *kc, *vc;
#define ROW ((size_t)HQ * HDIM) /* elements of one token's output */
static uint16_t *canon[NSEQ];                     /* canonical output [L][HQ][D] */

struct seg { int seq, qs, qe; };

/* Runs one ragged batch; writes each token's output row into dst[seq] (host). */
static void run_batch(const struct seg *sg, int n, int force_split, uint16_t **dst)
{
    int32_t qstart[NSEQ * 4], qlen[NSEQ * 4], clen[NSEQ * 4];
    int T = 0;
    for (int i = 0; i < n; i++) {
        qstart[i] = T;
        qlen[i] = sg[i].qe - sg[i].qs;
        clen[i] = sg[i].qe;
        T += qlen[i];
    }
    uint16_t *q = malloc((size_t)T * ROW * 2);
    int32_t *bt = malloc(sizeof(int32_t) * n * max_pages);
    for (int i = 0; i < n; i++) {
        memcpy(q + (size_t)qstart[i] * ROW, hq[sg[i].seq] + (size_t)sg[i].qs * ROW, (size_t)qlen[i] * ROW * 2);
        memcpy(bt + (size_t)i * max_pages, pages[sg[i].seq], sizeof(int32_t) * max_pages);
    }
    uint16_t *dq = upload(q, (size_t)T * ROW * 2);
    int32_t *dbt = upload(bt, sizeof(int32_t) * n * max_pages);
    uint16_t *dout = dmalloc((size_t)T * ROW * 2);
    CK(cudaMemset(dout, 0xFF, (size_t)T * ROW * 2));
    invar_cuda_attn_plan *pl;
    CKI(invar_cuda_attn_plan_create(ctx, &pl, n, qstart, qlen, clen, HQ, HKV, HDIM, max_pages));
    invar_cuda_attn_plan_force_split(pl, force_split);
    invar_cuda_attn_plan_cache_pages(pl, cache_pages);
    CKI(invar_cuda_attention(ctx, pl, dq, kc, vc, dbt, dout, 1.0f / sqrtf((float)HDIM)));
    CK(cudaDeviceSynchronize());
    uint16_t *out = download(dout, (size_t)T * ROW * 2);
    for (int i = 0; i < n; i++)
        memcpy(dst[sg[i].seq] + (size_t)sg[i].qs * ROW, out + (size_t)qstart[i] * ROW, (size_t)qlen[i] * ROW * 2);
    invar_cuda_attn_plan_free(pl);
    free(q); free(bt); free(out);
    CK(cudaFree(dq)); CK(cudaFree(dbt)); CK(cudaFree(dout));
}

/* want_zero 1: must not differ; 0: a negative control, must differ; -1: reported only. */
static long compare_want(uint16_t **got, const char *name, int want_zero)
{
    long bad = 0, rows = 0;
    int fs = -1, ft = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int t = 0; t < L[s]; t++) {
            int d = memcmp(got[s] + (size_t)t * ROW, canon[s] + (size_t)t * ROW, ROW * 2) != 0;
            if (d && fs < 0) {
                fs = s;
                ft = t;
            }
            bad += d;
            rows++;
        }
    printf("%-44s %ld of %ld token rows differ from the full prefill%s\n", name, bad, rows,
           want_zero == 1 ? "" : want_zero == 0 ? " (negative control: must differ)" : " (reported only)");
    if (fs >= 0 && want_zero == 1) {
        /* The first differing row: which heads and dims, and the values. */
        const uint16_t *a = got[fs] + (size_t)ft * ROW, *b = canon[fs] + (size_t)ft * ROW;
        int shown = 0, nd = 0;
        for (size_t e = 0; e < ROW; e++) {
            if (a[e] == b[e]) continue;
            nd++;
            if (shown++ < 4)
                printf("  first: seq %d (len %d) token %d head %d dim %d: got %.6g (0x%04x), full prefill %.6g (0x%04x)\n",
                       fs, L[fs], ft, (int)(e / HDIM), (int)(e % HDIM), bf2f(a[e]), a[e], bf2f(b[e]), b[e]);
        }
        printf("  (%d of %zu values differ in that row)\n", nd, ROW);
    }
    if (want_zero == 1) EXPECT(bad == 0, "attention: %s differs", name);
    else if (want_zero == 0) EXPECT(bad > 0, "attention: negative control %s found no difference", name);
    return bad;
}

static long compare(uint16_t **got, const char *name) { return compare_want(got, name, 1); }

/* Advances every sequence by its own step per batch (a ragged mix of decode and prefill). */
static void run_steps(const int *step, int reverse, int force, uint16_t **dst)
{
    int done[NSEQ] = {0};
    for (;;) {
        struct seg sg[NSEQ];
        int n = 0;
        for (int k = 0; k < NSEQ; k++) {
            int s = reverse ? NSEQ - 1 - k : k;
            if (done[s] >= L[s]) continue;
            int e = done[s] + step[s] < L[s] ? done[s] + step[s] : L[s];
            struct seg x = {s, done[s], e};
            sg[n++] = x;
            done[s] = e;
        }
        if (!n) break;
        run_batch(sg, n, force, dst);
    }
}

/* Steps on one of the TMA decode rings: split, then reversed without a split (same bits), then
 * a control that must differ: `ctrl` on (the in-CTA fold follows the tile, unsplit; or the
 * merge follows the batch, split: odd token counts fold with a fused multiply-add). */
static void tma_steps(const int *steps, int ring, const char *kernel, void (*ctrl)(invar_cuda_ctx *, int),
                      int ctrl_split, const char *ctrl_name, uint16_t **got)
{
    char name[160];
    int rw = invar_cuda_testing_attn_decode_ring(ctx, ring);
    run_steps(steps, 0, 1, got);
    snprintf(name, sizeof name, "steps of <= 8 tokens, split, %s", kernel);
    compare(got, name);
    run_steps(steps, 1, 0, got);
    snprintf(name, sizeof name, "steps of <= 8 tokens, reversed, no split, %s", kernel);
    compare(got, name);
    ctrl(ctx, 1);
    run_steps(steps, 0, ctrl_split, got);
    snprintf(name, sizeof name, "the same, not reversed [%s]", ctrl_name);
    compare_want(got, name, short_mode ? -1 : 0);
    ctrl(ctx, 0);
    invar_cuda_testing_attn_decode_ring(ctx, rw);
}

/* The last TAIL tokens of every sequence decoded one token a step, every sequence in each
 * step's batch, on top of its cached prefix; the other rows keep the canonical output, and
 * run_batch fills each launch's output with NaN first, so every compared decoded row is new. */
#define TAIL 6
static void tail_decode(int force_split, const char *name, uint16_t **got)
{
    for (int s = 0; s < NSEQ; s++) memcpy(got[s], canon[s], (size_t)L[s] * ROW * 2);
    for (int k = TAIL; k >= 1; k--) {
        struct seg sg[NSEQ];
        int n = 0;
        for (int s = 0; s < NSEQ; s++)
            if (L[s] >= k) {
                struct seg x = {s, L[s] - k, L[s] - k + 1};
                sg[n++] = x;
            }
        run_batch(sg, n, force_split, got);
    }
    compare(got, name);
}

/* fp64 attention of token t of sequence s, head h, into o[HDIM]. */
static void reference(int s, int t, int h, double *o)
{
    int kh = h / (HQ / HKV);
    double *sc = malloc(sizeof(double) * (t + 1)), mx = -INFINITY, sum = 0;
    for (int j = 0; j <= t; j++) {
        double d = 0;
        for (int e = 0; e < HDIM; e++)
            d += (double)bf2f(hq[s][((size_t)t * HQ + h) * HDIM + e]) * bf2f(hk[s][((size_t)j * HKV + kh) * HDIM + e]);
        sc[j] = d / sqrt((double)HDIM);
        mx = sc[j] > mx ? sc[j] : mx;
    }
    for (int j = 0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
    for (int e = 0; e < HDIM; e++) {
        double acc = 0;
        for (int j = 0; j <= t; j++) acc += sc[j] * bf2f(hv[s][((size_t)j * HKV + kh) * HDIM + e]);
        o[e] = acc / sum;
    }
    free(sc);
}

/* Relative error of out (all sequences, [L][HQ][HDIM]) against fp64 on sampled tokens (every
 * token in tiny mode), all heads; prints the worst element and per-sequence errors where
 * they exceed the tolerance. */
static double accuracy(uint16_t **o_dev, const char *what, int *nan_values)
{
    double num = 0, den = 0, worst = -1;
    int ws = 0, wt = 0, wh = 0, we = 0;
    double wgot = 0, wwant = 0;
    *nan_values = 0;
    double *ref = malloc(sizeof(double) * HDIM);
    for (int s = 0; s < NSEQ; s++) {
        double sn = 0, sd = 0;
        int toks[3] = {0, L[s] / 2, L[s] - 1}, nt = tiny_mode ? L[s] : 3;
        for (int ti = 0; ti < nt; ti++) {
            int t = tiny_mode ? ti : toks[ti];
            for (int h = 0; h < HQ; h++) {
                reference(s, t, h, ref);
                for (int e = 0; e < HDIM; e++) {
                    double g = bf2f(o_dev[s][((size_t)t * HQ + h) * HDIM + e]), d = fabs(g - ref[e]);
                    if (isnan(g)) (*nan_values)++;
                    if (isnan(g) || d > worst) {
                        worst = isnan(g) ? INFINITY : d;
                        ws = s; wt = t; wh = h; we = e; wgot = g; wwant = ref[e];
                    }
                    sn += (g - ref[e]) * (g - ref[e]);
                    sd += ref[e] * ref[e];
                }
            }
        }
        num += sn;
        den += sd;
        if (!(sqrt(sn / sd) < 8e-3))
            printf("  %s: seq %d (len %d): rel err %.3e\n", what, s, L[s], sqrt(sn / sd));
    }
    free(ref);
    printf("  %s: worst element seq %d token %d head %d dim %d: got %.6g, fp64 %.6g\n", what, ws, wt, wh, we, wgot,
           wwant);
    return sqrt(num / den);
}

static void run_config(int n_q_heads, int n_kv_heads, int head_dim)
{
    HQ = n_q_heads;
    HKV = n_kv_heads;
    HDIM = head_dim;
    printf("== %d query heads, %d KV heads, head_dim %d ==\n", HQ, HKV, HDIM);
    const double t0 = now_s();
    int total_pages = 0, maxL = 0;
    for (int s = 0; s < NSEQ; s++) {
        total_pages += (L[s] + PG - 1) / PG;
        if (L[s] > maxL) maxL = L[s];
    }
    max_pages = (maxL + PG - 1) / PG;
    /* Shuffled page pool. */
    int32_t *perm = malloc(sizeof(int32_t) * total_pages);
    for (int i = 0; i < total_pages; i++) perm[i] = i;
    uint64_t rs = 42;
    for (int i = total_pages - 1; i > 0; i--) {
        int j = (int)(rng_next(&rs) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    size_t page_elems = (size_t)HKV * PG * HDIM;
    cache_pages = total_pages;
    kc = dmalloc((size_t)total_pages * page_elems * 2);
    vc = dmalloc((size_t)total_pages * page_elems * 2);
    CK(cudaMemset(kc, 0xFF, (size_t)total_pages * page_elems * 2)); /* NaN where nothing wrote */
    CK(cudaMemset(vc, 0xFF, (size_t)total_pages * page_elems * 2));
    int next = 0;
    for (int s = 0; s < NSEQ; s++) {
        hq[s] = malloc((size_t)L[s] * ROW * 2);
        hk[s] = malloc((size_t)L[s] * HKV * HDIM * 2);
        hv[s] = malloc((size_t)L[s] * HKV * HDIM * 2);
        canon[s] = malloc((size_t)L[s] * ROW * 2);
        fill_bf16(hq[s], (size_t)L[s] * ROW, 1000 + s, 2.0f);
        fill_bf16(hk[s], (size_t)L[s] * HKV * HDIM, 2000 + s, 2.0f);
        /* Every 61st key of KV head 0 16x larger (exact in bf16): its scores jump the running
         * max by far more than the lazy rescale's 2^8 in the middle of a split, so the rescale
         * after skipped ones is checked against fp64 too; random keys alone move it by < 8.
         * Only head 0: a spiked row's softmax is nearly one-hot, where the controls' fp32
         * differences never reach the bf16 output, so the other heads keep plain keys. */
        for (int t = 37; t < L[s]; t += 61)
            for (int e = 0; e < HDIM; e++) {
                uint16_t *x = &hk[s][(size_t)t * HKV * HDIM + e];
                *x = f2bf(bf2f(*x) * 16.0f);
            }
        fill_bf16(hv[s], (size_t)L[s] * HKV * HDIM, 3000 + s, 1.0f);
        pages[s] = calloc((size_t)max_pages, sizeof(int32_t));
        for (int p = 0; p < (L[s] + PG - 1) / PG; p++) pages[s][p] = perm[next++];
        int32_t *slot = malloc(sizeof(int32_t) * L[s]);
        for (int t = 0; t < L[s]; t++) slot[t] = pages[s][t / PG] * PG + t % PG;
        uint16_t *dk = upload(hk[s], (size_t)L[s] * HKV * HDIM * 2);
        uint16_t *dv = upload(hv[s], (size_t)L[s] * HKV * HDIM * 2);
        int32_t *dslot = upload(slot, sizeof(int32_t) * L[s]);
        CKI(invar_cuda_kv_write(ctx, dk, dv, kc, vc, dslot, L[s], HKV, HDIM));
        CK(cudaDeviceSynchronize());
        CK(cudaFree(dk)); CK(cudaFree(dv)); CK(cudaFree(dslot));
        free(slot);
    }
    uint16_t *got[NSEQ];
    for (int s = 0; s < NSEQ; s++) got[s] = malloc((size_t)L[s] * ROW * 2);

    /* Canonical: every sequence prefilled whole, in one batch, CTAs folding all splits. */
    struct seg all[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        struct seg x = {s, 0, L[s]};
        all[s] = x;
    }
    run_batch(all, NSEQ, 0, canon);
    if (tail_mode) {
        tail_decode(-1, "tail decode, one token a step, plan's split", got);
        tail_decode(1, "tail decode, one token a step, forced split", got);
        tail_decode(0, "tail decode, one token a step, no split", got);
        goto done;
    }

    /* The previous (mma.sync) kernel on the same batch: its accuracy is reported only, so a
     * failure of the default kernel's check below shows whether the data or the kernel is off. */
    int was = invar_cuda_testing_attn_mma(ctx, 1), nan_values;
    run_batch(all, NSEQ, 0, got);
    double err_mma = accuracy(got, "mma.sync kernel", &nan_values);
    printf("accuracy vs fp64 of the previous mma.sync kernel: rel err %.2e, NaN values %d (reported only)\n", err_mma,
           nan_values);
    {
        /* Its split items as runs of 3 splits (a CTA walks several splits, writing each
         * partial) against its own full prefill. */
        static const int mixed[NSEQ] = {1, 7, 64, 100, 300, 1, 513};
        uint16_t *mma_full[NSEQ], *own[NSEQ];
        for (int s = 0; s < NSEQ; s++) {
            mma_full[s] = got[s];
            own[s] = canon[s];
            got[s] = malloc((size_t)L[s] * ROW * 2);
            canon[s] = mma_full[s];
        }
        int gw = invar_cuda_testing_attn_split_group(3);
        run_steps(mixed, 0, 1, got);
        invar_cuda_testing_attn_split_group(gw);
        compare(got, "mma.sync: ragged mix, split, runs of 3 splits");
        for (int s = 0; s < NSEQ; s++) {
            free(got[s]);
            got[s] = mma_full[s];
            canon[s] = own[s];
        }
    }
    invar_cuda_testing_attn_mma(ctx, was);

    /* Accuracy against fp64 on sampled tokens (all in tiny mode), all heads. */
    double err = accuracy(canon, "default kernel", &nan_values);
    printf("accuracy vs fp64 (%s tokens, all heads): rel err %.2e (tol 8e-3), NaN values %d\n",
           tiny_mode ? "all" : "sampled", err, nan_values);
    EXPECT(err < 8e-3 && nan_values == 0, "attention accuracy %.2e (head_dim %d)", err, HDIM);

    run_batch(all, NSEQ, 1, got);
    compare(got, "full prefill, KV split across CTAs");
    {
        /* Prefill tiles (> 64 rows) on the other variants of the kernel: the TMA one with
         * consumer turns, the cp.async one (all threads copy; decode's kernel), the TMA one on a
         * persistent grid. Then the TMA kernel's in-CTA fold made to follow the tile. */
        static const char *names[] = {"", "full prefill, TMA kernel, consumer turns", "full prefill, cp.async kernel",
                                      "full prefill, TMA kernel, persistent grid"};
        for (int mode = 1; mode <= 3; mode++) {
            int pw = invar_cuda_testing_attn_prefill(ctx, mode);
            run_batch(all, NSEQ, 0, got);
            compare(got, names[mode]);
            invar_cuda_testing_attn_prefill(ctx, pw);
        }
        /* Chunks of 29: every chunk ends in a prefill tile (> 64 rows, the kernel with the
         * control) of an odd number of tokens (29, 16 + 13, 18 + 11 at 4, 8 and 7 heads per KV
         * head), so many rows past a split fold with the control's rounding (a fold's fp32
         * difference shows in a bf16 output only now and then). */
        int c29[NSEQ];
        for (int s = 0; s < NSEQ; s++) c29[s] = 29;
        invar_cuda_testing_attn_fold_by_rows(ctx, 1);
        run_steps(c29, 1, 0, got); /* forced whole tiles: the in-CTA fold */
        /* The short modes' sequences leave few odd tiles past a split: reported only there. */
        compare_want(got, "chunks of 29 [control: in-CTA fold follows the tile]", short_mode ? -1 : 0);
        invar_cuda_testing_attn_fold_by_rows(ctx, 0);
    }
    {
        struct seg rev[NSEQ];
        for (int s = 0; s < NSEQ; s++) rev[s] = all[NSEQ - 1 - s];
        run_batch(rev, NSEQ, -1, got);
        compare(got, "full prefill, sequences reversed");
    }
    {
        int one[NSEQ];
        for (int s = 0; s < NSEQ; s++) one[s] = 1;
        if (!race_mode) {
            run_steps(one, 0, -1, got);
            compare(got, "decode, one token per sequence per batch");
        }
        /* The rest of this block on the wgmma kernel's cp.async rings (the merge in the
         * kernel's last CTA is theirs); tma_steps below covers the TMA decode kernels. */
        const int ring_was = invar_cuda_testing_attn_decode_ring(ctx, 3);
        run_steps(one, 1, 1, got);
        compare(got, "decode, reversed, forced split");
        /* The same launches with the other merge: the merge kernel after the attention, or
         * each tile's last CTA folding the tile's partials in the kernel. */
        int mk = invar_cuda_testing_attn_merge_kernel(ctx, -1), other = mk == 1 ? 0 : 1;
        invar_cuda_testing_attn_merge_kernel(ctx, other); /* the default (2) merges these in the CTA */
        run_steps(one, 1, 1, got);
        compare(got, other ? "the same, merge kernel after the attention" : "the same, merged in the kernel's last CTA");
        invar_cuda_testing_attn_merge_kernel(ctx, 0);
        if (!race_mode) {
            /* The in-kernel merge made to follow the batch (odd token counts: most steps). */
            invar_cuda_testing_merge_by_batch(ctx, 1);
            run_steps(one, 0, 1, got);
            compare_want(got, "decode, forced split [control: in-kernel merge follows batch]", short_mode ? -1 : 0);
            invar_cuda_testing_merge_by_batch(ctx, 0);
        }
        invar_cuda_testing_attn_merge_kernel(ctx, mk);
        if (!race_mode) {
            run_steps(one, 0, 0, got);
            compare(got, "decode, forced no split");
            /* Split items as runs of consecutive splits (one CTA walks a run). */
            int gw = invar_cuda_testing_attn_split_group(3);
            run_steps(one, 1, 1, got);
            compare(got, "decode, split, runs of 3 splits");
            invar_cuda_testing_attn_split_group(gw);
        }
        invar_cuda_testing_attn_decode_ring(ctx, ring_was);
    }
    if (!race_mode) {
        /* Steps of at most 8 tokens (at most 64 rows: the decode variants) on the 6-stage
         * one-CTA-per-SM ring with runs of 2 splits; then the merge control on the same path
         * (the batches' token counts are mostly odd, where the control reverses the fold). */
        static const int small_steps[NSEQ] = {1, 2, 3, 5, 7, 8, 7};
        int gw = invar_cuda_testing_attn_split_group(2), rw = invar_cuda_testing_attn_decode_ring(ctx, 6);
        run_steps(small_steps, 0, 1, got);
        compare(got, "steps of <= 8 tokens, runs of 2, 6-stage ring");
        invar_cuda_testing_merge_by_batch(ctx, 1);
        run_steps(small_steps, 0, 1, got);
        compare_want(got, "the same [control: merge follows batch]", short_mode ? -1 : 0);
        invar_cuda_testing_merge_by_batch(ctx, 0);
        invar_cuda_testing_attn_decode_ring(ctx, rw);
        invar_cuda_testing_attn_split_group(gw);
        /* The same steps with every decode launch on the TMA producer kernel (a persistent
         * grid, its second warpgroup idle), then on its one-consumer variant (5 stages). */
        tma_steps(small_steps, 4, "TMA kernel", invar_cuda_testing_attn_fold_by_rows, 0,
                  "control: in-CTA fold follows the tile", got);
        tma_steps(small_steps, 5, "one-consumer TMA kernel", invar_cuda_testing_merge_by_batch, 1,
                  "control: merge follows batch", got);
    }
    {
        int c100[NSEQ], c293[NSEQ];
        for (int s = 0; s < NSEQ; s++) {
            c100[s] = 100;
            c293[s] = 293;
        }
        run_steps(c100, 0, -1, got);
        compare(got, "chunked prefill, chunks of 100");
        run_steps(c293, 1, 1, got);
        compare(got, "chunked prefill, chunks of 293, split");
    }
    {
        static const int mixed[NSEQ] = {1, 7, 64, 100, 300, 1, 513};
        run_steps(mixed, 0, -1, got);
        compare(got, "ragged mix of decode and prefill steps");
        run_steps(mixed, 1, 0, got);
        compare(got, "ragged mix, reversed, no split");
        run_steps(mixed, 0, 1, got);
        compare(got, "ragged mix, split");
        /* The same check with the merge's fold order following the batch's token count. */
        invar_cuda_testing_merge_by_batch(ctx, 1);
        run_steps(mixed, 0, 1, got);
        /* The short modes' sequences hold one or two splits of 512: too few merges for the
         * control's fused fold to show, so it is only reported there, as the others are (the
         * full run requires it to differ). */
        compare_want(got, "ragged mix, split [control: merge follows batch]", short_mode ? -1 : 0);
        invar_cuda_testing_merge_by_batch(ctx, 0);
        int gw = invar_cuda_testing_attn_split_group(3); /* the wide variant's runs of splits */
        run_steps(mixed, 1, 1, got);
        compare(got, "ragged mix, reversed, split, runs of 3 splits");
        invar_cuda_testing_attn_split_group(gw);
    }
    {
        /* Prefix-cache hit: the first 512 positions were cached by another request; the rest
         * arrives as one prefill on top of them. */
        int pre = race_mode || tiny_mode ? 272 : 512; /* past the first 256 positions either way */
        struct seg a = {6, 0, pre}, b = {6, pre, L[6]};
        memcpy(got[6], canon[6], (size_t)L[6] * ROW * 2);
        run_batch(&a, 1, -1, got);
        run_batch(&b, 1, -1, got);
        for (int s = 0; s < 6; s++) memcpy(got[s], canon[s], (size_t)L[s] * ROW * 2);
        printf("(%d cached) ", pre);
        compare(got, "prefix-cache hit, rest prefilled");
    }
done:
    CK(cudaFree(kc));
    CK(cudaFree(vc));
    for (int s = 0; s < NSEQ; s++) {
        free(hq[s]); free(hk[s]); free(hv[s]); free(canon[s]); free(pages[s]); free(got[s]);
    }
    free(perm);
    printf("(head_dim %d: %.1f s)\n", HDIM, now_s() - t0);
}

/* Host only: for decode batches of every run length the plan picks (and forced ones), the
 * work list that fill writes has measure's item count, and each tile's split items are runs
 * that cover its splits 0 .. last once, in order. */
static void check_work_lists(void)
{
    static const int shapes[][2] = {{1, 1024}, {16, 4096}, {64, 4096}, {64, 16384}, {256, 4096}, {3, 777}};
    static const int forced[] = {0, 1, 3, 8};
    int bad = 0, groups_seen = 0;
    for (size_t f = 0; f < sizeof forced / sizeof *forced; f++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            int B = shapes[i][0], ctxl = shapes[i][1], maxp = (ctxl + PG - 1) / PG;
            int32_t *qs = malloc(4 * B), *ql = malloc(4 * B), *cl = malloc(4 * B);
            for (int b = 0; b < B; b++) {
                qs[b] = b;
                ql[b] = 1;
                cl[b] = ctxl - b % 5; /* ragged */
            }
            int gw = invar_cuda_testing_attn_split_group(forced[f]);
            invar_cuda_attn_shape sh;
            if (invar_cuda_attn_measure(B, qs, ql, cl, 32, 8, 128, maxp, 132, &sh)) {
                bad++;
            } else {
                invar_cuda_attn_item *it = malloc(sizeof *it * ((size_t)sh.n_items_split + 1));
                int32_t *pos = malloc(4 * (size_t)B), *pb = malloc(4 * (size_t)B);
                invar_cuda_attn_fill(B, qs, ql, cl, 32, 8, NULL, it, pos, pb);
                int n = 0, next_chunk = 0, prev_seq = -1, widest = 0;
                for (int k = 0; k < sh.n_items_split; k++) {
                    if (it[k].seq != prev_seq) {
                        if (prev_seq >= 0 && next_chunk != (cl[prev_seq] - 1) / INVAR_CUDA_KV_SPLIT + 1) bad++;
                        prev_seq = it[k].seq;
                        next_chunk = 0;
                    }
                    if (it[k].chunk != next_chunk || it[k].nchunk < 1) bad++;
                    next_chunk = it[k].chunk + it[k].nchunk;
                    widest = it[k].nchunk > widest ? it[k].nchunk : widest;
                    n++;
                }
                if (prev_seq != B - 1 || next_chunk != (cl[B - 1] - 1) / INVAR_CUDA_KV_SPLIT + 1) bad++;
                if (n != sh.n_items_split || (forced[f] && widest > forced[f])) bad++;
                groups_seen += widest > 1;
                free(it); free(pos); free(pb);
            }
            invar_cuda_testing_attn_split_group(gw);
            free(qs); free(ql); free(cl);
        }
    printf("work lists: %d inconsistencies (runs of several splits in %d of %d lists)\n", bad, groups_seen,
           (int)(sizeof forced / sizeof *forced * (sizeof shapes / sizeof *shapes)));
    EXPECT(bad == 0, "work lists: measure and fill disagree or runs do not tile the splits");
    EXPECT(groups_seen > 0, "work lists: no list had runs of several splits");
}

int main(void)
{
    check_work_lists();
    int rc = invar_cuda_init(&ctx, 0);
    if (rc == INVAR_CUDA_ENODEV) {
        printf("no sm_90 device: skipped\n");
        return failures ? 1 : SKIP_CODE;
    }
    if (rc) return 2;
    const char *small = getenv("INVAR_CUDA_TEST_SMALL"), *tiny = getenv("INVAR_CUDA_TEST_TINY");
    const char *hd = getenv("INVAR_CUDA_TEST_HD");
    race_mode = small && strcmp(small, "2") == 0;
    tail_mode = getenv("INVAR_CUDA_TEST_TAIL") != NULL;
    short_mode = small != NULL || tiny != NULL;
    tiny_mode = tiny && strcmp(tiny, "0") != 0;
    memcpy(L, tiny_mode ? L_TINY : small ? (race_mode ? L_RACE : L_SMALL) : L_FULL, sizeof L);
    printf("attention kernel: %s%s\n", invar_cuda_testing_attn_mma(ctx, -1) ? "mma.sync (INVAR_CUDA_ATTN=mma)" : "wgmma",
           tiny_mode ? ", tiny mode" : "");
    int only = hd ? atoi(hd) : tiny_mode ? 128 : 0;
    if (only != 0 && only != 64 && only != 128) {
        printf("INVAR_CUDA_TEST_HD must be 64 or 128\n");
        return 2;
    }
    if (!only || only == 128) run_config(32, 8, 128);
    /* The sanitizer modes (SMALL) skip this one: the next covers head_dim 64 too. */
    if ((!only && !small) || only == 64) run_config(32, 4, 64);
    /* Qwen2-0.5B's heads: 7 rows per token, so a token's rows straddle warps and warpgroups. */
    if (!only || only == 64) run_config(14, 2, 64);
    invar_cuda_free(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
