/* The vec16 kernels: the one exp is accurate, and every ISA build of exp, SiLU and the
 * attention tile gives the same bits as the others (so a request's bits cannot depend on
 * the machine's ISA, or on which lane of a vector computed it). Negative controls show
 * the bitwise comparisons would catch a different exp or a non-fused multiply-add. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rowops.h"
#include "kernels/cpu/vec16_kernels.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static int64_t ulp_diff(float a, double exact) {
    float e = (float)exact;
    int32_t ia, ie;
    memcpy(&ia, &a, 4);
    memcpy(&ie, &e, 4);
    int64_t d = (int64_t)ia - ie;
    return d < 0 ? -d : d;
}

static void test_exp_accuracy(void **state) {
    (void)state;
    int64_t worst = 0;
    float worst_x = 0;
    for (int64_t i = 0; i <= 4000000; i++) {
        const float x = -87.3f + (float)((double)i * (88.7 + 87.3) / 4000000.0);
        const int64_t d = ulp_diff(invar_expf(x), exp((double)x));
        if (d > worst) worst = d, worst_x = x;
    }
    printf("exp: worst error %lld ulp at x = %.9g\n", (long long)worst, (double)worst_x);
    assert_true(worst <= 1);
    assert_true(invar_expf(0.0f) == 1.0f);
    assert_true(invar_expf(-INFINITY) == 0.0f);
    assert_true(invar_expf(-100.0f) == 0.0f);
    assert_true(isinf(invar_expf(INFINITY)) && invar_expf(INFINITY) > 0);
    assert_true(isinf(invar_expf(89.0f)));
    assert_true(isfinite(invar_expf(88.72f)));
    assert_true(isnan(invar_expf(NAN)));
    /* 2^n scaling near the top of the range (n = 128 is built as 2^127 * 2). */
    assert_true(ulp_diff(invar_expf(88.7f), exp((double)88.7f)) <= 1);
}

static const cpu_isa ISAS[] = {CPU_ISA_SCALAR, CPU_ISA_AVX2, CPU_ISA_AVX512};

static void test_exp_and_silu_same_bits_on_every_isa_and_lane(void **state) {
    (void)state;
    enum { N = 4099 }; /* not a multiple of 16: the tail path too */
    float *x = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    float *sref = malloc(sizeof(float) * N), *sy = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = frand() * 100.0f, g[i] = frand() * 20.0f, u[i] = frand();
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72f, -87.34f, 1e-30f, -1e-30f};
    memcpy(x, specials, sizeof specials);
    vec16_kernels_generic.expf_n(x, 0.5f, ref, N);
    vec16_kernels_generic.silu_mul(g, u, sref, N);
    for (int i = 0; i < N; i++) { /* every lane position equals the scalar lane-0 call */
        float e = invar_expf(x[i] - 0.5f);
        assert_memory_equal(&e, &ref[i], 4);
    }
    for (size_t k = 0; k < sizeof ISAS / sizeof *ISAS; k++) {
        if (ISAS[k] > cpu_isa_supported()) continue;
        const vec16_kernels *v = vec16_for(ISAS[k]);
        for (int off = 0; off < 17; off += 5) { /* shifted starts: other lanes, other tails */
            v->expf_n(x + off, 0.5f, y + off, N - off);
            assert_memory_equal(ref + off, y + off, sizeof(float) * (size_t)(N - off));
            v->silu_mul(g + off, u + off, sy + off, N - off);
            assert_memory_equal(sref + off, sy + off, sizeof(float) * (size_t)(N - off));
            float a = vec16_kernels_generic.logsumexp(u + off, N - off), b = v->logsumexp(u + off, N - off);
            assert_memory_equal(&a, &b, 4);
            assert_int_equal(vec16_kernels_generic.argmax(g + off, N - off), v->argmax(g + off, N - off));
        }
    }
    free(x), free(ref), free(y), free(g), free(u), free(sref), free(sy);
}

static void test_logsumexp_and_argmax(void **state) {
    (void)state;
    enum { N = 49157 };
    float *x = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = frand() * 30.0f;
    x[777] = 31.0f, x[9999] = 31.0f; /* ties: the first wins */
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += exp((double)x[i] - 31.0);
    const float ref = (float)(31.0 + log(sum));
    assert_true(fabsf(row_logsumexp(x, N) - ref) <= 4e-6f * fabsf(ref));
    assert_int_equal(row_argmax(x, N), 777);
    x[5] = NAN; /* argmax ignores NaN */
    assert_int_equal(row_argmax(x, N), 777);
    float inf_row[3] = {1.0f, INFINITY, 2.0f}, ninf_row[2] = {-INFINITY, -INFINITY};
    assert_true(isinf(row_logsumexp(inf_row, 3)) && row_argmax(inf_row, 3) == 1);
    assert_true(row_logsumexp(ninf_row, 2) == -INFINITY && row_argmax(ninf_row, 2) == 0);
    free(x);
}

