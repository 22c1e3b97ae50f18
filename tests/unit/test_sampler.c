/* Sampler and counter-based RNG on synthetic logits rows: greedy and logprobs against a
 * double-precision reference, top alternatives in the documented order, truncation rules
 * (top-k, min-p, top-p and their combinations) as allowed sets computed in double here,
 * sampling frequencies against softmax(logits / T), parameter checks, and determinism
 * in (logits, parameters, position) whatever the scratch buffers held before.
 *
 * Semantics checked for combinations (those of the engine): top-k and min-p each keep a
 * prefix of the order (logit desc, id asc) and both apply; top-p then keeps the smallest
 * prefix of what is left whose mass reaches top_p times the mass that is left. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/rng.h"
#include "sampling/sampler.h"

#define V 1000

/* ---- helpers -------------------------------------------------------------------- */

static uint64_t g_state = 0x243F6A8885A308D3ULL;
static uint64_t next_u64(void) { /* xorshift64*: test data only */
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return g_state * 0x2545F4914F6CDD1DULL;
}
static double next_unit(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; }
static double next_normal(void) {
    double u = next_unit(), v = next_unit();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void random_row(float *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * next_normal());
}

/* Logits rounded to a coarse grid: many exact ties, including at the maximum. */
static void tied_row(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)floor(next_unit() * 6.0) * 0.5f;
}

static double ref_lse(const float *x, int64_t n) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

static const float *g_cmp_logits;
static int cmp_order(const void *a, const void *b) { /* logit desc, id asc */
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = g_cmp_logits[i], y = g_cmp_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}
static void ref_order(const float *x, int64_t n, int32_t *ids) {
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)i;
    g_cmp_logits = x;
    qsort(ids, (size_t)n, sizeof *ids, cmp_order);
}

static invar_sampling params(float t, int32_t k, float p, float minp, uint64_t seed) {
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = 16;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = minp;
    s.seed = seed;
    s.top_logprobs = 0;
    return s;
}

static int32_t g_work_idx[V + 64];
static float g_work_p[2 * V + 64];

static invar_token_info choose(const float *x, int64_t n, const invar_sampling *s, int64_t pos) {
    invar_token_info info;
    memset(&info, 0, sizeof info);
    sampler_choose(x, n, s, pos, NULL, &info, g_work_idx, g_work_p);
    return info;
}

/* Sampling distribution in double: prob[i] after temperature and truncation, 0 outside
 * the allowed set. ambiguous[i] marks tokens that sit within rounding of a truncation
 * boundary (float vs double weights), whose membership the tests do not judge. */
typedef struct {
    double prob[V];
    unsigned char allowed[V], ambiguous[V];
} ref_dist;

static void ref_sample_dist(const float *x, int64_t n, const invar_sampling *s, ref_dist *d) {
    int32_t ids[V];
    double w[V];
    ref_order(x, n, ids);
    const double mx = x[ids[0]];
    memset(d, 0, sizeof *d);
    for (int64_t i = 0; i < n; i++) w[i] = exp(((double)x[i] - mx) / (double)s->temperature);
    /* top-k and min-p: a prefix of the order */
    int64_t keep = n;
    if (s->top_k > 0 && s->top_k < keep) keep = s->top_k;
    if (s->min_p > 0.0f) {
        int64_t r = 0;
        while (r < keep && w[ids[r]] >= (double)s->min_p) r++;
        for (int64_t q = 0; q < n; q++) /* near the min-p cut: float expf may decide otherwise */
            if (fabs(w[ids[q]] - (double)s->min_p) <= 1e-5 * (double)s->min_p) d->ambiguous[ids[q]] = 1;
        keep = r;
    }
    double mass = 0.0;
    for (int64_t r = 0; r < keep; r++) mass += w[ids[r]];
    if (s->top_p < 1.0f) {
        double target = (double)s->top_p * mass, cum = 0.0;
        int64_t r = 0;
        while (r < keep) {
            cum += w[ids[r++]];
            if (fabs(cum - target) <= 1e-6 * mass) /* rounding could move the cut by one */
                for (int64_t q = r - 1; q < keep && q <= r; q++) d->ambiguous[ids[q]] = 1;
            if (cum >= target) break;
        }
        keep = r;
    }
    double kept = 0.0;
    for (int64_t r = 0; r < keep; r++) kept += w[ids[r]];
    for (int64_t r = 0; r < keep; r++) {
        d->allowed[ids[r]] = 1;
        d->prob[ids[r]] = w[ids[r]] / kept;
    }
}

