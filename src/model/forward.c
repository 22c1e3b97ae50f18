#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/attention.h"
#include "../kernels/cpu/rowops.h"

struct fwd_state {
    int64_t max_tokens, max_logits;
    float *x, *xn, *q, *k, *v, *attn, *gate, *up, *hidden;
    attn_job *jobs;
    void *scratch;
    matmul_fn matmul;
};

void fwd_state_set_matmul(fwd_state *s, matmul_fn fn) { s->matmul = fn; }

size_t kv_bytes_per_block(const model_config *c) {
    return (size_t)2 * (size_t)c->n_layer * KV_BLOCK * (size_t)(c->n_head_kv * c->head_dim) * sizeof(float);
}

int kv_storage_init(kv_storage *s, const model_config *c, int64_t n_blocks) {
    s->n_blocks = n_blocks;
    s->n_layer = c->n_layer;
    s->kv_dim = c->n_head_kv * c->head_dim;
    size_t n = (size_t)c->n_layer * (size_t)n_blocks * KV_BLOCK * (size_t)s->kv_dim;
    s->k = calloc(n, sizeof(float));
    s->v = calloc(n, sizeof(float));
    if (!s->k || !s->v) {
        kv_storage_free(s);
        return -1;
    }
    return 0;
}

void kv_storage_free(kv_storage *s) {
    free(s->k);
    free(s->v);
    s->k = s->v = NULL;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

fwd_state *fwd_state_create(const model *m, int64_t max_tokens, int64_t max_logits) {
    const model_config *c = &m->cfg;
    fwd_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->max_tokens = max_tokens;
    s->max_logits = max_logits;
    s->matmul = cpu_matmul;
    size_t T = (size_t)max_tokens, qd = (size_t)(c->n_head * c->head_dim), kvd = (size_t)(c->n_head_kv * c->head_dim);
    s->x = malloc(sizeof(float) * T * (size_t)c->n_embd);
    s->xn = malloc(sizeof(float) * T * max_sz((size_t)c->n_embd, qd));
    s->q = malloc(sizeof(float) * T * qd);
    s->k = malloc(sizeof(float) * T * kvd);
    s->v = malloc(sizeof(float) * T * kvd);
    s->attn = malloc(sizeof(float) * T * qd);
    s->gate = malloc(sizeof(float) * T * (size_t)c->n_ff);
    s->up = malloc(sizeof(float) * T * (size_t)c->n_ff);
    s->hidden = malloc(sizeof(float) * (size_t)max_logits * (size_t)c->n_embd);
    s->jobs = malloc(sizeof(attn_job) * T);
    size_t sc = 0;
    for (int64_t il = 0; il < c->n_layer; il++) {
        const layer_weights *L = &m->layers[il];
        const cpu_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < 7; i++) sc = max_sz(sc, cpu_matmul_scratch_bytes(ws[i], max_tokens));
    }
    sc = max_sz(sc, cpu_matmul_scratch_bytes(&m->output, max_logits));
    s->scratch = malloc(sc ? sc : 1);
    if (!s->x || !s->xn || !s->q || !s->k || !s->v || !s->attn || !s->gate || !s->up || !s->hidden ||
        !s->jobs || !s->scratch) {
        fwd_state_free(s);
        return NULL;
    }
    return s;
}

void fwd_state_free(fwd_state *s) {
    if (!s) return;
    float *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->attn, s->gate, s->up, s->hidden};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(s->jobs);
    free(s->scratch);
    free(s);
}

static void add_bias(float *x, const float *b, int64_t T, int64_t n) {
    if (!b) return;
    for (int64_t t = 0; t < T; t++) row_add(x + t * n, b, n);
}

