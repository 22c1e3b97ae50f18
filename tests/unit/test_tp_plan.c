/* The tensor-parallel plan (backend/tp_plan.h, docs/tensor-parallel.md) on the shapes the
 * doc names and on a sweep of others: every split is a partition of its range in rank order;
 * row-parallel K ranges start at absolute chunk boundaries and hold whole heads; a rank's KV
 * heads are exactly those its query heads read; fewer chunks than ranks switch the product to
 * the column-parallel gather; the communication figures are the doc's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "backend/tp_plan.h"

static model_config dense(int64_t D, int64_t F, int64_t H, int64_t Hkv, int64_t hd, int64_t V) {
    model_config c;
    memset(&c, 0, sizeof c);
    c.n_embd = D, c.n_ff = F, c.n_head = H, c.n_head_kv = Hkv, c.head_dim = hd, c.n_vocab = V, c.n_layer = 1;
    return c;
}

/* r's ranges tile [0, n) in rank order */
static void assert_partition(const tp_range *r, int tp, int64_t n) {
    int64_t at = 0;
    for (int i = 0; i < tp; i++) {
        assert_int_equal(r[i].lo, at);
        assert_true(r[i].hi >= r[i].lo);
        at = r[i].hi;
    }
    assert_int_equal(at, n);
}

static void check_plan(const model_config *c, int tp, const tp_plan *p) {
    const int64_t H = c->n_head, hd = c->head_dim, G = H / c->n_head_kv;
    assert_partition(p->heads, tp, H);
    assert_partition(p->ffn_cols, tp, c->n_ff);
    assert_partition(p->vocab, tp, c->n_vocab);
    for (int r = 0; r < tp; r++) {
        if (p->attn_out == TP_ROW_CHUNKS) assert_int_equal(p->heads[r].lo * hd % TP_K_CHUNK, 0);
        if (p->ffn_down == TP_ROW_CHUNKS) assert_int_equal(p->ffn_cols[r].lo % TP_K_CHUNK, 0);
        assert_int_equal(p->kv_heads[r].lo, p->heads[r].lo / G);
        assert_int_equal(p->kv_heads[r].hi, (p->heads[r].hi - 1) / G + 1);
        if (r + 1 < tp) assert_int_equal(p->vocab[r].hi % 8, 0);
    }
    const int64_t attn_chunks = (H * hd + TP_K_CHUNK - 1) / TP_K_CHUNK, ffn_chunks = (c->n_ff + TP_K_CHUNK - 1) / TP_K_CHUNK;
    assert_int_equal(p->attn_out, attn_chunks >= tp ? TP_ROW_CHUNKS : TP_COLUMN_GATHER);
    assert_int_equal(p->ffn_down, ffn_chunks >= tp ? TP_ROW_CHUNKS : TP_COLUMN_GATHER);
    if (p->attn_out == TP_COLUMN_GATHER) assert_partition(p->attn_out_cols, tp, c->n_embd);
    if (p->ffn_down == TP_COLUMN_GATHER) assert_partition(p->down_cols, tp, c->n_embd);
}

