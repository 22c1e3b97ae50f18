/* The engine's invariance suite on the GPU (--device cuda), token ids and logprobs bit for
 * bit, each check with a negative control that must fail:
 *   batch     each of 32 prompts (greedy, and temperature 0.8 with a seed) alone vs inside
 *             random batches of 2..256 with fillers, random order, random token budgets
 *   chunks    per-step token budgets 16, 64, 256, 2048 (prefill chunked differently)
 *   prefix    prefix cache cold vs warm (shared prefixes), hits counted
 *   preempt   a tiny KV budget forcing preemption and recompute
 *   score     invar_engine_score == the logprobs sampled step by step
 *   prompt    prompt logprobs from the engine (invar_sampling.prompt_logprobs), batched,
 *             chunked, cache warm == invar_engine_score of the prompt on the same device
 *   graphs    decode steps replayed from CUDA graphs (padded to buckets of up to 256) vs
 *             the same requests run eagerly, at every bucket boundary
 *   control   every check again with the GEMM's K chunk following M (SPLIT_BY_M): each
 *             must find mismatches; cuBLAS mode is reported too
 *   accuracy  GPU logits against the CPU engine's on the same file (relative error, top-1)
 * On a mixture-of-experts model (qwen3moe, deepseek2) the tokens per expert must really
 * vary between the alone and the batched runs compared, and two more negative controls run
 * the batch and chunk checks: experts combined in the order of their load in the batch, and
 * (deepseek2) MLA attention whose key splits follow the forward's token count. The experts
 * are routed on the device and MLA reads its block-table stride from device memory, so
 * these models decode from graphs like a dense one (the graphs check covers them).
 * Usage: test_cuda_engine MODEL.gguf [--quick]. Exits 77 without a usable GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine_testing.h"
#include "invar.h"

#define MAX_OUT 16
#define N_PROMPTS 32

typedef struct {
    int32_t *ids;
    int64_t n;
    invar_sampling s;
} req;

typedef struct {
    invar_finish finish;
    int64_t n;
    int32_t tok[MAX_OUT];
    float lp[MAX_OUT];
} out_t;

static invar_model *g_model;
static int g_failures;
static int quick_graphs;          /* --quick: every third bucket */
static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
/* Modes: the GEMM (backend_gemm_mode) in the low bits, and the MoE / MLA controls. */
#define MODE_GEMM_MASK 15
#define MODE_MOE_BY_LOAD 16
#define MODE_MLA_SPLIT 32
static int g_moe, g_mla;          /* the model routes experts / has MLA */
static int64_t g_n_expert;
static uint64_t *g_seen_alone, *g_seen_batched; /* per expert: token counts seen (moe_counts_seen) */

static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

