/* cpu_matmul against a double-precision reference computed from dequant_row, for
 * every weight type and every ISA the machine supports.
 *
 * Tolerance. Float weight types: |y - ref| <= 4 k 2^-24 sum|x w| (float FMA chains).
 * Quantised types: the activations are rounded to int8 with step d_b = amax_b/127,
 * an error of at most d_b/2 per element, so
 *     |y - ref| <= sum_b (d_b/2) sum_{k in b} |w_k|  +  4 k 2^-24 sum|x w|
 * (a proven bound, checked per element; observed errors are 10-30% of it).
 * Statistically: for quantised types with m*n >= 16 outputs the RMS error must be below
 * 2e-2 of the RMS reference; observed ~4e-3 typical, 1.3e-2 worst (k = 64, where one
 * outlier block of the test activations dominates). (Float types are held to the per-element bound only: a
 * single output can cancel to near zero, making a relative error meaningless.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "kernels/cpu/threadpool.h"
#include "test_matmul_common.h"

static void check_shape(uint32_t type, int64_t m, int64_t n, int64_t k, threadpool *tp) {
    char err[200];
    mm_seed((uint64_t)(type * 7919 + n * 31 + k));
    void *W = mm_make_weights(type, n, k);
    cpu_weight w;
    assert_int_equal(cpu_weight_init(&w, type, n, k, W, err, sizeof err), 0);
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    for (int64_t i = 0; i < m; i++) mm_make_row(x + i * k, k);
    float *wd = malloc(sizeof(float) * (size_t)(n * k));
    const size_t rb = mm_row_bytes(type, k);
    for (int64_t j = 0; j < n; j++) dequant_row(type, (uint8_t *)W + rb * (size_t)j, wd + j * k, k);
    float *y = malloc(sizeof(float) * (size_t)(m * n));
    void *scratch = malloc(cpu_matmul_scratch_bytes(&w, m) + 1);
    const int quant = mm_block_elems(type) > 1;

    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_supported(); isa++) {
        cpu_isa_set((cpu_isa)isa);
        cpu_matmul(tp, &w, x, m, k, y, n, scratch);
        double se = 0, sr = 0, worst = 0;
        for (int64_t i = 0; i < m; i++) {
            const float *xr = x + i * k;
            for (int64_t j = 0; j < n; j++) {
                const float *wr = wd + j * k;
                double ref = 0, absdot = 0, qbound = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    ref += (double)xr[kk] * wr[kk];
                    absdot += fabs((double)xr[kk] * wr[kk]);
                }
                if (quant)
                    for (int64_t b = 0; b < k; b += 32) {
                        double amax = 0, wsum = 0;
                        for (int64_t e = b; e < b + 32; e++) {
                            amax = fmax(amax, fabs(xr[e]));
                            wsum += fabs(wr[e]);
                        }
                        qbound += amax / 127.0 / 2.0 * wsum;
                    }
                const double tol = qbound * 1.0001 + 4.0 * (double)k * 0x1p-24 * absdot + 1e-30;
                const double e = fabs((double)y[i * n + j] - ref);
                if (!(e <= tol))
                    fail_msg("type %u isa %s m=%lld n=%lld k=%lld at (%lld,%lld): y=%.9g ref=%.9g tol=%.3g",
                             type, cpu_isa_name((cpu_isa)isa), (long long)m, (long long)n, (long long)k,
                             (long long)i, (long long)j, y[i * n + j], ref, tol);
                if (e / (tol + 1e-300) > worst) worst = e / tol;
                se += e * e;
                sr += ref * ref;
            }
        }
        const double rel = sqrt(se / (sr + 1e-300));
        if (quant && m * n >= 16 && !(rel <= 2e-2))
            fail_msg("type %u isa %s: rms relative error %.3g", type, cpu_isa_name((cpu_isa)isa), rel);
        if (m == 9 && n == 70)
            print_message("type %-2u isa %-6s m=%lld n=%lld k=%lld: rms rel err %.2e, worst err/bound %.2f\n", type,
                          cpu_isa_name((cpu_isa)isa), (long long)m, (long long)n, (long long)k, rel, worst);
    }
    cpu_isa_set(cpu_isa_supported());
    cpu_weight_free(&w);
    free(W);
    free(x);
    free(wd);
    free(y);
    free(scratch);
}

static void test_accuracy(void **state) {
    (void)state;
    threadpool *tp = threadpool_create(2);
    const mm_type_list types = mm_types();
    for (size_t t = 0; t < types.n; t++) {
        const uint32_t type = types.id[t];
        const int64_t be = mm_block_elems(type);
        /* one or two blocks (an odd 77 for element types), and about 576 (the model's K) */
        const int64_t ks[] = {be == 1 ? 77 : be >= 256 ? be : 2 * be, be == 1 ? 576 : (576 + be - 1) / be * be};
        const int64_t ns[] = {1, 16, 37, 70};
        const int64_t ms[] = {1, 3, 9, 17};
        for (size_t a = 0; a < 2; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 4; c++) check_shape(type, ms[c], ns[b], ks[a], tp);
    }
    threadpool_destroy(tp);
}

