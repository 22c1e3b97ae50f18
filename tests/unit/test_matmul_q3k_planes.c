/* Q3_K's plane form (MM_REC_PL, matmul_internal.h): the packed record against the
 * reference dequantisation, and every kernel that reads it against the decoded factor.
 *
 *  - record: for every column, unit and element, the value the record holds, read with
 *    this file's own reading of the documented layout ((d * s) * (code - 4), code = the
 *    2-bit plane's bits + 4 x the 1-bit plane's bit), equals dequant_row's bit for bit;
 *    the padded columns of the last group are all zero; the record is 1856 bytes.
 *  - kernels: on every ISA the machine has and for M = 1..17 rows (AVX-512: the one-row
 *    kernel at M = 1, the panel kernels from 2, panels of 1..8 rows; AVX2: row blocks of
 *    1..4), every output equals (memcmp) the factor of the integer form folded in K
 *    order: f = d * (float)(s0 * dlo + s1 * dhi), acc = fma(dx, f, acc).
 *  - control: one flipped bit of the 1-bit plane must fail both checks, on every ISA. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "kernels/cpu/matmul_internal.h"
#include "test_matmul_common.h"

#define N 37 /* two full 16-column groups and a 5-column tail */
#define K 768
#define MAXM 17

/* Element e of column c of unit u as the packed records hold it. */
static float record_value(const cpu_weight *w, int64_t c, int64_t u, int e) {
    const int64_t g = c / MM_NC, nu = w->k / 256;
    const uint8_t *rec = (const uint8_t *)w->packed + (size_t)(g * nu + u) * MM_REC_PL(256);
    const int lane = (int)(c % MM_NC), j = e / 32, t = (e % 32) / 4, i = e % 4;
    const int low = (rec[64 * (2 * j + t / 4) + 4 * lane + i] >> (2 * (t % 4))) & 3;
    const int high = (rec[1024 + 64 * j + 4 * lane + i] >> t) & 1;
    float d;
    memcpy(&d, rec + 1536 + 4 * lane, 4);
    const int s = (int8_t)rec[1600 + 32 * j + 2 * lane + (e % 32) / 16];
    return (d * (float)s) * (float)(low + 4 * high - 4) - 0.0f; /* dequant's - dmin * m, dmin = m = 0 */
}

/* Elements whose record value differs from dequant_row (bits), plus nonzero padding bytes. */
static int record_mismatches(const cpu_weight *w, const uint8_t *W) {
    int bad = 0;
    float ref[K];
    const size_t rb = quant_row_bytes(INVAR_T_Q3_K, K);
    for (int64_t c = 0; c < N; c++) {
        dequant_row(INVAR_T_Q3_K, W + (size_t)c * rb, ref, K);
        for (int64_t u = 0; u < K / 256; u++)
            for (int e = 0; e < 256; e++) {
                const float v = record_value(w, c, u, e);
                bad += memcmp(&v, &ref[256 * u + e], 4) != 0;
            }
    }
    /* padding: every byte of the tail group's padded lanes is zero */
    const int64_t g = N / MM_NC, nu = K / 256;
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *rec = (const uint8_t *)w->packed + (size_t)(g * nu + u) * MM_REC_PL(256);
        for (int lane = N % MM_NC; lane < MM_NC; lane++) {
            for (int wi = 0; wi < 24; wi++)
                for (int i = 0; i < 4; i++) bad += rec[64 * wi + 4 * lane + i] != 0;
            for (int i = 0; i < 4; i++) bad += rec[1536 + 4 * lane + i] != 0;
            for (int j = 0; j < 8; j++) bad += (rec[1600 + 32 * j + 2 * lane] | rec[1601 + 32 * j + 2 * lane]) != 0;
        }
    }
    return bad;
}

