/* Request handling of the engine on the default model: rejected requests (each finishes
 * at once with INVAR_FINISH_ERROR and a message, beside good requests whose outputs stay
 * bitwise equal to running them alone), admission under a KV budget smaller than all
 * requests together, cancel and release (blocks come back: checked through what can be
 * admitted afterwards), finish reasons, the token callback, and unknown ids.
 *
 * KV budgets are given in MiB; the test derives the block count from the model's bytes per
 * block (about 0.7 MiB for SmolLM2-135M: 2 MiB hold 2 blocks of 16 tokens). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "engine/engine_testing.h"
#include "engine_fixture.h"
#include "kernels/cpu/attention.h"
#include "model/forward.h"

/* The huge-max_tokens test makes the engine attempt a huge allocation: under ASan, have
 * malloc return NULL as it does without it, instead of aborting. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TEST_UNDER_ASAN 1
#endif
#ifdef TEST_UNDER_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

static invar_model *g_model;
static int32_t g_vocab;
static int32_t g_pool[512]; /* token ids of a long text: prompts are slices of it */
static int64_t g_pool_n;
static int32_t g_eos_prompt[64]; /* a chat prompt the model answers in 3 tokens then <|im_end|> */
static int64_t g_eos_n;

static const int32_t *slice(int64_t offset, int64_t len) {
    assert_true(offset + len <= g_pool_n);
    return g_pool + offset;
}

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    g_vocab = invar_model_n_vocab(g_model);
    const char *text =
        "The lighthouse keeper climbed the spiral stairs every evening, counting the steps out of habit. "
        "Below, the sea argued with the rocks, and the gulls complained about the wind. He trimmed the wick, "
        "polished the great lens, and wrote in his log the weather, the ships he had seen and the time the "
        "lamp was lit. In winter the nights were long and the coffee was strong; in summer the tourists came "
        "with cameras and questions about ghosts, which he answered with a smile and a story.";
    g_pool_n = invar_tokenize(g_model, text, strlen(text), false, false, g_pool, 512);
    if (g_pool_n < 100 || g_pool_n > 512) return -1;
    const char *eos = "<|im_start|>user\nReply with one word: yes or no?<|im_end|>\n<|im_start|>assistant\n";
    g_eos_n = invar_tokenize(g_model, eos, strlen(eos), true, true, g_eos_prompt, 64);
    if (g_eos_n <= 0 || g_eos_n > 64) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    invar_model_free(g_model);
    return 0;
}

static invar_engine_config config(int32_t n_ctx, int64_t kv_mb) {
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.n_threads = 2;
    c.n_ctx = n_ctx;
    c.kv_mem_mb = kv_mb;
    return c;
}

static int64_t blocks_in(int64_t kv_mb) {
    return (int64_t)((size_t)kv_mb * 1024 * 1024 / kv_bytes_per_block(&g_model->m->cfg, ATTN_KV_F32));
}

static int64_t blocks_for(int64_t n_prompt, int32_t max_tokens, int32_t n_ctx) {
    int64_t n = n_prompt + max_tokens;
    if (n > n_ctx) n = n_ctx;
    return (n + KV_BLOCK - 1) / KV_BLOCK;
}

static invar_engine *make_engine(const invar_engine_config *c) {
    char err[256];
    invar_engine *e = NULL;
    if (invar_engine_create(g_model, c, &e, err, sizeof err)) fail_msg("engine_create: %s", err);
    return e;
}

static invar_sampling greedy(int32_t max_tokens) {
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = max_tokens;
    return s;
}

static invar_sampling sampled(int32_t max_tokens, uint64_t seed) {
    invar_sampling s = greedy(max_tokens);
    s.temperature = 0.9f;
    s.top_p = 0.9f;
    s.top_k = 40;
    s.seed = seed;
    s.top_logprobs = 4;
    return s;
}

static void collect(invar_engine *e, int64_t id, run_out *o) {
    invar_result r;
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    assert_true(r.n_tokens <= 64);
    o->finish = r.finish;
    o->n = r.n_tokens;
    for (int64_t t = 0; t < r.n_tokens; t++) {
        o->tok[t] = r.tokens[t].token;
        o->lp[t] = r.tokens[t].logprob;
    }
}

/* Steps until nothing is left; fails if that takes more than max_steps. */
static int run_all(invar_engine *e, int max_steps) {
    int steps = 0, left;
    while ((left = invar_engine_step(e)) > 0) {
        if (++steps > max_steps) fail_msg("still %d unfinished requests after %d steps", left, max_steps);
    }
    assert_int_equal(left, 0);
    return steps;
}