static void shuffle(int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd((uint32_t)i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static invar_engine_config cfg_of(int max_batch, int budget, int64_t kv_blocks, bool cache) {
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.device = INVAR_DEVICE_CUDA;
    c.n_threads = 4;
    c.max_batch = max_batch;
    c.max_batch_tokens = budget;
    c.kv_blocks = kv_blocks;
    c.kv_mem_mb = 4096;
    c.no_prefix_cache = !cache;
    return c;
}

static invar_engine *engine(const invar_engine_config *c, int gemm_mode) {
    char err[256];
    invar_engine *e;
    if (invar_engine_create(g_model, c, &e, err, sizeof err)) {
        fprintf(stderr, "engine: %s\n", err);
        exit(strstr(err, "no usable") || strstr(err, "no CUDA") ? 77 : 1);
    }
    struct backend *be = invar_engine_testing_backend(e);
    if ((gemm_mode & MODE_GEMM_MASK) && invar_engine_testing_set_cuda_gemm(e, gemm_mode & MODE_GEMM_MASK)) exit(1);
    if ((gemm_mode & MODE_MOE_BY_LOAD) && backend_cuda_set_moe_combine(be, MOE_COMBINE_BY_LOAD)) exit(1);
    if ((gemm_mode & MODE_MLA_SPLIT) && backend_cuda_set_mla_split_by_batch(be, true)) exit(1);
    return e;
}

/* Before an engine of the real path goes: the per-expert token counts its forwards saw. */
static void collect_seen(invar_engine *e, int mode, int alone) {
    if (!g_moe || mode) return;
    const uint64_t *seen = backend_cuda_moe_counts_seen(invar_engine_testing_backend(e));
    if (!seen) {
        printf("experts: no per-expert counts from the CUDA backend FAILED\n");
        g_failures++;
        return;
    }
    for (int64_t x = 0; x < g_n_expert; x++) (alone ? g_seen_alone : g_seen_batched)[x] |= seen[x];
}

/* Steps until every request has finished. */
static void step_to_end(invar_engine *e) {
    int left;
    while ((left = invar_engine_step(e)) > 0) {}
    if (left < 0) {
        fprintf(stderr, "step failed: %s\n", invar_engine_error(e));
        exit(1);
    }
}

/* Submits rs[order[i]] in that order, steps to the end, collects outputs by index. */
static void run_on(invar_engine *e, const req *rs, const int *order, int n, out_t *outs) {
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) ids[i] = invar_engine_submit(e, rs[order[i]].ids, rs[order[i]].n, &rs[order[i]].s);
    step_to_end(e);
    for (int i = 0; i < n; i++) {
        invar_result r;
        invar_engine_result(e, ids[i], &r);
        out_t *o = &outs[order[i]];
        o->finish = r.finish;
        o->n = r.n_tokens;
        for (int64_t t = 0; t < r.n_tokens && t < MAX_OUT; t++) o->tok[t] = r.tokens[t].token, o->lp[t] = r.tokens[t].logprob;
        if (r.finish != INVAR_FINISH_STOP && r.finish != INVAR_FINISH_LENGTH) {
            fprintf(stderr, "request %d ended with %d: %s\n", order[i], r.finish, r.error ? r.error : "");
            exit(1);
        }
        invar_engine_release(e, ids[i]);
    }
    free(ids);
}

static void run(const invar_engine_config *c, int gemm_mode, const req *rs, const int *order, int n, out_t *outs,
                invar_engine_stats *st) {
    invar_engine *e = engine(c, gemm_mode);
    run_on(e, rs, order, n, outs);
    invar_engine_get_stats(e, st);
    if (st->kv_blocks_free != st->kv_blocks_total) {
        fprintf(stderr, "KV blocks leaked: %lld of %lld free\n", (long long)st->kv_blocks_free,
                (long long)st->kv_blocks_total);
        g_failures++;
    }
    collect_seen(e, gemm_mode, 0);
    invar_engine_free(e);
}

/* Each request run alone (batch of one) on one engine, prefix cache off. */
static void run_alone(const req *rs, int n, int gemm_mode, out_t *outs) {
    invar_engine_config c = cfg_of(1, 512, 0, false);
    invar_engine *e = engine(&c, gemm_mode);
    for (int i = 0; i < n; i++) run_on(e, rs, &i, 1, outs);
    collect_seen(e, gemm_mode, 1);
    invar_engine_free(e);
}

static int same(const out_t *a, const out_t *b) {
    return a->finish == b->finish && a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n);
}

static int count_diff(const out_t *ref, const out_t *got, int n) {
    int d = 0;
    for (int i = 0; i < n; i++) d += !same(&ref[i], &got[i]);
    return d;
}

static void report(const char *name, int mismatches, int compared, int want_zero) {
    int ok = want_zero ? mismatches == 0 : mismatches > 0;
    printf("%-44s %5d / %-5d %s\n", name, mismatches, compared, ok ? "ok" : "FAILED");
    if (!ok) g_failures++;
}

static int32_t *random_ids(int64_t n) {
    int32_t *p = malloc(sizeof(int32_t) * (size_t)n);
    int32_t V = invar_model_n_vocab(g_model);
    for (int64_t i = 0; i < n; i++) p[i] = (int32_t)rnd((uint32_t)V);
    return p;
}

/* OpenAI-style logits processing (penalties, logit_bias, min_tokens) on some requests, so the
 * device sampler's and the host's handling of it is inside the invariance checks too. */
