/* The serving determinism suite on the default model. Each check compares token ids and
 * logprobs bit for bit, and each has a negative control: the same check on an engine whose
 * matmul is not batch-invariant must find a difference.
 *   needle      one prompt alone vs at a random place among 64-128 filler prompts
 *   batch       batch size 1 vs N at temperature 0.6 with seeds
 *   chunks      per-step token budgets 16, 64, 256, 2048 (prefill chunked differently)
 *   prefix      prefix cache cold vs warm, shared prefixes of many lengths (mid-block too)
 *   preempt     preemption and recompute forced by a tiny KV budget
 *   score       one-pass score == logprobs sampled step by step (on an MLA model, deepseek2,
 *               a second control scores with the prefill rows in the non-absorbed MLA
 *               formulation: test_mla.py)
 *   threads     1 vs 2 threads
 * Both KV cache types: INVAR_TEST_KV_TYPE=f16 (test_serving_determinism_kv_f16) runs every
 * engine on an f16 cache, and scores through such an engine (invar_engine_score).
 * INVAR_TEST_QUICK=1 (sanitizer builds) shrinks the sizes and leaves the negative controls
 * to the Release run: the sanitizer run looks for memory errors, not for new bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/engine_internal.h"
#include "engine/engine_testing.h"
#include "engine_fixture.h"
#include "kernels/cpu/matmul.h"

static invar_model *g_model;

static int quick(void) {
    const char *q = getenv("INVAR_TEST_QUICK");
    return q && *q && *q != '0';
}

static uint64_t g_rng = 0x243F6A8885A308D3ULL;
static int rnd(int n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (int)(g_rng % (uint64_t)n);
}

/* Room for the longest prompt on a model with a small vocabulary (more tokens per text:
 * test_moe.py runs this suite on a 4096-token vocabulary). */
#define REQ_MAX_IDS 1024
typedef struct {
    int32_t ids[REQ_MAX_IDS];
    int64_t n;
    invar_sampling s;
} req;

static void make_req(req *r, const char *text, int max_tokens, float temp, uint64_t seed) {
    r->n = invar_tokenize(g_model, text, strlen(text), true, true, r->ids, REQ_MAX_IDS);
    assert_true(r->n > 0 && r->n <= REQ_MAX_IDS);
    invar_sampling_default(&r->s);
    r->s.max_tokens = max_tokens;
    r->s.temperature = temp;
    r->s.seed = seed;
}

static invar_engine_config config(int threads, int max_batch, int budget, int64_t kv_blocks, bool cache) {
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.n_threads = threads;
    c.max_batch = max_batch;
    c.max_batch_tokens = budget;
    c.kv_blocks = kv_blocks;
    c.no_prefix_cache = !cache;
    c.kv_type = fixture_kv_type();
    return c;
}

/* Runs requests (submitted in array order) on one engine; fills outputs; returns stats. */
static invar_engine_stats run(const req *rs, int n, const invar_engine_config *cfg, matmul_fn mm, run_out *out) {
    char err[256];
    invar_engine *e;
    assert_int_equal(invar_engine_create(g_model, cfg, &e, err, sizeof err), 0);
    if (mm) invar_engine_testing_set_matmul(e, mm);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) ids[i] = invar_engine_submit(e, rs[i].ids, rs[i].n, &rs[i].s);
    int left;
    while ((left = invar_engine_step(e)) > 0) {}
    assert_int_equal(left, 0);
    for (int i = 0; i < n; i++) {
        invar_result r;
        assert_int_equal(invar_engine_result(e, ids[i], &r), 0);
        assert_true(r.finish == INVAR_FINISH_STOP || r.finish == INVAR_FINISH_LENGTH);
        out[i].finish = r.finish;
        out[i].n = r.n_tokens;
        for (int64_t t = 0; t < r.n_tokens; t++) out[i].tok[t] = r.tokens[t].token, out[i].lp[t] = r.tokens[t].logprob;
    }
    invar_engine_stats st;
    invar_engine_get_stats(e, &st);
    assert_int_equal(st.kv_blocks_free, st.kv_blocks_total); /* every block came back */
    free(ids);
    invar_engine_free(e);
    return st;
}

static int same(const run_out *a, const run_out *b) {
    return a->finish == b->finish && a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n);
}

static void run_alone(const req *r, matmul_fn mm, run_out *out) {
    invar_engine_config c = config(1, 1, 512, 0, false);
    run(r, 1, &c, mm, out);
}

