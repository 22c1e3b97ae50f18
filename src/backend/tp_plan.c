#include "backend/tp_plan.h"

#include <stdio.h>

tp_range tp_share(int64_t n, int tp, int r) {
    const int64_t base = n / tp, extra = n % tp;
    const int64_t lo = r * base + (r < extra ? r : extra);
    return (tp_range){lo, lo + base + (r < extra)};
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A K-reducing product over K split by units of `unit` columns (heads or plain columns):
 * by chunks where there are at least tp of them, else column-parallel after a gather. The
 * ranks' K ranges go to k[] (in columns), their output columns (gather mode) to cols[]. */
static tp_split split_k(int64_t K, int64_t N, int tp, tp_range *k, tp_range *cols) {
    const int64_t n_chunks = (K + TP_K_CHUNK - 1) / TP_K_CHUNK;
    if (n_chunks >= tp) {
        for (int r = 0; r < tp; r++) {
            const tp_range c = tp_share(n_chunks, tp, r);
            k[r] = (tp_range){c.lo * TP_K_CHUNK, min64(c.hi * TP_K_CHUNK, K)};
            cols[r] = (tp_range){0, N};
        }
        return TP_ROW_CHUNKS;
    }
    for (int r = 0; r < tp; r++) {
        k[r] = tp_share(K, tp, r);
        cols[r] = tp_share(N, tp, r);
    }
    return TP_COLUMN_GATHER;
}

int tp_plan_make(const model_config *c, int tp, tp_plan *p, char *err, size_t errlen) {
    if (tp < 1 || tp > TP_MAX) return snprintf(err, errlen, "tensor parallel degree %d (1..%d)", tp, TP_MAX), -1;
    if (c->n_expert || c->mla.kv_lora)
        return snprintf(err, errlen, "tensor parallelism covers dense models (no experts, no MLA) so far"), -1;
    const int64_t hd = c->head_dim, H = c->n_head, G = c->n_head_kv ? H / c->n_head_kv : 1;
    if (hd <= 0 || TP_K_CHUNK % hd)
        return snprintf(err, errlen, "head_dim %lld does not divide the %d-wide K chunk", (long long)hd, TP_K_CHUNK), -1;
    if (H % tp || H < tp)
        return snprintf(err, errlen, "%lld heads do not split over %d GPUs", (long long)H, tp), -1;
    p->tp = tp;
    tp_range k[TP_MAX];
    p->attn_out = split_k(H * hd, c->n_embd, tp, k, p->attn_out_cols);
    for (int r = 0; r < tp; r++) {
        /* chunks hold whole heads (hd divides the chunk), so a rank's K range is whole heads */
        p->heads[r] = p->attn_out == TP_ROW_CHUNKS ? (tp_range){k[r].lo / hd, k[r].hi / hd} : tp_share(H, tp, r);
        p->kv_heads[r] = (tp_range){p->heads[r].lo / G, (p->heads[r].hi + G - 1) / G};
    }
    p->ffn_down = split_k(c->n_ff, c->n_embd, tp, p->ffn_cols, p->down_cols);
    const int64_t vpad = (c->n_vocab + 7) / 8 * 8;
    for (int r = 0; r < tp; r++) {
        const tp_range v = tp_share(vpad / 8, tp, r); /* rows in eights: GEMM widths stay multiples of 8 */
        p->vocab[r] = (tp_range){v.lo * 8, min64(v.hi * 8, c->n_vocab)};
    }
    return 0;
}

double tp_fold_bytes(int tp, int64_t M, int64_t N, int64_t n_chunks) {
    const double f = (double)(tp - 1) / tp, mn = (double)M * (double)N;
    return f * 4.0 * mn * (double)n_chunks / tp + f * 2.0 * mn;
}

double tp_allreduce_bytes(int tp, int64_t M, int64_t N) {
    return 2.0 * (double)(tp - 1) / tp * 2.0 * (double)M * (double)N;
}
