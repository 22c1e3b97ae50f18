/* Attention and row-op invariance: a query's output is bitwise the same alone or among M
 * other queries (M up to 300, including other tokens of its own sequence that share its
 * tiles), for 1 and 2 threads, and whatever physical blocks hold its KV, for a GQA shape and
 * MLA's latent head (value dim below key dim, read out of the key: stored once; the same bits
 * as a separate V pool holding the same values). Negative control:
 * the same check on the real kernel with split boundaries that follow the batch
 * (ATTN_SPLIT_BY_BATCH) fails. Row ops: the forward pass's row path (rows_run: many rows
 * in one call, spread over 2 or 3 threads) equals each row run alone; negative control: a
 * norm whose sum depends on the rows in the call fails the same check.
 * Every attention check runs on both cache types (f32 and f16, kv_setup_*); the f16 cache's
 * outputs also equal, bit for bit, an f32 cache's whose inputs were rounded to f16 first
 * (its control: a cache that truncates instead, ATTN_KV_ROUND_TOWARD_ZERO, does not). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "formats/quant.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rowops.h"

#define N_HEADS 6
#define N_KV 2
#define HD 64
#define CTX 700 /* crosses two 256-position split boundaries */
#define N_BLOCKS ((CTX + KV_BLOCK - 1) / KV_BLOCK)

