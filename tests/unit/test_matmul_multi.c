/* cpu_matmul_multi (q/k/v and gate/up in one call) gives every output exactly the bits of
 * cpu_matmul on that weight alone, for every type and ISA, batch size and thread count;
 * weights of different types (activations prepared per weight) included. So does
 * cpu_matmul_grouped (experts, MLA heads): groups of their own rows and row counts. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/threadpool.h"
#include "test_matmul_common.h"

#define NW 3
#define MAX_M 130

static const int64_t n_cols[NW] = {37, 16, 50}; /* a tail group, one whole group, a longer one */

static int64_t k_for(uint32_t type) { return 2 * mm_block_elems(type) > 256 ? 2 * mm_block_elems(type) : 256; }

typedef struct {
    void *wdata[NW];
    cpu_weight w[NW];
} weights;

static void weights_init(weights *W, const uint32_t *types, int64_t k) {
    char err[200];
    for (int i = 0; i < NW; i++) {
        W->wdata[i] = mm_make_weights(types[i], n_cols[i], k);
        assert_int_equal(cpu_weight_init(&W->w[i], types[i], n_cols[i], k, W->wdata[i], err, sizeof err), 0);
    }
}

static void weights_free(weights *W) {
    for (int i = 0; i < NW; i++) {
        cpu_weight_free(&W->w[i]);
        free(W->wdata[i]);
    }
}

typedef void (*matmul_fn)(threadpool *, const cpu_weight *, const float *, int64_t, int64_t, float *,
                          int64_t, void *);

/* Mismatching output rows of cpu_matmul_multi against ref (cpu_matmul) per weight, over a
 * sweep of m. */
static int compare(const weights *W, int64_t k, threadpool *tp, matmul_fn ref_mm) {
    const int64_t ldx = k + 5, ldy = 64;
    float *x = malloc(sizeof(float) * MAX_M * (size_t)ldx);
    float *ys[NW], *ref = malloc(sizeof(float) * MAX_M * (size_t)ldy);
    size_t sc = 0;
    for (int i = 0; i < NW; i++) {
        ys[i] = malloc(sizeof(float) * MAX_M * (size_t)ldy);
        const size_t b = cpu_matmul_scratch_bytes(&W->w[i], MAX_M);
        sc = b > sc ? b : sc;
    }
    void *scratch = malloc(sc + 1);
    for (int64_t r = 0; r < MAX_M; r++) mm_make_row(x + r * ldx, k);
    static const int64_t ms[] = {1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64, 65, 100, 130};
    const cpu_weight *wp[NW] = {&W->w[0], &W->w[1], &W->w[2]};
    const int64_t ldys[NW] = {ldy, ldy, ldy};
    int bad = 0;
    for (size_t s = 0; s < sizeof ms / sizeof ms[0]; s++) {
        const int64_t m = ms[s];
        for (int i = 0; i < NW; i++)
            for (int64_t e = 0; e < MAX_M * ldy; e++) ys[i][e] = NAN;
        cpu_matmul_multi(tp, NW, wp, x, m, ldx, ys, ldys, scratch);
        for (int i = 0; i < NW; i++) {
            ref_mm(tp, &W->w[i], x, m, ldx, ref, ldy, scratch);
            for (int64_t r = 0; r < m; r++)
                bad += memcmp(ys[i] + r * ldy, ref + r * ldy, sizeof(float) * (size_t)n_cols[i]) != 0;
        }
    }
    for (int i = 0; i < NW; i++) free(ys[i]);
    free(ref);
    free(x);
    free(scratch);
    return bad;
}

static void test_multi_matches_single(void **state) {
    (void)state;
    threadpool *tp[2] = {threadpool_create(1), threadpool_create(2)};
    const cpu_isa best = cpu_isa_supported();
    const mm_type_list all = mm_types();
    for (size_t t = 0; t < all.n; t++) {
        const uint32_t ty = all.id[t], types[NW] = {ty, ty, ty};
        const int64_t k = k_for(ty);
        mm_seed(77 + ty);
        weights W;
        weights_init(&W, types, k);
        for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
            assert_int_equal(cpu_isa_set((cpu_isa)isa), isa);
            for (int p = 0; p < 2; p++) {
                const int bad = compare(&W, k, tp[p], cpu_matmul);
                if (bad) fail_msg("type %u isa %s threads %d: %d rows differ", ty, cpu_isa_name((cpu_isa)isa), p + 1, bad);
            }
        }
        weights_free(&W);
    }
    cpu_isa_set(best);
    threadpool_destroy(tp[0]);
    threadpool_destroy(tp[1]);
}

/* Mixed types (a model with Q6_K beside Q4_K, or F16 beside Q8_0) take the per-weight path. */
static void test_mixed_types(void **state) {
    (void)state;
    threadpool *tp = threadpool_create(2);
    static const uint32_t mixes[][NW] = {
        {INVAR_T_Q4_K, INVAR_T_Q6_K, INVAR_T_Q4_K},
        {INVAR_T_Q8_0, INVAR_T_F16, INVAR_T_Q4_1},
    };
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++) {
        mm_seed(500 + i);
        weights W;
        weights_init(&W, mixes[i], 512);
        assert_int_equal(compare(&W, 512, tp, cpu_matmul), 0);
        weights_free(&W);
    }
    threadpool_destroy(tp);
}

