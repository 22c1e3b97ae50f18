/* Speculative decoding changes only the speed: on the default model, every request run with
 * speculation on equals, bitwise in token ids, logprobs and finish reason, the same request
 * decoded plainly alone (one sequence per step, one thread). Drafts: the real prompt lookup
 * (n-gram), the draft model (here the model itself), an oracle that proposes plain
 * decoding's own continuation (always agrees), a mix that agrees about two times in three,
 * and random tokens that rarely agree; greedy,
 * seeded temperature and seeded top-p; batches of 1 to 64 in random order with random
 * token budgets, K from 1 to 8, 1 and 2 threads; with the prefix cache, with preemption
 * forced by a small KV budget, max_tokens falling inside accepted runs, and a callback that
 * cancels a request mid-run (what a stop string does). Negative control: the textbook
 * rejection-sampling rule (accept with probability min(1, p/q)), run in the engine in place
 * of the exact verification, keeps the distribution but must change the tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <time.h>

#include "engine/engine_testing.h"
#include "engine_fixture.h"

#define N_PROMPTS 6
#define N_MODES 3
#define MAX_TOKENS 16

static invar_model *g_model;
static prompt_ids g_prompts[N_PROMPTS];
static run_out g_ref[N_MODES][N_PROMPTS]; /* plain decoding alone, computed on first use */
static bool g_have_ref[N_MODES][N_PROMPTS];

/* Chat questions (free text, drafts rarely match) and tasks that repeat their input (the
 * continuation is in the prompt: prompt lookup drafts well). */
static const char *prompt_text[N_PROMPTS] = {
    "Tell me about the ocean.",
    "Repeat this sentence exactly: the red fox jumps over the lazy brown dog near the river bank.",
    "Fix the typo and repeat the code: int count_items(int *items, int n_items) { int cuont = 0; "
    "for (int i = 0; i < n_items; i++) cuont += items[i]; return cuont; }",
    "What is a prime number?",
    "Copy this list: apple, banana, cherry, apple, banana, cherry, apple, banana, cherry.",
    "Summarise in one sentence: The meeting was moved to Tuesday. The meeting will be in room 4.",
};

/* Mode 0 greedy, 1 seeded top-p, 2 seeded temperature only (the negative control's). */
static invar_sampling mode_sampling(int mode, int prompt, int max_tokens) {
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = max_tokens;
    if (mode == 1) s.temperature = 0.8f, s.top_p = 0.95f, s.seed = 777u + (uint64_t)prompt;
    if (mode == 2) s.temperature = 1.0f, s.seed = 4242u + (uint64_t)prompt;
    return s;
}

/* The reference: the request decoded plainly, alone, on one thread. */
static const run_out *reference(int mode, int p) {
    run_out *ref = &g_ref[mode][p];
    if (g_have_ref[mode][p]) return ref;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    cfg.n_threads = 1;
    cfg.max_batch = 1;
    char err[256];
    invar_engine *e;
    assert_int_equal(invar_engine_create(g_model, &cfg, &e, err, sizeof err), 0);
    invar_sampling s = mode_sampling(mode, p, MAX_TOKENS);
    int64_t id = invar_engine_submit(e, g_prompts[p].ids, g_prompts[p].n, &s);
    while (invar_engine_step(e) > 0) {}
    invar_result r;
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    assert_true(r.n_tokens > 0);
    ref->finish = r.finish;
    ref->n = r.n_tokens;
    for (int64_t t = 0; t < r.n_tokens; t++) ref->tok[t] = r.tokens[t].token, ref->lp[t] = r.tokens[t].logprob;
    invar_engine_free(e);
    g_have_ref[mode][p] = true;
    return ref;
}

typedef enum { DRAFT_NGRAM, DRAFT_ORACLE, DRAFT_MIXED, DRAFT_RANDOM, DRAFT_MODEL } draft_kind;

/* Per engine: what each request id is, for the oracle-based drafters. */
typedef struct {
    draft_kind kind;
    const run_out **ref_of;     /* by request id */
    const int64_t *n_prompt_of;
    uint64_t rng;
    int64_t *cancel_at;         /* by request id: cancel after this many tokens (0: never) */
    int64_t *seen;
    invar_engine *e;
} draft_ctx;

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Oracle-based drafts: plain decoding's next tokens, each replaced by a random token with a
 * probability that depends on the kind. */