/* A matmul whose split count depends on the thread count: the negative control for threads. */
static void splitk_by_threads(threadpool *tp, const cpu_weight *w, const float *x, int64_t m, int64_t ldx,
                              float *y, int64_t ldy, void *scratch) {
    if (threadpool_size(tp) == 1) {
        cpu_matmul_splitk_by_m(tp, w, x, m, ldx, y, ldy, scratch);
    } else {
        for (int64_t i = 0; i < m; i++) cpu_matmul_splitk_by_m(tp, w, x + i * ldx, 1, ldx, y + i * ldy, ldy, scratch);
    }
}

static const char *FILLERS[] = {"Tell me a joke.", "What is 2+2?", "Describe a cat.", "Name a river.",
                                "Write one line of C.", "Say hello in French.", "List two colors.",
                                "Why do birds sing?"};

/* --- needle -------------------------------------------------------------------------- */
static int needle_mismatches(matmul_fn mm, int trials) {
    req needle;
    make_req(&needle, "<|im_start|>user\nWhat is the tallest mountain on Earth?<|im_end|>\n<|im_start|>assistant\n",
             8, 0.0f, 0);
    run_out alone, *out = calloc(129, sizeof *out);
    run_alone(&needle, mm, &alone);
    int bad = 0;
    req *rs = calloc(129, sizeof *rs);
    for (int t = 0; t < trials; t++) {
        int n = quick() ? 12 : mm ? 24 : 64 + rnd(65), at = rnd(n + 1);
        for (int i = 0, f = 0; i <= n; i++) {
            if (i == at) { rs[i] = needle; continue; }
            char text[128];
            snprintf(text, sizeof text, "%s (%d)", FILLERS[f % 8], f);
            make_req(&rs[i], text, 1 + rnd(4), rnd(2) ? 0.7f : 0.0f, (uint64_t)f);
            f++;
        }
        invar_engine_config c = config(2, 16 + rnd(113), 64 + rnd(448), 0, true);
        run(rs, n + 1, &c, mm, out);
        bad += !same(&out[at], &alone);
    }
    free(rs), free(out);
    return bad;
}

static void test_needle(void **s) {
    (void)s;
    assert_int_equal(needle_mismatches(NULL, quick() ? 1 : 5), 0);
    if (!quick()) assert_true(needle_mismatches(cpu_matmul_splitk_by_m, 1) > 0); /* negative control (Release run) */
}

/* --- batch 1 vs N, temperature 0.6 ---------------------------------------------------- */
static int batch_mismatches(matmul_fn mm, int n) {
    req *rs = calloc((size_t)n, sizeof *rs);
    run_out *alone = calloc((size_t)n, sizeof *alone), *together = calloc((size_t)n, sizeof *together);
    for (int i = 0; i < n; i++) {
        char text[160];
        snprintf(text, sizeof text, "<|im_start|>user\n%s Answer %d.<|im_end|>\n<|im_start|>assistant\n", FILLERS[i % 8], i);
        make_req(&rs[i], text, 8, 0.6f, 1000 + (uint64_t)i);
        run_alone(&rs[i], mm, &alone[i]);
    }
    invar_engine_config c = config(2, n, 512, 0, true);
    run(rs, n, &c, mm, together);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += !same(&alone[i], &together[i]);
    free(rs), free(alone), free(together);
    return bad;
}

static void test_batch_1_vs_n_sampled(void **s) {
    (void)s;
    assert_int_equal(batch_mismatches(NULL, quick() ? 4 : 16), 0);
    if (!quick()) assert_true(batch_mismatches(cpu_matmul_splitk_by_m, 6) > 0); /* negative control (Release run) */
}

/* --- chunked prefill ------------------------------------------------------------------ */
/* Negative controls use shorter inputs: the non-invariant matmul is a slow reference. */
static void long_prompt(req *r, float temp, int items) {
    char text[4096];
    int len = snprintf(text, sizeof text, "<|im_start|>user\nSummarise this:");
    for (int i = 0; i < items; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, " Item %d is %s.", i, FILLERS[i % 8]);
    snprintf(text + len, sizeof text - (size_t)len, "<|im_end|>\n<|im_start|>assistant\n");
    make_req(r, text, 6, temp, 77);
}

