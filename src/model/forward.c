#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rowops.h"
#include "model/mla.h"
#include "model/moe.h"

struct fwd_state {
    int64_t max_tokens, max_logits;
    float *x, *xn, *q, *k, *v, *attn, *gate, *up, *hidden;
    attn_job *jobs;
    int64_t *row_cuts; /* first token of each row task, then T (rows_cut) */
    void *scratch;
    matmul_fn matmul;
    attn_split_mode attn_split; /* ATTN_SPLIT_INVARIANT but in negative controls */
    bool kv_round_by_batch;     /* the negative control of fwd_state_set_kv_round_by_batch */
    moe_state *moe;             /* routed layers' buffers, or NULL for a dense model */
    mla_state *mla;             /* MLA's buffers (deepseek2), or NULL */
    float *shared;              /* [T][n_embd] the shared experts' output (deepseek2) */
};

void fwd_state_set_matmul(fwd_state *s, matmul_fn fn) { s->matmul = fn ? fn : cpu_matmul; }
void fwd_state_set_attention(fwd_state *s, attn_split_mode mode) { s->attn_split = mode; }
int fwd_state_set_moe_combine(fwd_state *s, moe_combine_mode mode) {
    if (!s->moe) return -1;
    moe_state_set_combine(s->moe, mode);
    return 0;
}
void fwd_state_set_kv_round_by_batch(fwd_state *s, bool on) { s->kv_round_by_batch = on; }
const uint64_t *fwd_state_moe_counts_seen(const fwd_state *s) { return s->moe ? moe_counts_seen(s->moe) : NULL; }
int fwd_state_set_mla_prefill_plain(fwd_state *s, bool on) {
    if (!s->mla) return -1;
    mla_state_set_prefill_plain(s->mla, on);
    return 0;
}

attn_kv_layout kv_layout_of(const model_config *c) {
    return c->mla.kv_lora > 0 ? ATTN_KV_LATENT : ATTN_KV_SEPARATE;
}

/* V floats the cache stores per position and layer (none when V is K's prefix). */
static int64_t kv_dim_v_stored(const model_config *c) {
    return kv_layout_of(c) == ATTN_KV_LATENT ? 0 : c->n_head_kv * c->head_dim_v;
}

size_t kv_bytes_per_block(const model_config *c, attn_kv_type type) {
    return (size_t)c->n_layer * KV_BLOCK * (size_t)(c->n_head_kv * c->head_dim + kv_dim_v_stored(c)) *
           attn_kv_type_size(type);
}

/* Zeroed, 64-byte aligned (kernel vectors never straddle cache lines), and still lazily
 * backed by the OS like calloc: pages are only touched when a block is first used. */
static void *calloc_aligned64(size_t bytes, void **raw) {
    *raw = calloc(bytes + 64, 1);
    if (!*raw) return NULL;
    return (void *)(((uintptr_t)*raw + 63) & ~(uintptr_t)63);
}

int kv_storage_init(kv_storage *s, const model_config *c, int64_t n_blocks, attn_kv_type type) {
    memset(s, 0, sizeof *s);
    s->n_blocks = n_blocks;
    s->n_layer = c->n_layer;
    s->layout = kv_layout_of(c);
    s->type = type;
    s->kv_dim = c->n_head_kv * c->head_dim;
    s->kv_dim_v = kv_dim_v_stored(c);
    size_t n = (size_t)c->n_layer * (size_t)n_blocks * KV_BLOCK * attn_kv_type_size(type);
    s->k = calloc_aligned64(n * (size_t)s->kv_dim, &s->k_raw);
    if (s->kv_dim_v) s->v = calloc_aligned64(n * (size_t)s->kv_dim_v, &s->v_raw);
    if (!s->k || (s->kv_dim_v && !s->v)) {
        kv_storage_free(s);
        return -1;
    }
    return 0;
}

