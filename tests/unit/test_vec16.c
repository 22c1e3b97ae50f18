/* The vec16 kernels: the one exp is accurate, and every ISA build of exp, SiLU, log-sum-exp,
 * argmax and the attention tile gives the same bits as the others (so a request's bits
 * cannot depend on the machine's ISA, or on which lane of a vector computed it). Negative
 * control: with one ISA's build perturbed in one lane (the lowest bit of lane 5 of every
 * exp, vec16_flip_*.c), the same comparisons fail. */
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
enum { K_EXP, K_SILU, K_LSE, K_ARGMAX, K_LANES, K_ATTN, N_CHECKS };
static const char *CHECK_NAMES[N_CHECKS] = {"exp", "silu", "logsumexp", "argmax", "lanes", "attention"};

/* The cross-ISA check of the row kernels: every supported build's exp, SiLU, log-sum-exp
 * and argmax equal the generic build's, from shifted starts (other lanes, other tails),
 * and every lane of the generic exp equals the scalar lane-0 call. Adds the comparisons
 * that differ to bad[K_*] and the comparisons made to *made. */
static void row_kernel_mismatches(int *bad, int *made) {
    enum { N = 4099 }; /* not a multiple of 16: the tail path too */
    float *x = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    float *sref = malloc(sizeof(float) * N), *sy = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = frand() * 100.0f, g[i] = frand() * 20.0f, u[i] = frand();
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72f, -87.34f, 1e-30f, -1e-30f};
    memcpy(x, specials, sizeof specials);
    const vec16_kernels *gen = vec16_for(CPU_ISA_SCALAR);
    gen->expf_n(x, 0.5f, ref, N);
    gen->silu_mul(g, u, sref, N);
    int lanes = 0;
    for (int i = 0; i < N; i++) { /* every lane position equals the scalar lane-0 call */
        float e = invar_expf(x[i] - 0.5f);
        lanes += memcmp(&e, &ref[i], 4) != 0;
    }
    bad[K_LANES] += lanes != 0;
    (*made)++;
    for (size_t k = 0; k < sizeof ISAS / sizeof *ISAS; k++) {
        if (ISAS[k] > cpu_isa_supported()) continue;
        const vec16_kernels *v = vec16_for(ISAS[k]);
        for (int off = 0; off < 17; off += 5) { /* shifted starts: other lanes, other tails */
            v->expf_n(x + off, 0.5f, y + off, N - off);
            bad[K_EXP] += memcmp(ref + off, y + off, sizeof(float) * (size_t)(N - off)) != 0;
            v->silu_mul(g + off, u + off, sy + off, N - off);
            bad[K_SILU] += memcmp(sref + off, sy + off, sizeof(float) * (size_t)(N - off)) != 0;
            float a = gen->logsumexp(u + off, N - off), b = v->logsumexp(u + off, N - off);
            bad[K_LSE] += memcmp(&a, &b, 4) != 0;
            bad[K_ARGMAX] += gen->argmax(g + off, N - off) != v->argmax(g + off, N - off);
            *made += 4;
        }
        /* Rows where one small term decides the last bits of the log-sum-exp (max 0, one
         * element -10, the rest -100), the term in every lane position: on dense rows a
         * one-ulp change of a single exp is lost in the sum's rounding. */
        for (int j = 0; j < 36; j++) {
            float row[37];
            for (int i = 0; i < 37; i++) row[i] = -100.0f;
            row[36] = 0.0f, row[j] = -10.0f;
            float a = gen->logsumexp(row, 37), b = v->logsumexp(row, 37);
            bad[K_LSE] += memcmp(&a, &b, 4) != 0;
            (*made)++;
        }
    }
    free(x), free(ref), free(y), free(g), free(u), free(sref), free(sy);
}

static void test_exp_and_silu_same_bits_on_every_isa_and_lane(void **state) {
    (void)state;
    int bad[N_CHECKS] = {0}, made = 0;
    row_kernel_mismatches(bad, &made);
    for (int k = 0; k < N_CHECKS; k++) assert_int_equal(bad[k], 0);
    assert_true(made >= 5);
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

/* The cache's element type of the attention checks (both run: attention_mismatches). */
static attn_kv_type g_kv_type;

/* Attention: random K/V in a shuffled block layout; every ISA build, every head tiling.
 * In an f16 cache, every 7th position's values are tiny (subnormal halves: the widening's
 * hardest case, vcvtph2ps against fp16_to_f32). Returns how many builds' outputs differ
 * from the generic build's. */
static int attention_all_isas_layout(int64_t n_heads, int64_t n_kv, int64_t hd, int64_t hdv, attn_kv_layout layout) {
    const int64_t ctx = 600, nblk = (ctx + KV_BLOCK - 1) / KV_BLOCK, kvd = n_kv * hd, qd = n_heads * hd;
    const int64_t od = n_heads * hdv;
    const size_t es = attn_kv_type_size(g_kv_type);
    void *kp = calloc((size_t)(nblk * KV_BLOCK * kvd), es);
    void *vp = layout == ATTN_KV_LATENT ? NULL : calloc((size_t)(nblk * KV_BLOCK * n_kv * hdv), es);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)nblk);
    for (int64_t b = 0; b < nblk; b++) table[b] = (int32_t)((b * 7) % nblk); /* 7 coprime to nblk = 38 */
    attn_kv kv = {kp, vp, table, n_kv, hd, hdv, layout, g_kv_type};
    float *k = malloc(sizeof(float) * (size_t)kvd), *v = malloc(sizeof(float) * (size_t)kvd);
    for (int64_t p = 0; p < ctx; p++) {
        const float tiny = g_kv_type == ATTN_KV_F16 && p % 7 == 3 ? 1e-6f : 1.0f;
        for (int64_t i = 0; i < kvd; i++) k[i] = frand() * 2.0f * tiny, v[i] = frand() * tiny;
        attn_kv_store(&kv, p, k, v);
    }
    const int64_t positions[] = {0, 5, 15, 16, 255, 256, 300, 511, 512, ctx - 1};
    const int64_t nj = sizeof positions / sizeof *positions;
    float *q = malloc(sizeof(float) * (size_t)(nj * qd));
    float *ref = malloc(sizeof(float) * (size_t)(nj * od)), *out = malloc(sizeof(float) * (size_t)(nj * od));
    attn_job *jobs = malloc(sizeof(attn_job) * (size_t)nj);
    for (int64_t i = 0; i < nj * qd; i++) q[i] = frand();
    const attn_shape sh = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), hdv};
    const cpu_isa best = cpu_isa_supported();
    int bad = 0;
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (ISAS[s] > best) continue;
        cpu_isa_set(ISAS[s]);
        for (int64_t j = 0; j < nj; j++) jobs[j] = (attn_job){q + j * qd, (s ? out : ref) + j * od, kv, positions[j]};
        attn_run(NULL, &sh, jobs, nj);
        if (s) bad += memcmp(ref, out, sizeof(float) * (size_t)(nj * od)) != 0;
    }
    cpu_isa_set(best);
    free(kp), free(vp), free(table), free(k), free(v), free(q), free(ref), free(out), free(jobs);
    return bad;
}

