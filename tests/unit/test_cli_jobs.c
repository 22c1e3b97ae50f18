/* The CLI's job runner (src/cli/jobs.c) on the default model: requests the engine rejects
 * come back with an error and no tokens beside good ones, and a done callback can stop the
 * run. The sanitizer build is the point of the first test: collecting a rejected request
 * once passed memcpy a NULL source (UB even for 0 bytes; UBSan aborts on it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli/jobs.h"
#include "engine_fixture.h"

static invar_model *g_model;

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

/* A job over the first n ids of a fixed text (BOS included). */
static job make_job(int64_t n, int32_t max_tokens) {
    static const char text[] = "one two three four five six seven eight nine ten eleven twelve thirteen";
    job j = {0};
    j.prompt = malloc(sizeof(int32_t) * 64);
    assert_non_null(j.prompt);
    int64_t got = invar_tokenize(g_model, text, sizeof text - 1, true, false, j.prompt, 64);
    assert_true(got >= n);
    j.n_prompt = n;
    invar_sampling_default(&j.samp);
    j.samp.max_tokens = max_tokens;
    return j;
}

static invar_engine_config small_config(void) {
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.n_threads = 1;
    c.n_ctx = 8;
    c.kv_mem_mb = 16;
    return c;
}

static void test_rejected_jobs_come_back_without_tokens(void **state) {
    (void)state;
    invar_engine_config c = small_config();
    job jobs[3] = {make_job(3, 2), make_job(12, 2) /* over n_ctx 8 */, make_job(0, 2) /* empty */};
    assert_int_equal(run_jobs(g_model, &c, jobs, 3, NULL, NULL, NULL), 0);
    assert_int_equal(jobs[0].finish, INVAR_FINISH_LENGTH);
    assert_int_equal(jobs[0].n_toks, 2);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(jobs[i].finish, INVAR_FINISH_ERROR);
        assert_non_null(jobs[i].error);
        assert_true(strlen(jobs[i].error) > 0);
        assert_int_equal(jobs[i].n_toks, 0);
    }
    for (int i = 0; i < 3; i++) job_clear(&jobs[i]);
}

static int g_calls;
static int stop_at_first(void *user, int64_t index) {
    (void)user;
    (void)index;
    g_calls++;
    return 1;
}

static void test_done_callback_stops_the_run(void **state) {
    (void)state;
    invar_engine_config c = small_config();
    c.max_batch = 1; /* one at a time: the second has not started when the first is done */
    job jobs[2] = {make_job(3, 1), make_job(3, 4)};
    g_calls = 0;
    assert_int_equal(run_jobs(g_model, &c, jobs, 2, NULL, stop_at_first, NULL), 1);
    assert_int_equal(g_calls, 1);
    assert_int_equal(jobs[0].n_toks, 1);
    assert_int_equal(jobs[1].finish, INVAR_FINISH_NONE);
    for (int i = 0; i < 2; i++) job_clear(&jobs[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rejected_jobs_come_back_without_tokens),
        cmocka_unit_test(test_done_callback_stops_the_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