/* Draws at positions 0..n_draws-1 and checks: every draw allowed; the counts of the 10
 * likeliest tokens within 4 sigma (+1) of their expectation; and a chi-square over all
 * tokens expected at least 5 times (the rest pooled) within 6 sigma of its degrees of
 * freedom. Returns the number of distinct tokens drawn. */
static int check_draws(const float *x, const invar_sampling *s, int n_draws) {
    ref_dist *d = malloc(sizeof *d);
    ref_sample_dist(x, V, s, d);
    int *count = calloc(V, sizeof *count);
    for (int pos = 0; pos < n_draws; pos++) {
        invar_token_info info = choose(x, V, s, pos);
        assert_true(info.token >= 0 && info.token < V);
        if (!d->allowed[info.token] && !d->ambiguous[info.token]) {
            fail_msg("T=%g top_k=%d top_p=%g min_p=%g: drew token %d (logit %g) outside the allowed set",
                     s->temperature, s->top_k, s->top_p, s->min_p, info.token, x[info.token]);
        }
        count[info.token]++;
    }
    int32_t ids[V];
    ref_order(x, V, ids); /* probability order */
    int distinct = 0, df = -1;
    double chi2 = 0.0, pooled_e = 0.0, pooled_n = 0.0;
    for (int r = 0; r < V; r++) {
        const int i = ids[r];
        if (count[i]) distinct++;
        if (d->ambiguous[i]) continue;
        double mean = n_draws * d->prob[i], sd = sqrt(n_draws * d->prob[i] * (1.0 - d->prob[i]));
        if (r < 10 && fabs(count[i] - mean) > 4.0 * sd + 1.0)
            fail_msg("T=%g top_k=%d top_p=%g min_p=%g: token %d drawn %d times, expected %.1f +- %.1f",
                     s->temperature, s->top_k, s->top_p, s->min_p, i, count[i], mean, sd);
        if (mean >= 5.0) {
            chi2 += (count[i] - mean) * (count[i] - mean) / mean;
            df++;
        } else {
            pooled_e += mean;
            pooled_n += count[i];
        }
    }
    if (pooled_e >= 5.0) {
        chi2 += (pooled_n - pooled_e) * (pooled_n - pooled_e) / pooled_e;
        df++;
    }
    if (df > 0 && chi2 > df + 6.0 * sqrt(2.0 * df) + 10.0)
        fail_msg("T=%g top_k=%d top_p=%g min_p=%g: chi-square %.1f with %d degrees of freedom", s->temperature,
                 s->top_k, s->top_p, s->min_p, chi2, df);
    free(count);
    free(d);
    return distinct;
}

/* ---- greedy, logprobs, top alternatives ------------------------------------------ */