static void with_logits_processing(invar_sampling *s, int k) {
    s->presence_penalty = 0.5f;
    s->frequency_penalty = 0.25f * (float)(k % 3);
    s->repetition_penalty = 1.1f;
    s->min_tokens = s->max_tokens < 2 ? s->max_tokens : 2;
    s->n_logit_bias = 2;
    s->logit_bias[0] = (invar_logit_bias){(int32_t)(7 * k + 1), 5.0f};
    s->logit_bias[1] = (invar_logit_bias){(int32_t)(11 * k + 2), -100.0f};
}

/* 32 prompts: chat prompts, random token sequences up to 700 long, and a group sharing a
 * 150-token prefix (prefix-cache hits inside and across blocks). Each as greedy (even index)
 * and temperature 0.8 with a seed (odd index). */
static req *make_targets(int *n_out) {
    req *rs = calloc(2 * N_PROMPTS, sizeof *rs);
    int32_t *shared = random_ids(150);
    for (int p = 0; p < N_PROMPTS; p++) {
        int32_t *ids;
        int64_t n;
        if (p < 8) {
            char text[512];
            snprintf(text, sizeof text, "<|im_start|>user\nTell me about topic %d, briefly.<|im_end|>\n<|im_start|>assistant\n", p);
            ids = malloc(sizeof(int32_t) * 512);
            n = invar_tokenize(g_model, text, strlen(text), true, true, ids, 512);
        } else if (p < 24) {
            n = 1 + (int64_t)rnd(700);
            ids = random_ids(n);
        } else {
            int64_t extra = 1 + (int64_t)rnd(40);
            n = 150 + extra;
            ids = random_ids(n);
            memcpy(ids, shared, sizeof(int32_t) * 150);
        }
        for (int v = 0; v < 2; v++) {
            req *r = &rs[2 * p + v];
            r->ids = malloc(sizeof(int32_t) * (size_t)n);
            memcpy(r->ids, ids, sizeof(int32_t) * (size_t)n);
            r->n = n;
            invar_sampling_default(&r->s);
            r->s.max_tokens = MAX_OUT;
            r->s.ignore_eos = true;
            r->s.temperature = v ? 0.8f : 0.0f;
            r->s.seed = 1000 + (uint64_t)p;
            if (p % 4 == 3) with_logits_processing(&r->s, p);
        }
        free(ids);
    }
    free(shared);
    *n_out = 2 * N_PROMPTS;
    return rs;
}

static req *make_fillers(int n) {
    req *rs = calloc((size_t)n, sizeof *rs);
    for (int i = 0; i < n; i++) {
        rs[i].n = 2 + (int64_t)rnd(200);
        rs[i].ids = random_ids(rs[i].n);
        invar_sampling_default(&rs[i].s);
        rs[i].s.max_tokens = 1 + (int32_t)rnd(MAX_OUT);
        rs[i].s.temperature = rnd(2) ? 0.7f : 0.0f;
        rs[i].s.top_k = rnd(2) ? 40 : 0;
        rs[i].s.top_logprobs = (int32_t)rnd(3);
        rs[i].s.seed = rnd(1000);
        rs[i].s.ignore_eos = true;
        if (rnd(4) == 0) with_logits_processing(&rs[i].s, i);
    }
    return rs;
}

/* Targets (a random subset) among fillers in one batch; returns mismatching targets. */
static int batch_trial(const req *tg, int nt, const out_t *ref, const req *fill, int batch, int budget, int gemm_mode,
                       int *compared) {
    int k = batch / 2 < nt ? (batch / 2 > 0 ? batch / 2 : 1) : nt;
    int total = batch > k ? batch : k;
    req *all = malloc(sizeof(req) * (size_t)total);
    int *pick = malloc(sizeof(int) * (size_t)nt), *order = malloc(sizeof(int) * (size_t)total);
    for (int i = 0; i < nt; i++) pick[i] = i;
    shuffle(pick, nt);
    for (int i = 0; i < k; i++) all[i] = tg[pick[i]];
    for (int i = k; i < total; i++) all[i] = fill[i - k];
    for (int i = 0; i < total; i++) order[i] = i;
    shuffle(order, total);
    out_t *got = calloc((size_t)total, sizeof *got);
    invar_engine_config c = cfg_of(batch, budget, 0, false);
    invar_engine_stats st;
    run(&c, gemm_mode, all, order, total, got, &st);
    int d = 0;
    for (int i = 0; i < k; i++) d += !same(&ref[pick[i]], &got[i]);
    *compared += k;
    free(all);
    free(pick);
    free(order);
    free(got);
    return d;
}