void kv_storage_free(kv_storage *s) {
    free(s->k_raw);
    free(s->v_raw);
    s->k = s->v = NULL;
    s->k_raw = s->v_raw = NULL;
}

attn_kv kv_layer_view(const kv_storage *s, int64_t il, int64_t n_kv_heads, int64_t head_dim_v) {
    const size_t layer = (size_t)il * (size_t)s->n_blocks * KV_BLOCK * attn_kv_type_size(s->type);
    char *k = (char *)s->k + layer * (size_t)s->kv_dim, *v = s->v ? (char *)s->v + layer * (size_t)s->kv_dim_v : NULL;
    return (attn_kv){k, v, NULL, n_kv_heads, s->kv_dim / n_kv_heads, head_dim_v, s->layout, s->type};
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Activation buffers on 64-byte boundaries: rows of 576 floats are then whole cache lines
 * (malloc's large blocks start 16 bytes past a page, so every vector straddled two). */
static float *falloc(size_t n) { return aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64); }

fwd_state *fwd_state_create(const model *m, int64_t max_tokens, int64_t max_logits) {
    const model_config *c = &m->cfg;
    fwd_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->max_tokens = max_tokens;
    s->max_logits = max_logits;
    s->matmul = cpu_matmul;
    const bool mla = c->mla.kv_lora > 0; /* its q/k/v live in mla_state */
    size_t T = (size_t)max_tokens, qd = (size_t)(c->n_head * c->head_dim), kvd = (size_t)(c->n_head_kv * c->head_dim);
    size_t od = mla ? (size_t)(c->n_head * c->mla.v_dim) : qd;
    size_t ff = max_sz((size_t)c->n_ff, (size_t)(c->n_ff_exp * c->n_expert_shared)); /* dense or shared FFN */
    s->x = falloc(T * (size_t)c->n_embd);
    s->xn = falloc(T * max_sz((size_t)c->n_embd, od));
    s->q = falloc(mla ? 1 : T * qd);
    s->k = falloc(mla ? 1 : T * kvd);
    s->v = falloc(mla ? 1 : T * kvd);
    s->attn = falloc(T * od);
    s->gate = falloc(T * max_sz(ff, 1)); /* a MoE model may have no dense FFN (n_ff 0) */
    s->up = falloc(T * max_sz(ff, 1));
    s->shared = falloc(c->n_expert_shared ? T * (size_t)c->n_embd : 1);
    if ((c->n_expert && !(s->moe = moe_state_create(c, max_tokens))) ||
        (mla && !(s->mla = mla_state_create(c, max_tokens)))) {
        fwd_state_free(s);
        return NULL;
    }
    s->hidden = falloc((size_t)max_logits * (size_t)c->n_embd);
    s->jobs = malloc(sizeof(attn_job) * T);
    s->row_cuts = malloc(sizeof(int64_t) * (T + 1));
    size_t sc = 0;
    for (int64_t il = 0; il < c->n_layer; il++) {
        const layer_weights *L = &m->layers[il];
        const cpu_weight *ws[] = {&L->wq,     &L->wk,      &L->wv,    &L->wo,      &L->gate, &L->up,   &L->down,
                                  &L->router, &L->sh_gate, &L->sh_up, &L->sh_down, &L->wq_a, &L->wq_b, &L->wkv_a};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
            if (ws[i]->data) sc = max_sz(sc, cpu_matmul_scratch_bytes(ws[i], max_tokens));
        /* the experts' grouped matmuls: T k rows over all experts (gate and up share theirs) */
        const int64_t TK = max_tokens * c->n_expert_used;
        for (int64_t e = 0; L->exp_gate && e < c->n_expert; e++) {
            const cpu_weight *xs[] = {&L->exp_gate[e], &L->exp_up[e], &L->exp_down[e]};
            for (size_t i = 0; i < 3; i++)
                sc = max_sz(sc, cpu_matmul_grouped_scratch_bytes(xs[i], TK, 2 * c->n_expert));
        }
        /* MLA's per-head projections, grouped: n_head groups of max_tokens rows */
        for (int64_t h = 0; L->k_b && h < c->n_head; h++) {
            sc = max_sz(sc, cpu_matmul_grouped_scratch_bytes(&L->k_b[h], max_tokens * c->n_head, c->n_head));
            sc = max_sz(sc, cpu_matmul_grouped_scratch_bytes(&L->v_b[h], max_tokens * c->n_head, c->n_head));
        }
    }
    sc = max_sz(sc, cpu_matmul_scratch_bytes(&m->output, max_logits));
    s->scratch = malloc(sc ? sc : 1);
    if (!s->x || !s->xn || !s->q || !s->k || !s->v || !s->attn || !s->gate || !s->up || !s->hidden || !s->shared ||
        !s->jobs || !s->row_cuts || !s->scratch) {
        fwd_state_free(s);
        return NULL;
    }
    return s;
}

void fwd_state_free(fwd_state *s) {
    if (!s) return;
    float *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->attn, s->gate, s->up, s->hidden, s->shared};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(s->jobs);
    free(s->row_cuts);
    free(s->scratch);
    moe_state_free(s->moe);
    mla_state_free(s->mla);
    free(s);
}