static void check_logprob_info(const float *x, int64_t n, const invar_token_info *info, int32_t n_top) {
    const double lse = ref_lse(x, n);
    const double tol = 1e-6 + 4.0 * FLT_EPSILON * (fabs(lse) + 1.0);
    assert_true(fabs((double)info->logprob - ((double)x[info->token] - lse)) <= tol);
    assert_true(info->logprob <= 0.0f);
    assert_int_equal(info->n_top, n_top);
    if (n_top == 0) return;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    ref_order(x, n, ids);
    for (int32_t r = 0; r < n_top; r++) {
        assert_int_equal(info->top_ids[r], ids[r]);
        assert_true(fabs((double)info->top_logprobs[r] - ((double)x[ids[r]] - lse)) <= tol);
        if (r > 0) assert_true(info->top_logprobs[r] <= info->top_logprobs[r - 1]);
        /* the chosen token's logprob is the same number wherever it is reported */
        if (info->top_ids[r] == info->token) assert_memory_equal(&info->top_logprobs[r], &info->logprob, sizeof(float));
    }
    free(ids);
}

static void test_greedy_random_rows(void **state) {
    (void)state;
    float x[V];
    for (int row = 0; row < 50; row++) {
        random_row(x, V, 1.0 + row * 0.2);
        invar_sampling s = params(0.0f, 0, 1.0f, 0.0f, 0);
        s.top_logprobs = row % (INVAR_MAX_TOP_LOGPROBS + 1);
        invar_token_info info = choose(x, V, &s, row);
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (x[i] > x[best]) best = i;
        assert_int_equal(info.token, best);
        check_logprob_info(x, V, &info, s.top_logprobs);
        if (s.top_logprobs > 0) assert_int_equal(info.top_ids[0], best);
    }
}

static void test_greedy_ties_lowest_id(void **state) {
    (void)state;
    float x[V];
    invar_sampling s = params(0.0f, 0, 1.0f, 0.0f, 0);
    s.top_logprobs = INVAR_MAX_TOP_LOGPROBS;

    for (int i = 0; i < V; i++) x[i] = 0.25f; /* all tied */
    invar_token_info info = choose(x, V, &s, 0);
    assert_int_equal(info.token, 0);
    for (int r = 0; r < INVAR_MAX_TOP_LOGPROBS; r++) assert_int_equal(info.top_ids[r], r);
    check_logprob_info(x, V, &info, s.top_logprobs);
    assert_true(fabs(info.logprob - (-log((double)V))) <= 1e-6);

    for (int i = 0; i < V; i++) x[i] = -1.0f; /* maximum tied at 7, 300, 999 */
    x[300] = x[999] = x[7] = 3.0f;
    x[5] = 2.0f;
    info = choose(x, V, &s, 1);
    assert_int_equal(info.token, 7);
    assert_int_equal(info.top_ids[0], 7);
    assert_int_equal(info.top_ids[1], 300);
    assert_int_equal(info.top_ids[2], 999);
    assert_int_equal(info.top_ids[3], 5);
    assert_int_equal(info.top_ids[4], 0);
    assert_int_equal(info.top_ids[5], 1);
    check_logprob_info(x, V, &info, s.top_logprobs);

    x[999] = 4.0f; /* the last id wins alone */
    info = choose(x, V, &s, 2);
    assert_int_equal(info.token, 999);

    for (int row = 0; row < 30; row++) { /* coarse grid: ties everywhere */
        tied_row(x, V);
        s.top_logprobs = 1 + row % INVAR_MAX_TOP_LOGPROBS;
        info = choose(x, V, &s, row);
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (x[i] > x[best]) best = i;
        assert_int_equal(info.token, best);
        check_logprob_info(x, V, &info, s.top_logprobs);
    }
}

/* Small vocabularies and top_logprobs at the limit, including more than one row holds. */
static void test_top_logprobs_small_vocab(void **state) {
    (void)state;
    float x[32];
    for (int n = 1; n <= 32; n++) {
        random_row(x, n, 2.0);
        invar_sampling s = params(0.0f, 0, 1.0f, 0.0f, 0);
        s.top_logprobs = n < INVAR_MAX_TOP_LOGPROBS ? n : INVAR_MAX_TOP_LOGPROBS;
        invar_token_info info = choose(x, n, &s, 0);
        check_logprob_info(x, n, &info, s.top_logprobs);
    }
}