static uint64_t rng_state = 88172645463325252ULL;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* The cache type of the test running (a setup function picks it) and the rounding of
 * the f16 stores (ATTN_KV_ROUND_TOWARD_ZERO only in the reference check's control). */
static attn_kv_type g_kv_type;
static attn_kv_rounding g_rounding = ATTN_KV_ROUND_NEAREST;
static int kv_setup_f32(void **state) { (void)state; g_kv_type = ATTN_KV_F32; return 0; }
static int kv_setup_f16(void **state) { (void)state; g_kv_type = ATTN_KV_F16; return 0; }

/* What an f16 cache holds for x, in float (exact). */
static float f16_rounded(float x) { return fp16_to_f32(f32_to_fp16(x)); }

typedef struct {
    void *k, *v;
    int32_t table[N_BLOCKS];
    attn_kv_layout layout;
    attn_kv_type type;
    int64_t n_kv, hd, hdv;
} kv_fixture;

static attn_kv kv_view(const kv_fixture *f) {
    return (attn_kv){f->k, f->v, f->table, f->n_kv, f->hd, f->hdv, f->layout, f->type};
}

/* Fills the pool (elements of g_kv_type) so that logical position p holds the same K/V
 * whatever block layout: n_kv heads of hd key and hdv value floats (MLA's latent head: hdv
 * < hd). ATTN_KV_LATENT stores no V (the value is the key's first hdv floats; vals unused). */
static void kv_make_layout(kv_fixture *f, const float *keys, const float *vals, int shuffle, int64_t n_kv, int64_t hd,
                           int64_t hdv, attn_kv_layout layout) {
    const size_t es = attn_kv_type_size(g_kv_type);
    *f = (kv_fixture){.layout = layout, .type = g_kv_type, .n_kv = n_kv, .hd = hd, .hdv = hdv};
    f->k = calloc((size_t)N_BLOCKS * KV_BLOCK * (size_t)(n_kv * hd), es);
    f->v = layout == ATTN_KV_LATENT ? NULL : calloc((size_t)N_BLOCKS * KV_BLOCK * (size_t)(n_kv * hdv), es);
    for (int b = 0; b < N_BLOCKS; b++) f->table[b] = b;
    if (shuffle)
        for (int b = N_BLOCKS - 1; b > 0; b--) {
            int j = (int)((frand() * 0.5f + 0.5f) * (float)b);
            int32_t t = f->table[b];
            f->table[b] = f->table[j];
            f->table[j] = t;
        }
    attn_kv view = kv_view(f);
    for (int64_t p = 0; p < CTX; p++)
        attn_kv_store_rounded(&view, p, keys + p * n_kv * hd, vals ? vals + p * n_kv * hdv : NULL, g_rounding);
}

/* The model's layout for a shape: the latent one where the value is narrower (MLA). */
static void kv_make_shape(kv_fixture *f, const float *keys, const float *vals, int shuffle, int64_t n_kv, int64_t hd,
                          int64_t hdv) {
    kv_make_layout(f, keys, vals, shuffle, n_kv, hd, hdv, hdv < hd ? ATTN_KV_LATENT : ATTN_KV_SEPARATE);
}

static void kv_make(kv_fixture *f, const float *keys, const float *vals, int shuffle) {
    kv_make_shape(f, keys, vals, shuffle, N_KV, HD, HD);
}

static const attn_shape SHAPE = {N_HEADS, N_KV, HD, 0.125f, HD};

/* The check: each query of batches of m = 1..max_m queries (mixed positions across split
 * edges, two sequences, one with shuffled physical blocks, 1 or 2 threads) against the same
 * query alone on one thread. Returns how many of the `checked` queries differ. */
static int64_t attention_mismatches_shape(const attn_shape *sh, attn_split_mode mode, int64_t max_m, int64_t *checked) {
    const int64_t nkv = sh->n_kv_heads, hd = sh->head_dim, hdv = sh->head_dim_v;
    const int64_t qd = sh->n_heads * hd, od = sh->n_heads * hdv;
    float *keys = malloc(sizeof(float) * CTX * nkv * hd), *vals = malloc(sizeof(float) * CTX * nkv * hdv);
    for (int64_t i = 0; i < CTX * nkv * hd; i++) keys[i] = frand() * 2.0f;
    for (int64_t i = 0; i < CTX * nkv * hdv; i++) vals[i] = frand();
    kv_fixture a, b;
    kv_make_shape(&a, keys, vals, 0, nkv, hd, hdv);
    kv_make_shape(&b, keys, vals, 1, nkv, hd, hdv);
    float *q = malloc(sizeof(float) * max_m * qd), *out = malloc(sizeof(float) * max_m * od);
    float *ref = malloc(sizeof(float) * od);
    attn_job *jobs = malloc(sizeof(attn_job) * max_m);
    threadpool *pools[2] = {threadpool_create(1), threadpool_create(2)};
    int64_t bad = 0;
    *checked = 0;
    for (int64_t m = 1; m <= max_m; m += (m < 40 ? 1 : 37)) {
        for (int64_t i = 0; i < m * qd; i++) q[i] = frand();
        for (int64_t j = 0; j < m; j++) {
            int64_t pos = (j * 131 + m * 7) % CTX; /* mixed positions, across split edges */
            /* odd m: runs of 3 jobs on one sequence (they share attention tiles, with
             * positions that differ and cross split edges); even m: alternating */
            kv_fixture *f = ((m & 1) ? (j / 3) & 1 : j & 1) ? &b : &a;
            jobs[j] = (attn_job){q + j * qd, out + j * od, kv_view(f), pos};
        }
        threadpool *tp = pools[m & 1];
        attn_run_split(tp, sh, jobs, m, mode);
        for (int64_t j = 0; j < m; j++) {
            attn_job alone = jobs[j];
            alone.out = ref;
            /* alone, 1 thread, always through the unshuffled layout */
            alone.kv = kv_view(&a);
            attn_run_split(pools[0], sh, &alone, 1, mode);
            bad += memcmp(ref, out + j * od, sizeof(float) * (size_t)od) != 0;
            (*checked)++;
        }
    }
    threadpool_destroy(pools[0]);
    threadpool_destroy(pools[1]);
    free(keys), free(vals), free(q), free(out), free(ref), free(jobs);
    free(a.k), free(a.v), free(b.k), free(b.v);
    return bad;
}

/* MLA's latent head (model/mla.h): one KV head for every query head, the value the first
 * kv_lora of the key's kv_lora + rope floats (here 64 + 16, 4 heads). */
static const attn_shape LATENT = {4, 1, 80, 0.1f, 64};

static int64_t attention_mismatches(attn_split_mode mode, int64_t max_m, int64_t *checked) {
    int64_t c2;
    int64_t bad = attention_mismatches_shape(&SHAPE, mode, max_m, checked);
    bad += attention_mismatches_shape(&LATENT, mode, max_m / 2, &c2);
    *checked += c2;
    return bad;
}

static void test_attention_batch_invariance(void **state) {
    (void)state;
    int64_t checked;
    assert_int_equal(attention_mismatches(ATTN_SPLIT_INVARIANT, 300, &checked), 0);
    assert_true(checked > 1000);
}

/* Negative control: the same check on the real kernel with ATTN_SPLIT_BY_BATCH (split
 * boundaries that follow the number of queries in the call) finds differences. */
static void test_negative_control_split_by_batch(void **state) {
    (void)state;
    int64_t checked;
    const int64_t bad = attention_mismatches(ATTN_SPLIT_BY_BATCH, 80, &checked);
    printf("# negative control (split by batch): %lld/%lld queries differ from alone\n", (long long)bad,
           (long long)checked);
    assert_true(bad > checked / 2);
}

/* The same queries on two caches a and b: tiles of m = 1..40 tokens of one sequence at
 * positions across split edges; a runs on pools[m % 2] (NULL pools: the caller's thread),
 * b on pools[0]. Returns the queries whose outputs differ. */
static int64_t caches_differ(const attn_shape *sh, const kv_fixture *a, const kv_fixture *b, threadpool *const *pools,
                             int64_t *checked) {
    const int64_t qd = sh->n_heads * sh->head_dim, od = sh->n_heads * sh->head_dim_v;
    enum { MAX_M = 40 };
    float *q = malloc(sizeof(float) * MAX_M * qd), *out = malloc(sizeof(float) * 2 * MAX_M * od);
    attn_job *jobs = malloc(sizeof(attn_job) * 2 * MAX_M);
    int64_t bad = 0;
    *checked = 0;
    for (int64_t m = 1; m <= MAX_M; m += 3) {
        for (int64_t i = 0; i < m * qd; i++) q[i] = frand();
        for (int64_t j = 0; j < m; j++) {
            const int64_t pos = (j * 131 + m * 7) % CTX;
            jobs[j] = (attn_job){q + j * qd, out + j * od, kv_view(a), pos};
            jobs[MAX_M + j] = (attn_job){q + j * qd, out + (MAX_M + j) * od, kv_view(b), pos};
        }
        attn_run(pools ? pools[m & 1] : NULL, sh, jobs, m);
        attn_run(pools ? pools[0] : NULL, sh, jobs + MAX_M, m);
        for (int64_t j = 0; j < m; j++, (*checked)++)
            bad += memcmp(out + j * od, out + (MAX_M + j) * od, sizeof(float) * (size_t)od) != 0;
    }
    free(q), free(out), free(jobs);
    return bad;
}

/* The latent layout (V read out of the transposed K block, stored once) against the
 * separate one holding the same values as a V pool of their own: the same bits for every
 * query, in tiles of several tokens of one sequence, across split edges, with and without
 * a scalar tail of the value row. With `perturb`, one stored value of position 3 differs
 * from its key, and the queries that see it must differ: the comparison reads V. Returns
 * the queries that differ. */
static int64_t latent_vs_separate(const attn_shape *sh, int perturb, int64_t *checked) {
    const int64_t nkv = sh->n_kv_heads, hd = sh->head_dim, hdv = sh->head_dim_v;
    float *keys = malloc(sizeof(float) * CTX * nkv * hd), *vals = malloc(sizeof(float) * CTX * nkv * hdv);
    for (int64_t i = 0; i < CTX * nkv * hd; i++) keys[i] = frand() * 2.0f;
    for (int64_t p = 0; p < CTX * nkv; p++) memcpy(vals + p * hdv, keys + p * hd, sizeof(float) * (size_t)hdv);
    if (perturb) vals[3 * nkv * hdv] += 0.25f;
    kv_fixture lat, sep;
    kv_make_layout(&lat, keys, NULL, 1, nkv, hd, hdv, ATTN_KV_LATENT);
    kv_make_layout(&sep, keys, vals, 0, nkv, hd, hdv, ATTN_KV_SEPARATE);
    const int64_t bad = caches_differ(sh, &lat, &sep, NULL, checked);
    free(keys), free(vals);
    free(lat.k), free(sep.k), free(sep.v);
    return bad;
}

static void test_latent_layout_same_bits_as_separate(void **state) {
    (void)state;
    static const attn_shape tail = {3, 1, 44, 0.15f, 36}; /* 36 = 2 vectors + a scalar tail */
    static const attn_shape dsv2 = {16, 1, 576, 0.07f, 512}; /* DeepSeek-V2: 16 heads, two tiles of 8 */
    const attn_shape *shapes[] = {&LATENT, &tail, &dsv2};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int64_t checked, c2;
        assert_int_equal(latent_vs_separate(shapes[i], 0, &checked), 0);
        assert_true(checked > 250);
        const int64_t bad = latent_vs_separate(shapes[i], 1, &c2);
        printf("# control (one stored value != its key): %lld/%lld queries differ\n", (long long)bad, (long long)c2);
        assert_true(bad > c2 / 2);
    }
}

