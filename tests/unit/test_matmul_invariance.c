/* THE batch-invariance proof for cpu_matmul.
 *
 * For every weight type, every ISA this machine supports and thread pools of 1 and 2
 * threads: a pool of distinct activation rows is placed at random positions in batches
 * of M = 1..64 and a spread of sizes up to 301; each row of the M-row result must equal
 * (memcmp) that row's M = 1 result. Also: all ISAs give identical bits. On AVX-512 the
 * K-quants and the decoded types run their one-row kernels at M = 1 and the panel kernels from M = 2 (panels of
 * 8 rows and a remainder panel of 1..7), and on AVX2 their one-row kernels at M = 1..3 and
 * the unpacked-chunk kernels of matmul_kq_avx2.c from M = 4 (tiles of 4 rows and a
 * remainder of 1..3, group-major up to 16 rows, chunk-major above), so the sweep proves
 * those agree bit for bit.
 * Negative control: the same check on cpu_matmul_splitk_by_m (same maths, K split
 * by m) must find mismatches, showing the check can detect non-invariance.
 * Every type read through the integer form quant_iblock (the decoded types in their byte
 * or nibble records, and Q5_K, packed natively since it got its own kernels) must give
 * the bits of that form's factor (matmul_internal.h) computed from the file's blocks, on
 * every ISA; control: the same comparison with that factor unfused must find differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/threadpool.h"
#include "test_matmul_common.h"

#define N_COLS 37   /* odd: two full 16-column groups and a 5-column tail */
#define POOL 301

typedef void (*matmul_fn)(threadpool *, const cpu_weight *, const float *, int64_t, int64_t,
                          float *, int64_t, void *);

static const int64_t extra_m[] = {65, 67, 96, 127, 128, 129, 150, 200, 255, 256, 257, 299, 301};

static int64_t k_for(uint32_t type) {
    const int64_t be = mm_block_elems(type);
    if (be == 1) return 200; /* float types: any k (the AVX-512 kernel converts k in chunks of 1024) */
    return be >= 256 ? 2 * be : 8 * be; /* two K-quant units, eight 32-blocks */
}

typedef struct {
    uint32_t type;
    int64_t k, ldx, ldy;
    void *wdata;
    cpu_weight w;
    float *pool;   /* POOL rows of ldx floats */
    float *ref;    /* POOL rows of N_COLS: M = 1 results */
    float *x, *y;  /* batch buffers, POOL rows */
    void *scratch;
    int64_t *pos;  /* batch position -> pool row */
} fixture;

static void fixture_init(fixture *f, uint32_t type) {
    char err[200];
    f->type = type;
    f->k = k_for(type);
    f->ldx = f->k + 3;
    f->ldy = N_COLS + 5;
    mm_seed(1000 + type);
    f->wdata = mm_make_weights(type, N_COLS, f->k);
    assert_int_equal(cpu_weight_init(&f->w, type, N_COLS, f->k, f->wdata, err, sizeof err), 0);
    f->pool = calloc((size_t)(POOL * f->ldx), sizeof(float));
    for (int64_t r = 0; r < POOL; r++) mm_make_row(f->pool + r * f->ldx, f->k);
    f->ref = calloc((size_t)(POOL * N_COLS), sizeof(float));
    f->x = calloc((size_t)(POOL * f->ldx), sizeof(float));
    f->y = calloc((size_t)(POOL * f->ldy), sizeof(float));
    f->scratch = malloc(cpu_matmul_scratch_bytes(&f->w, POOL) + 1);
    f->pos = calloc(POOL, sizeof(int64_t));
}

static void fixture_free(fixture *f) {
    cpu_weight_free(&f->w);
    free(f->wdata);
    free(f->pool);
    free(f->ref);
    free(f->x);
    free(f->y);
    free(f->scratch);
    free(f->pos);
}

/* Reference: each pool row alone (M = 1, no pool). */
static void compute_refs(fixture *f, matmul_fn mm) {
    for (int64_t r = 0; r < POOL; r++) {
        mm(NULL, &f->w, f->pool + r * f->ldx, 1, f->ldx, f->y, f->ldy, f->scratch);
        memcpy(f->ref + r * N_COLS, f->y, N_COLS * sizeof(float));
    }
}

/* Runs one batch of M rows drawn at random from the pool; returns the number of rows
 * whose result differs from their M = 1 reference. */
static int run_batch(fixture *f, matmul_fn mm, threadpool *tp, int64_t M) {
    for (int64_t i = 0; i < POOL; i++) f->pos[i] = i;
    for (int64_t i = 0; i < M; i++) { /* partial Fisher-Yates: random distinct rows */
        int64_t j = i + (int64_t)(mm_rand() % (uint32_t)(POOL - i));
        int64_t t = f->pos[i]; f->pos[i] = f->pos[j]; f->pos[j] = t;
    }
    for (int64_t i = 0; i < M; i++)
        memcpy(f->x + i * f->ldx, f->pool + f->pos[i] * f->ldx, (size_t)f->k * sizeof(float));
    for (int64_t i = 0; i < M * f->ldy; i++) f->y[i] = NAN;
    mm(tp, &f->w, f->x, M, f->ldx, f->y, f->ldy, f->scratch);
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        if (memcmp(f->y + i * f->ldy, f->ref + f->pos[i] * N_COLS, N_COLS * sizeof(float)) != 0) bad++;
    return bad;
}

/* Mismatching rows over every M of the sweep, for thread pool tp. */
static int sweep(fixture *f, matmul_fn mm, threadpool *tp) {
    int bad = 0;
    for (int64_t M = 1; M <= 64; M++) bad += run_batch(f, mm, tp, M);
    for (size_t e = 0; e < sizeof extra_m / sizeof extra_m[0]; e++) bad += run_batch(f, mm, tp, extra_m[e]);
    return bad;
}