/* Negative control: the comparison above is bit-sensitive: libm's expf, a different
 * (also accurate) exp, differs from invar_expf on some inputs. */
static void test_negative_control_other_exp_differs(void **state) {
    (void)state;
    int differ = 0;
    for (int i = 0; i < 10000; i++) {
        float x = frand() * 80.0f, a = invar_expf(x), b = expf(x);
        differ += memcmp(&a, &b, 4) != 0;
    }
    printf("libm expf differs from invar_expf on %d of 10000 inputs\n", differ);
    assert_true(differ > 0);
}

/* Attention: random K/V in a shuffled block layout; every ISA build, every head tiling. */
static void attention_all_isas(int64_t n_heads, int64_t n_kv, int64_t hd) {
    const int64_t ctx = 600, nblk = (ctx + KV_BLOCK - 1) / KV_BLOCK, kvd = n_kv * hd, qd = n_heads * hd;
    float *kp = calloc((size_t)(nblk * KV_BLOCK * kvd), sizeof(float));
    float *vp = calloc((size_t)(nblk * KV_BLOCK * kvd), sizeof(float));
    int32_t *table = malloc(sizeof(int32_t) * (size_t)nblk);
    for (int64_t b = 0; b < nblk; b++) table[b] = (int32_t)((b * 7) % nblk); /* 7 coprime to nblk = 38 */
    attn_kv kv = {kp, vp, table, n_kv, hd};
    float *k = malloc(sizeof(float) * (size_t)kvd), *v = malloc(sizeof(float) * (size_t)kvd);
    for (int64_t p = 0; p < ctx; p++) {
        for (int64_t i = 0; i < kvd; i++) k[i] = frand() * 2.0f, v[i] = frand();
        attn_kv_store(&kv, p, k, v);
    }
    const int64_t positions[] = {0, 5, 15, 16, 255, 256, 300, 511, 512, ctx - 1};
    const int64_t nj = sizeof positions / sizeof *positions;
    float *q = malloc(sizeof(float) * (size_t)(nj * qd));
    float *ref = malloc(sizeof(float) * (size_t)(nj * qd)), *out = malloc(sizeof(float) * (size_t)(nj * qd));
    attn_job *jobs = malloc(sizeof(attn_job) * (size_t)nj);
    for (int64_t i = 0; i < nj * qd; i++) q[i] = frand();
    const attn_shape sh = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd)};
    const cpu_isa best = cpu_isa_supported();
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (ISAS[s] > best) continue;
        cpu_isa_set(ISAS[s]);
        for (int64_t j = 0; j < nj; j++) jobs[j] = (attn_job){q + j * qd, (s ? out : ref) + j * qd, kv, positions[j]};
        attn_run(NULL, &sh, jobs, nj);
        if (s) assert_memory_equal(ref, out, sizeof(float) * (size_t)(nj * qd));
    }
    cpu_isa_set(best);
    free(kp), free(vp), free(table), free(k), free(v), free(q), free(ref), free(out), free(jobs);
}

static void test_attention_same_bits_on_every_isa(void **state) {
    (void)state;
    attention_all_isas(9, 3, 64);  /* SmolLM2: groups of 3 */
    attention_all_isas(8, 1, 128); /* a group of 8: two tiles of 4 */
    attention_all_isas(5, 1, 40);  /* head_dim with a scalar tail; tiles of 4 + 1 */
    attention_all_isas(4, 2, 24);
}

/* Negative control: a chain of separate multiplies and adds (what a compiler without
 * fused multiply-add, or with contraction off, would produce) gives different bits from
 * the fused chain the kernels use, so the ISA comparison would catch such a build. */
static void test_negative_control_unfused_chain_differs(void **state) {
    (void)state;
    int differ = 0;
    for (int t = 0; t < 1000; t++) {
        float a[64], b[64], fused = 0.0f, plain = 0.0f;
        for (int i = 0; i < 64; i++) a[i] = frand(), b[i] = frand();
        for (int i = 0; i < 64; i++) {
            fused = fmaf(a[i], b[i], fused);
            volatile float p = a[i] * b[i];
            plain = plain + p;
        }
        differ += memcmp(&fused, &plain, 4) != 0;
    }
    assert_true(differ > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_exp_and_silu_same_bits_on_every_isa_and_lane),
        cmocka_unit_test(test_negative_control_other_exp_differs),
        cmocka_unit_test(test_logsumexp_and_argmax),
        cmocka_unit_test(test_attention_same_bits_on_every_isa),
        cmocka_unit_test(test_negative_control_unfused_chain_differs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