/* Every check runs twice: on the invariant engine (0 mismatches wanted) and on the same engine
 * with the GEMM's K chunk following M (BACKEND_GEMM_SPLIT_BY_M = 2), against alone runs of
 * that engine: the negative control, which must find mismatches. */
static const char *mode_tag(int mode) {
    switch (mode) {
    case 0: return "";
    case MODE_MOE_BY_LOAD: return " [control: experts in load order]";
    case MODE_MLA_SPLIT: return " [control: MLA split follows T]";
    default: return " [control: K chunk follows M]";
    }
}

static void report_mode(const char *name, int mode, int mismatches, int compared) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s%s", name, mode_tag(mode));
    report(buf, mismatches, compared, mode == 0);
}

static void check_batches(const req *tg, int nt, const out_t *ref, const req *fill, int trials, int mode) {
    static const int sizes[] = {2, 3, 8, 17, 64, 128, 256};
    static const int budgets[] = {16, 64, 256, 2048};
    int d = 0, compared = 0;
    for (int t = 0; t < trials; t++) {
        int b = sizes[t % 7], budget = budgets[rnd(4)];
        d += batch_trial(tg, nt, ref, fill, b, budget < b ? b : budget, mode, &compared);
    }
    report_mode("batch: alone vs batches 2..256", mode, d, compared);
}

static void check_chunks(const req *tg, int nt, const out_t *ref, int mode) {
    static const int budgets[] = {16, 64, 256, 2048};
    out_t *got = calloc((size_t)nt, sizeof *got);
    int *order = malloc(sizeof(int) * (size_t)nt), d = 0;
    for (int i = 0; i < nt; i++) order[i] = i;
    for (int b = 0; b < 4; b++) {
        invar_engine_config c = cfg_of(64, budgets[b], 0, false);
        invar_engine_stats st;
        shuffle(order, nt);
        run(&c, mode, tg, order, nt, got, &st);
        d += count_diff(ref, got, nt);
    }
    report_mode("chunks: budgets 16/64/256/2048", mode, d, 4 * nt);
    free(got);
    free(order);
}

static void check_prefix(const req *tg, int nt, const out_t *ref, int mode) {
    out_t *got = calloc((size_t)nt, sizeof *got);
    int *order = malloc(sizeof(int) * (size_t)nt), d = 0;
    for (int i = 0; i < nt; i++) order[i] = i;
    invar_engine_config c = cfg_of(16, 512, 0, true);
    invar_engine *e = engine(&c, mode);
    for (int pass = 0; pass < 2; pass++) { /* cold, then warm */
        shuffle(order, nt);
        run_on(e, tg, order, nt, got);
        d += count_diff(ref, got, nt);
    }
    invar_engine_stats st;
    invar_engine_get_stats(e, &st);
    invar_engine_free(e);
    printf("prefix: %lld of %lld blocks looked up were hits\n", (long long)st.prefix_blocks_hit,
           (long long)st.prefix_blocks_looked_up);
    if (st.prefix_blocks_hit == 0) g_failures++, printf("prefix: no hits: FAILED\n");
    report_mode("prefix: cache cold and warm", mode, d, 2 * nt);
    free(got);
    free(order);
}