static int attention_all_isas(int64_t n_heads, int64_t n_kv, int64_t hd, int64_t hdv) {
    return attention_all_isas_layout(n_heads, n_kv, hd, hdv, ATTN_KV_SEPARATE);
}

static int attention_mismatches_type(attn_kv_type t) {
    g_kv_type = t;
    return attention_all_isas(9, 3, 64, 64) +   /* SmolLM2: groups of 3 */
           attention_all_isas(8, 1, 128, 128) + /* a group of 8: two tiles of 4 */
           attention_all_isas(5, 1, 40, 40) +   /* head_dim with a scalar tail; tiles of 4 + 1 */
           attention_all_isas(4, 2, 24, 24) +
           attention_all_isas(3, 1, 576, 512) + /* MLA's latent head (DeepSeek-V2/V3: 512 + 64) */
           attention_all_isas(4, 1, 40, 32) +   /* a tiny model's latent head */
           /* and in the latent layout MLA runs (V read out of the key block) */
           attention_all_isas_layout(16, 1, 576, 512, ATTN_KV_LATENT) +
           attention_all_isas_layout(4, 1, 40, 32, ATTN_KV_LATENT) +
           attention_all_isas_layout(3, 1, 44, 36, ATTN_KV_LATENT); /* with a scalar tail */
}

/* Both cache types: the f16 one's widening is per ISA (vec16.h: v16_load_f16). */
static int attention_mismatches(void) {
    return attention_mismatches_type(ATTN_KV_F32) + attention_mismatches_type(ATTN_KV_F16);
}

static void test_attention_same_bits_on_every_isa(void **state) {
    (void)state;
    assert_int_equal(attention_mismatches(), 0);
}

/* Negative control: the same comparisons with one build's kernels perturbed (the flipped
 * build: the lowest bit of lane 5 of every exp, vec16_testing_flip_isa), for each
 * supported ISA in turn, find the difference in every exp-based kernel. */
static void test_negative_control_flipped_lane_in_one_isa(void **state) {
    (void)state;
    const cpu_isa best = cpu_isa_supported();
    if (best == CPU_ISA_SCALAR) {
        printf("# only the generic build runs here: no second ISA to compare with\n");
        skip();
    }
    for (size_t k = 0; k < sizeof ISAS / sizeof *ISAS; k++) {
        if (ISAS[k] > best) continue;
        int bad[N_CHECKS] = {0}, made = 0;
        vec16_testing_flip_isa = (int)ISAS[k];
        row_kernel_mismatches(bad, &made);
        bad[K_ATTN] = attention_mismatches();
        vec16_testing_flip_isa = -1;
        printf("# %s build flipped:", cpu_isa_name(ISAS[k]));
        for (int c = 0; c < N_CHECKS; c++) printf(" %s %d", CHECK_NAMES[c], bad[c]);
        printf("\n");
        assert_true(bad[K_EXP] > 0 && bad[K_SILU] > 0 && bad[K_LSE] > 0 && bad[K_ATTN] > 0);
        assert_int_equal(bad[K_ARGMAX], 0); /* argmax has no exp: the real kernel */
        if (ISAS[k] == CPU_ISA_SCALAR) assert_true(bad[K_LANES] > 0);
    }
    /* and unperturbed again: nothing */
    int bad[N_CHECKS] = {0}, made = 0;
    row_kernel_mismatches(bad, &made);
    for (int c = 0; c < N_CHECKS; c++) assert_int_equal(bad[c], 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_exp_and_silu_same_bits_on_every_isa_and_lane),
        cmocka_unit_test(test_logsumexp_and_argmax),
        cmocka_unit_test(test_attention_same_bits_on_every_isa),
        cmocka_unit_test(test_negative_control_flipped_lane_in_one_isa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
