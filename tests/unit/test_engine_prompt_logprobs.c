/* Prompt logprobs from the engine (invar_sampling.prompt_logprobs) on the default model: the
 * logprob of every prompt token from position 1, computed in the request's own prefill, must
 * equal invar_score (a separate one-sequence pass) bit for bit:
 *   chunks     per-step token budgets 16, 64, 512 (512 with a 270-token prompt too: its
 *              chunk is cut to the backend's 256 logits rows; 16: the rows left beside
 *              decodes), each prompt among other requests and a duplicate of it without the
 *              option, shuffled; also == invar_engine_score
 *   streamed   entries arrive in order over several steps and never change once delivered
 *   warm       the prefix cache holds every prompt: such a request still computes them all
 *   preempt    a KV budget of about two sequences forces preemption mid-prefill and
 *              mid-decode (prefix cache on and off): no entry lost or repeated
 *   cancel     a request cancelled mid-prefill keeps a correct prefix and frees its blocks
 *   control    the engine with the split-K-by-M matmul: the same comparison fails
 * Such a request generates the same tokens and logprobs as without the option.
 * INVAR_TEST_QUICK=1 (sanitizer builds) shrinks the sizes (no long prompt, no 512 budget) and
 * leaves the negative control to the Release run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/engine_testing.h"
#include "engine_fixture.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"

#define N_SHORT 4
#define LONG_TOKENS 270
#define MAX_TOKENS 3

static invar_model *g_model;
static prompt_ids *g_short;         /* fixture prompts (10-40 tokens) */
static int32_t g_long[LONG_TOKENS]; /* longer than a step's logits rows */
static const int32_t *g_ids[N_SHORT + 1];
static int64_t g_n[N_SHORT + 1];
static float *g_ref[N_SHORT + 1]; /* invar_score: logprobs of tokens 1..n-1 */
static int g_np;                  /* short prompts in use; g_ids[g_np] is the long one */
static bool g_with_long;          /* the long prompt is in use (not in quick runs) */

static int quick(void) {
    const char *q = getenv("INVAR_TEST_QUICK");
    return q && *q && *q != '0';
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static int rnd(int n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (int)(g_rng % (uint64_t)n);
}

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    g_short = fixture_prompts(g_model, N_SHORT);
    char text[8192];
    int len = 0;
    for (int i = 0; len < 4000; i++)
        len += snprintf(text + len, sizeof text - (size_t)len,
                        "Paragraph %d: the tide came in over the flats and the birds lifted as one. ", i);
    static int32_t all[4096];
    if (invar_tokenize(g_model, text, strlen(text), true, false, all, 4096) < LONG_TOKENS) return -1;
    memcpy(g_long, all, sizeof g_long);
    g_np = quick() ? 3 : N_SHORT;
    g_with_long = !quick();
    for (int i = 0; i < g_np + g_with_long; i++) {
        bool is_long = i == g_np;
        g_ids[i] = is_long ? g_long : g_short[i].ids;
        g_n[i] = is_long ? LONG_TOKENS : g_short[i].n;
        g_ref[i] = malloc(sizeof(float) * (size_t)(g_n[i] - 1));
        char err[256];
        if (invar_score(g_model, g_ids[i], 1, g_ids[i] + 1, g_n[i] - 1, 2, g_ref[i], err, sizeof err)) return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < g_np + g_with_long; i++) free(g_ref[i]);
    fixture_prompts_free(g_short, N_SHORT);
    invar_model_free(g_model);
    return 0;
}

typedef struct {
    int prompt;  /* index into g_ids */
    int64_t len; /* its first len tokens (0: all); prompt logprobs are causal: a prefix's are
                    a prefix of the reference */
    bool want;   /* asks for prompt logprobs */
    int64_t id;
    run_out out;
    int64_t n_plp;
    float *plp; /* copy of the result's */
} job;

static invar_engine_config config(int max_batch, int budget, int64_t kv_blocks, bool cache) {
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.n_threads = 2;
    c.max_batch = max_batch;
    c.max_batch_tokens = budget;
    c.kv_blocks = kv_blocks;
    c.no_prefix_cache = !cache;
    return c;
}