static void check_preempt(const req *tg, int nt, const out_t *ref, int mode) {
    out_t *got = calloc((size_t)nt, sizeof *got);
    int *order = malloc(sizeof(int) * (size_t)nt);
    for (int i = 0; i < nt; i++) order[i] = i;
    invar_engine_config c = cfg_of(32, 256, (700 + MAX_OUT) / 16 + 8, false);
    invar_engine_stats st;
    run(&c, mode, tg, order, nt, got, &st);
    printf("preempt: %lld preemptions\n", (long long)st.preemptions);
    if (st.preemptions == 0) g_failures++, printf("preempt: none happened: FAILED\n");
    report_mode("preempt: tiny KV budget, recompute", mode, count_diff(ref, got, nt), nt);
    free(got);
    free(order);
}

static void check_score(const req *tg, int nt, const out_t *ref, int mode) {
    invar_engine_config c = cfg_of(1, 512, 1, false);
    invar_engine *e = engine(&c, mode);
    int d = 0;
    for (int i = 0; i < nt; i++) {
        float lp[MAX_OUT];
        char err[256];
        if (invar_engine_score(e, tg[i].ids, tg[i].n, ref[i].tok, ref[i].n, lp, err, sizeof err)) {
            fprintf(stderr, "score: %s\n", err);
            exit(1);
        }
        d += memcmp(lp, ref[i].lp, sizeof(float) * (size_t)ref[i].n) != 0;
    }
    invar_engine_free(e);
    report_mode("score: one pass == sampled logprobs", mode, d, nt);
}

/* The greedy targets (prompts up to 700 tokens: chunks cut to the backend's logits rows) in
 * one batch with prompt_logprobs, budgets 64 and 2048, prefix cache on, against
 * invar_engine_score of each prompt (one sequence) on the same engine kind. */
static void check_prompt_logprobs(const req *tg, int nt, int mode) {
    const int n = nt / 2;
    float **want = calloc((size_t)n, sizeof *want);
    char err[256];
    invar_engine_config c1 = cfg_of(1, 512, 1, false);
    invar_engine *e = engine(&c1, mode);
    for (int i = 0; i < n; i++) {
        const req *r = &tg[2 * i];
        if (r->n < 2) continue;
        want[i] = malloc(sizeof(float) * (size_t)(r->n - 1));
        if (invar_engine_score(e, r->ids, 1, r->ids + 1, r->n - 1, want[i], err, sizeof err)) {
            fprintf(stderr, "score: %s\n", err);
            exit(1);
        }
    }
    invar_engine_free(e);
    static const int budgets[] = {64, 2048};
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
    int d = 0, compared = 0;
    for (int b = 0; b < 2; b++) {
        invar_engine_config c = cfg_of(32, budgets[b], 0, true);
        e = engine(&c, mode);
        for (int i = 0; i < n; i++) {
            invar_sampling s = tg[2 * i].s;
            s.prompt_logprobs = true;
            ids[i] = invar_engine_submit(e, tg[2 * i].ids, tg[2 * i].n, &s);
        }
        step_to_end(e);
        for (int i = 0; i < n; i++) {
            invar_result r;
            invar_engine_result(e, ids[i], &r);
            if (want[i]) {
                const int64_t k = tg[2 * i].n - 1;
                d += r.n_prompt_logprobs != k || memcmp(r.prompt_logprobs, want[i], sizeof(float) * (size_t)k) != 0;
                compared++;
            }
            invar_engine_release(e, ids[i]);
        }
        invar_engine_free(e);
    }
    report_mode("prompt: engine prompt logprobs == score", mode, d, compared);
    for (int i = 0; i < n; i++) free(want[i]);
    free(want);
    free(ids);
}

/* Decode steps replayed from CUDA graphs (padded to a bucket) against the same requests run
 * eagerly: batches of every bucket size and one more (the most padding: b + 1 runs in the
 * next bucket), and as fillers finish, every smaller size on the way down. The control's K
 * chunk follows M's parity, so an odd batch and its even padded replay round differently. */