static void attention_block(const model *m, fwd_state *s, threadpool *tp, kv_storage *kv,
                            const fwd_batch *b, int64_t il) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[il];
    const int64_t T = b->n_tokens, hd = c->head_dim;
    const int64_t qd = c->n_head * hd, kvd = c->n_head_kv * hd;
    const int64_t D = c->n_embd;

    for (int64_t t = 0; t < T; t++) row_rmsnorm(s->x + t * D, L->attn_norm, s->xn + t * D, D, c->rms_eps);
    s->matmul(tp, &L->wq, s->xn, T, D, s->q, qd, s->scratch);
    s->matmul(tp, &L->wk, s->xn, T, D, s->k, kvd, s->scratch);
    s->matmul(tp, &L->wv, s->xn, T, D, s->v, kvd, s->scratch);
    add_bias(s->q, L->bq, T, qd);
    add_bias(s->k, L->bk, T, kvd);
    add_bias(s->v, L->bv, T, kvd);

    float *kpool = kv->k + (size_t)il * (size_t)kv->n_blocks * KV_BLOCK * (size_t)kvd;
    float *vpool = kv->v + (size_t)il * (size_t)kv->n_blocks * KV_BLOCK * (size_t)kvd;
    const int64_t half = c->n_rot / 2;
    for (int64_t t = 0; t < T; t++) {
        float *q = s->q + t * qd, *k = s->k + t * kvd;
        if (L->q_norm) {
            for (int64_t h = 0; h < c->n_head; h++) row_rmsnorm(q + h * hd, L->q_norm, q + h * hd, hd, c->rms_eps);
            for (int64_t h = 0; h < c->n_head_kv; h++) row_rmsnorm(k + h * hd, L->k_norm, k + h * hd, hd, c->rms_eps);
        }
        const float *cs = m->rope_cs + (size_t)b->pos[t] * (size_t)half * 2;
        row_rope(q, c->n_head, hd, c->n_rot, cs, c->rope_neox);
        row_rope(k, c->n_head_kv, hd, c->n_rot, cs, c->rope_neox);
        /* Write this token's K/V into its sequence's cache before any query reads it. */
        attn_kv view = {kpool, vpool, b->block_tables[t], kvd};
        memcpy((float *)attn_kv_row(kpool, &view, b->pos[t]), k, sizeof(float) * (size_t)kvd);
        memcpy((float *)attn_kv_row(vpool, &view, b->pos[t]), s->v + t * kvd, sizeof(float) * (size_t)kvd);
        s->jobs[t] = (attn_job){q, s->attn + t * qd, view, b->pos[t]};
    }
    attn_shape shape = {c->n_head, c->n_head_kv, hd, 1.0f / sqrtf((float)hd)};
    attn_run(tp, &shape, s->jobs, T);

    s->matmul(tp, &L->wo, s->attn, T, qd, s->xn, D, s->scratch);
    for (int64_t t = 0; t < T; t++) row_add(s->x + t * D, s->xn + t * D, D);
}

static void ffn_block(const model *m, fwd_state *s, threadpool *tp, const fwd_batch *b, int64_t il) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[il];
    const int64_t T = b->n_tokens, D = c->n_embd, F = c->n_ff;
    for (int64_t t = 0; t < T; t++) row_rmsnorm(s->x + t * D, L->ffn_norm, s->xn + t * D, D, c->rms_eps);
    s->matmul(tp, &L->gate, s->xn, T, D, s->gate, F, s->scratch);
    s->matmul(tp, &L->up, s->xn, T, D, s->up, F, s->scratch);
    for (int64_t t = 0; t < T; t++) row_silu_mul(s->gate + t * F, s->up + t * F, s->gate + t * F, F);
    s->matmul(tp, &L->down, s->gate, T, F, s->xn, D, s->scratch);
    for (int64_t t = 0; t < T; t++) row_add(s->x + t * D, s->xn + t * D, D);
}

int model_forward(const model *m, fwd_state *s, threadpool *tp, kv_storage *kv, const fwd_batch *b,
                  float *logits) {
    const model_config *c = &m->cfg;
    const int64_t T = b->n_tokens, D = c->n_embd;
    if (T <= 0 || T > s->max_tokens || b->n_logits > s->max_logits) return -1;
    for (int64_t t = 0; t < T; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= c->n_vocab) return -1;
        if (b->pos[t] < 0 || b->pos[t] >= m->rope_len) return -1;
    }
    for (int64_t t = 0; t < T; t++) model_embed(m, b->tokens[t], s->x + t * D);
    for (int64_t il = 0; il < c->n_layer; il++) {
        attention_block(m, s, tp, kv, b, il);
        ffn_block(m, s, tp, b, il);
    }
    for (int64_t i = 0; i < b->n_logits; i++) {
        int32_t r = b->logit_rows[i];
        if (r < 0 || r >= T) return -1;
        row_rmsnorm(s->x + (int64_t)r * D, m->output_norm, s->hidden + i * D, D, c->rms_eps);
    }
    if (b->n_logits > 0) s->matmul(tp, &m->output, s->hidden, b->n_logits, D, logits, c->n_vocab, s->scratch);
    return 0;
}