static invar_engine *make_engine(const invar_engine_config *c, matmul_fn mm) {
    char err[256];
    invar_engine *e = NULL;
    if (invar_engine_create(g_model, c, &e, err, sizeof err)) fail_msg("engine_create: %s", err);
    if (mm) assert_int_equal(invar_engine_testing_set_matmul(e, mm), 0);
    return e;
}

static int64_t job_len(const job *j) { return j->len ? j->len : g_n[j->prompt]; }

static int64_t submit(invar_engine *e, int prompt, int64_t len, bool plp) {
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = MAX_TOKENS;
    s.prompt_logprobs = plp;
    int64_t id = invar_engine_submit(e, g_ids[prompt], len ? len : g_n[prompt], &s);
    assert_true(id >= 0);
    return id;
}

static void collect(invar_engine *e, job *j) {
    invar_result r;
    assert_int_equal(invar_engine_result(e, j->id, &r), 0);
    assert_true(r.n_tokens <= 64);
    j->out.finish = r.finish;
    j->out.n = r.n_tokens;
    for (int64_t t = 0; t < r.n_tokens; t++) j->out.tok[t] = r.tokens[t].token, j->out.lp[t] = r.tokens[t].logprob;
    j->n_plp = r.n_prompt_logprobs;
    free(j->plp);
    j->plp = malloc(sizeof(float) * (size_t)(r.n_prompt_logprobs + 1));
    if (r.n_prompt_logprobs) memcpy(j->plp, r.prompt_logprobs, sizeof(float) * (size_t)r.n_prompt_logprobs);
}

static void jobs_free(job *js, int n) {
    for (int i = 0; i < n; i++) free(js[i].plp), js[i].plp = NULL;
}

/* Each short prompt (and the long one if asked) with the option and without, shuffled.
 * Returns the count. */
static int make_mix(job *js, bool with_long) {
    int n = 0;
    for (int p = 0; p < g_np; p++)
        for (int k = 0; k < 2; k++) js[n++] = (job){.prompt = p, .want = k == 0};
    if (with_long && g_with_long) js[n++] = (job){.prompt = g_np, .want = true};
    for (int i = n - 1; i > 0; i--) {
        int k = rnd(i + 1);
        job t = js[i];
        js[i] = js[k];
        js[k] = t;
    }
    return n;
}

/* After each step: a request's prompt logprobs only grow (a preempted request recomputing its
 * prompt delivers no entry twice). */
static void check_progress(invar_engine *e, job *js, int n) {
    for (int i = 0; i < n; i++) {
        invar_result r;
        assert_int_equal(invar_engine_result(e, js[i].id, &r), 0);
        assert_true(r.n_prompt_logprobs >= js[i].n_plp);
        js[i].n_plp = r.n_prompt_logprobs;
    }
}

/* Submits js in order, runs them to the end, collects; every block must come back. */
static invar_engine_stats run_jobs(invar_engine *e, job *js, int n) {
    for (int i = 0; i < n; i++) js[i].id = submit(e, js[i].prompt, js[i].len, js[i].want), js[i].n_plp = 0;
    int left;
    while ((left = invar_engine_step(e)) > 0) check_progress(e, js, n);
    assert_int_equal(left, 0);
    for (int i = 0; i < n; i++) {
        collect(e, &js[i]);
        assert_true(js[i].out.finish == INVAR_FINISH_STOP || js[i].out.finish == INVAR_FINISH_LENGTH);
        invar_engine_release(e, js[i].id);
    }
    invar_engine_stats st;
    invar_engine_get_stats(e, &st);
    assert_int_equal(st.kv_blocks_free, st.kv_blocks_total);
    return st;
}

/* Requests whose prompt logprobs differ from invar_score's (or are missing); a request
 * without the option must report none. */
static int mismatches(const job *js, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const job *j = &js[i];
        if (!j->want) {
            assert_int_equal(j->n_plp, 0);
            continue;
        }
        int64_t want = job_len(j) - 1;
        bad += j->n_plp != want || memcmp(j->plp, g_ref[j->prompt], sizeof(float) * (size_t)want) != 0;
    }
    return bad;
}

static bool same_out(const run_out *a, const run_out *b) {
    return a->finish == b->finish && a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n);
}