/* Per-token work between the matmuls, on the row path of rowops.h (rows_run): each token's
 * row depends on that row only, so splitting the tokens over threads cannot change a bit. */
typedef struct {
    const model *m;
    fwd_state *s;
    kv_storage *kv;
    const fwd_batch *b;
    int64_t il;
    int64_t n_tasks; /* row tasks: s->row_cuts[i] .. s->row_cuts[i + 1] */
    attn_kv_rounding kv_round; /* ATTN_KV_ROUND_NEAREST but in a negative control */
} rows_ctx;

static void for_each_row(threadpool *tp, rows_ctx *c, rows_fn row) {
    rows_run(tp, c->b->n_tokens, c->s->row_cuts, c->n_tasks, row, c);
}

static void add_bias(float *x, const float *bias, int64_t n) {
    if (bias) row_add(x, bias, n);
}

/* Token t enters layer 0: embedding, then the first attention norm. */
static void row_embed(void *ctx, int64_t t) {
    const rows_ctx *c = ctx;
    const model_config *cf = &c->m->cfg;
    float *x = c->s->x + t * cf->n_embd;
    model_embed(c->m, c->b->tokens[t], x);
    row_rmsnorm(x, c->m->layers[0].attn_norm, c->s->xn + t * cf->n_embd, cf->n_embd, cf->rms_eps);
}

/* Biases, q/k norms, RoPE, and the token's K/V written into its sequence's cache (before
 * any query of this batch reads it: attention runs after all rows are done). */
static void row_qkv(void *ctx, int64_t t) {
    const rows_ctx *c = ctx;
    const model_config *cf = &c->m->cfg;
    const layer_weights *L = &c->m->layers[c->il];
    const int64_t hd = cf->head_dim, qd = cf->n_head * hd, kvd = cf->n_head_kv * hd;
    float *q = c->s->q + t * qd, *k = c->s->k + t * kvd, *v = c->s->v + t * kvd;
    add_bias(q, L->bq, qd);
    add_bias(k, L->bk, kvd);
    add_bias(v, L->bv, kvd);
    if (L->q_norm) {
        for (int64_t h = 0; h < cf->n_head; h++) row_rmsnorm(q + h * hd, L->q_norm, q + h * hd, hd, cf->rms_eps);
        for (int64_t h = 0; h < cf->n_head_kv; h++) row_rmsnorm(k + h * hd, L->k_norm, k + h * hd, hd, cf->rms_eps);
    }
    const float *cs = c->m->rope_cs + (size_t)c->b->pos[t] * (size_t)cf->n_rot;
    row_rope(q, cf->n_head, hd, cf->n_rot, cs, cf->rope_neox);
    row_rope(k, cf->n_head_kv, hd, cf->n_rot, cs, cf->rope_neox);
    attn_kv view = kv_layer_view(c->kv, c->il, cf->n_head_kv, hd);
    view.block_table = c->b->block_tables[t];
    attn_kv_store_rounded(&view, c->b->pos[t], k, v, c->kv_round);
    c->s->jobs[t] = (attn_job){q, c->s->attn + t * qd, view, c->b->pos[t]};
}