/* logprob is that of the raw model (T = 1, no truncation) whatever the sampling settings. */
static void test_logprob_ignores_sampling_settings(void **state) {
    (void)state;
    float x[V];
    random_row(x, V, 2.5);
    const invar_sampling settings[] = {params(0.3f, 0, 1.0f, 0.0f, 1), params(1.7f, 5, 1.0f, 0.0f, 2),
                                       params(1.0f, 0, 0.5f, 0.0f, 3), params(0.9f, 40, 0.9f, 0.05f, 4)};
    for (size_t k = 0; k < sizeof settings / sizeof *settings; k++)
        for (int pos = 0; pos < 50; pos++) {
            invar_sampling s = settings[k];
            s.top_logprobs = 3;
            invar_token_info info = choose(x, V, &s, pos);
            check_logprob_info(x, V, &info, 3);
        }
}

static void test_logits_not_modified(void **state) {
    (void)state;
    float x[V], copy[V];
    random_row(x, V, 3.0);
    memcpy(copy, x, sizeof x);
    invar_sampling s = params(0.8f, 20, 0.9f, 0.01f, 9);
    s.top_logprobs = 5;
    for (int pos = 0; pos < 20; pos++) choose(x, V, &s, pos);
    s = params(1.3f, 0, 1.0f, 0.0f, 9);
    for (int pos = 0; pos < 20; pos++) choose(x, V, &s, pos);
    assert_memory_equal(x, copy, sizeof x);
}

/* ---- rng ------------------------------------------------------------------------ */

static void test_rng_deterministic_and_in_range(void **state) {
    (void)state;
    for (uint64_t seed = 0; seed < 50; seed++)
        for (uint64_t pos = 0; pos < 200; pos++) {
            double u = rng_uniform(seed, pos);
            assert_true(u >= 0.0 && u < 1.0);
            double v = rng_uniform(seed, pos);
            assert_memory_equal(&u, &v, sizeof u);
            /* neighbours in position and in seed draw different numbers */
            assert_true(u != rng_uniform(seed, pos + 1));
            assert_true(u != rng_uniform(seed + 1, pos));
            assert_true(u != rng_uniform(pos, seed) || seed == pos);
        }
    /* extreme inputs */
    const uint64_t big[] = {0, 1, UINT64_MAX, UINT64_MAX - 1, 0x8000000000000000ULL};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            double u = rng_uniform(big[i], big[j]);
            assert_true(u >= 0.0 && u < 1.0);
        }
}

static void check_uniform(double (*draw)(uint64_t), int n) {
    enum { BINS = 100 };
    int hist[BINS] = {0};
    double sum = 0.0, sum2 = 0.0, lag = 0.0, prev = 0.5;
    for (int i = 0; i < n; i++) {
        double u = draw((uint64_t)i);
        hist[(int)(u * BINS)]++;
        sum += u;
        sum2 += u * u;
        lag += (u - 0.5) * (prev - 0.5);
        prev = u;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.005);           /* sd of the mean: 0.0009 */
    assert_true(fabs(var - 1.0 / 12.0) < 0.002);     /* sd of the variance: 0.00024 */
    assert_true(fabs(lag / n / (1.0 / 12.0)) < 0.02); /* lag-1 correlation, sd 0.003 */
    double chi2 = 0.0, expect = (double)n / BINS;
    for (int b = 0; b < BINS; b++) chi2 += (hist[b] - expect) * (hist[b] - expect) / expect;
    assert_true(chi2 < 200.0); /* 99 degrees of freedom: mean 99, sd 14 */
}

static double draw_by_position(uint64_t i) { return rng_uniform(42, i); }
static double draw_by_seed(uint64_t i) { return rng_uniform(i, 7); }
static double draw_by_both(uint64_t i) { return rng_uniform(i, i); }

