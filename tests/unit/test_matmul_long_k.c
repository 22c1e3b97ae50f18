/* cpu_matmul invariance at long K (the model's 1536 and beyond), where the AVX-512
 * kernels split K into chunks (panel types with many rows, K-quants from 2 rows; float
 * types from 16 rows, whose chains resume from y every 1024 values of k): for every
 * weight type (at each K that is a whole number of its blocks), every ISA and batch sizes
 * across all kernel paths, each row's bits must equal that row computed alone, and every
 * ISA must equal scalar. (test_matmul_invariance covers short K with a dense sweep of m.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "kernels/cpu/threadpool.h"
#include "test_matmul_common.h"

#define N_COLS 37
#define MAX_M 100

/* 1600: 50 blocks, a short last chunk; 2112: 3 float chunks; 1792: 7 K-quant units, chunks
 * of 3 + 3 + 1 in the AVX-512 panel kernels (1536: 3 + 3) */
static const int64_t ks[] = {1536, 1600, 1792, 2112};
static const int64_t ms[] = {2, 8, 9, 16, 17, 24, 25, 33, 64, 100};

static void check(uint32_t type, int64_t k, threadpool *tp) {
    char err[200];
    assert_int_equal(k % mm_block_elems(type), 0);
    mm_seed((uint64_t)(type * 131 + k));
    void *W = mm_make_weights(type, N_COLS, k);
    cpu_weight w;
    assert_int_equal(cpu_weight_init(&w, type, N_COLS, k, W, err, sizeof err), 0);
    const int64_t ldx = k + 5, ldy = N_COLS + 3;
    float *x = calloc((size_t)(MAX_M * ldx), sizeof(float));
    for (int64_t i = 0; i < MAX_M; i++) mm_make_row(x + i * ldx, k);
    float *ref = malloc(sizeof(float) * MAX_M * N_COLS), *scal = malloc(sizeof(float) * MAX_M * N_COLS);
    float *y = malloc(sizeof(float) * (size_t)(MAX_M * ldy));
    void *scratch = malloc(cpu_matmul_scratch_bytes(&w, MAX_M) + 1);
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_supported(); isa++) {
        cpu_isa_set((cpu_isa)isa);
        for (int64_t i = 0; i < MAX_M; i++) { /* each row alone */
            cpu_matmul(NULL, &w, x + i * ldx, 1, ldx, y, ldy, scratch);
            memcpy(ref + i * N_COLS, y, N_COLS * sizeof(float));
        }
        if (isa == CPU_ISA_SCALAR) memcpy(scal, ref, sizeof(float) * MAX_M * N_COLS);
        if (memcmp(scal, ref, sizeof(float) * MAX_M * N_COLS) != 0)
            fail_msg("type %u k %lld: ISA %s differs from scalar", type, (long long)k, cpu_isa_name((cpu_isa)isa));
        for (size_t c = 0; c < sizeof ms / sizeof ms[0]; c++) {
            const int64_t m = ms[c], off = (int64_t)(mm_rand() % (uint32_t)(MAX_M - m + 1));
            for (int64_t i = 0; i < m * ldy; i++) y[i] = NAN;
            cpu_matmul(tp, &w, x + off * ldx, m, ldx, y, ldy, scratch);
            for (int64_t i = 0; i < m; i++)
                if (memcmp(y + i * ldy, ref + (off + i) * N_COLS, N_COLS * sizeof(float)) != 0)
                    fail_msg("type %u k %lld isa %s m %lld: row %lld not invariant", type, (long long)k,
                             cpu_isa_name((cpu_isa)isa), (long long)m, (long long)i);
        }
    }
    cpu_isa_set(cpu_isa_supported());
    cpu_weight_free(&w);
    free(W);
    free(x);
    free(ref);
    free(scal);
    free(y);
    free(scratch);
}

static void test_long_k_invariance(void **state) {
    (void)state;
    threadpool *tp = threadpool_create(2);
    assert_non_null(tp);
    const mm_type_list types = mm_types();
    int checked = 0;
    for (size_t t = 0; t < types.n; t++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++)
            if (ks[j] % mm_block_elems(types.id[t]) == 0) check(types.id[t], ks[j], tp), checked++;
    assert_true(checked >= 4 * 6); /* every K for the 32-block and float types, 1536 and 1792 for K-quants */
    threadpool_destroy(tp);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_long_k_invariance)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