/* The f16 cache against its definition: the same queries (tiles of several tokens of a
 * sequence, positions across split edges, 1 or 2 threads) on an f16 cache of the raw K/V
 * (stored with `rounding`, shuffled blocks) and on an f32 cache of the K/V rounded to f16
 * first. Returns the queries whose outputs differ. */
static int64_t f16_vs_rounded_f32(const attn_shape *sh, attn_kv_rounding rounding, int64_t *checked) {
    const int64_t nkv = sh->n_kv_heads, hd = sh->head_dim, hdv = sh->head_dim_v;
    const int64_t nk = CTX * nkv * hd, nv = CTX * nkv * hdv;
    float *keys = malloc(sizeof(float) * nk), *vals = malloc(sizeof(float) * nv);
    float *rkeys = malloc(sizeof(float) * nk), *rvals = malloc(sizeof(float) * nv);
    for (int64_t i = 0; i < nk; i++) keys[i] = frand() * 2.0f, rkeys[i] = f16_rounded(keys[i]);
    for (int64_t i = 0; i < nv; i++) vals[i] = frand(), rvals[i] = f16_rounded(vals[i]);
    const attn_kv_layout layout = hdv < hd ? ATTN_KV_LATENT : ATTN_KV_SEPARATE;
    kv_fixture h, f;
    g_kv_type = ATTN_KV_F16, g_rounding = rounding;
    kv_make_layout(&h, keys, vals, 1, nkv, hd, hdv, layout);
    g_kv_type = ATTN_KV_F32, g_rounding = ATTN_KV_ROUND_NEAREST;
    kv_make_layout(&f, rkeys, rvals, 0, nkv, hd, hdv, layout);
    threadpool *pools[2] = {threadpool_create(1), threadpool_create(2)};
    const int64_t bad = caches_differ(sh, &h, &f, pools, checked);
    threadpool_destroy(pools[0]), threadpool_destroy(pools[1]);
    free(keys), free(vals), free(rkeys), free(rvals);
    free(h.k), free(h.v), free(f.k), free(f.v);
    return bad;
}