static void test_invariance(void **state) {
    (void)state;
    threadpool *tp[2] = {threadpool_create(1), threadpool_create(2)};
    assert_non_null(tp[0]);
    assert_non_null(tp[1]);
    const cpu_isa best = cpu_isa_supported();
    const mm_type_list types = mm_types();
    for (size_t t = 0; t < types.n; t++) {
        fixture f;
        fixture_init(&f, types.id[t]);
        float *ref_scalar = malloc(POOL * N_COLS * sizeof(float));
        for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
            assert_int_equal(cpu_isa_set((cpu_isa)isa), isa);
            compute_refs(&f, cpu_matmul);
            if (isa == CPU_ISA_SCALAR) memcpy(ref_scalar, f.ref, POOL * N_COLS * sizeof(float));
            /* Same bits on every ISA (holds for all types by construction). */
            if (memcmp(ref_scalar, f.ref, POOL * N_COLS * sizeof(float)) != 0)
                fail_msg("type %u: ISA %s differs from scalar", f.type, cpu_isa_name((cpu_isa)isa));
            for (int p = 0; p < 2; p++) {
                int bad = sweep(&f, cpu_matmul, tp[p]);
                if (bad) fail_msg("type %u isa %s threads %d: %d rows not invariant", f.type,
                                  cpu_isa_name((cpu_isa)isa), p + 1, bad);
            }
        }
        free(ref_scalar);
        fixture_free(&f);
    }
    cpu_isa_set(best);
    threadpool_destroy(tp[0]);
    threadpool_destroy(tp[1]);
}

/* The control must fail the same check, for every type. */
static void test_negative_control_detected(void **state) {
    (void)state;
    threadpool *tp = threadpool_create(2);
    const mm_type_list types = mm_types();
    for (size_t t = 0; t < types.n; t++) {
        fixture f;
        fixture_init(&f, types.id[t]);
        compute_refs(&f, cpu_matmul_splitk_by_m);
        int bad = sweep(&f, cpu_matmul_splitk_by_m, tp);
        print_message("negative control type %u: %d mismatching rows\n", f.type, bad);
        assert_true(bad > 0);
        fixture_free(&f);
    }
    threadpool_destroy(tp);
}

/* y of one activation row from the decoded integer form of each of the type's blocks:
 * the decoded types' factor f = fma(-dmin, imin, d * isum) folded by acc = fma(dx, f, acc),
 * or (the control) that fold unfused, acc + dx * f. */
static void decoded_form(const fixture *f, const float *x, float *y, int fused) {
    const quant_traits *qt = &quant_type_table[f->type];
    const int n32 = qt->block_elems / 32;
    int8_t q[8 * 256];
    float xd[8 * 8];
    int16_t xs[2 * 8 * 8];
    assert_true(f->k <= 8 * 256);
    mm_quantize_row_scalar(x, f->k, q, xd, xs);
    for (int64_t j = 0; j < N_COLS; j++) {
        const uint8_t *row = (const uint8_t *)f->wdata + (size_t)j * f->w.row_bytes;
        float acc = 0.0f;
        for (int64_t u = 0; u < f->k / qt->block_elems; u++) {
            quant_iblock B;
            qt->decode(row + (size_t)u * qt->block_bytes, &B);
            for (int jj = 0; jj < n32; jj++) {
                const int64_t b = u * n32 + jj;
                int dlo = 0, dhi = 0;
                for (int i = 0; i < 16; i++) {
                    dlo += B.q[32 * jj + i] * q[32 * b + i];
                    dhi += B.q[32 * jj + 16 + i] * q[32 * b + 16 + i];
                }
                const int isum = B.s[2 * jj] * dlo + B.s[2 * jj + 1] * dhi;
                const int imin = B.m[2 * jj] * xs[2 * b] + B.m[2 * jj + 1] * xs[2 * b + 1];
                const float fb = fmaf(-B.dmin, (float)imin, B.d * (float)isum);
                acc = fused ? fmaf(xd[b], fb, acc) : acc + xd[b] * fb;
            }
        }
        y[j] = acc;
    }
}

static void test_keeps_decoded_bits(void **state) {
    (void)state;
    const cpu_isa best = cpu_isa_supported();
    const mm_type_list types = mm_types();
    int tested = 0;
    for (size_t t = 0; t < types.n; t++) {
        if (!quant_type_table[types.id[t]].decode) continue;
        fixture f;
        fixture_init(&f, types.id[t]);
        float want[N_COLS], loose[N_COLS];
        int differ_unfused = 0;
        for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
            assert_int_equal(cpu_isa_set((cpu_isa)isa), isa);
            compute_refs(&f, cpu_matmul);
            for (int64_t r = 0; r < 64; r++) {
                decoded_form(&f, f.pool + r * f.ldx, want, 1);
                if (memcmp(want, f.ref + r * N_COLS, sizeof want) != 0)
                    fail_msg("%s isa %s row %d: not the decoded form's bits", quant_type_table[f.type].name,
                             cpu_isa_name((cpu_isa)isa), (int)r);
                decoded_form(&f, f.pool + r * f.ldx, loose, 0);
                differ_unfused += memcmp(loose, want, sizeof want) != 0;
            }
        }
        cpu_isa_set(best);
        print_message("%s: decoded form's bits on every ISA; control: unfused fold differs on %d rows\n",
                      quant_type_table[f.type].name, differ_unfused);
        assert_true(differ_unfused > 0);
        tested++;
        fixture_free(&f);
    }
    assert_true(tested >= 8); /* Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS, MXFP4 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariance),
        cmocka_unit_test(test_negative_control_detected),
        cmocka_unit_test(test_keeps_decoded_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
