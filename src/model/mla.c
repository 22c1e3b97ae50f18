#include "model/mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/rowops.h"

struct mla_state {
    int64_t max_tokens;
    float *qa;   /* [T][q_lora] the query's bottleneck (q_lora > 0) */
    float *q;    /* [T][n_head][qk_nope + rope] */
    float *kva;  /* [T][kv_lora + rope]: c_kv, then k_pe; normed and rope'd in place */
    float *qlat; /* [T][n_head][kv_lora + rope]: the absorbed query, then q_pe */
    float *olat; /* [T][n_head][kv_lora] */
    attn_job *jobs;
    bool prefill_plain; /* the negative control */
    float *w_uk, *w_uv; /* the control's dequantised k_b / v_b of the layer */
};

static float *falloc(size_t n) { return aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64); }

void mla_state_free(mla_state *s) {
    if (!s) return;
    void *p[] = {s->qa, s->q, s->kva, s->qlat, s->olat, s->jobs, s->w_uk, s->w_uv};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
    free(s);
}

mla_state *mla_state_create(const model_config *c, int64_t max_tokens) {
    mla_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t T = (size_t)max_tokens, H = (size_t)c->n_head, R = (size_t)c->mla.kv_lora;
    const size_t rope = (size_t)c->n_rot, qk = (size_t)c->mla.qk_nope + rope;
    s->max_tokens = max_tokens;
    s->qa = falloc(T * (size_t)(c->mla.q_lora ? c->mla.q_lora : 1));
    s->q = falloc(T * H * qk);
    s->kva = falloc(T * (R + rope));
    s->qlat = falloc(T * H * (R + rope));
    s->olat = falloc(T * H * R);
    s->jobs = malloc(sizeof(attn_job) * T);
    if (!s->qa || !s->q || !s->kva || !s->qlat || !s->olat || !s->jobs) {
        mla_state_free(s);
        return NULL;
    }
    return s;
}

void mla_state_set_prefill_plain(mla_state *s, bool on) { s->prefill_plain = on; }

typedef struct {
    mla_state *s;
    const mla_args *a;
    attn_kv view;
    float *out;
} rows_ctx;

static void run_rows(rows_ctx *c, rows_fn fn) {
    rows_run(c->a->tp, c->a->b->n_tokens, c->a->row_cuts, c->a->n_tasks, fn, c);
}

/* The query bottleneck's norm; c_kv's norm, k_pe's rope, and the latent K/V into the cache
 * (before any query of this forward reads it: attention runs after all rows are done). */
static void row_latent(void *ctx, int64_t t) {
    const rows_ctx *c = ctx;
    const model_config *cf = &c->a->m->cfg;
    const layer_weights *L = &c->a->m->layers[c->a->il];
    const int64_t R = cf->mla.kv_lora, ql = cf->mla.q_lora;
    if (ql) row_rmsnorm(c->s->qa + t * ql, L->q_a_norm, c->s->qa + t * ql, ql, cf->rms_eps);
    float *kv = c->s->kva + t * (R + cf->n_rot);
    row_rmsnorm(kv, L->kv_a_norm, kv, R, cf->rms_eps);
    const float *cs = c->a->m->rope_cs + (size_t)c->a->b->pos[t] * (size_t)cf->n_rot;
    row_rope(kv + R, 1, cf->n_rot, cf->n_rot, cs, cf->rope_neox);
    attn_kv view = c->view;
    view.block_table = c->a->b->block_tables[t];
    attn_kv_store_rounded(&view, c->a->b->pos[t], kv, NULL, c->a->kv_round); /* V is its first kv_lora floats, c_kv: not stored again */
}