static void run_alone(const invar_engine_config *c, const int32_t *prompt, int64_t n, const invar_sampling *s,
                      run_out *o) {
    invar_engine *e = make_engine(c);
    int64_t id = invar_engine_submit(e, prompt, n, s);
    assert_true(id >= 0);
    run_all(e, 200);
    collect(e, id, o);
    invar_engine_free(e);
}

static void assert_same(const run_out *a, const run_out *b, const char *what) {
    if (a->finish != b->finish || a->n != b->n || memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) ||
        memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n))
        fail_msg("%s: output differs from the request run alone (finish %d/%d, %lld/%lld tokens)", what, a->finish,
                 b->finish, (long long)a->n, (long long)b->n);
}

static void assert_rejected(invar_engine *e, int64_t id, const char *what) {
    invar_result r;
    if (id < 0) fail_msg("%s: submit returned %lld", what, (long long)id);
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    if (r.finish != INVAR_FINISH_ERROR) fail_msg("%s: finish %d, expected INVAR_FINISH_ERROR", what, r.finish);
    if (!r.error || !r.error[0]) fail_msg("%s: no error message", what);
    assert_int_equal(r.n_tokens, 0);
}

/* ---- rejected requests ---------------------------------------------------------- */

typedef struct {
    const char *what;
    const int32_t *prompt;
    int64_t n;
    invar_sampling s;
} bad_request;

static void test_bad_requests_do_not_disturb_others(void **state) {
    (void)state;
    const int32_t n_ctx = 64;
    const invar_engine_config c = config(n_ctx, 2);
    const int64_t nb = blocks_in(2);
    /* over the KV budget but within the context */
    const int64_t over_kv = nb * KV_BLOCK + 1;
    assert_true(nb >= 2 && over_kv + 8 < n_ctx);
    assert_true(blocks_for(over_kv, 8, n_ctx) > nb);

    static int32_t bad_ids[2][8];
    memcpy(bad_ids[0], slice(0, 8), sizeof bad_ids[0]);
    memcpy(bad_ids[1], slice(0, 8), sizeof bad_ids[1]);
    bad_ids[0][3] = -1;
    bad_ids[1][7] = g_vocab;

    invar_sampling s_mt0 = greedy(0), s_mtneg = greedy(-5), s_tneg = greedy(8), s_tnan = greedy(8), s_p0 = greedy(8),
                   s_p15 = greedy(8), s_minp = greedy(8), s_k = greedy(8), s_lp = greedy(8);
    s_tneg.temperature = -1.0f;
    s_tnan.temperature = NAN;
    s_p0.top_p = 0.0f;
    s_p15.top_p = 1.5f;
    s_minp.min_p = 2.0f;
    s_k.top_k = -1;
    s_lp.top_logprobs = INVAR_MAX_TOP_LOGPROBS + 1;
    const bad_request bad[] = {
        {"empty prompt", slice(0, 0), 0, greedy(8)},
        {"NULL prompt", NULL, 0, greedy(8)},
        {"negative length", slice(0, 4), -3, greedy(8)},
        {"prompt == n_ctx", slice(0, n_ctx), n_ctx, greedy(8)},
        {"prompt > n_ctx", slice(0, 100), 100, greedy(8)},
        {"token id -1", bad_ids[0], 8, greedy(8)},
        {"token id == n_vocab", bad_ids[1], 8, greedy(8)},
        {"max_tokens 0", slice(0, 8), 8, s_mt0},
        {"max_tokens < 0", slice(0, 8), 8, s_mtneg},
        {"temperature < 0", slice(0, 8), 8, s_tneg},
        {"temperature NaN", slice(0, 8), 8, s_tnan},
        {"top_p 0", slice(0, 8), 8, s_p0},
        {"top_p > 1", slice(0, 8), 8, s_p15},
        {"min_p > 1", slice(0, 8), 8, s_minp},
        {"top_k < 0", slice(0, 8), 8, s_k},
        {"top_logprobs > 20", slice(0, 8), 8, s_lp},
        {"over the KV budget", slice(0, over_kv), over_kv, greedy(8)},
    };
    const int n_bad = (int)(sizeof bad / sizeof *bad);

    /* three good requests of one block each: two run at once, the third waits */
    const invar_sampling sa = greedy(8), sb = sampled(8, 7), sc = greedy(8);
    run_out alone[3], got[3];
    run_alone(&c, slice(0, 8), 8, &sa, &alone[0]);
    run_alone(&c, slice(5, 8), 8, &sb, &alone[1]);
    run_alone(&c, slice(11, 7), 7, &sc, &alone[2]);

    invar_engine *e = make_engine(&c);
    int64_t good[3], ids[sizeof bad / sizeof *bad];
    good[0] = invar_engine_submit(e, slice(0, 8), 8, &sa);
    for (int i = 0; i < n_bad / 2; i++) ids[i] = invar_engine_submit(e, bad[i].prompt, bad[i].n, &bad[i].s);
    good[1] = invar_engine_submit(e, slice(5, 8), 8, &sb);
    for (int i = n_bad / 2; i < n_bad; i++) ids[i] = invar_engine_submit(e, bad[i].prompt, bad[i].n, &bad[i].s);
    good[2] = invar_engine_submit(e, slice(11, 7), 7, &sc);
    for (int i = 0; i < n_bad; i++) assert_rejected(e, ids[i], bad[i].what); /* at once, before any step */
    for (int g = 0; g < 3; g++) {
        invar_result r;
        assert_true(good[g] >= 0);
        assert_int_equal(invar_engine_result(e, good[g], &r), 0);
        assert_int_equal(r.finish, INVAR_FINISH_NONE);
        assert_null(r.error);
    }
    invar_result r;
    assert_int_equal(invar_engine_result(e, ids[3], &r), 0);
    assert_int_equal(r.n_prompt, n_ctx);
    /* only the good requests count as unfinished */
    assert_int_equal(invar_engine_step(e), 3);
    /* more bad requests while the good ones run */
    int64_t late_empty = invar_engine_submit(e, slice(0, 0), 0, &sa);
    int64_t late_kv = invar_engine_submit(e, slice(0, over_kv), over_kv, &sa);
    assert_rejected(e, late_empty, "late empty prompt");
    assert_rejected(e, late_kv, "late over the KV budget");
    invar_engine_step(e);
    int64_t late_param = invar_engine_submit(e, slice(0, 8), 8, &s_p15);
    assert_rejected(e, late_param, "late top_p > 1");
    run_all(e, 100);
    for (int g = 0; g < 3; g++) {
        collect(e, good[g], &got[g]);
        assert_same(&got[g], &alone[g], "good request beside rejected ones");
    }
    for (int i = 0; i < n_bad; i++) assert_rejected(e, ids[i], bad[i].what); /* unchanged by the steps */
    invar_engine_free(e);

    /* an engine holding only rejected requests has nothing to do */
    e = make_engine(&c);
    for (int i = 0; i < n_bad; i++) assert_rejected(e, invar_engine_submit(e, bad[i].prompt, bad[i].n, &bad[i].s), bad[i].what);
    assert_int_equal(invar_engine_step(e), 0);
    invar_engine_free(e);
}