/* Llama-3-8B: attn_output K = 4096 (4 chunks), FFN 14336 (14 chunks). */
static void test_llama3_8b(void **state) {
    (void)state;
    const model_config c = dense(4096, 14336, 32, 8, 128, 128256);
    char err[160];
    for (int tp = 1; tp <= 8; tp *= 2) {
        tp_plan p;
        assert_int_equal(tp_plan_make(&c, tp, &p, err, sizeof err), 0);
        check_plan(&c, tp, &p);
        assert_int_equal(p.attn_out, tp <= 4 ? TP_ROW_CHUNKS : TP_COLUMN_GATHER);
        assert_int_equal(p.ffn_down, TP_ROW_CHUNKS);
    }
    tp_plan p;
    assert_int_equal(tp_plan_make(&c, 4, &p, err, sizeof err), 0);
    const int64_t want4[4] = {4, 4, 3, 3}; /* 14 chunks over 4 GPUs */
    for (int r = 0; r < 4; r++) assert_int_equal(p.ffn_cols[r].hi - p.ffn_cols[r].lo, want4[r] * TP_K_CHUNK);
    assert_int_equal(tp_plan_make(&c, 8, &p, err, sizeof err), 0);
    const int64_t want8[8] = {2, 2, 2, 2, 2, 2, 1, 1};
    for (int r = 0; r < 8; r++) assert_int_equal(p.ffn_cols[r].hi - p.ffn_cols[r].lo, want8[r] * TP_K_CHUNK);
    for (int r = 0; r < 8; r++) { /* 4 query heads per GPU, one KV head each */
        assert_int_equal(p.heads[r].hi - p.heads[r].lo, 4);
        assert_int_equal(p.kv_heads[r].hi - p.kv_heads[r].lo, 1);
    }
}

/* Llama-3-70B: K = 8192 (8 chunks) and 28672 (28): row-parallel up to TP = 8; the doc's
 * traffic: 5.25 M N for attn_output and 14 M N for ffn_down at TP = 8 (NCCL: 3.5 M N). */
static void test_llama3_70b_and_traffic(void **state) {
    (void)state;
    const model_config c = dense(8192, 28672, 64, 8, 128, 128256);
    char err[160];
    tp_plan p;
    assert_int_equal(tp_plan_make(&c, 8, &p, err, sizeof err), 0);
    check_plan(&c, 8, &p);
    assert_int_equal(p.attn_out, TP_ROW_CHUNKS);
    assert_int_equal(p.ffn_down, TP_ROW_CHUNKS);
    const double mn = 256.0 * 8192.0;
    assert_true(tp_fold_bytes(8, 256, 8192, 8) == 5.25 * mn);
    assert_true(tp_fold_bytes(8, 256, 8192, 28) == 14.0 * mn);
    assert_true(tp_allreduce_bytes(8, 256, 8192) == 3.5 * mn);
    assert_true(tp_fold_bytes(1, 256, 8192, 28) == 0.0);
}

/* A sweep of head counts, widths and degrees: the properties hold wherever a plan is made,
 * and the refusals are the documented ones. */
static void test_sweep(void **state) {
    (void)state;
    static const int64_t Hs[] = {8, 12, 16, 32, 40, 64}, hds[] = {64, 128}, Fs[] = {1536, 5632, 11008, 14336, 28672};
    char err[160];
    int made = 0;
    for (size_t i = 0; i < sizeof Hs / sizeof *Hs; i++)
        for (size_t j = 0; j < sizeof hds / sizeof *hds; j++)
            for (size_t f = 0; f < sizeof Fs / sizeof *Fs; f++)
                for (int tp = 1; tp <= 8; tp++) {
                    const model_config c = dense(Hs[i] * hds[j], Fs[f], Hs[i], Hs[i] / 4 ? Hs[i] / 4 : 1, hds[j], 32001);
                    tp_plan p;
                    const int rc = tp_plan_make(&c, tp, &p, err, sizeof err);
                    assert_int_equal(rc, Hs[i] % tp ? -1 : 0);
                    if (rc) continue;
                    check_plan(&c, tp, &p);
                    made++;
                }
    assert_true(made > 100);
    model_config moe = dense(2048, 0, 16, 16, 128, 1000);
    moe.n_expert = 64;
    tp_plan p;
    assert_int_equal(tp_plan_make(&moe, 2, &p, err, sizeof err), -1);
    model_config odd = dense(576, 1536, 9, 3, 96, 1000); /* head_dim 96 does not divide 1024 */
    assert_int_equal(tp_plan_make(&odd, 1, &p, err, sizeof err), -1);
    assert_int_equal(tp_plan_make(&odd, 9, &p, err, sizeof err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3_8b),
        cmocka_unit_test(test_llama3_70b_and_traffic),
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