/* x += attention output (in xn); xn = ffn_norm(x). */
static void row_attn_residual(void *ctx, int64_t t) {
    const rows_ctx *c = ctx;
    const model_config *cf = &c->m->cfg;
    const int64_t D = cf->n_embd;
    float *x = c->s->x + t * D, *xn = c->s->xn + t * D;
    row_add(x, xn, D);
    row_rmsnorm(x, c->m->layers[c->il].ffn_norm, xn, D, cf->rms_eps);
}

/* x += ffn output (in xn); xn = the next layer's attention norm of x. */
static void row_ffn_residual(void *ctx, int64_t t) {
    const rows_ctx *c = ctx;
    const model_config *cf = &c->m->cfg;
    const int64_t D = cf->n_embd;
    float *x = c->s->x + t * D, *xn = c->s->xn + t * D;
    row_add(x, xn, D);
    if (c->il + 1 < cf->n_layer) row_rmsnorm(x, c->m->layers[c->il + 1].attn_norm, xn, D, cf->rms_eps);
}

/* Matmuls that read the same activations (q/k/v, gate/up): one cpu_matmul_multi, which
 * quantises x once and hands out all column tasks in one pool run. A test's replacement
 * matmul is called once per weight. */
static void matmuls_on(fwd_state *s, threadpool *tp, int nw, const cpu_weight *const *w, const float *x,
                       int64_t T, int64_t ldx, float *const *y, const int64_t *ldy) {
    if (s->matmul == cpu_matmul) {
        cpu_matmul_multi(tp, nw, w, x, T, ldx, y, ldy, s->scratch);
        return;
    }
    for (int i = 0; i < nw; i++) s->matmul(tp, w[i], x, T, ldx, y[i], ldy[i], s->scratch);
}

/* deepseek2: MLA (mla.h), then attn_output and the residual as for the others. */
static void attention_block_mla(const model *m, fwd_state *s, threadpool *tp, rows_ctx *rc, int64_t il) {
    const model_config *c = &m->cfg;
    const int64_t T = rc->b->n_tokens, od = c->n_head * c->mla.v_dim;
    mla_args a = {m, il, tp, rc->kv, rc->b, s->row_cuts, rc->n_tasks, s->matmul, s->scratch, s->attn_split, rc->kv_round};
    mla_attention(s->mla, &a, s->xn, s->attn);
    s->matmul(tp, &m->layers[il].wo, s->attn, T, od, s->xn, c->n_embd, s->scratch);
    for_each_row(tp, rc, row_attn_residual);
}

static void attention_block(const model *m, fwd_state *s, threadpool *tp, rows_ctx *rc, int64_t il) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[il];
    const int64_t T = rc->b->n_tokens, hd = c->head_dim;
    const int64_t qd = c->n_head * hd, kvd = c->n_head_kv * hd, D = c->n_embd;
    if (s->mla) {
        attention_block_mla(m, s, tp, rc, il);
        return;
    }
    const cpu_weight *w[] = {&L->wq, &L->wk, &L->wv};
    float *const y[] = {s->q, s->k, s->v};
    const int64_t ldy[] = {qd, kvd, kvd};
    matmuls_on(s, tp, 3, w, s->xn, T, D, y, ldy);
    for_each_row(tp, rc, row_qkv);
    attn_shape shape = {c->n_head, c->n_head_kv, hd, c->attn_scale, hd};
    attn_run_split(tp, &shape, s->jobs, T, s->attn_split);
    s->matmul(tp, &L->wo, s->attn, T, qd, s->xn, D, s->scratch);
    for_each_row(tp, rc, row_attn_residual);
}