/* ---- admission under a small KV budget ------------------------------------------ */

static void test_requests_wait_for_kv_budget(void **state) {
    (void)state;
    const int32_t n_ctx = 256;
    const invar_engine_config c = config(n_ctx, 3);
    const int64_t nb = blocks_in(3);
    enum { N = 6 };
    const int64_t off[N] = {0, 9, 20, 31, 44, 50}, len[N] = {10, 20, 12, 25, 9, 30};
    const int32_t mt[N] = {6, 8, 4, 7, 7, 2};
    invar_sampling s[N];
    int64_t need_total = 0, need[N];
    for (int i = 0; i < N; i++) {
        s[i] = i % 2 ? sampled(mt[i], 100 + (uint64_t)i) : greedy(mt[i]);
        s[i].ignore_eos = true;
        need[i] = blocks_for(len[i], mt[i], n_ctx);
        assert_true(need[i] <= nb);
        need_total += need[i];
    }
    assert_true(need_total > nb); /* cannot all run at once */

    run_out alone[N], got;
    for (int i = 0; i < N; i++) run_alone(&c, slice(off[i], len[i]), len[i], &s[i], &alone[i]);

    invar_engine *e = make_engine(&c);
    int64_t ids[N], before[N] = {0};
    for (int i = 0; i < N; i++) ids[i] = invar_engine_submit(e, slice(off[i], len[i]), len[i], &s[i]);
    int steps = 0, left, waited = 0;
    do {
        left = invar_engine_step(e);
        assert_true(left >= 0 && ++steps < 100);
        /* the requests that made progress this step held their blocks together */
        int64_t held = 0;
        for (int i = 0; i < N; i++) {
            invar_result r;
            assert_int_equal(invar_engine_result(e, ids[i], &r), 0);
            if (r.n_tokens > before[i]) held += need[i];
            if (r.n_tokens == 0 && r.finish == INVAR_FINISH_NONE) waited = 1;
            assert_true(r.n_tokens <= before[i] + 1); /* one token per step */
            before[i] = r.n_tokens;
        }
        if (held > nb) fail_msg("step %d: requests needing %lld blocks ran with a budget of %lld", steps, (long long)held, (long long)nb);
    } while (left > 0);
    assert_true(waited);
    for (int i = 0; i < N; i++) {
        collect(e, ids[i], &got);
        assert_int_equal(got.finish, INVAR_FINISH_LENGTH);
        assert_int_equal(got.n, mt[i]);
        assert_same(&got, &alone[i], "request that waited for KV blocks");
    }
    invar_engine_free(e);
}

