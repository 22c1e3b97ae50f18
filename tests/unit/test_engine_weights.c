/* Weight updates of a live engine (invar_engine_update_weights, invar_engine_load_weights) on
 * the default model. W below: blk.0's attn_q and ffn_up replaced by blk.1's (raw Q4_1, same
 * type) and token_embd (tied to the output) by its F32 dequantisation scaled by 1.01 (a type
 * change).
 *   fresh      after W, the engine computes bitwise what a second engine on a freshly loaded
 *              model with W computes, and not what it computed before
 *   restore    the original tensors (or invar_engine_load_weights of the model file) give back
 *              the original bits
 *   running    a request mid-generation at the update keeps its tokens so far and continues
 *              bitwise as a request of prompt + those tokens on the new weights
 *   cache      a prompt held in the prefix cache before the update is computed anew
 *   control    with the update leaving caches and KV in place (engine_testing.h), the running
 *              and cache comparisons fail
 *   refused    unknown names, wrong shapes, sizes, types and dimensions, duplicates, the tied
 *              output, rope_freqs, a bad file: an error with a message, nothing changed (also
 *              when only one tensor of a list is bad)
 * INVAR_TEST_QUICK=1 (sanitizer builds) leaves the negative control to the Release run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/engine_testing.h"
#include "engine_fixture.h"
#include "formats/gguf.h"
#include "formats/quant.h"

#define MAX_TOKENS 10

static invar_model *g_model;
static gguf_file *g_file;
static char g_path[4096];
static prompt_ids *g_prompts;
static float *g_embd_f32;
static invar_tensor g_w[3];
static run_out g_ref0, g_ref_w; /* prompt 0 before and after W (fresh engine) */

static const gguf_tensor *tensor(const char *name) {
    const gguf_tensor *t = gguf_find_tensor(g_file, name);
    assert_non_null(t);
    return t;
}

static invar_tensor raw(const char *name, const gguf_tensor *t) {
    invar_tensor r = {name,    t->type,          (int32_t)t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]},
                      t->data, (size_t)t->nbytes};
    return r;
}

static invar_engine *engine(invar_model *m, bool prefix_cache) {
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.n_threads = 2;
    c.kv_mem_mb = 64;
    c.no_prefix_cache = !prefix_cache;
    invar_engine *e = NULL;
    char err[256];
    assert_int_equal(invar_engine_create(m, &c, &e, err, sizeof err), 0);
    return e;
}

static invar_sampling greedy(int32_t max_tokens) {
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = max_tokens;
    s.ignore_eos = true;
    return s;
}

static void collect(invar_engine *e, int64_t id, run_out *o) {
    invar_result r;
    assert_int_equal(invar_engine_result(e, id, &r), 0);
    o->finish = r.finish;
    o->n = r.n_tokens;
    for (int64_t i = 0; i < r.n_tokens && i < 64; i++) o->tok[i] = r.tokens[i].token, o->lp[i] = r.tokens[i].logprob;
}

static void run(invar_engine *e, const int32_t *ids, int64_t n, int32_t max_tokens, run_out *o) {
    invar_sampling s = greedy(max_tokens);
    int64_t id = invar_engine_submit(e, ids, n, &s);
    assert_true(id >= 0);
    while (invar_engine_step(e) > 0) {}
    collect(e, id, o);
    assert_int_equal(o->finish, INVAR_FINISH_LENGTH);
    invar_engine_release(e, id);
}

static bool same(const run_out *a, const run_out *b) {
    return a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n);
}