static int chunk_mismatches(matmul_fn mm) {
    req r[2];
    int items = mm || quick() ? 6 : 40;
    long_prompt(&r[0], 0.0f, items);
    long_prompt(&r[1], 0.9f, items);
    assert_true(items < 40 || r[0].n > 300);
    static const int budgets[] = {16, 64, 256, 2048};
    run_out ref[2], out[2];
    int bad = 0;
    for (int b = 0; b < (mm ? 2 : 4); b += (quick() ? 3 : 1)) {
        invar_engine_config c = config(2, 2, budgets[b], 0, false);
        run(r, 2, &c, mm, b == 0 ? ref : out);
        if (b) bad += !same(&ref[0], &out[0]) + !same(&ref[1], &out[1]);
    }
    return bad;
}

static void test_chunk_sizes(void **s) {
    (void)s;
    assert_int_equal(chunk_mismatches(NULL), 0);
    if (!quick()) assert_true(chunk_mismatches(cpu_matmul_splitk_by_m) > 0); /* negative control (Release run) */
}

/* --- prefix cache --------------------------------------------------------------------- */
static int prefix_mismatches(matmul_fn mm, int64_t *hits) {
    /* A shared document, then questions that diverge after prefixes of many lengths. */
    req base;
    long_prompt(&base, 0.0f, mm || quick() ? 6 : 25);
    static const int cut[] = {5, 15, 16, 17, 31, 32, 33, 47, 100, 161, 250};
    const int n = quick() ? 3 : mm ? 4 : (int)(sizeof cut / sizeof *cut);
    assert_true(base.n > cut[n - 1]);
    req *rs = calloc((size_t)n + 1, sizeof *rs);
    run_out *cold = calloc((size_t)n + 1, sizeof *cold), *warm = calloc((size_t)n + 1, sizeof *warm);
    rs[0] = base;
    for (int i = 0; i < n; i++) {
        req *r = &rs[i + 1];
        *r = base;
        r->n = cut[i];
        for (int j = 0; j < 5; j++) r->ids[r->n++] = 100 + 37 * i + j; /* a different ending */
        r->s.temperature = i % 2 ? 0.8f : 0.0f;
        r->s.seed = (uint64_t)i;
    }
    for (int i = 0; i <= n; i++) run_alone(&rs[i], mm, &cold[i]);
    /* Warm: the base first (fills the cache), then the others one at a time, each hitting. */
    invar_engine_config c = config(2, 1, 512, 0, true);
    invar_engine_stats st = run(rs, n + 1, &c, mm, warm);
    *hits = st.prefix_blocks_hit;
    int bad = 0;
    for (int i = 0; i <= n; i++) bad += !same(&cold[i], &warm[i]);
    free(rs), free(cold), free(warm);
    return bad;
}

static void test_prefix_cache_cold_vs_warm(void **s) {
    (void)s;
    int64_t hits;
    assert_int_equal(prefix_mismatches(NULL, &hits), 0);
    printf("# prefix cache: %lld blocks hit\n", (long long)hits);
    assert_true(hits > 0);
    if (!quick()) assert_true(prefix_mismatches(cpu_matmul_splitk_by_m, &hits) > 0); /* negative control (Release run) */
}

/* --- preemption ----------------------------------------------------------------------- */
static int preempt_mismatches(matmul_fn mm, int64_t *preemptions) {
    const int n = quick() ? 3 : mm ? 4 : 8;
    req *rs = calloc((size_t)n, sizeof *rs);
    run_out *alone = calloc((size_t)n, sizeof *alone), *squeezed = calloc((size_t)n, sizeof *squeezed);
    for (int i = 0; i < n; i++) {
        char text[200];
        snprintf(text, sizeof text, "<|im_start|>user\n%s Please explain at length, part %d.<|im_end|>\n<|im_start|>assistant\n",
                 FILLERS[i % 8], i);
        make_req(&rs[i], text, 24, i % 2 ? 0.6f : 0.0f, 500 + (uint64_t)i);
        rs[i].s.ignore_eos = true;
        run_alone(&rs[i], mm, &alone[i]);
    }
    /* Room for about two sequences at a time: the others are preempted and recomputed. */
    int64_t per_seq = (rs[0].n + 24 + 16 - 1) / 16;
    invar_engine_config c = config(2, n, 512, 2 * per_seq + 1, false);
    invar_engine_stats st = run(rs, n, &c, mm, squeezed);
    *preemptions = st.preemptions;
    int bad = 0;
    for (int i = 0; i < n; i++) bad += !same(&alone[i], &squeezed[i]);
    free(rs), free(alone), free(squeezed);
    return bad;
}