/* ---- cancel and release --------------------------------------------------------- */

static void test_cancel_frees_blocks(void **state) {
    (void)state;
    const invar_engine_config c = config(0, 2);
    const int64_t nb = blocks_in(2);
    /* every request here needs the whole budget: one at a time */
    const int64_t len = nb * KV_BLOCK - 8;
    assert_true(len >= 8 && len + 40 <= g_pool_n);
    assert_int_equal(blocks_for(len, 8, invar_model_n_ctx(g_model)), nb);
    const invar_sampling sg = greedy(8), ss = sampled(8, 99);
    run_out a_alone, b_alone, f_alone, got;
    run_alone(&c, slice(0, len), len, &sg, &a_alone);
    run_alone(&c, slice(3, len), len, &sg, &b_alone);
    run_alone(&c, slice(1, len), len, &ss, &f_alone);
    assert_true(a_alone.n >= 4);

    invar_engine *e = make_engine(&c);
    int64_t a = invar_engine_submit(e, slice(0, len), len, &sg);
    int64_t b = invar_engine_submit(e, slice(3, len), len, &sg);
    for (int k = 1; k <= 3; k++) {
        assert_int_equal(invar_engine_step(e), 2);
        invar_result ra, rb;
        invar_engine_result(e, a, &ra);
        invar_engine_result(e, b, &rb);
        assert_int_equal(ra.n_tokens, k);
        assert_int_equal(rb.n_tokens, 0); /* waits: no blocks left */
    }
    assert_int_equal(invar_engine_cancel(e, a), 0);
    collect(e, a, &got);
    assert_int_equal(got.finish, INVAR_FINISH_CANCELLED);
    assert_int_equal(got.n, 3);
    assert_memory_equal(got.tok, a_alone.tok, sizeof(int32_t) * 3);
    assert_memory_equal(got.lp, a_alone.lp, sizeof(float) * 3);
    assert_int_equal(invar_engine_cancel(e, a), 0); /* again: no effect */
    assert_int_equal(invar_engine_step(e), 1);      /* b admitted into a's blocks */
    invar_result rb;
    invar_engine_result(e, b, &rb);
    assert_int_equal(rb.n_tokens, 1);
    run_all(e, 20);
    collect(e, b, &got);
    assert_same(&got, &b_alone, "request admitted after a cancel");
    assert_int_equal(invar_engine_cancel(e, b), 0); /* finished: stays as it is */
    collect(e, b, &got);
    assert_same(&got, &b_alone, "finished request cancelled");
    collect(e, a, &got);
    assert_int_equal(got.finish, INVAR_FINISH_CANCELLED);
    assert_int_equal(got.n, 3);

    /* cancel while queued: never runs */
    int64_t q1 = invar_engine_submit(e, slice(0, len), len, &sg);
    int64_t q2 = invar_engine_submit(e, slice(2, len), len, &sg);
    invar_engine_step(e);
    assert_int_equal(invar_engine_cancel(e, q2), 0);
    run_all(e, 20);
    collect(e, q1, &got);
    assert_same(&got, &a_alone, "request beside a cancelled queued one");
    collect(e, q2, &got);
    assert_int_equal(got.finish, INVAR_FINISH_CANCELLED);
    assert_int_equal(got.n, 0);

    /* many submit/cancel/release cycles in every state; a leaked block would keep the
     * last request, which needs the whole budget, queued forever */
    for (int i = 0; i < 50; i++) {
        int64_t x = invar_engine_submit(e, slice(i % 10, len), len, i % 2 ? &ss : &sg);
        int64_t y = i % 5 == 0 ? invar_engine_submit(e, slice(7, len), len, &sg) : -1; /* queued behind x */
        switch (i % 4) {
        case 0: /* cancelled before it runs */
            assert_int_equal(invar_engine_cancel(e, x), 0);
            break;
        case 1: /* cancelled while it holds its blocks */
            invar_engine_step(e);
            assert_int_equal(invar_engine_cancel(e, x), 0);
            break;
        case 2: /* released while running */
            invar_engine_step(e);
            invar_engine_step(e);
            invar_engine_release(e, x);
            break;
        case 3: /* runs to the end, then released */
            run_all(e, 40);
            invar_engine_release(e, x);
            break;
        }
        if (y >= 0) {
            if (i % 10 == 0) invar_engine_step(e); /* y may be admitted first */
            invar_engine_release(e, y);
        }
        int left = invar_engine_step(e);
        assert_true(left == 0);
    }
    int64_t f = invar_engine_submit(e, slice(1, len), len, &ss);
    run_all(e, 20);
    collect(e, f, &got);
    assert_same(&got, &f_alone, "request after 50 cancel cycles");
    invar_engine_free(e);
}

