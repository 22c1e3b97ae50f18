/* End-to-end batch invariance on the default model: each of 32 prompts generated alone
 * (one sequence per step, one thread) equals, bitwise in token ids and logprobs, the same
 * request inside random batches of 2..64 requests in random order, with random per-step
 * token budgets (so prefill is chunked differently) and 1 or 2 threads; greedy and at
 * temperature 0.8 with seeds. Negative controls: the same check finds mismatches on an
 * engine whose matmul splits K by batch size, whose attention splits the keys at
 * boundaries that follow the number of tokens in the forward (ATTN_SPLIT_BY_BATCH), or
 * whose sampler keys a row's draw by its place in the step (backend_cpu_set_draw_by_row).
 * A third of the requests use per-request logits processing (penalties, logit_bias,
 * min_tokens, stop_token_ids), each with parameters of its own; their control reads a
 * penalty history shared by the batch (invar_engine_testing_set_shared_history).
 * On a mixture-of-experts model (INVAR_MODEL a qwen3moe file, tests/python/test_moe.py) it
 * also checks that the tokens per expert really vary across the runs it compares, and its
 * control combines a token's experts in the order of their load in the batch.
 * Both KV cache types: INVAR_TEST_KV_TYPE=f16 (test_engine_invariance_kv_f16) runs every
 * engine on an f16 cache; that run's control stores the halves of odd-sized forwards
 * rounded toward zero (backend_cpu_set_kv_round_by_batch) and must differ; the f32 run
 * holds the other controls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "engine/engine_internal.h"
#include "engine/engine_testing.h"
#include "engine_fixture.h"
#include "kernels/cpu/matmul.h"

#define N_PROMPTS 32
#define MAX_TOKENS 8

static invar_model *g_model;
static prompt_ids *g_prompts;

/* Modes: 0 greedy, 1 sampled, 2 logits processing (penalties, logit_bias, min_tokens,
 * stop_token_ids; greedy or sampled by prompt), each with parameters of its own prompt. */
#define N_MODES 3
/* Prompts that also run in mode 2 (each reference costs a solo run): the first g_processed. */
static int g_processed;
static int has_mode(int prompt, int mode) { return mode < 2 || prompt < g_processed; }
static invar_sampling mode_sampling(int mode, int prompt) {
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = MAX_TOKENS;
    if (mode == 1 || (mode == 2 && prompt % 2)) {
        s.temperature = 0.8f;
        s.seed = 12345u + (uint64_t)prompt;
        s.top_p = 0.95f;
    }
    if (mode == 2) {
        s.repetition_penalty = 1.3f + 0.1f * (float)(prompt % 3);
        s.frequency_penalty = 0.5f + 0.25f * (float)(prompt % 2);
        s.presence_penalty = 0.4f;
        s.min_tokens = 2 + prompt % 3;
        s.n_logit_bias = 2;
        s.logit_bias[0] = (invar_logit_bias){(int32_t)(100 + 17 * prompt), 3.0f};
        s.logit_bias[1] = (invar_logit_bias){(int32_t)(1000 + prompt), -100.0f};
        s.n_stop_token_ids = 1;
        s.stop_token_ids[0] = (int32_t)(30 + prompt); /* rare ASCII tokens */
    }
    return s;
}

/* The engine's real path, or one deliberately non-invariant part of it (the negative
 * controls): the matmul, the attention split or the sampler's draw. */
typedef enum { REAL, SPLITK_BY_M, ATTN_BY_BATCH, DRAW_BY_ROW, SHARED_HISTORY, MOE_BY_LOAD, KV_ROUND_BY_BATCH } variant;

/* MoE: per expert, the token counts (bit c-1: c tokens in one layer's forward) every run
 * saw, alone runs and batched runs apart (moe_counts_seen). */
static int64_t g_n_expert;
static uint64_t *g_seen_alone, *g_seen_batched;