static void update(invar_engine *e, const invar_tensor *t, size_t n) {
    char err[256] = "";
    int rc = invar_engine_update_weights(e, t, n, err, sizeof err);
    if (rc) fprintf(stderr, "update: %s\n", err);
    assert_int_equal(rc, 0);
}

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    const char *env = getenv("INVAR_MODEL");
    snprintf(g_path, sizeof g_path, "%s",
             env && *env ? env : INVAR_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    char err[256];
    if (gguf_open(g_path, &g_file, err, sizeof err)) return -1;
    g_prompts = fixture_prompts(g_model, 2);
    const gguf_tensor *embd = gguf_find_tensor(g_file, "token_embd.weight");
    if (!embd || gguf_find_tensor(g_file, "output.weight")) return -1; /* the tests use the tied output */
    int64_t rows = embd->ne[1], k = embd->ne[0];
    size_t rb = quant_row_bytes(embd->type, k);
    g_embd_f32 = malloc(sizeof(float) * (size_t)(rows * k));
    if (!g_embd_f32) return -1;
    for (int64_t r = 0; r < rows; r++)
        dequant_row(embd->type, (const char *)embd->data + (size_t)r * rb, g_embd_f32 + r * k, k);
    for (int64_t i = 0; i < rows * k; i++) g_embd_f32[i] *= 1.01f;
    const gguf_tensor *q1 = gguf_find_tensor(g_file, "blk.1.attn_q.weight");
    const gguf_tensor *u1 = gguf_find_tensor(g_file, "blk.1.ffn_up.weight");
    if (!q1 || !u1) return -1;
    g_w[0] = raw("blk.0.attn_q.weight", q1);
    g_w[1] = raw("blk.0.ffn_up.weight", u1);
    g_w[2] = (invar_tensor){"token_embd.weight", 0 /* F32 */, 2,
                            {k, rows, 1, 1},     g_embd_f32,  sizeof(float) * (size_t)(rows * k)};

    invar_engine *e = engine(g_model, false);
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &g_ref0);
    invar_engine_free(e);
    invar_model *m2 = fixture_model();
    e = engine(m2, false);
    if (invar_engine_update_weights(e, g_w, 3, err, sizeof err)) return fprintf(stderr, "%s\n", err), -1;
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &g_ref_w);
    invar_engine_free(e);
    invar_model_free(m2);
    return same(&g_ref0, &g_ref_w) ? -1 : 0; /* W must change the output */
}

static int teardown(void **state) {
    (void)state;
    fixture_prompts_free(g_prompts, 2);
    free(g_embd_f32);
    gguf_close(g_file);
    invar_model_free(g_model);
    return 0;
}

/* The original weights of W's names. */
static void restore(invar_engine *e) {
    invar_tensor orig[3] = {raw("blk.0.attn_q.weight", tensor("blk.0.attn_q.weight")),
                            raw("blk.0.ffn_up.weight", tensor("blk.0.ffn_up.weight")),
                            raw("token_embd.weight", tensor("token_embd.weight"))};
    update(e, orig, 3);
}

static void test_fresh_and_restore(void **state) {
    (void)state;
    invar_engine *e = engine(g_model, true);
    run_out o;
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    assert_true(same(&o, &g_ref0));
    update(e, g_w, 3);
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    assert_true(same(&o, &g_ref_w));
    update(e, g_w, 3); /* again: the same bits (the first update's data is freed) */
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    assert_true(same(&o, &g_ref_w));
    restore(e);
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    assert_true(same(&o, &g_ref0));
    update(e, g_w, 3);
    char err[256];
    assert_int_equal(invar_engine_load_weights(e, g_path, err, sizeof err), 0);
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    assert_true(same(&o, &g_ref0));
    invar_engine_free(e);
}

/* Prompt 0 runs to k tokens, W is swapped in, it finishes. Returns whether the tokens after
 * the update equal a fresh W engine's continuation of prompt + the first k tokens. */
static bool running_request_continues(bool stale, const invar_tensor *w, size_t n_w) {
    invar_engine *e = engine(g_model, true);
    if (stale) invar_engine_testing_set_stale_kv(e, true);
    invar_sampling s = greedy(MAX_TOKENS);
    int64_t id = invar_engine_submit(e, g_prompts[0].ids, g_prompts[0].n, &s);
    run_out o;
    do {
        assert_true(invar_engine_step(e) > 0);
        collect(e, id, &o);
    } while (o.n < 3);
    int64_t k = o.n;
    update(e, w, n_w);
    while (invar_engine_step(e) > 0) {}
    collect(e, id, &o);
    assert_int_equal(o.n, MAX_TOKENS);
    assert_memory_equal(o.tok, g_ref0.tok, sizeof(int32_t) * (size_t)k); /* sampled before: kept */
    assert_memory_equal(o.lp, g_ref0.lp, sizeof(float) * (size_t)k);
    restore(e);
    invar_engine_free(e);

    invar_model *m2 = fixture_model();
    assert_non_null(m2);
    e = engine(m2, false);
    update(e, w, n_w);
    int32_t ids[1024];
    memcpy(ids, g_prompts[0].ids, sizeof(int32_t) * (size_t)g_prompts[0].n);
    memcpy(ids + g_prompts[0].n, o.tok, sizeof(int32_t) * (size_t)k);
    run_out c;
    run(e, ids, g_prompts[0].n + k, (int32_t)(MAX_TOKENS - k), &c);
    invar_engine_free(e);
    invar_model_free(m2);
    return !memcmp(c.tok, o.tok + k, sizeof(int32_t) * (size_t)c.n) &&
           !memcmp(c.lp, o.lp + k, sizeof(float) * (size_t)c.n);
}