/* ---- finish reasons ------------------------------------------------------------- */

static void test_finish_reasons(void **state) {
    (void)state;
    const invar_engine_config c = config(0, 16);
    run_out got, longer;
    for (int32_t mt = 1; mt <= 6; mt += 5) { /* max_tokens: exactly that many */
        invar_sampling s = greedy(mt);
        s.ignore_eos = true;
        run_alone(&c, slice(0, 8), 8, &s, &got);
        assert_int_equal(got.finish, INVAR_FINISH_LENGTH);
        assert_int_equal(got.n, mt);
    }

    /* context limit: n_ctx - n_prompt tokens, the same as without the limit */
    const invar_engine_config small = config(24, 16);
    invar_sampling s = greedy(100);
    s.ignore_eos = true;
    run_alone(&small, slice(2, 20), 20, &s, &got);
    assert_int_equal(got.finish, INVAR_FINISH_LENGTH);
    assert_int_equal(got.n, 4);
    invar_sampling s4 = greedy(4);
    s4.ignore_eos = true;
    run_alone(&c, slice(2, 20), 20, &s4, &longer);
    assert_same(&got, &longer, "generation cut by the context");
    run_alone(&small, slice(2, 23), 23, &s, &got); /* one slot left */
    assert_int_equal(got.finish, INVAR_FINISH_LENGTH);
    assert_int_equal(got.n, 1);

    /* end of generation: STOP on the EOG token, which is reported; ignore_eos goes on */
    invar_sampling se = greedy(8);
    run_alone(&c, g_eos_prompt, g_eos_n, &se, &got);
    assert_int_equal(got.finish, INVAR_FINISH_STOP);
    assert_true(got.n >= 1 && got.n < 8);
    for (int64_t t = 0; t < got.n - 1; t++) assert_false(invar_token_is_eog(g_model, got.tok[t]));
    assert_true(invar_token_is_eog(g_model, got.tok[got.n - 1]));
    se.ignore_eos = true;
    run_alone(&c, g_eos_prompt, g_eos_n, &se, &longer);
    assert_int_equal(longer.finish, INVAR_FINISH_LENGTH);
    assert_int_equal(longer.n, 8);
    assert_memory_equal(longer.tok, got.tok, sizeof(int32_t) * (size_t)got.n);
    assert_memory_equal(longer.lp, got.lp, sizeof(float) * (size_t)got.n);
    /* max_tokens reached on the EOG token itself: STOP wins */
    se.ignore_eos = false;
    se.max_tokens = (int32_t)got.n;
    run_alone(&c, g_eos_prompt, g_eos_n, &se, &longer);
    assert_int_equal(longer.finish, INVAR_FINISH_STOP);
    assert_int_equal(longer.n, got.n);
}

/* ---- callback ------------------------------------------------------------------- */

typedef struct {
    int64_t id;
    invar_token_info info;
} cb_event;

static cb_event g_events[256];
static int g_n_events;

static void record(void *user, int64_t id, const invar_token_info *tok) {
    assert_ptr_equal(user, &g_n_events);
    assert_true(g_n_events < 256);
    g_events[g_n_events].id = id;
    g_events[g_n_events].info = *tok;
    g_n_events++;
}

static void test_callback_each_token_once(void **state) {
    (void)state;
    const invar_engine_config c = config(0, 16);
    invar_engine *e = make_engine(&c);
    invar_engine_set_callback(e, record, &g_n_events);
    g_n_events = 0;
    invar_sampling s0 = greedy(8), s1 = sampled(7, 5), s2 = greedy(8), s3 = greedy(0);
    s0.top_logprobs = 5;
    s1.top_logprobs = INVAR_MAX_TOP_LOGPROBS;
    int64_t ids[4];
    ids[0] = invar_engine_submit(e, slice(0, 12), 12, &s0);
    prompt_ids *fp = fixture_prompts(g_model, 2); /* the submit copies the prompt */
    ids[1] = invar_engine_submit(e, fp[1].ids, fp[1].n, &s1);
    fixture_prompts_free(fp, 2);
    ids[2] = invar_engine_submit(e, g_eos_prompt, g_eos_n, &s2); /* stops early */
    ids[3] = invar_engine_submit(e, slice(0, 4), 4, &s3);          /* rejected: no tokens */
    run_all(e, 40);
    int64_t total = 0;
    for (int k = 0; k < 4; k++) {
        invar_result r;
        assert_int_equal(invar_engine_result(e, ids[k], &r), 0);
        total += r.n_tokens;
        int64_t t = 0;
        for (int j = 0; j < g_n_events; j++) {
            if (g_events[j].id != ids[k]) continue;
            assert_true(t < r.n_tokens);
            const invar_token_info *a = &g_events[j].info, *b = &r.tokens[t];
            assert_int_equal(a->token, b->token);
            assert_memory_equal(&a->logprob, &b->logprob, sizeof(float));
            assert_int_equal(a->n_top, b->n_top);
            assert_memory_equal(a->top_ids, b->top_ids, sizeof(int32_t) * (size_t)a->n_top);
            assert_memory_equal(a->top_logprobs, b->top_logprobs, sizeof(float) * (size_t)a->n_top);
            t++;
        }
        assert_int_equal(t, r.n_tokens); /* each token exactly once */
    }
    assert_int_equal(total, g_n_events);
    invar_result r;
    invar_engine_result(e, ids[2], &r);
    assert_int_equal(r.finish, INVAR_FINISH_STOP);
    invar_engine_result(e, ids[1], &r);
    assert_int_equal(r.n_tokens, 7);
    assert_int_equal(r.tokens[0].n_top, INVAR_MAX_TOP_LOGPROBS);
    invar_engine_free(e);
}