/* Negative control: against a matmul with another reduction order (split-K by m) the same
 * comparison finds differences, for every type. */
static void test_negative_control_detected(void **state) {
    (void)state;
    threadpool *tp = threadpool_create(2);
    const mm_type_list all = mm_types();
    for (size_t t = 0; t < all.n; t++) {
        const uint32_t ty = all.id[t], types[NW] = {ty, ty, ty};
        mm_seed(900 + ty);
        weights W;
        weights_init(&W, types, k_for(ty));
        const int bad = compare(&W, k_for(ty), tp, cpu_matmul_splitk_by_m);
        print_message("negative control type %u: %d rows differ\n", ty, bad);
        assert_true(bad > 0);
        weights_free(&W);
    }
    threadpool_destroy(tp);
}

/* Mismatching rows of cpu_matmul_grouped against ref per group: groups of the NW weights
 * over rows of x at different offsets and counts (one of them empty, one pair sharing its
 * activations, as an expert's gate and up do). */
static int compare_grouped(const weights *W, int64_t k, threadpool *tp, matmul_fn ref_mm) {
    enum { NG = 6 };
    const int64_t ldx = k + 5, ldy = 64;
    static const int64_t m_of[NG] = {3, 3, 0, 17, 1, 40}, off[NG] = {0, 0, 5, 9, 30, 31};
    static const int w_of[NG] = {0, 1, 2, 2, 1, 0};
    float *x = malloc(sizeof(float) * MAX_M * (size_t)ldx), *ys[NG];
    float *ref = malloc(sizeof(float) * MAX_M * (size_t)ldy);
    for (int64_t r = 0; r < MAX_M; r++) mm_make_row(x + r * ldx, k);
    cpu_matmul_group g[NG];
    size_t sc = 0;
    for (int i = 0; i < NG; i++) {
        ys[i] = malloc(sizeof(float) * MAX_M * (size_t)ldy);
        for (int64_t e = 0; e < MAX_M * ldy; e++) ys[i][e] = NAN;
        g[i] = (cpu_matmul_group){&W->w[w_of[i]], x + off[i] * ldx, m_of[i], ldx, ys[i], ldy};
        sc += cpu_matmul_scratch_bytes(&W->w[w_of[i]], m_of[i] ? m_of[i] : 1) + 256;
    }
    void *scratch = malloc(sc + 1);
    cpu_matmul_grouped(tp, NG, g, scratch);
    int bad = 0;
    for (int i = 0; i < NG; i++) {
        if (!m_of[i]) {
            bad += !isnan(ys[i][0]); /* an empty group writes nothing */
            continue;
        }
        ref_mm(tp, g[i].w, g[i].x, m_of[i], ldx, ref, ldy, scratch);
        for (int64_t r = 0; r < m_of[i]; r++)
            bad += memcmp(ys[i] + r * ldy, ref + r * ldy, sizeof(float) * (size_t)n_cols[w_of[i]]) != 0;
    }
    for (int i = 0; i < NG; i++) free(ys[i]);
    free(ref);
    free(x);
    free(scratch);
    return bad;
}

static void test_grouped_matches_single(void **state) {
    (void)state;
    threadpool *tp[2] = {threadpool_create(1), threadpool_create(2)};
    const mm_type_list all = mm_types();
    for (size_t t = 0; t < all.n; t++) {
        const uint32_t ty = all.id[t], types[NW] = {ty, ty, ty};
        mm_seed(300 + ty);
        weights W;
        weights_init(&W, types, k_for(ty));
        for (int p = 0; p < 2; p++) {
            const int bad = compare_grouped(&W, k_for(ty), tp[p], cpu_matmul);
            if (bad) fail_msg("grouped type %u threads %d: %d rows differ", ty, p + 1, bad);
        }
        weights_free(&W);
    }
    static const uint32_t mixed[NW] = {INVAR_T_Q4_K, INVAR_T_Q4_0, INVAR_T_F16};
    weights W;
    weights_init(&W, mixed, 512);
    assert_int_equal(compare_grouped(&W, 512, tp[1], cpu_matmul), 0);
    weights_free(&W);
    threadpool_destroy(tp[0]);
    threadpool_destroy(tp[1]);
}

/* Negative control of the grouped comparison: split-K by m differs from it. */
static void test_grouped_negative_control_detected(void **state) {
    (void)state;
    threadpool *tp = threadpool_create(2);
    static const uint32_t types[NW] = {INVAR_T_Q4_K, INVAR_T_Q4_K, INVAR_T_Q4_K};
    mm_seed(901);
    weights W;
    weights_init(&W, types, 512);
    const int bad = compare_grouped(&W, 512, tp, cpu_matmul_splitk_by_m);
    print_message("grouped negative control: %d rows differ\n", bad);
    assert_true(bad > 0);
    weights_free(&W);
    threadpool_destroy(tp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_matches_single),
        cmocka_unit_test(test_mixed_types),
        cmocka_unit_test(test_negative_control_detected),
        cmocka_unit_test(test_grouped_matches_single),
        cmocka_unit_test(test_grouped_negative_control_detected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