static void test_f16_cache_equals_f32_on_rounded_inputs(void **state) {
    (void)state;
    static const attn_shape tail = {3, 1, 44, 0.15f, 36};    /* latent, value row with a scalar tail */
    static const attn_shape sep_tail = {4, 2, 40, 0.15f, 40}; /* separate V, a scalar tail */
    const attn_shape *shapes[] = {&SHAPE, &LATENT, &tail, &sep_tail};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int64_t checked, c2;
        assert_int_equal(f16_vs_rounded_f32(shapes[i], ATTN_KV_ROUND_NEAREST, &checked), 0);
        assert_true(checked > 250);
        /* control: halves truncated instead of rounded to nearest */
        const int64_t bad = f16_vs_rounded_f32(shapes[i], ATTN_KV_ROUND_TOWARD_ZERO, &c2);
        printf("# control (f16 stored toward zero): %lld/%lld queries differ from the rounded f32 reference\n",
               (long long)bad, (long long)c2);
        assert_true(bad > c2 / 2);
    }
}

/* What the cache under test holds for x. */
static float held(float x) { return g_kv_type == ATTN_KV_F16 ? f16_rounded(x) : x; }

/* Accuracy against a double-precision softmax on random data (on the values the cache
 * holds: an f16 cache's rounding is the reference check's business, below). */