static void make_variant(invar_engine *e, variant v) {
    struct backend *be = invar_engine_testing_backend(e);
    switch (v) {
    case REAL: break;
    case SPLITK_BY_M: assert_int_equal(invar_engine_testing_set_matmul(e, cpu_matmul_splitk_by_m), 0); break;
    case ATTN_BY_BATCH: assert_int_equal(backend_cpu_set_attention(be, ATTN_SPLIT_BY_BATCH), 0); break;
    case DRAW_BY_ROW: assert_int_equal(backend_cpu_set_draw_by_row(be, true), 0); break;
    case SHARED_HISTORY: invar_engine_testing_set_shared_history(e, true); break;
    case MOE_BY_LOAD: assert_int_equal(backend_cpu_set_moe_combine(be, MOE_COMBINE_BY_LOAD), 0); break;
    case KV_ROUND_BY_BATCH: assert_int_equal(backend_cpu_set_kv_round_by_batch(be, true), 0); break;
    }
}

/* Runs requests (prompt index, sampled flag) submitted in the given order. */
static void run_batch(const int *prompt_of, const int *sampled_of, const int *order, int n,
                      const invar_engine_config *cfg, variant v, run_out *out) {
    char err[256];
    invar_engine *e;
    assert_int_equal(invar_engine_create(g_model, cfg, &e, err, sizeof err), 0);
    make_variant(e, v);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
    for (int k = 0; k < n; k++) {
        int i = order[k];
        invar_sampling s = mode_sampling(sampled_of[i], prompt_of[i]);
        ids[i] = invar_engine_submit(e, g_prompts[prompt_of[i]].ids, g_prompts[prompt_of[i]].n, &s);
        assert_true(ids[i] >= 0);
    }
    int left;
    while ((left = invar_engine_step(e)) > 0) {}
    assert_int_equal(left, 0);
    const uint64_t *seen = backend_cpu_moe_counts_seen(invar_engine_testing_backend(e));
    assert_true((seen != NULL) == (g_n_expert > 0));
    for (int64_t x = 0; x < g_n_expert && v == REAL; x++) (n == 1 ? g_seen_alone : g_seen_batched)[x] |= seen[x];
    for (int i = 0; i < n; i++) {
        invar_result r;
        assert_int_equal(invar_engine_result(e, ids[i], &r), 0);
        out[i].finish = r.finish;
        out[i].n = r.n_tokens;
        for (int64_t t = 0; t < r.n_tokens; t++) {
            out[i].tok[t] = r.tokens[t].token;
            out[i].lp[t] = r.tokens[t].logprob;
        }
    }
    free(ids);
    invar_engine_free(e);
}