static void check_graphs(const req *tg, int nt, const req *fill, int mode) {
    static const int buckets[] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208,
                                  224, 240, 256};
    invar_engine_config on = cfg_of(256, 4096, 0, false), off = on;
    off.cuda_no_graphs = true;
    invar_engine *eg = engine(&on, mode), *ee = engine(&off, mode);
    const char *info = invar_engine_device_info(eg);
    if (mode == 0) printf("%s\n", info);
    if (!strstr(info, "captured") || *invar_engine_device_info(ee)) {
        printf("graphs: expected graphs on one engine only, got '%s' / '%s' FAILED\n", info,
               invar_engine_device_info(ee));
        g_failures++;
    }
    req *all = malloc(sizeof(req) * 256);
    out_t *a = calloc(256, sizeof *a), *b = calloc(256, sizeof *b);
    int *order = malloc(sizeof(int) * 256), d = 0, compared = 0;
    for (size_t k = 0; k < sizeof buckets / sizeof *buckets; k++)
        for (int extra = 0; extra <= 1; extra++) {
            int n = buckets[k] + extra;
            if (n > 256 || (quick_graphs && k % 3)) continue;
            for (int i = 0; i < n; i++) all[i] = i < nt ? tg[(i + (int)k) % nt] : fill[i];
            for (int i = 0; i < n; i++) order[i] = i;
            run_on(eg, all, order, n, a);
            run_on(ee, all, order, n, b);
            d += count_diff(a, b, n);
            compared += n;
        }
    report_mode("graphs: graph replay vs eager, every bucket", mode, d, compared);
    invar_engine_free(eg);
    invar_engine_free(ee);
    free(all);
    free(a);
    free(b);
    free(order);
}

/* cuBLAS picks its kernels by shape: it differs from its own M = 1 results on Llama-3-8B
 * widths (test_cuda_gemm shows it), but can agree with itself on small models, so there
 * it is reported, not required. */
static void check_cublas(const req *tg, int nt, const req *fill) {
    out_t *ref = calloc((size_t)nt, sizeof *ref);
    run_alone(tg, nt, 1, ref);
    int compared = 0, d = batch_trial(tg, nt, ref, fill, 64, 256, 1, &compared);
    printf("%-44s %5d / %-5d (information: cuBLAS mode, not invariant by design)\n", "cublas: alone vs batch of 64", d,
           compared);
    free(ref);
}

/* GPU logits against the CPU engine on a few prompts: bf16 weights and activations against
 * the CPU's own numerics, so a loose bound; it catches wrong layouts, not rounding. */
static void check_accuracy(const req *tg) {
    const int V = invar_model_n_vocab(g_model);
    double num = 0, den = 0;
    int top1 = 0, rows = 0;
    invar_engine_config c = cfg_of(1, 512, 1, false);
    invar_engine *e = engine(&c, 0);
    for (int p = 0; p < 3; p++) {
        const req *r = &tg[2 * p];
        float *a = malloc(sizeof(float) * (size_t)(r->n * V)), *b = malloc(sizeof(float) * (size_t)(r->n * V));
        char err[256];
        if (invar_model_logits(g_model, r->ids, r->n, 0, 8, a, err, sizeof err) ||
            invar_engine_logits(e, r->ids, r->n, 0, b, err, sizeof err)) {
            fprintf(stderr, "logits: %s\n", err);
            exit(1);
        }
        for (int64_t t = 0; t < r->n; t++) {
            const float *x = a + t * V, *y = b + t * V;
            int ax = 0, ay = 0;
            double mx = 0, my = 0;
            for (int v = 0; v < V; v++) mx += x[v], my += y[v];
            mx /= V, my /= V;
            for (int v = 0; v < V; v++) {
                double dx = (x[v] - mx) - (y[v] - my);
                num += dx * dx;
                den += (x[v] - mx) * (x[v] - mx);
                if (x[v] > x[ax]) ax = v;
                if (y[v] > y[ay]) ay = v;
            }
            top1 += ax == ay;
            rows++;
        }
        free(a);
        free(b);
    }
    invar_engine_free(e);
    double rel = sqrt(num / den);
    int ok = rel < 0.25 && top1 >= rows * 8 / 10;
    printf("accuracy vs CPU engine: centred rel. error %.4f, top-1 agreement %d/%d %s\n", rel, top1, rows,
           ok ? "ok" : "FAILED");
    if (!ok) g_failures++;
}