/* The option changes nothing about what a request generates. */
static void assert_generation_unchanged(const job *js, int n) {
    for (int i = 0; i < n; i++) {
        if (!js[i].want) continue;
        for (int k = 0; k < n; k++)
            if (!js[k].want && js[k].prompt == js[i].prompt && js[k].len == js[i].len)
                assert_true(same_out(&js[i].out, &js[k].out));
    }
}

static void test_chunks_in_batches(void **state) {
    (void)state;
    const int budgets[] = {16, 64, 512};
    job js[2 * (N_SHORT + 1)];
    for (int b = 0; b < (quick() ? 2 : 3); b++) {
        invar_engine_config c = config(8, budgets[b], 0, budgets[b] == 64);
        invar_engine *e = make_engine(&c, NULL);
        int n = make_mix(js, budgets[b] == 512);
        run_jobs(e, js, n);
        assert_int_equal(mismatches(js, n), 0);
        assert_generation_unchanged(js, n);
        if (b == 0) { /* and the engine's own one-sequence scoring path, on its device */
            float lp[64];
            char err[200];
            assert_int_equal(invar_engine_score(e, g_ids[0], 1, g_ids[0] + 1, g_n[0] - 1, lp, err, sizeof err), 0);
            assert_memory_equal(lp, g_ref[0], sizeof(float) * (size_t)(g_n[0] - 1));
        }
        jobs_free(js, n);
        invar_engine_free(e);
    }
}

static void test_streamed_in_order(void **state) {
    (void)state;
    const int p = g_np - 1; /* a short prompt, 4 tokens a step */
    const int64_t want = g_n[p] - 1;
    invar_engine_config c = config(2, 4, 0, false);
    invar_engine *e = make_engine(&c, NULL);
    int64_t other = submit(e, 0, 0, false), id = submit(e, p, 0, true);
    int64_t seen = 0, partial = 0;
    while (invar_engine_step(e) > 0) {
        invar_result r;
        assert_int_equal(invar_engine_result(e, id, &r), 0);
        assert_true(r.n_prompt_logprobs >= seen && r.n_prompt_logprobs <= want);
        /* everything delivered so far is final: equal to the reference */
        if (r.n_prompt_logprobs)
            assert_memory_equal(r.prompt_logprobs, g_ref[p], sizeof(float) * (size_t)r.n_prompt_logprobs);
        partial += r.n_prompt_logprobs > seen && r.n_prompt_logprobs < want;
        seen = r.n_prompt_logprobs;
        if (r.n_tokens) assert_int_equal(r.n_prompt_logprobs, want); /* all of them before the first token */
    }
    assert_int_equal(seen, want);
    assert_true(partial >= 3); /* 3 tokens a step beside the other's decode: over many steps */
    invar_engine_release(e, other);
    invar_engine_release(e, id);
    invar_engine_free(e);
}

static void test_warm_prefix_cache(void **state) {
    (void)state;
    invar_engine_config c = config(8, 64, 0, true);
    invar_engine *e = make_engine(&c, NULL);
    job warm[N_SHORT], js[N_SHORT];
    for (int p = 0; p < g_np; p++) warm[p] = (job){.prompt = p, .want = false};
    invar_engine_stats s0 = run_jobs(e, warm, g_np);
    int64_t prompt_tokens = 0;
    for (int p = 0; p < g_np; p++) js[p] = (job){.prompt = p, .want = true}, prompt_tokens += g_n[p];
    invar_engine_stats s1 = run_jobs(e, js, g_np);
    assert_int_equal(mismatches(js, g_np), 0);
    /* No hit is taken for positions whose logprobs are owed: the prompts are computed again. */
    assert_true(s1.tokens_computed - s0.tokens_computed >= prompt_tokens);
    /* ... and the cache still serves requests without the option. */
    invar_engine_stats s2 = run_jobs(e, warm, g_np);
    assert_true(s2.prefix_blocks_hit > s1.prefix_blocks_hit);
    for (int p = 0; p < g_np; p++) assert_true(same_out(&js[p].out, &warm[p].out));
    jobs_free(warm, g_np);
    jobs_free(js, g_np);
    invar_engine_free(e);
}