static void test_preemption_recompute(void **s) {
    (void)s;
    int64_t pre;
    assert_int_equal(preempt_mismatches(NULL, &pre), 0);
    printf("# preemption: %lld preemptions\n", (long long)pre);
    assert_true(pre > 0);
    if (!quick()) assert_true(preempt_mismatches(cpu_matmul_splitk_by_m, &pre) > 0); /* negative control (Release run) */
}

/* --- score vs sampled ----------------------------------------------------------------- */
/* The one-pass score of cont after prompt: the model-level path (f32 cache), or an engine
 * on the suite's cache type with the same matmul. */
static int score_cont(const req *r, const run_out *sampled, matmul_fn mm, float *lp) {
    char err[256];
    if (fixture_kv_type() == INVAR_KV_F32)
        return invar_score_testing(g_model, r->ids, r->n, sampled->tok, sampled->n, 2, lp, mm, err, sizeof err);
    const invar_engine_config c = config(2, 1, 512, 1, false);
    invar_engine *e;
    if (invar_engine_create(g_model, &c, &e, err, sizeof err)) return -1;
    if (mm) invar_engine_testing_set_matmul(e, mm);
    const int rc = invar_engine_score(e, r->ids, r->n, sampled->tok, sampled->n, lp, err, sizeof err);
    invar_engine_free(e);
    return rc;
}

static int score_mismatches(matmul_fn mm, int n, bool mla_prefill_plain) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        req r;
        char text[200];
        snprintf(text, sizeof text, "<|im_start|>user\n%s (%d)<|im_end|>\n<|im_start|>assistant\n", FILLERS[i % 8], i);
        make_req(&r, text, 12, 0.8f, 42 + (uint64_t)i);
        run_out sampled;
        run_alone(&r, mm, &sampled);
        float lp[64];
        char err[256];
        if (mla_prefill_plain)
            assert_int_equal(invar_score_testing_mla_prefill_plain(g_model, r.ids, r.n, sampled.tok, sampled.n, 2, lp,
                                                                   err, sizeof err),
                             0);
        else
            assert_int_equal(score_cont(&r, &sampled, mm, lp), 0);
        bad += memcmp(lp, sampled.lp, sizeof(float) * (size_t)sampled.n) != 0;
    }
    return bad;
}

static void test_score_equals_sampled_logprobs(void **s) {
    (void)s;
    assert_int_equal(score_mismatches(NULL, quick() ? 2 : 8, false), 0);
    if (!quick())
        assert_true(score_mismatches(cpu_matmul_splitk_by_m, 2, false) > 0); /* negative control (Release run) */
    if (!quick() && g_model->m->cfg.mla.kv_lora && fixture_kv_type() == INVAR_KV_F32) { /* prefill (score) in the other MLA formulation than decode */
        const int bad = score_mismatches(NULL, 2, true);
        printf("# negative control (MLA prefill rows non-absorbed): %d/2 scores differ from the sampled logprobs\n",
               bad);
        assert_true(bad > 0);
    }
}

/* --- threads -------------------------------------------------------------------------- */
static int thread_mismatches(matmul_fn mm) {
    enum { N = 4 };
    req rs[N];
    run_out one[N], two[N];
    for (int i = 0; i < N; i++) {
        char text[160];
        snprintf(text, sizeof text, "%s Go on, %d.", FILLERS[i % 8], i);
        make_req(&rs[i], text, 6, i % 2 ? 0.7f : 0.0f, (uint64_t)i);
    }
    invar_engine_config c1 = config(1, N, 512, 0, true), c2 = config(2, N, 512, 0, true);
    run(rs, N, &c1, mm, one);
    run(rs, N, &c2, mm, two);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += !same(&one[i], &two[i]);
    return bad;
}

static void test_thread_counts(void **s) {
    (void)s;
    assert_int_equal(thread_mismatches(NULL), 0);
    if (!quick()) assert_true(thread_mismatches(splitk_by_threads) > 0); /* negative control (Release run) */
}

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    invar_model_free(g_model);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needle),
        cmocka_unit_test(test_batch_1_vs_n_sampled),
        cmocka_unit_test(test_chunk_sizes),
        cmocka_unit_test(test_prefix_cache_cold_vs_warm),
        cmocka_unit_test(test_preemption_recompute),
        cmocka_unit_test(test_score_equals_sampled_logprobs),
        cmocka_unit_test(test_thread_counts),
    };
    if (getenv("TEST_FILTER")) cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