/* y[N] of one activation row from the integer form of the file's blocks. */
static void factor_ref(const uint8_t *W, const float *x, float *y) {
    int8_t q[K];
    float xd[K / 32];
    int16_t xs[K / 16];
    mm_quantize_row_scalar(x, K, q, xd, xs);
    const size_t rb = quant_row_bytes(INVAR_T_Q3_K, K);
    for (int64_t c = 0; c < N; c++) {
        float acc = 0.0f;
        for (int64_t u = 0; u < K / 256; u++) {
            quant_iblock B;
            quant_type_table[INVAR_T_Q3_K].decode(W + (size_t)c * rb + (size_t)u * 110, &B);
            for (int j = 0; j < 8; j++) {
                const int64_t b = 8 * u + j;
                int dlo = 0, dhi = 0;
                for (int i = 0; i < 16; i++) {
                    dlo += B.q[32 * j + i] * q[32 * b + i];
                    dhi += B.q[32 * j + 16 + i] * q[32 * b + 16 + i];
                }
                acc = fmaf(xd[b], B.d * (float)(B.s[2 * j] * dlo + B.s[2 * j + 1] * dhi), acc);
            }
        }
        y[c] = acc;
    }
}

/* Outputs differing from factor_ref, over M = 1..MAXM rows, on the current ISA. */
static int kernel_mismatches(const cpu_weight *w, const uint8_t *W, const float *x, void *scratch) {
    static float y[MAXM * N], want[N];
    int bad = 0;
    for (int64_t m = 1; m <= MAXM; m++) {
        cpu_matmul(NULL, w, x, m, K, y, N, scratch);
        for (int64_t r = 0; r < m; r++) {
            factor_ref(W, x + r * K, want);
            for (int c = 0; c < N; c++) bad += memcmp(&y[r * N + c], &want[c], 4) != 0;
        }
    }
    return bad;
}

static void test_q3k_planes(void **state) {
    (void)state;
    char err[200];
    const mm_type_list types = mm_types();
    int listed = 0;
    for (size_t t = 0; t < types.n; t++) listed += types.id[t] == INVAR_T_Q3_K;
    assert_int_equal(listed, 1);
    assert_int_equal(mm_block_elems(INVAR_T_Q3_K), 256);
    const mm_kernel *kt = mm_kernel_of(INVAR_T_Q3_K);
    assert_non_null(kt);
    assert_int_equal(kt->rec_bytes, 1856);
    mm_seed(3003);
    uint8_t *W = mm_make_weights(INVAR_T_Q3_K, N, K);
    cpu_weight w;
    assert_int_equal(cpu_weight_init(&w, INVAR_T_Q3_K, N, K, W, err, sizeof err), 0);
    float *x = malloc(sizeof(float) * MAXM * K);
    for (int r = 0; r < MAXM; r++) mm_make_row(x + r * K, K);
    void *scratch = malloc(cpu_matmul_scratch_bytes(&w, MAXM) + 1);
    const cpu_isa best = cpu_isa_supported();

    assert_int_equal(record_mismatches(&w, W), 0);
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(cpu_isa_set((cpu_isa)isa), isa);
        const int bad = kernel_mismatches(&w, W, x, scratch);
        if (bad) fail_msg("isa %s: %d outputs differ from the integer form's factor", cpu_isa_name((cpu_isa)isa), bad);
    }

    /* Control: bit 5 of one byte of the 1-bit plane (column 17, unit 1, 32-block 3) flipped. */
    uint8_t *rec = (uint8_t *)w.packed + (size_t)(1 * (K / 256) + 1) * MM_REC_PL(256);
    rec[1024 + 64 * 3 + 4 * 1 + 2] ^= 1 << 5;
    const int rec_bad = record_mismatches(&w, W);
    int kern_bad[MM_N_ISA] = {0};
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
        cpu_isa_set((cpu_isa)isa);
        kern_bad[isa] = kernel_mismatches(&w, W, x, scratch);
    }
    cpu_isa_set(best);
    print_message("control (one high bit flipped): record %d mismatches; kernels scalar %d avx2 %d avx512 %d\n",
                  rec_bad, kern_bad[0], kern_bad[1], kern_bad[2]);
    assert_int_equal(rec_bad, 1);
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) assert_true(kern_bad[isa] > 0);

    free(scratch);
    free(x);
    cpu_weight_free(&w);
    free(W);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q3k_planes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