static void test_preemption(void **state) {
    (void)state;
    /* The longest short prompt and two blocks more: requests run a few at a time. */
    int64_t longest = 0;
    for (int p = 0; p < g_np; p++) longest = g_n[p] > longest ? g_n[p] : longest;
    const int64_t blocks = (longest + MAX_TOKENS + 15) / 16 + 2;
    job js[2 * N_SHORT];
    for (int cache = quick(); cache < 2; cache++) {
        invar_engine_config c = config(8, 64, blocks, cache);
        invar_engine *e = make_engine(&c, NULL);
        int n = make_mix(js, false);
        invar_engine_stats st = run_jobs(e, js, n);
        assert_true(st.preemptions > 0);
        assert_int_equal(mismatches(js, n), 0);
        assert_generation_unchanged(js, n);
        jobs_free(js, n);
        invar_engine_free(e);
    }
}

/* Two requests, 16 tokens a step, 6 KV blocks: the second computes its prompt beside the
 * first's decodes until the blocks run out, is preempted with part of its prompt logprobs
 * delivered, and recomputes (from the cached block before those, or from 0 without the
 * cache). */
static void test_preempted_mid_prefill(void **state) {
    (void)state;
    for (int cache = 0; cache < 2; cache++) {
        invar_engine_config c = config(2, 16, 6, cache);
        invar_engine *e = make_engine(&c, NULL);
        job js[2] = {{.prompt = 2, .want = true}, {.prompt = 1, .want = true}};
        invar_sampling s;
        invar_sampling_default(&s);
        s.max_tokens = 8; /* the first decodes while the second's prompt grows */
        s.prompt_logprobs = true;
        js[0].id = invar_engine_submit(e, g_ids[2], g_n[2], &s);
        js[1].id = submit(e, js[1].prompt, 0, true);
        int64_t preempted_at = 0, preemptions = 0;
        while (invar_engine_step(e) > 0) {
            int64_t before = js[1].n_plp;
            check_progress(e, js, 2);
            invar_engine_stats st;
            invar_engine_get_stats(e, &st);
            if (st.preemptions > preemptions && before > 0 && before < g_n[1] - 1) preempted_at = before;
            preemptions = st.preemptions;
        }
        print_message("cache %d: preempted with %lld of %lld prompt logprobs delivered\n", cache,
                      (long long)preempted_at, (long long)(g_n[1] - 1));
        assert_true(preempted_at > KV_BLOCK); /* past a whole block: the cached one is reused */
        invar_engine_stats st;
        invar_engine_get_stats(e, &st);
        assert_true(!cache || st.prefix_blocks_hit > 0);
        for (int i = 0; i < 2; i++) collect(e, &js[i]);
        assert_int_equal(mismatches(js, 2), 0);
        jobs_free(js, 2);
        invar_engine_free(e);
    }
}

static void test_cancel_mid_prefill(void **state) {
    (void)state;
    const int p = g_np - 1;
    invar_engine_config c = config(4, 4, 0, true);
    invar_engine *e = make_engine(&c, NULL);
    int64_t id = submit(e, p, 0, true);
    int32_t one = g_ids[0][0];
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = 2;
    s.prompt_logprobs = true;
    int64_t single = invar_engine_submit(e, &one, 1, &s); /* a one-token prompt has none to give */
    for (int i = 0; i < 4; i++) invar_engine_step(e);
    assert_int_equal(invar_engine_cancel(e, id), 0);
    invar_result r;
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    assert_int_equal(r.finish, INVAR_FINISH_CANCELLED);
    assert_true(r.n_prompt_logprobs > 0 && r.n_prompt_logprobs < g_n[p] - 1);
    assert_memory_equal(r.prompt_logprobs, g_ref[p], sizeof(float) * (size_t)r.n_prompt_logprobs);
    while (invar_engine_step(e) > 0) {}
    assert_int_equal(invar_engine_result(e, single, &r), 0);
    assert_int_equal(r.n_prompt_logprobs, 0);
    assert_int_equal(r.n_tokens, 2);
    invar_engine_stats st;
    invar_engine_get_stats(e, &st);
    assert_int_equal(st.kv_blocks_free, st.kv_blocks_total);
    invar_engine_release(e, id);
    invar_engine_release(e, single);
    invar_engine_free(e);
}