/* Cancelling another request from the callback: that request reports no token after the
 * cancel and finishes CANCELLED, even when its row is in the same step. */
static invar_engine *g_cb_engine;
static int64_t g_cb_trigger, g_cb_victim;
static int g_victim_tokens_at_cancel, g_victim_tokens_after_cancel, g_cancelled;

static void cancel_other(void *user, int64_t id, const invar_token_info *tok) {
    (void)user;
    (void)tok;
    if (id == g_cb_victim) {
        if (g_cancelled) g_victim_tokens_after_cancel++;
        else g_victim_tokens_at_cancel++;
    }
    if (id == g_cb_trigger && !g_cancelled && g_victim_tokens_at_cancel >= 1) {
        assert_int_equal(invar_engine_cancel(g_cb_engine, g_cb_victim), 0);
        g_cancelled = 1;
    }
}

static void test_cancel_from_callback(void **state) {
    (void)state;
    const invar_engine_config c = config(0, 16);
    invar_engine *e = make_engine(&c);
    invar_engine_set_callback(e, cancel_other, NULL);
    invar_sampling s = greedy(8);
    s.ignore_eos = true;
    g_cb_engine = e;
    g_cancelled = g_victim_tokens_at_cancel = g_victim_tokens_after_cancel = 0;
    /* the trigger is submitted first, so its row comes before the victim's in a step */
    g_cb_trigger = invar_engine_submit(e, slice(0, 8), 8, &s);
    g_cb_victim = invar_engine_submit(e, slice(10, 8), 8, &s);
    run_all(e, 40);
    run_out got;
    collect(e, g_cb_victim, &got);
    invar_engine_free(e); /* before the checks: a failure must not leak it */
    assert_true(g_cancelled);
    if (g_victim_tokens_after_cancel)
        fail_msg("the cancelled request got %d token(s) after invar_engine_cancel returned", g_victim_tokens_after_cancel);
    assert_int_equal(got.finish, INVAR_FINISH_CANCELLED);
    assert_int_equal(got.n, g_victim_tokens_at_cancel);
}

/* Stats stay readable while a step runs: /metrics reads them from another thread, and a
 * step holds the engine's lock for a whole forward pass (taken again at once, back to
 * back, so a reader waiting on that lock could starve for many steps; it did, and the
 * server's disconnect test lost its race to it). The reader runs while the step is held
 * inside the callback; it must finish without the step's lock. */
typedef struct {
    invar_engine *e;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool done;
    invar_engine_stats st;
} stats_reader;

static void *read_stats(void *arg) {
    stats_reader *sr = arg;
    invar_engine_stats st;
    invar_engine_get_stats(sr->e, &st);
    pthread_mutex_lock(&sr->mu);
    sr->st = st;
    sr->done = true;
    pthread_cond_signal(&sr->cond);
    pthread_mutex_unlock(&sr->mu);
    return NULL;
}

static stats_reader g_reader;
static int g_reader_calls, g_reader_in_time;

static void read_stats_mid_step(void *user, int64_t id, const invar_token_info *tok) {
    (void)user, (void)id, (void)tok;
    if (g_reader_calls++) return;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_stats, &g_reader), 0);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 20;
    pthread_mutex_lock(&g_reader.mu);
    while (!g_reader.done && pthread_cond_timedwait(&g_reader.cond, &g_reader.mu, &deadline) == 0) continue;
    g_reader_in_time = g_reader.done;
    pthread_mutex_unlock(&g_reader.mu);
    pthread_detach(t); /* a blocked reader finishes once the step returns */
}