static void test_running_request_recomputes(void **state) {
    (void)state;
    assert_true(running_request_continues(false, g_w, 3));
}

/* Prompt 0 twice (the second from the prefix cache), W, prompt 0 again: == the fresh W run? */
static bool cache_dropped(bool stale) {
    invar_engine *e = engine(g_model, true);
    if (stale) invar_engine_testing_set_stale_kv(e, true);
    run_out o;
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    invar_engine_stats st0, st1;
    invar_engine_get_stats(e, &st0);
    assert_true(st0.prefix_blocks_hit > 0);
    update(e, g_w, 2); /* same types, so the stale control is meaningful */
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    invar_engine_get_stats(e, &st1);
    restore(e);
    invar_engine_free(e);
    invar_model *m2 = fixture_model();
    e = engine(m2, false);
    update(e, g_w, 2);
    run_out ref;
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &ref);
    invar_engine_free(e);
    invar_model_free(m2);
    if (!stale) assert_int_equal(st1.prefix_blocks_hit, st0.prefix_blocks_hit); /* nothing left to hit */
    return same(&o, &ref);
}

static void test_prefix_cache_dropped(void **state) {
    (void)state;
    assert_true(cache_dropped(false));
}

static void test_negative_control(void **state) {
    (void)state;
    const char *q = getenv("INVAR_TEST_QUICK");
    if (q && *q && *q != '0') skip(); /* the Release run checks the control; sanitizers look for memory errors */
    assert_false(running_request_continues(true, g_w, 2));
    assert_false(cache_dropped(true));
}

static void expect_refused(invar_engine *e, invar_tensor t, const char *msg) {
    invar_tensor two[2] = {g_w[0], t}; /* a good tensor first: nothing of it may stay */
    char err[256] = "";
    assert_int_equal(invar_engine_update_weights(e, two, 2, err, sizeof err), -1);
    if (!strstr(err, msg)) fail_msg("expected '%s' in '%s'", msg, err);
}

static void test_refused(void **state) {
    (void)state;
    invar_engine *e = engine(g_model, true);
    const gguf_tensor *q = tensor("blk.0.attn_q.weight");
    invar_tensor good = raw("blk.0.attn_q.weight", q), t;
    t = good, t.name = "blk.0.attn_x.weight";
    expect_refused(e, t, "no tensor blk.0.attn_x.weight");
    t = good, t.name = "blk.99.attn_q.weight";
    expect_refused(e, t, "no tensor");
    t = good, t.name = "blk.00.attn_q.weight";
    expect_refused(e, t, "no tensor");
    t = good, t.name = "rope_freqs.weight";
    expect_refused(e, t, "rope_freqs");
    t = good, t.name = "output.weight";
    expect_refused(e, t, "ties");
    t = good, t.name = "blk.0.attn_q.bias"; /* llama has none */
    expect_refused(e, t, "no tensor");
    t = good, t.name = NULL;
    expect_refused(e, t, "without a name");
    t = good, t.ne[1] -= 1;
    expect_refused(e, t, "must have");
    t = good, t.n_dims = 0;
    expect_refused(e, t, "dimensions");
    t = good, t.n_dims = 7;
    expect_refused(e, t, "dimensions");
    t = good, t.ne[1] = -5;
    expect_refused(e, t, "must have");
    t = good, t.n_bytes -= 1;
    expect_refused(e, t, "bytes of data");
    t = good, t.data = NULL;
    expect_refused(e, t, "bytes of data");
    t = good, t.type = 9999;
    expect_refused(e, t, "unsupported type");
    expect_refused(e, g_w[0], "given twice");
    char err[256] = "";
    assert_int_equal(invar_engine_load_weights(e, "/nonexistent/model.gguf", err, sizeof err), -1);
    assert_true(err[0] != '\0');
    assert_int_equal(invar_engine_update_weights(e, NULL, 0, err, sizeof err), 0); /* nothing to do */
    run_out o;
    run(e, g_prompts[0].ids, g_prompts[0].n, MAX_TOKENS, &o);
    assert_true(same(&o, &g_ref0)); /* the model is unchanged */
    invar_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_and_restore),
        cmocka_unit_test(test_running_request_recomputes),
        cmocka_unit_test(test_prefix_cache_dropped),
        cmocka_unit_test(test_negative_control),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