static void test_attention_accuracy(void **state) {
    (void)state;
    int64_t kvd = N_KV * HD;
    float *keys = malloc(sizeof(float) * CTX * kvd), *vals = malloc(sizeof(float) * CTX * kvd);
    for (int64_t i = 0; i < CTX * kvd; i++) keys[i] = frand() * 3.0f, vals[i] = frand();
    kv_fixture a;
    kv_make(&a, keys, vals, 1);
    float q[N_HEADS * HD], out[N_HEADS * HD];
    for (int i = 0; i < N_HEADS * HD; i++) q[i] = frand();
    int64_t positions[] = {0, 1, 255, 256, 257, 511, 600, CTX - 1};
    for (size_t pi = 0; pi < sizeof positions / sizeof *positions; pi++) {
        attn_job job = {q, out, kv_view(&a), positions[pi]};
        attn_run(NULL, &SHAPE, &job, 1);
        for (int h = 0; h < N_HEADS; h++) {
            int kvh = h / (N_HEADS / N_KV);
            double *s = malloc(sizeof(double) * CTX), mx = -INFINITY, sum = 0;
            for (int64_t p = 0; p <= positions[pi]; p++) {
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)q[h * HD + i] * held(keys[p * kvd + kvh * HD + i]);
                s[p] = d * SHAPE.scale;
                if (s[p] > mx) mx = s[p];
            }
            for (int64_t p = 0; p <= positions[pi]; p++) sum += exp(s[p] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int64_t p = 0; p <= positions[pi]; p++)
                    o += exp(s[p] - mx) / sum * held(vals[p * kvd + kvh * HD + i]);
                assert_true(fabs(o - out[h * HD + i]) < 1e-5); /* fp32 accumulation over <= 700 terms */
            }
            free(s);
        }
    }
    free(keys), free(vals), free(a.k), free(a.v);
}

/* Row ops on the forward pass's row path (rowops.h: rows_cut + rows_run, as forward.c runs
 * them): one token's work between the matmuls, in forward.c's order: RMSNorm, per-head norm
 * (Qwen3's q/k norm), RoPE at the row's position, SiLU gate, residual add, and the sampler's
 * log-sum-exp of the row. RD is odd, so every op has a tail. */
#define RD 577
#define ROPE_POS 256
typedef struct {
    const float *x, *g, *w, *hw, *cs; /* rows of x and g; weights; RoPE table [ROPE_POS][64] */
    const int32_t *pos;
    float *y, *lse; /* outputs: a row of y and one lse per row */
} rows_fixture;

static void row_work(void *p, int64_t t) {
    const rows_fixture *f = p;
    const float *x = f->x + t * RD;
    float *y = f->y + t * RD;
    row_rmsnorm(x, f->w, y, RD, 1e-5f);
    for (int h = 0; h < 9; h++) row_rmsnorm(y + h * 64, f->hw, y + h * 64, 64, 1e-6f);
    row_rope(y, 9, 64, 64, f->cs + f->pos[t] * 64, f->pos[t] & 1);
    row_silu_mul(y, f->g + t * RD, y, RD);
    row_add(y, x, RD);
    f->lse[t] = row_logsumexp(y, RD);
}

/* The check: batches of m = 1..301 rows from sequences of 1 to 40 consecutive positions
 * (decodes and prefill chunks), run in one call on 2 or 3 threads, against each row run
 * alone (a one-row call on one thread). Returns how many rows differ; *threaded counts the
 * calls that ran as several tasks on the pool. */