/* A routed layer's output into xn (moe.h), then the shared experts' (deepseek2: always
 * after the routed sum, never interleaved with it), then the residual as for a dense FFN. */
static void row_moe_residual(void *ctx, int64_t t) {
    const rows_ctx *c = ctx;
    const int64_t D = c->m->cfg.n_embd;
    moe_combine_row(c->s->moe, t, c->s->xn + t * D);
    if (c->m->layers[c->il].sh_gate.data) row_add(c->s->xn + t * D, c->s->shared + t * D, D);
    row_ffn_residual(ctx, t);
}

typedef struct {
    rows_ctx *rc;
    int64_t F;
} silu_ctx;

static void row_silu(void *ctx, int64_t t) {
    const silu_ctx *c = ctx;
    float *g = c->rc->s->gate + t * c->F;
    row_silu_mul(g, c->rc->s->up + t * c->F, g, c->F);
}

/* down(silu(gate(xn)) * up(xn)) into out [T][n_embd]: a dense layer's FFN (F = n_ff) or
 * deepseek2's shared experts (F = n_ff_exp * n_expert_shared). */
static void dense_ffn(fwd_state *s, threadpool *tp, rows_ctx *rc, const cpu_weight *gate, const cpu_weight *up,
                      const cpu_weight *down, int64_t F, float *out) {
    const int64_t T = rc->b->n_tokens, D = rc->m->cfg.n_embd;
    const cpu_weight *w[] = {gate, up};
    float *const y[] = {s->gate, s->up};
    const int64_t ldy[] = {F, F};
    matmuls_on(s, tp, 2, w, s->xn, T, D, y, ldy);
    silu_ctx sc = {rc, F};
    rows_run(tp, T, s->row_cuts, rc->n_tasks, row_silu, &sc);
    s->matmul(tp, down, s->gate, T, F, out, D, s->scratch);
}

static void ffn_block(const model *m, fwd_state *s, threadpool *tp, rows_ctx *rc, int64_t il) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[il];
    if (L->exp_gate) {
        if (L->sh_gate.data)
            dense_ffn(s, tp, rc, &L->sh_gate, &L->sh_up, &L->sh_down, c->n_ff_exp * c->n_expert_shared, s->shared);
        moe_run_experts(s->moe, tp, L, s->xn, rc->b->n_tokens, s->matmul, s->scratch);
        for_each_row(tp, rc, row_moe_residual);
        return;
    }
    dense_ffn(s, tp, rc, &L->gate, &L->up, &L->down, c->n_ff, s->xn);
    for_each_row(tp, rc, row_ffn_residual);
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
    /* (the negative control: the rounding follows the forward's token count) */
    const attn_kv_rounding round = s->kv_round_by_batch && T % 2 ? ATTN_KV_ROUND_TOWARD_ZERO : ATTN_KV_ROUND_NEAREST;
    rows_ctx rc = {m, s, kv, b, 0, rows_cut(T, b->pos, b->block_tables, s->row_cuts), round};
    for_each_row(tp, &rc, row_embed);
    for (int64_t il = 0; il < c->n_layer; il++) {
        rc.il = il;
        attention_block(m, s, tp, &rc, il);
        ffn_block(m, s, tp, &rc, il);
    }
    for (int64_t i = 0; i < b->n_logits; i++) {
        int32_t r = b->logit_rows[i];
        if (r < 0 || r >= T) return -1;
        row_rmsnorm(s->x + (int64_t)r * D, m->output_norm, s->hidden + i * D, D, c->rms_eps);
    }
    if (b->n_logits > 0) s->matmul(tp, &m->output, s->hidden, b->n_logits, D, logits, c->n_vocab, s->scratch);
    return 0;
}