static void test_rng_roughly_uniform(void **state) {
    (void)state;
    check_uniform(draw_by_position, 100000);
    check_uniform(draw_by_seed, 100000);
    check_uniform(draw_by_both, 100000);
}

/* ---- truncation ----------------------------------------------------------------- */

static void test_top_k_one_is_argmax(void **state) {
    (void)state;
    float x[V];
    for (int row = 0; row < 20; row++) {
        if (row % 2) tied_row(x, V);
        else random_row(x, V, 0.5 + row * 0.3);
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (x[i] > x[best]) best = i;
        for (int pos = 0; pos < 100; pos++) {
            invar_sampling s = params(pos % 2 ? 5.0f : 0.7f, 1, pos % 3 ? 1.0f : 0.3f, pos % 5 ? 0.0f : 0.5f,
                                      (uint64_t)row);
            assert_int_equal(choose(x, V, &s, pos).token, best);
        }
    }
}

static void test_top_k_draws_only_best_k(void **state) {
    (void)state;
    float x[V];
    const int32_t ks[] = {2, 5, 17, 100, 999, 1000, 5000};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        random_row(x, V, 2.0);
        invar_sampling s = params(1.5f, ks[i], 1.0f, 0.0f, 100 + i);
        int distinct = check_draws(x, &s, 4000);
        if (ks[i] <= 5) assert_int_equal(distinct, ks[i]); /* each is likely enough to show up */
    }
    /* ties at the cut: top_k = 2 among three equal maxima keeps the two lowest ids */
    for (int j = 0; j < V; j++) x[j] = 0.0f;
    x[10] = x[20] = x[30] = 5.0f;
    invar_sampling s = params(1.0f, 2, 1.0f, 0.0f, 3);
    int seen10 = 0, seen20 = 0;
    for (int pos = 0; pos < 500; pos++) {
        int32_t t = choose(x, V, &s, pos).token;
        assert_true(t == 10 || t == 20);
        seen10 += t == 10;
        seen20 += t == 20;
    }
    assert_true(seen10 > 150 && seen20 > 150);
}

static void test_min_p_draws_only_likely_tokens(void **state) {
    (void)state;
    float x[V];
    const float mins[] = {0.001f, 0.01f, 0.05f, 0.2f, 0.9f, 1.0f};
    const float temps[] = {0.5f, 1.0f, 2.0f};
    for (size_t i = 0; i < sizeof mins / sizeof *mins; i++)
        for (size_t t = 0; t < 3; t++) {
            random_row(x, V, 2.0);
            invar_sampling s = params(temps[t], 0, 1.0f, mins[i], 7 * i + t);
            check_draws(x, &s, 3000);
        }
}

static void test_top_p_draws_only_nucleus(void **state) {
    (void)state;
    float x[V];
    const float ps[] = {0.05f, 0.3f, 0.5f, 0.8f, 0.95f, 0.999f};
    const float temps[] = {0.6f, 1.0f, 1.8f};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (size_t t = 0; t < 3; t++) {
            random_row(x, V, 2.0);
            invar_sampling s = params(temps[t], 0, ps[i], 0.0f, 31 * i + t);
            check_draws(x, &s, 3000);
        }
}

/* softmax(logits / T) frequencies over 20k positions, no truncation. */
static void test_temperature_frequencies(void **state) {
    (void)state;
    float x[V];
    const float temps[] = {0.3f, 0.7f, 1.0f, 1.5f, 3.0f};
    for (size_t t = 0; t < sizeof temps / sizeof *temps; t++) {
        random_row(x, V, 2.5);
        invar_sampling s = params(temps[t], 0, 1.0f, 0.0f, 1000 + t);
        check_draws(x, &s, 20000);
    }
    /* a row with ties: equal logits are equally likely */
    for (int j = 0; j < V; j++) x[j] = -10.0f;
    x[3] = x[600] = 2.0f;
    x[100] = 1.0f;
    invar_sampling s = params(1.0f, 0, 1.0f, 0.0f, 77);
    check_draws(x, &s, 20000);
}