static int popcount64(uint64_t x) {
    int c = 0;
    for (; x; x &= x - 1) c++;
    return c;
}

/* The MoE comparisons mean something only if an expert's GEMMs saw different numbers of
 * tokens in the runs compared: every expert must have run with counts its alone runs never
 * had, with several distinct counts, and some expert with many tokens at once. */
static void check_expert_counts_varied(void) {
    int varied = 0, max_count = 0, distinct = 0;
    for (int64_t x = 0; x < g_n_expert; x++) {
        varied += (g_seen_batched[x] & ~g_seen_alone[x]) != 0;
        uint64_t all = g_seen_alone[x] | g_seen_batched[x];
        if (popcount64(all) > distinct) distinct = popcount64(all);
        for (int c = 63; c >= 0; c--)
            if (all >> c & 1) {
                if (c + 1 > max_count) max_count = c + 1;
                break;
            }
    }
    int ok = varied == g_n_expert && distinct >= 8 && max_count >= 32;
    printf("experts: %d/%lld ran with token counts their alone runs never had; up to %d distinct counts per "
           "expert, largest %d%s %s\n",
           varied, (long long)g_n_expert, distinct, max_count, max_count == 64 ? "+" : "", ok ? "ok" : "FAILED");
    if (!ok) g_failures++;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_engine MODEL.gguf [--quick]\n");
        return 2;
    }
    int quick = argc > 2 && !strcmp(argv[2], "--quick");
    quick_graphs = quick;
    char err[256];
    if (invar_model_load(argv[1], &g_model, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", argv[1], err);
        return 1;
    }
    printf("model %s (%s)\n", argv[1], invar_model_arch(g_model));
    g_moe = !strcmp(invar_model_arch(g_model), "qwen3moe") || !strcmp(invar_model_arch(g_model), "deepseek2");
    g_mla = !strcmp(invar_model_arch(g_model), "deepseek2");
    if (g_moe) {
        invar_engine_config c = cfg_of(1, 512, 1, false);
        invar_engine *e = engine(&c, 0);
        g_n_expert = invar_engine_testing_backend(e)->m->cfg.n_expert;
        invar_engine_free(e);
        g_seen_alone = calloc((size_t)g_n_expert + 1, sizeof(uint64_t));
        g_seen_batched = calloc((size_t)g_n_expert + 1, sizeof(uint64_t));
    }
    int nt;
    req *tg = make_targets(&nt);
    req *fill = make_fillers(256);
    out_t *ref = calloc((size_t)nt, sizeof *ref);
    for (int mode = 0; mode <= 2; mode += 2) { /* invariant, then the negative control */
        run_alone(tg, nt, mode, ref);
        check_batches(tg, nt, ref, fill, quick ? 7 : 14, mode);
        check_chunks(tg, nt, ref, mode);
        check_prefix(tg, nt, ref, mode);
        check_preempt(tg, nt, ref, mode);
        check_score(tg, nt, ref, mode);
        check_prompt_logprobs(tg, nt, mode);
        check_graphs(tg, nt, fill, mode);
        if (mode == 0 && g_moe) check_expert_counts_varied();
    }
    /* The MoE and MLA negative controls: the batch and chunk checks must find mismatches. */
    const int controls[] = {g_moe ? MODE_MOE_BY_LOAD : 0, g_mla ? MODE_MLA_SPLIT : 0};
    for (int i = 0; i < 2; i++) {
        if (!controls[i]) continue;
        run_alone(tg, nt, controls[i], ref);
        /* more trials than the GEMM control: a load-order swap flips a token less often */
        check_batches(tg, nt, ref, fill, quick ? 8 : 14, controls[i]);
        check_chunks(tg, nt, ref, controls[i]);
    }
    check_cublas(tg, nt, fill);
    check_accuracy(tg);
    printf("%s: %d failure(s)\n", argv[1], g_failures);
    invar_model_free(g_model);
    return g_failures ? 1 : 0;
}