static int32_t drafter(void *user, int64_t id, const int32_t *seq, int64_t n_seq, int32_t k, int32_t *out) {
    (void)seq;
    draft_ctx *c = user;
    const run_out *ref = c->ref_of[id];
    const int64_t g = n_seq - c->n_prompt_of[id];
    const int truth = c->kind == DRAFT_ORACLE ? 100 : c->kind == DRAFT_MIXED ? 67 : 10;
    int32_t n = 0;
    for (; n < k; n++) {
        uint64_t r = next_rand(&c->rng);
        if (g + n < ref->n && (int)(r % 100) < truth) out[n] = ref->tok[g + n];
        else out[n] = (int32_t)((r >> 8) % (uint64_t)invar_model_n_vocab(g_model));
    }
    return n;
}

/* Cancels a request after cancel_at[id] tokens, from inside the step, as a stop string does. */
static void cancel_cb(void *user, int64_t id, const invar_token_info *tok) {
    (void)tok;
    draft_ctx *c = user;
    if (++c->seen[id] == c->cancel_at[id]) invar_engine_cancel(c->e, id);
}

typedef struct {
    int prompt, mode, max_tokens;
    int64_t cancel_at;
} req_spec;

/* Runs requests in the given order; speculation with K = spec_k (0: off) and drafts of the
 * given kind. Returns the engine's stats. */
static invar_engine_stats run(const req_spec *rq, const int *order, int n, const invar_engine_config *cfg,
                              int spec_k, draft_kind kind, bool rejection, uint64_t seed, run_out *out) {
    char err[256];
    invar_engine *e;
    assert_int_equal(invar_engine_create(g_model, cfg, &e, err, sizeof err), 0);
    const run_out **ref_of = calloc((size_t)n, sizeof *ref_of);
    int64_t *n_prompt_of = calloc((size_t)n, sizeof *n_prompt_of), *ids = calloc((size_t)n, sizeof *ids);
    int64_t *cancel_at = calloc((size_t)n, sizeof *cancel_at), *seen = calloc((size_t)n, sizeof *seen);
    draft_ctx ctx = {kind, ref_of, n_prompt_of, seed | 1, cancel_at, seen, e};
    if (kind != DRAFT_NGRAM && kind != DRAFT_MODEL) invar_engine_testing_set_drafter(e, drafter, &ctx);
    invar_engine_testing_set_spec_rejection(e, rejection);
    invar_engine_set_callback(e, cancel_cb, &ctx);
    for (int k = 0; k < n; k++) {
        const req_spec *q = &rq[order[k]];
        invar_sampling s = mode_sampling(q->mode, q->prompt, q->max_tokens);
        s.speculate = !spec_k ? INVAR_SPEC_OFF : kind == DRAFT_MODEL ? INVAR_SPEC_DRAFT : INVAR_SPEC_NGRAM;
        s.spec_tokens = spec_k;
        int64_t id = invar_engine_submit(e, g_prompts[q->prompt].ids, g_prompts[q->prompt].n, &s);
        assert_true(id >= 0 && id < n);
        ids[order[k]] = id;
        ref_of[id] = reference(q->mode, q->prompt);
        n_prompt_of[id] = g_prompts[q->prompt].n;
        cancel_at[id] = q->cancel_at;
    }
    int left;
    while ((left = invar_engine_step(e)) > 0) {}
    assert_int_equal(left, 0);
    for (int i = 0; i < n; i++) {
        invar_result r;
        assert_int_equal(invar_engine_result(e, ids[i], &r), 0);
        out[i].finish = r.finish;
        out[i].n = r.n_tokens;
        for (int64_t t = 0; t < r.n_tokens; t++) out[i].tok[t] = r.tokens[t].token, out[i].lp[t] = r.tokens[t].logprob;
    }
    invar_engine_stats st;
    invar_engine_get_stats(e, &st);
    invar_engine_free(e);
    free(ref_of), free(n_prompt_of), free(ids), free(cancel_at), free(seen);
    return st;
}

/* What plain decoding alone gives for this request: the reference cut at max_tokens, or at
 * the cancelling callback. */
