/* Thread pool: every task runs exactly once, across many runs, pool sizes 1..4,
 * create/destroy loops, idle periods long enough for workers to fall asleep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "kernels/cpu/threadpool.h"

typedef struct {
    _Atomic int *hits;
    int64_t n;
} count_ctx;

static void count_task(void *ctx, int64_t t) {
    count_ctx *c = ctx;
    assert_true(t >= 0 && t < c->n);
    atomic_fetch_add_explicit(&c->hits[t], 1, memory_order_relaxed);
}

static void run_and_check(threadpool *p, int64_t n) {
    _Atomic int *hits = calloc((size_t)(n > 0 ? n : 1), sizeof *hits);
    count_ctx c = {hits, n};
    threadpool_run(p, count_task, &c, n);
    /* Returned means done: every effect must be visible now, exactly once. */
    for (int64_t t = 0; t < n; t++) assert_int_equal(atomic_load(&hits[t]), 1);
    free(hits);
}

static void test_every_task_once(void **state) {
    (void)state;
    run_and_check(NULL, 17); /* NULL pool runs serially */
    for (int nt = 1; nt <= 4; nt++) {
        threadpool *p = threadpool_create(nt);
        assert_non_null(p);
        assert_int_equal(threadpool_size(p), nt);
        for (int r = 0; r < 2000; r++) run_and_check(p, r % 67);
        run_and_check(p, 100000);
        threadpool_destroy(p);
    }
}

/* Non-atomic writes to disjoint slots must be visible to the caller after run. */
typedef struct {
    int64_t *out;
    int64_t base;
} write_ctx;

static void write_task(void *ctx, int64_t t) {
    write_ctx *c = ctx;
    c->out[t] = c->base + t * t;
}

static void test_results_visible(void **state) {
    (void)state;
    threadpool *p = threadpool_create(3);
    int64_t out[300];
    for (int r = 0; r < 3000; r++) {
        write_ctx c = {out, r};
        const int64_t n = 1 + r % 300;
        threadpool_run(p, write_task, &c, n);
        for (int64_t t = 0; t < n; t++) assert_int_equal(out[t], r + t * t);
    }
    threadpool_destroy(p);
}

static void sleep_ms(long ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs after the workers have gone to sleep (futex path). */
static void test_after_idle(void **state) {
    (void)state;
    threadpool *p = threadpool_create(4);
    for (int r = 0; r < 5; r++) {
        sleep_ms(5);
        run_and_check(p, 64);
        run_and_check(p, 3);
    }
    threadpool_destroy(p);
}

static void test_create_destroy_loop(void **state) {
    (void)state;
    for (int r = 0; r < 200; r++) {
        threadpool *p = threadpool_create(1 + r % 4);
        assert_non_null(p);
        if (r % 2) run_and_check(p, 1 + r % 13);
        threadpool_destroy(p); /* also right after creation, with workers still starting */
    }
    assert_null(threadpool_create(0));
    threadpool_destroy(NULL);
}

#if defined(__x86_64__)
#include <immintrin.h>
static void csr_task(void *ctx, int64_t t) { ((unsigned *)ctx)[t] = _mm_getcsr(); }

/* Workers take the caller's MXCSR (FTZ/DAZ, rounding), even when it changed after
 * the pool was created: results must not depend on the thread that ran a task. */
static void test_fp_control_word_follows_caller(void **state) {
    (void)state;
    threadpool *p = threadpool_create(2);
    const unsigned orig = _mm_getcsr();
    unsigned seen[64];
    _mm_setcsr(orig | 0x8040); /* FTZ + DAZ */
    for (int r = 0; r < 50; r++) {
        threadpool_run(p, csr_task, seen, 64);
        for (int t = 0; t < 64; t++) assert_int_equal(seen[t] & ~0x3Fu, (orig | 0x8040) & ~0x3Fu);
    }
    _mm_setcsr(orig);
    threadpool_run(p, csr_task, seen, 64);
    for (int t = 0; t < 64; t++) assert_int_equal(seen[t] & ~0x3Fu, orig & ~0x3Fu);
    threadpool_destroy(p);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_results_visible),
        cmocka_unit_test(test_after_idle),
        cmocka_unit_test(test_create_destroy_loop),
#if defined(__x86_64__)
        cmocka_unit_test(test_fp_control_word_follows_caller),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