static int64_t row_ops_mismatches(int64_t *checked, int64_t *threaded) {
    enum { MAX_M = 301 };
    float *x = malloc(sizeof(float) * MAX_M * RD), *g = malloc(sizeof(float) * MAX_M * RD);
    float *y = malloc(sizeof(float) * MAX_M * RD), *cs = malloc(sizeof(float) * ROPE_POS * 64);
    float w[RD], hw[64], ref[RD], lse[MAX_M], ref_lse;
    int32_t pos[MAX_M], seq_tables[MAX_M];
    const int32_t *tables[MAX_M];
    int64_t cuts[MAX_M + 1];
    for (int64_t i = 0; i < RD; i++) w[i] = 1.0f + 0.1f * frand();
    for (int64_t i = 0; i < 64; i++) hw[i] = 1.0f + 0.1f * frand();
    for (int64_t p = 0; p < ROPE_POS; p++)
        for (int i = 0; i < 32; i++) {
            const double a = (double)p * pow(10000.0, -(double)i / 32.0);
            cs[p * 64 + 2 * i] = (float)cos(a), cs[p * 64 + 2 * i + 1] = (float)sin(a);
        }
    for (int64_t i = 0; i < MAX_M * RD; i++) x[i] = 4.0f * frand(), g[i] = 2.0f * frand();
    threadpool *one = threadpool_create(1), *pools[2] = {threadpool_create(2), threadpool_create(3)};
    int64_t bad = 0;
    *checked = *threaded = 0;
    for (int64_t m = 1; m <= MAX_M; m += (m < 40 ? 3 : 29)) {
        for (int64_t t = 0, s = 0; t < m; s++) { /* sequence s: rows t .. t+len-1 */
            const int64_t len = 1 + (int64_t)((frand() * 0.5f + 0.5f) * 39.0f);
            const int64_t p0 = (int64_t)((frand() * 0.5f + 0.5f) * 200.0f);
            for (int64_t i = 0; i < len && t < m; i++, t++) pos[t] = (int32_t)(p0 + i), tables[t] = &seq_tables[s];
        }
        const int64_t n_tasks = rows_cut(m, pos, tables, cuts);
        *threaded += m >= ROWS_PARALLEL_MIN && n_tasks > 1;
        rows_fixture f = {x, g, w, hw, cs, pos, y, lse};
        rows_run(pools[m & 1], m, cuts, n_tasks, row_work, &f);
        for (int64_t t = 0; t < m; t++) {
            rows_fixture alone = {x + t * RD, g + t * RD, w, hw, cs, pos + t, ref, &ref_lse};
            int64_t cut1[2];
            rows_run(one, 1, cut1, rows_cut(1, pos + t, tables + t, cut1), row_work, &alone);
            bad += memcmp(ref, y + t * RD, sizeof ref) != 0 || memcmp(&ref_lse, &lse[t], sizeof ref_lse) != 0;
            (*checked)++;
        }
    }
    threadpool_destroy(one), threadpool_destroy(pools[0]), threadpool_destroy(pools[1]);
    free(x), free(g), free(y), free(cs);
    return bad;
}

static void test_row_ops_batch_invariance(void **state) {
    (void)state;
    int64_t checked, threaded;
    assert_int_equal(row_ops_mismatches(&checked, &threaded), 0);
    assert_true(checked > 1000);
    assert_true(threaded >= 8); /* the threaded path ran, in several tasks */
}

/* Negative control: the same check with a norm whose sum of squares is cut by the number
 * of rows in the call (rows_testing_set_norm_by_rows) finds differences. */
static void test_negative_control_norm_by_rows(void **state) {
    (void)state;
    int64_t checked, threaded;
    rows_testing_set_norm_by_rows(true);
    const int64_t bad = row_ops_mismatches(&checked, &threaded);
    rows_testing_set_norm_by_rows(false);
    printf("# negative control (norm by rows in the call): %lld/%lld rows differ from alone\n", (long long)bad,
           (long long)checked);
    assert_true(bad > checked / 4);
}

int main(void) {
/* The attention checks run once per cache type. */
#define BOTH_KV_TYPES(fn) cmocka_unit_test_setup(fn, kv_setup_f32), cmocka_unit_test_setup(fn, kv_setup_f16)
    const struct CMUnitTest tests[] = {
        BOTH_KV_TYPES(test_attention_batch_invariance),
        BOTH_KV_TYPES(test_attention_accuracy),
        BOTH_KV_TYPES(test_latent_layout_same_bits_as_separate),
        BOTH_KV_TYPES(test_negative_control_split_by_batch),
        cmocka_unit_test(test_f16_cache_equals_f32_on_rounded_inputs),
        cmocka_unit_test(test_row_ops_batch_invariance),
        cmocka_unit_test(test_negative_control_norm_by_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