static void test_rejects_bad_shapes(void **state) {
    (void)state;
    char err[200];
    cpu_weight w;
    static uint8_t buf[4096];
    assert_int_not_equal(cpu_weight_init(&w, INVAR_T_Q4_1, 4, 48, buf, err, sizeof err), 0);
    assert_int_not_equal(cpu_weight_init(&w, INVAR_T_Q4_K, 4, 128, buf, err, sizeof err), 0);
    assert_int_not_equal(cpu_weight_init(&w, INVAR_T_Q3_K, 4, 128, buf, err, sizeof err), 0);
    assert_int_not_equal(cpu_weight_init(&w, INVAR_T_Q5_0, 4, 48, buf, err, sizeof err), 0);
    assert_int_not_equal(cpu_weight_init(&w, INVAR_T_Q8_1, 4, 32, buf, err, sizeof err), 0);
    assert_non_null(strstr(err, "unsupported weight type Q8_1"));
    assert_int_not_equal(cpu_weight_init(&w, 4 /* retired */, 4, 32, buf, err, sizeof err), 0);
    assert_int_not_equal(cpu_weight_init(&w, UINT32_MAX, 4, 32, buf, err, sizeof err), 0);
    assert_int_not_equal(cpu_weight_init(&w, INVAR_T_F32, 0, 32, buf, err, sizeof err), 0);
    assert_int_equal(cpu_weight_init(&w, INVAR_T_F32, 4, 33, buf, err, sizeof err), 0);
    cpu_weight_free(&w);
}

/* Non-finite activations give NaN outputs (not garbage), on every ISA. */
static void test_nonfinite_input(void **state) {
    (void)state;
    char err[200];
    mm_seed(5);
    void *W = mm_make_weights(INVAR_T_Q8_0, 16, 64);
    cpu_weight w;
    assert_int_equal(cpu_weight_init(&w, INVAR_T_Q8_0, 16, 64, W, err, sizeof err), 0);
    float x[2 * 64], y[2 * 16];
    for (int i = 0; i < 128; i++) x[i] = mm_randf();
    x[3] = INFINITY;
    x[64 + 40] = NAN;
    void *scratch = malloc(cpu_matmul_scratch_bytes(&w, 2));
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_supported(); isa++) {
        cpu_isa_set((cpu_isa)isa);
        cpu_matmul(NULL, &w, x, 2, 64, y, 16, scratch);
        for (int j = 0; j < 32; j++) assert_true(isnan(y[j]));
    }
    cpu_isa_set(cpu_isa_supported());
    free(scratch);
    cpu_weight_free(&w);
    free(W);
}

/* The kernel table against formats' table: every matmul type can be dequantised (the
 * references here and the CUDA upload need it) and has test weights; the types the
 * engine has always had are all there (so an emptied table cannot pass vacuously). */
static void test_kernel_table(void **state) {
    (void)state;
    const mm_type_list types = mm_types();
    for (size_t t = 0; t < types.n; t++) {
        assert_true(quant_type_supported(types.id[t]));
        assert_non_null(mm_gen[types.id[t]]);
    }
    static const uint32_t expected[] = {INVAR_T_F32,  INVAR_T_F16,    INVAR_T_Q4_0,   INVAR_T_Q4_1,
                                        INVAR_T_Q5_0, INVAR_T_Q5_1,   INVAR_T_Q8_0,   INVAR_T_Q2_K,
                                        INVAR_T_Q3_K, INVAR_T_Q4_K,   INVAR_T_Q5_K,   INVAR_T_Q6_K,
                                        INVAR_T_IQ4_NL, INVAR_T_IQ4_XS, INVAR_T_BF16, INVAR_T_MXFP4};
    assert_int_equal(types.n, sizeof expected / sizeof expected[0]);
    for (size_t i = 0; i < types.n; i++) assert_int_equal(types.id[i], expected[i]);
    assert_false(cpu_matmul_supports(INVAR_T_Q8_1));
    assert_false(cpu_matmul_supports(INVAR_T_Q8_K));
    assert_false(cpu_matmul_supports(QUANT_TYPE_END));
}

int main(void) {
    printf("supported ISA: %s\n", cpu_isa_name(cpu_isa_supported()));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_table),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_rejects_bad_shapes),
        cmocka_unit_test(test_nonfinite_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