static int matches_reference(const req_spec *q, const run_out *got) {
    const run_out *ref = reference(q->mode, q->prompt);
    int64_t n = ref->n < q->max_tokens ? ref->n : q->max_tokens;
    invar_finish fin = ref->n <= q->max_tokens ? ref->finish : INVAR_FINISH_LENGTH;
    /* Cancelled after its last token, a request has already finished: cancel leaves it so. */
    if (q->cancel_at > 0 && q->cancel_at < n) n = q->cancel_at, fin = INVAR_FINISH_CANCELLED;
    return got->finish == fin && got->n == n && !memcmp(got->tok, ref->tok, sizeof(int32_t) * (size_t)n) &&
           !memcmp(got->lp, ref->lp, sizeof(float) * (size_t)n);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static int rnd(int n) { return (int)(next_rand(&g_rng) % (uint64_t)n); }

static int quick(void) {
    const char *q = getenv("INVAR_TEST_QUICK");
    return q && *q && *q != '0';
}

typedef struct {
    int size;
    draft_kind kind;
    bool small_kv, cancels;
} trial;

/* One trial: random requests of the trial's size, random order, budget, K and threads. */
static int run_trial(const trial *t, int index, invar_engine_stats *st, int *n_compared) {
    const int n = t->size;
    req_spec *rq = calloc((size_t)n, sizeof *rq);
    int *order = malloc(sizeof(int) * (size_t)n);
    run_out *out = calloc((size_t)n, sizeof *out);
    for (int i = 0; i < n; i++) {
        rq[i].prompt = rnd(N_PROMPTS); /* duplicates: identical requests side by side, prefix hits */
        rq[i].mode = rnd(N_MODES);
        rq[i].max_tokens = rnd(3) ? MAX_TOKENS : 1 + rnd(MAX_TOKENS);
        rq[i].cancel_at = t->cancels && rnd(2) ? 1 + rnd(MAX_TOKENS - 1) : 0;
        order[i] = i;
    }
    for (int i = n - 1; i > 0; i--) {
        int j = rnd(i + 1), x = order[i];
        order[i] = order[j], order[j] = x;
    }
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    cfg.n_threads = 1 + index % 2;
    cfg.max_batch = 1 + rnd(n);
    static const int budgets[] = {7, 33, 64, 512};
    cfg.max_batch_tokens = budgets[rnd(4)];
    if (t->small_kv) cfg.kv_blocks = 12, cfg.max_batch = n; /* a few requests' worth: preemption */
    /* The model drafting for itself: it agrees at temperature 0, and often when sampling. */
    if (t->kind == DRAFT_MODEL) cfg.draft_model = g_model;
    cfg.spec_step_tokens = index % 3 == 2 ? 0 : 256; /* the device's cap, or drafts for every decode */
    const int spec_k = 1 + rnd(8);
    *st = run(rq, order, n, &cfg, spec_k, t->kind, false, (uint64_t)index * 7919u, out);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += !matches_reference(&rq[i], &out[i]);
    *n_compared += n;
    free(rq), free(order), free(out);
    return bad;
}

static const char *kind_name[] = {"prompt lookup", "oracle", "mixed", "random", "draft model"};

static void test_speculation_equals_plain(void **state) {
    (void)state;
    static const trial full[] = {
        {1, DRAFT_NGRAM, false, false}, {1, DRAFT_ORACLE, false, false}, {1, DRAFT_RANDOM, false, false},
        {4, DRAFT_MIXED, false, true},  {9, DRAFT_NGRAM, false, false},  {17, DRAFT_ORACLE, false, true},
        {16, DRAFT_MIXED, true, false}, {64, DRAFT_MIXED, false, true},  {5, DRAFT_RANDOM, false, false},
        {6, DRAFT_MODEL, false, true},  {8, DRAFT_MODEL, true, false},
    };
    static const trial brief[] = {
        {1, DRAFT_ORACLE, false, false}, {5, DRAFT_MIXED, true, true}, {4, DRAFT_NGRAM, false, false},
        {3, DRAFT_MODEL, false, true},
    };
    const trial *tr = quick() ? brief : full;
    const int n_trials = quick() ? (int)(sizeof brief / sizeof brief[0]) : (int)(sizeof full / sizeof full[0]);
    int bad = 0, compared = 0;
    int64_t preemptions = 0, prefix_hits = 0;
    for (int i = 0; i < n_trials; i++) {
        invar_engine_stats st;
        clock_t t0 = clock();
        int b = run_trial(&tr[i], i, &st, &compared);
        printf("# %2d requests, %-13s drafts: %d differ; %lld/%lld drafted tokens kept in %lld verifications "
               "(%.1f s cpu)\n",
               tr[i].size, kind_name[tr[i].kind], b, (long long)st.spec_accepted, (long long)st.spec_drafted,
               (long long)st.spec_steps, (double)(clock() - t0) / CLOCKS_PER_SEC);
        bad += b;
        preemptions += st.preemptions;
        prefix_hits += st.prefix_blocks_hit;
        assert_true(st.spec_steps > 0); /* speculation ran */
        if (tr[i].kind == DRAFT_ORACLE && !tr[i].cancels) assert_int_equal(st.spec_accepted, st.spec_drafted);
        if (tr[i].kind == DRAFT_MIXED) assert_true(st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted);
        if (tr[i].kind == DRAFT_MODEL) assert_true(st.spec_accepted > 0);
    }
    printf("# speculation on: %d/%d requests differ from plain decoding alone (%lld preemptions, %lld "
           "prefix-cache block hits)\n",
           bad, compared, (long long)preemptions, (long long)prefix_hits);
    assert_true(preemptions > 0);
    assert_true(prefix_hits > 0);
    assert_int_equal(bad, 0);
}

/* The real n-gram drafts must be kept now and then on the prompts that repeat their input,
 * or the speed-up the benchmark reports would not come from here. */
static void test_prompt_lookup_keeps_drafts(void **state) {
    (void)state;
    if (quick()) skip(); /* the sweep's prompt-lookup trial runs the same drafts */
    req_spec rq[2] = {{1, 0, MAX_TOKENS, 0}, {4, 0, MAX_TOKENS, 0}};
    int order[2] = {0, 1};
    run_out out[2];
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    cfg.n_threads = 1;
    invar_engine_stats st = run(rq, order, 2, &cfg, 4, DRAFT_NGRAM, false, 1, out);
    printf("# prompt lookup on repeating prompts: %lld/%lld drafted tokens kept\n", (long long)st.spec_accepted,
           (long long)st.spec_drafted);
    assert_true(matches_reference(&rq[0], &out[0]) && matches_reference(&rq[1], &out[1]));
    assert_true(st.spec_accepted >= 4);
    assert_true(st.tokens_generated > 0);
}

/* The negative control: rejection sampling against the oracle's drafts must change some
 * sampled requests' tokens (and no greedy one: at temperature 0 it is the exact rule). */
static void test_negative_control_rejection_sampling(void **state) {
    (void)state;
    if (quick()) skip(); /* the Release run holds the negative control */
    req_spec rq[2 * N_PROMPTS];
    int order[2 * N_PROMPTS];
    run_out out[2 * N_PROMPTS];
    for (int i = 0; i < 2 * N_PROMPTS; i++) rq[i] = (req_spec){i % N_PROMPTS, i < N_PROMPTS ? 0 : 2, MAX_TOKENS, 0}, order[i] = i;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    cfg.n_threads = 2;
    cfg.max_batch = 2 * N_PROMPTS;
    cfg.spec_step_tokens = 256;
    invar_engine_stats st = run(rq, order, 2 * N_PROMPTS, &cfg, 4, DRAFT_ORACLE, true, 3, out);
    assert_true(st.spec_steps > 0);
    int sampled_bad = 0, greedy_bad = 0;
    for (int i = 0; i < 2 * N_PROMPTS; i++) {
        int b = !matches_reference(&rq[i], &out[i]);
        if (rq[i].mode == 0) greedy_bad += b;
        else sampled_bad += b;
    }
    printf("# negative control (rejection sampling): %d/%d sampled requests differ, %d/%d greedy\n", sampled_bad,
           N_PROMPTS, greedy_bad, N_PROMPTS);
    assert_true(sampled_bad > 0);
    assert_int_equal(greedy_bad, 0);
}

/* A request asking for the draft model on an engine without one is rejected clearly. */
static void test_draft_mode_needs_a_draft_model(void **state) {
    (void)state;
    char err[256];
    invar_engine *e;
    assert_int_equal(invar_engine_create(g_model, NULL, &e, err, sizeof err), 0);
    invar_sampling s = mode_sampling(0, 0, 4);
    s.speculate = INVAR_SPEC_DRAFT;
    int64_t id = invar_engine_submit(e, g_prompts[0].ids, g_prompts[0].n, &s);
    invar_result r;
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    assert_int_equal(r.finish, INVAR_FINISH_ERROR);
    assert_non_null(strstr(r.error, "draft model"));
    s.speculate = INVAR_SPEC_NGRAM;
    s.spec_tokens = INVAR_MAX_SPEC_TOKENS + 1;
    id = invar_engine_submit(e, g_prompts[0].ids, g_prompts[0].n, &s);
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    assert_int_equal(r.finish, INVAR_FINISH_ERROR);
    invar_engine_free(e);
}

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    char text[1024];
    for (int i = 0; i < N_PROMPTS; i++) {
        snprintf(text, sizeof text, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", prompt_text[i]);
        g_prompts[i].ids = malloc(sizeof(int32_t) * 512);
        g_prompts[i].n = invar_tokenize(g_model, text, strlen(text), true, true, g_prompts[i].ids, 512);
        if (g_prompts[i].n <= 0 || g_prompts[i].n > 512) return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_PROMPTS; i++) free(g_prompts[i].ids);
    invar_model_free(g_model);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_speculation_equals_plain),
        cmocka_unit_test(test_prompt_lookup_keeps_drafts),
        cmocka_unit_test(test_negative_control_rejection_sampling),
        cmocka_unit_test(test_draft_mode_needs_a_draft_model),
    };
    if (getenv("TEST_FILTER")) cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