/* Each head's q_pe rope'd and placed after its absorbed part; the row's attention job. */
static void row_query(void *ctx, int64_t t) {
    const rows_ctx *c = ctx;
    const model_config *cf = &c->a->m->cfg;
    const int64_t H = cf->n_head, R = cf->mla.kv_lora, rope = cf->n_rot, nope = cf->mla.qk_nope, qk = nope + rope;
    const float *cs = c->a->m->rope_cs + (size_t)c->a->b->pos[t] * (size_t)rope;
    float *q = c->s->q + t * H * qk, *ql = c->s->qlat + t * H * (R + rope);
    for (int64_t h = 0; h < H; h++) {
        row_rope(q + h * qk + nope, 1, rope, rope, cs, cf->rope_neox);
        memcpy(ql + h * (R + rope) + R, q + h * qk + nope, sizeof(float) * (size_t)rope);
    }
    attn_kv view = c->view;
    view.block_table = c->a->b->block_tables[t];
    c->s->jobs[t] = (attn_job){ql, c->s->olat + t * H * R, view, c->a->b->pos[t]};
}

/* Per head h, y[:, h] = W_h x[:, h] for the T rows (strided views of the batch rows): all
 * heads in one pool run (each head's bits are cpu_matmul's alone). */
static void per_head(const mla_args *a, const cpu_weight *w, const float *x, int64_t ldx, int64_t xh, float *y,
                     int64_t ldy, int64_t yh) {
    const int64_t H = a->m->cfg.n_head, T = a->b->n_tokens;
    if (a->mm == cpu_matmul && H <= MODEL_MAX_HEADS) {
        cpu_matmul_group g[MODEL_MAX_HEADS];
        for (int64_t h = 0; h < H; h++) g[h] = (cpu_matmul_group){&w[h], x + h * xh, T, ldx, y + h * yh, ldy};
        cpu_matmul_grouped(a->tp, (int)H, g, a->scratch);
        return;
    }
    for (int64_t h = 0; h < H; h++) a->mm(a->tp, &w[h], x + h * xh, T, ldx, y + h * yh, ldy, a->scratch);
}

static bool is_prefill_row(const fwd_batch *b, int64_t t) {
    return (t > 0 && b->block_tables[t - 1] == b->block_tables[t]) ||
           (t + 1 < b->n_tokens && b->block_tables[t + 1] == b->block_tables[t]);
}

static void dequant_heads(const cpu_weight *w, int64_t H, float *out) {
    for (int64_t h = 0; h < H; h++)
        for (int64_t r = 0; r < w[h].n; r++)
            dequant_row(w[h].type, (const char *)w[h].data + (size_t)r * w[h].row_bytes,
                        out + (h * w[h].n + r) * w[h].k, w[h].k);
}

/* The negative control's plain formulation for one row: per head, every cached position's
 * key [W_UK c_j, k_pe_j] and value W_UV c_j decompressed, then softmax attention over them
 * in float, sequentially. */
static void plain_row(rows_ctx *c, int64_t t, float *out) {
    const model_config *cf = &c->a->m->cfg;
    const int64_t H = cf->n_head, R = cf->mla.kv_lora, rope = cf->n_rot, nope = cf->mla.qk_nope, qk = nope + rope;
    const int64_t vd = cf->mla.v_dim, P = c->a->b->pos[t] + 1;
    attn_kv view = c->view;
    view.block_table = c->a->b->block_tables[t];
    float *lat = malloc(sizeof(float) * (size_t)(P * (R + rope))), *sc = malloc(sizeof(float) * (size_t)P);
    float vbuf[MODEL_MAX_LATENT_DIM];
    if (!lat || !sc) abort(); /* tests only */
    for (int64_t j = 0; j < P; j++) attn_kv_load(&view, j, lat + j * (R + rope), vbuf);
    for (int64_t h = 0; h < H; h++) {
        const float *q = c->s->q + t * H * qk + h * qk, *uk = c->s->w_uk + h * R * nope, *uv = c->s->w_uv + h * vd * R;
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < P; j++) {
            const float *cj = lat + j * (R + rope);
            float s = 0.0f;
            for (int64_t n = 0; n < nope; n++) {
                float kn = 0.0f;
                for (int64_t r = 0; r < R; r++) kn += uk[r * nope + n] * cj[r];
                s += q[n] * kn;
            }
            for (int64_t d = 0; d < rope; d++) s += q[nope + d] * cj[R + d];
            sc[j] = s * cf->attn_scale;
            mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int64_t j = 0; j < P; j++) sum += sc[j] = expf(sc[j] - mx);
        float *o = out + h * vd;
        for (int64_t d = 0; d < vd; d++) o[d] = 0.0f;
        for (int64_t j = 0; j < P; j++) {
            const float *cj = lat + j * (R + rope);
            for (int64_t d = 0; d < vd; d++) {
                float v = 0.0f;
                for (int64_t r = 0; r < R; r++) v += uv[d * R + r] * cj[r];
                o[d] += sc[j] / sum * v;
            }
        }
    }
    free(lat), free(sc);
}