static void test_negative_control(void **state) {
    (void)state;
    if (quick()) skip();
    invar_engine_config c = config(8, 64, 0, false);
    invar_engine *e = make_engine(&c, cpu_matmul_splitk_by_m);
    /* Short, as the split-K matmul is a slow scalar one: two prompts of 12 tokens in a batch. */
    job js[3] = {{.prompt = 0, .len = 12, .want = true}, {.prompt = 1, .len = 12, .want = true},
                 {.prompt = 2, .len = 12, .want = false}};
    int n = 3;
    run_jobs(e, js, n);
    int bad = mismatches(js, n);
    fprintf(stderr, "negative control: %d of 2 prompt-logprob requests differ\n", bad);
    assert_true(bad > 0);
    jobs_free(js, n);
    invar_engine_free(e);
}

/* With top_logprobs: each prompt position's alternatives are the top of its raw logits row
 * (invar_engine_logits), against the same logprob the entry reports for the prompt token;
 * a batch of two (chunked) gives the same entries as the prompt alone. */
static void test_prompt_alternatives(void **state) {
    (void)state;
    const int p = 0, K = 3;
    const int64_t n = g_n[p], V = invar_model_n_vocab(g_model);
    invar_token_info *alone = NULL;
    for (int run = 0; run < 2; run++) {
        invar_engine_config c = config(run ? 2 : 1, run ? 7 : 512, 0, false);
        invar_engine *e = make_engine(&c, NULL);
        invar_sampling s;
        invar_sampling_default(&s);
        s.max_tokens = 2;
        s.prompt_logprobs = true;
        s.top_logprobs = K;
        if (run) submit(e, 1, 0, true); /* a neighbour */
        int64_t id = invar_engine_submit(e, g_ids[p], n, &s);
        while (invar_engine_step(e) > 0) {}
        invar_result r;
        assert_int_equal(invar_engine_result(e, id, &r), 0);
        assert_int_equal(r.n_prompt_logprobs, n - 1);
        assert_non_null(r.prompt_top);
        if (!run) {
            float *logits = malloc(sizeof(float) * (size_t)(n * V));
            char err[200];
            assert_int_equal(invar_engine_logits(e, g_ids[p], n, 0, logits, err, sizeof err), 0);
            for (int64_t i = 0; i + 1 < n; i++) {
                const invar_token_info *t = &r.prompt_top[i];
                assert_int_equal(t->token, g_ids[p][i + 1]);
                assert_true(t->logprob == r.prompt_logprobs[i]);
                assert_int_equal(t->n_top, K);
                const float *row = logits + i * V;
                for (int k = 0; k < K; k++) {
                    for (int64_t v = 0; v < V; v++) /* nothing better outside the list */
                        if (row[v] > row[t->top_ids[k]]) {
                            bool listed = false;
                            for (int q = 0; q < k; q++) listed |= t->top_ids[q] == v;
                            assert_true(listed);
                        }
                    assert_true(t->top_logprobs[k] <= (k ? t->top_logprobs[k - 1] : 0.0f));
                }
                if (t->top_ids[0] == t->token) assert_true(t->top_logprobs[0] == t->logprob);
            }
            free(logits);
            alone = malloc(sizeof *alone * (size_t)(n - 1));
            memcpy(alone, r.prompt_top, sizeof *alone * (size_t)(n - 1));
        } else {
            for (int64_t i = 0; i + 1 < n; i++) {
                const invar_token_info *a = &alone[i], *b = &r.prompt_top[i];
                assert_true(a->token == b->token && a->logprob == b->logprob && a->n_top == b->n_top);
                assert_memory_equal(a->top_ids, b->top_ids, sizeof(int32_t) * K);
                assert_memory_equal(a->top_logprobs, b->top_logprobs, sizeof(float) * K);
            }
        }
        invar_engine_free(e);
    }
    free(alone);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_in_batches),     cmocka_unit_test(test_streamed_in_order),
        cmocka_unit_test(test_warm_prefix_cache),     cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_preempted_mid_prefill), cmocka_unit_test(test_cancel_mid_prefill),
        cmocka_unit_test(test_negative_control),      cmocka_unit_test(test_prompt_alternatives),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