static void test_stats_readable_during_step(void **state) {
    (void)state;
    const invar_engine_config c = config(0, 16);
    invar_engine *e = make_engine(&c);
    g_reader = (stats_reader){.e = e, .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    g_reader_calls = g_reader_in_time = 0;
    invar_engine_set_callback(e, read_stats_mid_step, NULL);
    invar_sampling s = greedy(4);
    int64_t id = invar_engine_submit(e, slice(0, 8), 8, &s);
    invar_engine_step(e);
    pthread_mutex_lock(&g_reader.mu);
    while (!g_reader.done) pthread_cond_wait(&g_reader.cond, &g_reader.mu); /* before freeing e */
    pthread_mutex_unlock(&g_reader.mu);
    run_all(e, 20);
    invar_engine_stats after;
    invar_engine_get_stats(e, &after);
    invar_engine_release(e, id);
    invar_engine_free(e);
    assert_true(g_reader_calls >= 1);
    if (!g_reader_in_time) fail_msg("invar_engine_get_stats waited for the step to end");
    /* What it read is the state before that step: one request, none of its tokens yet. */
    assert_int_equal(g_reader.st.n_queued + g_reader.st.n_running, 1);
    assert_int_equal(g_reader.st.tokens_generated, 0);
    assert_int_equal(after.tokens_generated, 4);
}

/* ---- the KV cache's element type ------------------------------------------------ */

/* The same kv_mem_mb holds twice the blocks in f16, and the stats say so; an f16 engine
 * generates; a bad kv_type and f16 on the CUDA device are refused with a message. */
static void test_f16_cache_holds_twice_the_blocks(void **state) {
    (void)state;
    invar_engine_config c = config(0, 8);
    invar_engine_stats st[2];
    for (int t = 0; t < 2; t++) {
        c.kv_type = t ? INVAR_KV_F16 : INVAR_KV_F32;
        invar_engine *e = make_engine(&c);
        invar_engine_get_stats(e, &st[t]);
        invar_sampling s = greedy(4);
        int64_t id = invar_engine_submit(e, slice(0, 8), 8, &s);
        run_all(e, 20);
        invar_result r;
        assert_int_equal(invar_engine_result(e, id, &r), 0);
        assert_int_equal(r.finish, INVAR_FINISH_LENGTH);
        invar_engine_release(e, id);
        invar_engine_free(e);
    }
    printf("# 8 MiB of KV: %lld f32 blocks, %lld f16 blocks\n", (long long)st[0].kv_blocks_total,
           (long long)st[1].kv_blocks_total);
    assert_int_equal(st[0].kv_blocks_total, blocks_in(8));
    assert_int_equal(st[1].kv_blocks_total, 8 * 1024 * 1024 / kv_bytes_per_block(&g_model->m->cfg, ATTN_KV_F16));
    assert_int_equal(st[1].kv_blocks_total, 2 * st[0].kv_blocks_total);
    char err[256] = "";
    invar_engine *e = NULL;
    c.kv_type = (invar_kv_type)7;
    assert_int_equal(invar_engine_create(g_model, &c, &e, err, sizeof err), -1);
    assert_non_null(strstr(err, "kv_type"));
    c.kv_type = INVAR_KV_F16;
    c.device = INVAR_DEVICE_CUDA;
    assert_int_equal(invar_engine_create(g_model, &c, &e, err, sizeof err), -1);
    assert_non_null(strstr(err, "kv_type f16"));
}

/* ---- ids ------------------------------------------------------------------------ */

static void test_unknown_and_released_ids(void **state) {
    (void)state;
    const invar_engine_config c = config(0, 2);
    const int64_t nb = blocks_in(2), len = nb * KV_BLOCK - 8; /* one request at a time */
    invar_engine *e = make_engine(&c);
    invar_result r;
    assert_int_equal(invar_engine_result(e, 0, &r), -1);
    assert_int_equal(invar_engine_result(e, -1, &r), -1);
    assert_int_equal(invar_engine_cancel(e, 0), -1);
    invar_engine_release(e, 0);
    invar_engine_release(e, -7);
    invar_engine_release(e, INT64_MAX);
    assert_int_equal(invar_engine_step(e), 0); /* empty engine */

    const invar_sampling s = greedy(4);
    int64_t a = invar_engine_submit(e, slice(0, 8), 8, &s);
    assert_int_equal(invar_engine_result(e, a + 1, &r), -1);
    assert_int_equal(invar_engine_result(e, 1000, &r), -1);
    run_all(e, 20);
    assert_int_equal(invar_engine_result(e, a, &r), 0);
    assert_int_equal(r.finish == INVAR_FINISH_LENGTH || r.finish == INVAR_FINISH_STOP, 1);
    invar_engine_release(e, a);
    assert_int_equal(invar_engine_result(e, a, &r), -1);
    assert_int_equal(invar_engine_cancel(e, a), -1);
    invar_engine_release(e, a); /* double release */

    /* releasing a running and a queued request; the engine carries on */
    int64_t b = invar_engine_submit(e, slice(0, len), len, &s);
    int64_t q = invar_engine_submit(e, slice(1, len), len, &s);
    int64_t d = invar_engine_submit(e, slice(2, len), len, &s);
    assert_true(b != a && q != b && d != q); /* ids are not reused */
    invar_engine_step(e);
    invar_engine_release(e, q); /* queued */
    invar_engine_release(e, b); /* running */
    invar_engine_release(e, b);
    assert_int_equal(invar_engine_result(e, q, &r), -1);
    run_all(e, 20);
    run_out got, alone;
    collect(e, d, &got);
    run_alone(&c, slice(2, len), len, &s, &alone);
    assert_same(&got, &alone, "request after released ones");
    invar_engine_release(e, d);
    assert_int_equal(invar_engine_step(e), 0);
    invar_engine_free(e);
}

/* A long-running server: many thousands of requests served (a third rejected at once, the
 * rest released while queued, running or done; every 1000th submission runs the live ones
 * through the model), never more than 8 live plus 3 old ones held unreleased throughout.
 * The engine's storage for requests must follow the live count, not the count served. */
static void test_request_slots_stay_bounded(void **state) {
    (void)state;
    const char *q = getenv("INVAR_TEST_QUICK");
    const int n = q && *q && *q != '0' ? 1500 : 20000;
    const invar_engine_config c = config(0, 16);
    invar_engine *e = make_engine(&c);
    const invar_sampling s = greedy(2);
    int64_t pinned[3], live[8], prev = -1, most = 0;
    for (int i = 0; i < 3; i++) pinned[i] = invar_engine_submit(e, slice(0, 8), 8, &s);
    run_all(e, 20);
    for (int i = 0; i < n; i++) {
        int64_t id = invar_engine_submit(e, slice(i % 50, 8), i % 3 ? 8 : 0, &s); /* 0 tokens: rejected */
        assert_true(id > prev); /* ids only grow */
        prev = id;
        if (i >= 8) invar_engine_release(e, live[i % 8]);
        live[i % 8] = id;
        if (i % 1000 == 999) run_all(e, 40);
        int64_t slots = invar_engine_testing_request_slots(e);
        most = slots > most ? slots : most;
    }
    print_message("request slots: at most %lld for %d requests served\n", (long long)most, n);
    assert_true(most <= 128);
    invar_result r;
    for (int i = 0; i < 3; i++) { /* the old ones are still there, the released ones gone */
        assert_int_equal(invar_engine_result(e, pinned[i], &r), 0);
        assert_int_equal(r.n_tokens, 2);
    }
    assert_int_equal(invar_engine_result(e, live[0] - 8, &r), -1);
    for (int i = 0; i < 8; i++) invar_engine_release(e, live[i]);
    run_out got, alone; /* and the engine still serves requests as before */
    int64_t last = invar_engine_submit(e, slice(3, 40), 40, &s);
    run_all(e, 20);
    collect(e, last, &got);
    run_alone(&c, slice(3, 40), 40, &s, &alone);
    assert_same(&got, &alone, "request after 20000 served");
    invar_engine_free(e);
}

/* max_tokens far beyond the context is valid: generation stops at the context limit. */
static void test_huge_max_tokens_stops_at_context(void **state) {
    (void)state;
    const invar_engine_config c = config(32, 16);
    invar_sampling s = greedy(INT32_MAX);
    s.ignore_eos = true;
    invar_engine *e = make_engine(&c);
    int64_t id = invar_engine_submit(e, slice(0, 20), 20, &s);
    run_all(e, 40);
    invar_result r;
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    char error[200] = "";
    if (r.error) snprintf(error, sizeof error, "%s", r.error);
    const invar_finish finish = r.finish;
    const int64_t n_tokens = r.n_tokens;
    invar_engine_free(e); /* before the checks: a failure must not leak it */
    if (finish == INVAR_FINISH_ERROR) fail_msg("max_tokens = INT32_MAX rejected: %s", error);
    assert_int_equal(finish, INVAR_FINISH_LENGTH);
    assert_int_equal(n_tokens, 12);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_requests_do_not_disturb_others),
        cmocka_unit_test(test_requests_wait_for_kv_budget),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_finish_reasons),
        cmocka_unit_test(test_callback_each_token_once),
        cmocka_unit_test(test_cancel_from_callback),
        cmocka_unit_test(test_stats_readable_during_step),
        cmocka_unit_test(test_f16_cache_holds_twice_the_blocks),
        cmocka_unit_test(test_unknown_and_released_ids),
        cmocka_unit_test(test_request_slots_stay_bounded),
        cmocka_unit_test(test_huge_max_tokens_stops_at_context),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