static void test_combined_truncations(void **state) {
    (void)state;
    float x[V];
    struct { float t; int32_t k; float p, minp; } combos[] = {
        {1.0f, 50, 0.9f, 0.02f}, {0.7f, 10, 0.5f, 0.0f}, {1.3f, 0, 0.8f, 0.05f}, {2.0f, 30, 1.0f, 0.1f},
        {1.0f, 3, 0.99f, 0.5f},  {0.5f, 200, 0.7f, 0.001f}, {1.0f, 1000, 0.95f, 0.01f},
    };
    for (size_t i = 0; i < sizeof combos / sizeof *combos; i++) {
        random_row(x, V, 2.0);
        invar_sampling s = params(combos[i].t, combos[i].k, combos[i].p, combos[i].minp, 500 + i);
        check_draws(x, &s, 10000);
    }
}

/* top-p together with a small min-p (below the sampler's first weight cut of 2^-10) and no
 * top-k: top-p must be measured against everything min-p keeps. Token 0 has weight 1,
 * tokens 1 and 2 weight 0.3, 999 tokens weight 2^-11 (kept by min_p = 2e-4). Mass kept is
 * 1.6 + 0.488; top_p = 0.75 needs 1.566, so the nucleus is {0, 1, 2} and token 2 has
 * probability 0.3 / 1.6. */
static void test_top_p_with_small_min_p(void **state) {
    (void)state;
    float x[V];
    x[0] = 0.0f;
    x[1] = x[2] = logf(0.3f);
    for (int j = 3; j < V; j++) x[j] = -11.0f * logf(2.0f);
    invar_sampling s = params(1.0f, 0, 0.75f, 2e-4f, 5);
    ref_dist *d = malloc(sizeof *d);
    ref_sample_dist(x, V, &s, d);
    assert_true(d->allowed[0] && d->allowed[1] && d->allowed[2] && !d->allowed[3]);
    free(d);
    int drawn2 = 0;
    for (int pos = 0; pos < 2000; pos++) drawn2 += choose(x, V, &s, pos).token == 2;
    if (drawn2 == 0) /* expected about 375 */
        fail_msg("top_p=0.75 with min_p=2e-4: token 2 (in the nucleus, p=0.19) never drawn: the sampler "
                 "measures top-p against the mass of its weight-cut candidates, not of all min-p keeps");
    check_draws(x, &s, 10000);
    /* the same with min-p off gives the same nucleus (min-p keeps everything here) */
    s.min_p = 0.0f;
    check_draws(x, &s, 10000);
}

/* ---- parameters and determinism ------------------------------------------------- */

static void test_sampler_check(void **state) {
    (void)state;
    invar_sampling ok;
    invar_sampling_default(&ok);
    assert_null(sampler_check(&ok));
    const invar_sampling good[] = {
        params(0.0f, 0, 1.0f, 0.0f, 0), params(2.0f, 100000, 1e-6f, 1.0f, 0), params(1e-30f, 1, 1.0f, 0.0f, 0),
        params(100.0f, 0, 1.0f, 0.0f, UINT64_MAX),
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) assert_null(sampler_check(&good[i]));
    invar_sampling s = ok;
    s.top_logprobs = INVAR_MAX_TOP_LOGPROBS;
    assert_null(sampler_check(&s));
    s = ok;
    s.max_tokens = 1;
    assert_null(sampler_check(&s));

#define BAD(field, value)                                  \
    do {                                                   \
        invar_sampling b = ok;                             \
        b.field = value;                                   \
        const char *msg = sampler_check(&b);               \
        assert_non_null(msg);                              \
        assert_true(strlen(msg) > 0);                      \
    } while (0)
    BAD(max_tokens, 0);
    BAD(max_tokens, -1);
    BAD(max_tokens, INT32_MIN);
    BAD(temperature, -0.1f);
    BAD(temperature, -INFINITY);
    BAD(temperature, INFINITY);
    BAD(temperature, NAN);
    BAD(top_k, -1);
    BAD(top_p, 0.0f);
    BAD(top_p, -0.5f);
    BAD(top_p, 1.0001f);
    BAD(top_p, NAN);
    BAD(min_p, -0.01f);
    BAD(min_p, 1.5f);
    BAD(min_p, NAN);
    BAD(top_logprobs, -1);
    BAD(top_logprobs, INVAR_MAX_TOP_LOGPROBS + 1);
#undef BAD
}