static int same(const run_out *a, const run_out *b) {
    return a->finish == b->finish && a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static int rnd(int n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (int)(g_rng % (uint64_t)n);
}

/* References: every (prompt, mode) alone. Then trials of random batches; returns the
 * number of requests whose output differed from their reference (of them, *greedy_bad at
 * temperature 0). */
static int check_batches(variant v, int n_prompts, const int *sizes, int n_trials, int all_at_once, int *n_compared,
                         int *greedy_bad, int *processed_bad) {
    invar_engine_config alone_cfg;
    invar_engine_config_default(&alone_cfg);
    alone_cfg.n_threads = 1;
    alone_cfg.max_batch = 1;
    alone_cfg.kv_type = fixture_kv_type();
    run_out *ref = calloc((size_t)n_prompts * N_MODES, sizeof *ref);
    for (int i = 0; i < n_prompts * N_MODES; i++) {
        int p = i % n_prompts, smp = i / n_prompts, zero = 0;
        if (!has_mode(p, smp)) continue;
        run_batch(&p, &smp, &zero, 1, &alone_cfg, v, &ref[i]);
        assert_true(ref[i].n > 0);
    }
    int mismatches = 0;
    *n_compared = *greedy_bad = *processed_bad = 0;
    for (int t = 0; t < n_trials; t++) {
        int n = sizes[t];
        int *prompt_of = malloc(sizeof(int) * (size_t)n), *sampled_of = malloc(sizeof(int) * (size_t)n);
        int *order = malloc(sizeof(int) * (size_t)n);
        run_out *out = calloc((size_t)n, sizeof *out);
        for (int i = 0; i < n; i++) {
            prompt_of[i] = rnd(n_prompts); /* duplicates allowed: identical requests side by side */
            sampled_of[i] = rnd(has_mode(prompt_of[i], 2) ? N_MODES : 2);
            order[i] = i;
        }
        for (int i = n - 1; i > 0; i--) {
            int j = rnd(i + 1), x = order[i];
            order[i] = order[j];
            order[j] = x;
        }
        invar_engine_config cfg;
        invar_engine_config_default(&cfg);
        cfg.n_threads = 1 + t % 2;
        cfg.max_batch = all_at_once ? n : 1 + rnd(n);
        static const int budgets[] = {7, 33, 64, 200, 512};
        cfg.max_batch_tokens = budgets[rnd(5)];
        cfg.kv_type = fixture_kv_type();
        run_batch(prompt_of, sampled_of, order, n, &cfg, v, out);
        for (int i = 0; i < n; i++) {
            const int differs = !same(&out[i], &ref[sampled_of[i] * n_prompts + prompt_of[i]]);
            mismatches += differs;
            *greedy_bad += differs && !sampled_of[i];
            *processed_bad += differs && sampled_of[i] == 2;
            (*n_compared)++;
        }
        free(prompt_of), free(sampled_of), free(order), free(out);
    }
    free(ref);
    return mismatches;
}

/* INVAR_TEST_QUICK=1 (the sanitizer build in scripts/test.sh) runs a smaller sweep: the
 * same checks, fewer requests, since instrumented forwards are ~10x slower. */
static int quick(void) {
    const char *q = getenv("INVAR_TEST_QUICK");
    return q && *q && *q != '0';
}

static int popcount64(uint64_t x) {
    int c = 0;
    for (; x; x &= x - 1) c++;
    return c;
}

/* The comparisons above mean something for the MoE layers only if an expert's matmul saw
 * different numbers of tokens in the runs compared: every expert must have run with counts
 * that its alone runs never had, and some expert with many tokens at once. */
static void check_expert_counts_varied(void) {
    if (!g_n_expert) return;
    int experts_varied = 0, max_count = 0, distinct = 0;
    for (int64_t x = 0; x < g_n_expert; x++) {
        experts_varied += (g_seen_batched[x] & ~g_seen_alone[x]) != 0;
        uint64_t all = g_seen_alone[x] | g_seen_batched[x];
        if (popcount64(all) > distinct) distinct = popcount64(all);
        for (int c = 63; c >= 0; c--)
            if (all >> c & 1) {
                if (c + 1 > max_count) max_count = c + 1;
                break;
            }
    }
    printf("# experts: %d/%lld ran with token counts their alone runs never had; up to %d distinct counts "
           "per expert, largest %d%s\n",
           experts_varied, (long long)g_n_expert, distinct, max_count, max_count == 64 ? "+" : "");
    assert_int_equal(experts_varied, g_n_expert);
    assert_true(distinct >= 8);
    assert_true(max_count >= 32);
}

static void test_batches_equal_alone(void **state) {
    (void)state;
    g_processed = quick() ? 2 : 8;
    static const int sizes[] = {2, 64, 5, 33, 17, 9};
    static const int quick_sizes[] = {2, 24, 7};
    int compared, greedy_bad, processed_bad;
    int mismatches = quick() ? check_batches(REAL, 8, quick_sizes, 3, 0, &compared, &greedy_bad, &processed_bad)
                             : check_batches(REAL, N_PROMPTS, sizes, 6, 0, &compared, &greedy_bad, &processed_bad);
    printf("# invariant engine: %d/%d batched requests differ from alone\n", mismatches, compared);
    assert_true(compared >= (quick() ? 33 : 128));
    assert_int_equal(mismatches, 0);
    check_expert_counts_varied();
}

/* The negative controls: the same check on an engine with one non-invariant part, for one
 * batch of 16 requests that all run together (a fixed draw of the check's random choices,
 * so that the result does not depend on the tests run before). */
static int control_mismatches(variant v, const char *what, int *greedy_bad, int *processed_bad) {
    static const int sizes[] = {16};
    int compared;
    g_rng = 0x2545F4914F6CDD1DULL;
    g_processed = v == SHARED_HISTORY ? 6 : 0; /* only its control needs mode 2 */
    int mismatches = check_batches(v, 6, sizes, 1, 1, &compared, greedy_bad, processed_bad);
    printf("# negative control (%s): %d/%d batched requests differ (%d greedy)\n", what, mismatches, compared,
           *greedy_bad);
    return mismatches;
}

/* The negative controls of the f32 run (an f16 run has its own, below). */
static int f32_controls(void) { return !quick() && fixture_kv_type() == INVAR_KV_F32; }

static void test_negative_control_splitk_by_batch_size(void **state) {
    (void)state;
    if (!f32_controls()) skip(); /* the Release run holds the negative controls */
    int greedy_bad, processed_bad;
    assert_true(control_mismatches(SPLITK_BY_M, "split-K by batch size", &greedy_bad, &processed_bad) > 0);
}

/* Attention whose split boundaries follow the number of tokens in the forward. */
static void test_negative_control_attention_split_by_batch(void **state) {
    (void)state;
    if (!f32_controls()) skip();
    int greedy_bad, processed_bad;
    assert_true(control_mismatches(ATTN_BY_BATCH, "attention split by batch", &greedy_bad, &processed_bad) > 0);
    assert_true(greedy_bad > 0); /* the logits themselves changed */
}

/* Draws keyed by the row's place in the step: only sampled requests can change. */
static void test_negative_control_draw_by_row(void **state) {
    (void)state;
    if (!f32_controls()) skip();
    int greedy_bad, processed_bad;
    assert_true(control_mismatches(DRAW_BY_ROW, "sampler draw by row index", &greedy_bad, &processed_bad) > 0);
    assert_int_equal(greedy_bad, 0);
}

/* Penalties read a history shared by the step's rows instead of the request's own: only
 * requests with logits processing can change, and some of them must. */
static void test_negative_control_shared_history(void **state) {
    (void)state;
    if (!f32_controls()) skip();
    int greedy_bad, processed_bad;
    const int bad = control_mismatches(SHARED_HISTORY, "penalty history shared by the batch", &greedy_bad,
                                       &processed_bad);
    assert_true(processed_bad > 0);
    assert_int_equal(bad, processed_bad);
}

/* A token's experts summed in the order of their load in the batch (most tokens first):
 * the rounding follows which other tokens chose the same experts. Dense models: skipped. */
static void test_negative_control_moe_combine_by_load(void **state) {
    (void)state;
    if (!f32_controls() || !g_n_expert) skip();
    int greedy_bad, processed_bad;
    assert_true(control_mismatches(MOE_BY_LOAD, "experts combined in load order", &greedy_bad, &processed_bad) > 0);
    assert_true(greedy_bad > 0); /* the logits themselves changed */
}

/* f16 cache: K/V of forwards with an odd number of tokens stored rounded toward zero, of
 * the others to nearest: a position's cached bits then follow its batch. */
static void test_negative_control_f16_rounding_by_batch(void **state) {
    (void)state;
    if (quick() || fixture_kv_type() != INVAR_KV_F16) skip();
    int greedy_bad, processed_bad;
    assert_true(control_mismatches(KV_ROUND_BY_BATCH, "f16 cache rounded by batch", &greedy_bad, &processed_bad) > 0);
    assert_true(greedy_bad > 0); /* the logits themselves changed */
}

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    g_n_expert = g_model->m->cfg.n_expert;
    g_seen_alone = calloc((size_t)g_n_expert + 1, sizeof(uint64_t));
    g_seen_batched = calloc((size_t)g_n_expert + 1, sizeof(uint64_t));
    g_prompts = fixture_prompts(g_model, N_PROMPTS);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    fixture_prompts_free(g_prompts, N_PROMPTS);
    invar_model_free(g_model);
    free(g_seen_alone), free(g_seen_batched);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_equal_alone),
        cmocka_unit_test(test_negative_control_splitk_by_batch_size),
        cmocka_unit_test(test_negative_control_attention_split_by_batch),
        cmocka_unit_test(test_negative_control_draw_by_row),
        cmocka_unit_test(test_negative_control_shared_history),
        cmocka_unit_test(test_negative_control_moe_combine_by_load),
        cmocka_unit_test(test_negative_control_f16_rounding_by_batch),
    };
    if (getenv("TEST_FILTER")) cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