static void control_prefill_plain(rows_ctx *c) {
    const model_config *cf = &c->a->m->cfg;
    const layer_weights *L = &c->a->m->layers[c->a->il];
    const int64_t H = cf->n_head, R = cf->mla.kv_lora;
    mla_state *s = c->s;
    if (!s->w_uk) s->w_uk = malloc(sizeof(float) * (size_t)(H * R * cf->mla.qk_nope));
    if (!s->w_uv) s->w_uv = malloc(sizeof(float) * (size_t)(H * R * cf->mla.v_dim));
    if (!s->w_uk || !s->w_uv) abort(); /* tests only */
    dequant_heads(L->k_b, H, s->w_uk);
    dequant_heads(L->v_b, H, s->w_uv);
    for (int64_t t = 0; t < c->a->b->n_tokens; t++)
        if (is_prefill_row(c->a->b, t)) plain_row(c, t, c->out + t * H * cf->mla.v_dim);
}

void mla_attention(mla_state *s, const mla_args *a, const float *xn, float *out) {
    const model_config *cf = &a->m->cfg;
    const layer_weights *L = &a->m->layers[a->il];
    const int64_t T = a->b->n_tokens, D = cf->n_embd, H = cf->n_head, R = cf->mla.kv_lora, rope = cf->n_rot;
    const int64_t qk = cf->mla.qk_nope + rope, ql = cf->mla.q_lora, vd = cf->mla.v_dim;
    /* the latent layout: one row [c_kv, k_pe] per position, V read from its c_kv */
    rows_ctx c = {s, a, kv_layer_view(a->kv, a->il, 1, R), out};
    /* x's two projections: the query (or its bottleneck) and the compressed KV */
    const cpu_weight *w[] = {ql ? &L->wq_a : &L->wq, &L->wkv_a};
    float *const y[] = {ql ? s->qa : s->q, s->kva};
    const int64_t ldy[] = {ql ? ql : H * qk, R + rope};
    if (a->mm == cpu_matmul) cpu_matmul_multi(a->tp, 2, w, xn, T, D, y, ldy, a->scratch);
    else
        for (int i = 0; i < 2; i++) a->mm(a->tp, w[i], xn, T, D, y[i], ldy[i], a->scratch);
    run_rows(&c, row_latent);
    if (ql) a->mm(a->tp, &L->wq_b, s->qa, T, ql, s->q, H * qk, a->scratch);
    per_head(a, L->k_b, s->q, H * qk, qk, s->qlat, H * (R + rope), R + rope); /* q_lat = W_UK^T q_nope */
    run_rows(&c, row_query);
    attn_shape shape = {H, 1, R + rope, cf->attn_scale, R};
    attn_run_split(a->tp, &shape, s->jobs, T, a->split);
    per_head(a, L->v_b, s->olat, H * R, R, out, H * vd, vd); /* o = W_UV o_lat */
    if (s->prefill_plain) control_prefill_plain(&c);
}