static void dirty_scratch(void) {
    for (size_t i = 0; i < sizeof g_work_idx / sizeof *g_work_idx; i++) g_work_idx[i] = (int32_t)(next_u64() % 5000) - 2000;
    for (size_t i = 0; i < sizeof g_work_p / sizeof *g_work_p; i++) g_work_p[i] = (i % 3) ? NAN : 1e30f;
}

static void test_same_inputs_same_token(void **state) {
    (void)state;
    float x[V], other[V];
    random_row(x, V, 2.0);
    random_row(other, V, 4.0);
    const invar_sampling settings[] = {params(0.0f, 0, 1.0f, 0.0f, 0),    params(0.8f, 0, 1.0f, 0.0f, 11),
                                       params(1.2f, 40, 1.0f, 0.0f, 12),  params(1.0f, 0, 0.9f, 0.0f, 13),
                                       params(0.9f, 0, 1.0f, 0.05f, 14),  params(1.1f, 25, 0.8f, 0.01f, 15),
                                       params(1.0f, 0, 0.75f, 2e-4f, 16)};
    const size_t n_settings = sizeof settings / sizeof *settings;
    for (size_t k = 0; k < n_settings; k++)
        for (int64_t pos = 0; pos < 300; pos += 7) {
            invar_sampling s = settings[k];
            s.top_logprobs = (int32_t)(pos % 6);
            invar_token_info a = choose(x, V, &s, pos);
            /* something else in between, then garbage in the scratch */
            invar_sampling o = settings[(k + 1) % n_settings];
            choose(other, V, &o, pos + 1);
            dirty_scratch();
            invar_token_info b = choose(x, V, &s, pos);
            assert_int_equal(a.token, b.token);
            assert_memory_equal(&a.logprob, &b.logprob, sizeof(float));
            assert_int_equal(a.n_top, b.n_top);
            assert_memory_equal(a.top_ids, b.top_ids, sizeof(int32_t) * (size_t)a.n_top);
            assert_memory_equal(a.top_logprobs, b.top_logprobs, sizeof(float) * (size_t)a.n_top);
        }
    /* different positions (or seeds) do give different draws */
    invar_sampling s = params(1.0f, 0, 1.0f, 0.0f, 3);
    for (int j = 0; j < V; j++) x[j] = 0.0f; /* uniform over V */
    int changes = 0;
    for (int pos = 0; pos < 100; pos++) changes += choose(x, V, &s, pos).token != choose(x, V, &s, pos + 1).token;
    assert_true(changes > 90);
    int seed_changes = 0;
    for (uint64_t seed = 0; seed < 100; seed++) {
        invar_sampling a = params(1.0f, 0, 1.0f, 0.0f, seed), b = params(1.0f, 0, 1.0f, 0.0f, seed + 1);
        seed_changes += choose(x, V, &a, 5).token != choose(x, V, &b, 5).token;
    }
    assert_true(seed_changes > 90);
}

/* The processing order of invar.h, value by value: repetition, then frequency/presence on
 * output tokens only, then logit_bias, then min_tokens' mask; the raw row is reported. */
static void test_logits_processing(void **state) {
    (void)state;
    float x[8] = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f, -2.0f, 0.0f, 4.0f}, out[8];
    const int32_t seq[] = {0, 1, 3, 3, 2, 3}; /* prompt 0 1 3, output 3 2 3 */
    const int32_t eog[] = {7};
    sampler_history h = {seq, 6, 3, eog, 1};
    invar_sampling s;
    invar_sampling_default(&s);
    s.repetition_penalty = 2.0f;
    s.frequency_penalty = 0.5f;
    s.presence_penalty = 0.25f;
    s.n_logit_bias = 2;
    s.logit_bias[0] = (invar_logit_bias){4, 10.0f};
    s.logit_bias[1] = (invar_logit_bias){4, -1.0f}; /* summed in order */
    s.min_tokens = 4;                               /* 3 output tokens so far: eog masked */
    s.n_stop_token_ids = 1;
    s.stop_token_ids[0] = 6;
    assert_true(sampler_processes(&s));
    int32_t counts[8];
    for (int i = 0; i < 8; i++) counts[i] = 12345; /* not cleared by the caller */
    sampler_process(x, 8, &s, &h, out, counts);
    assert_true(out[0] == 1.0f);                       /* prompt only: repetition */
    assert_true(out[1] == -2.0f);                      /* negative: times p */
    assert_true(out[2] == 0.25f - (1 * 0.5f + 0.25f)); /* output once */
    assert_true(out[3] == 1.5f - (2 * 0.5f + 0.25f));  /* output twice */
    assert_true(out[4] == 1.0f + 10.0f - 1.0f);
    assert_true(out[5] == -2.0f);
    assert_true(out[6] == -INFINITY && out[7] == -INFINITY);
    /* greedy picks the processed argmax (4) and reports its raw logprob */
    int32_t work_idx[8];
    float work_p[16];
    invar_token_info info, raw;
    sampler_choose(x, 8, &s, 6, &h, &info, work_idx, work_p);
    assert_int_equal(info.token, 4);
    invar_sampling plain;
    invar_sampling_default(&plain);
    sampler_choose(x, 8, &plain, 6, NULL, &raw, work_idx, work_p);
    assert_int_equal(raw.token, 7);
    float mx = 4.0f, sum = 0.0f;
    for (int i = 0; i < 8; i++) sum += expf(x[i] - mx);
    assert_true(fabsf(info.logprob - (x[4] - mx - logf(sum))) < 1e-5f);
    /* min_tokens reached: nothing masked */
    s.min_tokens = 3;
    sampler_process(x, 8, &s, &h, out, counts);
    assert_true(out[7] == 4.0f && out[6] == 0.0f);
    /* a row without processing is not touched */
    assert_false(sampler_processes(&plain));
    assert_non_null(sampler_check(&(invar_sampling){.max_tokens = 4, .top_p = 1, .repetition_penalty = 0}));
    s.logit_bias[0].bias = 101.0f;
    assert_non_null(sampler_check(&s));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_random_rows),
        cmocka_unit_test(test_greedy_ties_lowest_id),
        cmocka_unit_test(test_top_logprobs_small_vocab),
        cmocka_unit_test(test_logprob_ignores_sampling_settings),
        cmocka_unit_test(test_logits_not_modified),
        cmocka_unit_test(test_rng_deterministic_and_in_range),
        cmocka_unit_test(test_rng_roughly_uniform),
        cmocka_unit_test(test_top_k_one_is_argmax),
        cmocka_unit_test(test_top_k_draws_only_best_k),
        cmocka_unit_test(test_min_p_draws_only_likely_tokens),
        cmocka_unit_test(test_top_p_draws_only_nucleus),
        cmocka_unit_test(test_temperature_frequencies),
        cmocka_unit_test(test_combined_truncations),
        cmocka_unit_test(test_top_p_with_small_min_p),
        cmocka_unit_test(test_sampler_check),
        cmocka_unit_test(test_same_inputs_same_token),
        cmocka_unit_test(test_logits_processing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
