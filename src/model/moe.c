#include "model/moe.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/rowops.h"

struct moe_state {
    int64_t max_tokens, E, k, D, F;
    int64_t n_rows;        /* T k sorted rows of the current layer */
    float *logits;         /* [T][E] router output */
    int32_t *sel;          /* [T][k] expert of each (token, rank) */
    float *wts;            /* [T][k] its weight */
    int64_t *count;        /* [E] tokens routed to each expert in this layer */
    int64_t *start;        /* [E + 1] first sorted slot of each expert */
    int64_t *fill;         /* [E] */
    int64_t *slot;         /* [T][k] sorted slot of each (token, rank) */
    float *xg, *g, *u, *y; /* sorted rows: input [T k][D], gate and up [T k][F], output [T k][D] */
    uint64_t *seen;        /* [E] tests: moe_counts_seen */
    bool normalise;        /* expert_weights_norm */
    moe_combine_mode combine;
    /* deepseek2's routing (config.h): gating, groups, scale; qwen3moe routes by logit */
    bool deepseek;
    expert_gating gating;
    int64_t n_group, n_group_used;
    bool group_max; /* a group's score: its best expert (else its two best summed) */
    float scale;
    float *score; /* [E] one token's gate scores (route_token_deepseek) */
    cpu_matmul_group *groups; /* [2 E] the experts' matmuls of one pool run */
};

static float *falloc(size_t n) { return aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64); }

void moe_state_free(moe_state *s) {
    if (!s) return;
    void *p[] = {s->logits, s->sel, s->wts, s->count, s->start, s->fill, s->slot,
                 s->xg,     s->g,   s->u,   s->y,     s->seen,  s->score, s->groups};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
    free(s);
}

moe_state *moe_state_create(const model_config *c, int64_t max_tokens) {
    moe_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    *s = (moe_state){
        .max_tokens = max_tokens, .E = c->n_expert, .k = c->n_expert_used, .D = c->n_embd, .F = c->n_ff_exp};
    s->normalise = c->expert_weights_norm;
    s->deepseek = c->arch == ARCH_DEEPSEEK2;
    s->gating = c->gating;
    s->n_group = c->n_group;
    s->n_group_used = c->n_group_used;
    s->group_max = c->expert_group_max;
    s->scale = c->expert_weights_scale;
    const size_t T = (size_t)max_tokens, E = (size_t)s->E, TK = T * (size_t)s->k;
    s->logits = falloc(T * E);
    s->sel = malloc(sizeof(int32_t) * TK);
    s->wts = malloc(sizeof(float) * TK);
    s->count = malloc(sizeof(int64_t) * E);
    s->start = malloc(sizeof(int64_t) * (E + 1));
    s->fill = malloc(sizeof(int64_t) * E);
    s->slot = malloc(sizeof(int64_t) * TK);
    s->xg = falloc(TK * (size_t)s->D);
    s->g = falloc(TK * (size_t)s->F);
    s->u = falloc(TK * (size_t)s->F);
    s->y = falloc(TK * (size_t)s->D);
    s->seen = calloc(E, sizeof(uint64_t));
    s->score = malloc(sizeof(float) * 2 * E);
    s->groups = malloc(sizeof(cpu_matmul_group) * 2 * E);
    if (!s->groups || !s->score || !s->logits || !s->sel || !s->wts || !s->count || !s->start || !s->fill || !s->slot || !s->xg ||
        !s->g || !s->u || !s->y || !s->seen) {
        moe_state_free(s);
        return NULL;
    }
    return s;
}


void moe_state_set_combine(moe_state *s, moe_combine_mode mode) { s->combine = mode; }
const uint64_t *moe_counts_seen(const moe_state *s) { return s->seen; }

/* Token t's experts: the k largest logits (ties: the lower id; whatever the logits, even
 * NaNs, k distinct valid ids), in that rank order, and their softmax weights, over all experts or, normalised, over
 * the chosen k. Sums run in expert-id order and rank order: the token's row alone. */
static void route_token(moe_state *s, int64_t t, bool normalise) {
    const float *l = s->logits + t * s->E;
    int32_t *sel = s->sel + t * s->k;
    float *w = s->wts + t * s->k;
    uint64_t taken[MODEL_MAX_EXPERTS / 64] = {0};
    for (int64_t r = 0; r < s->k; r++) {
        int64_t best = -1;
        for (int64_t e = 0; e < s->E; e++)
            if (!(taken[e / 64] >> (e % 64) & 1) && (best < 0 || l[e] > l[best])) best = e;
        taken[best / 64] |= 1ull << (best % 64);
        sel[r] = (int32_t)best;
    }
    float max = l[sel[0]];
    for (int64_t e = 0; e < s->E; e++)
        if (l[e] > max) max = l[e];
    float sum = 0.0f;
    for (int64_t r = 0; r < s->k; r++) {
        w[r] = invar_expf(l[sel[r]] - max);
        if (normalise) sum += w[r];
    }
    if (!normalise)
        for (int64_t e = 0; e < s->E; e++) sum += invar_expf(l[e] - max);
    for (int64_t r = 0; r < s->k; r++) w[r] /= sum;
}

/* The best not-yet-taken entry of v[0..n) (ties: the lower index; NaNs never win over a
 * number, and some index is always returned). */
static int64_t best_free(const float *v, int64_t n, const uint64_t *taken) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; e++)
        if (!(taken[e / 64] >> (e % 64) & 1) && (best < 0 || v[e] > v[best] || (v[best] != v[best] && v[e] == v[e])))
            best = e;
    return best;
}

/* deepseek2 (llama.cpp's semantics): scores p = softmax (over all experts, id order) or
 * sigmoid of the logits; selection by p + bias (the score-correction bias), within the
 * n_group_used groups of the best sum of two biased scores (group_max: of the best biased
 * score); the weights are the unbiased p
 * of the chosen, normalised to sum 1 if asked (sum in rank order), times scale. The row's
 * own values only. */
static void route_token_deepseek(moe_state *s, int64_t t, const float *bias) {
    const int64_t E = s->E, k = s->k, G = s->n_group, per = E / G;
    const float *l = s->logits + t * E;
    float *p = s->score, *sel_score = s->score + E;
    int32_t *sel = s->sel + t * k;
    float *w = s->wts + t * k;
    if (s->gating == GATING_SIGMOID) {
        for (int64_t e = 0; e < E; e++) p[e] = 1.0f / (1.0f + invar_expf(-l[e]));
    } else {
        float max = l[0], sum = 0.0f;
        for (int64_t e = 1; e < E; e++) max = l[e] > max ? l[e] : max;
        for (int64_t e = 0; e < E; e++) sum += p[e] = invar_expf(l[e] - max);
        for (int64_t e = 0; e < E; e++) p[e] /= sum;
    }
    for (int64_t e = 0; e < E; e++) sel_score[e] = bias ? p[e] + bias[e] : p[e];
    uint64_t taken[MODEL_MAX_EXPERTS / 64] = {0};
    if (G > 1) { /* groups left out: their experts count as taken */
        float gs[MODEL_MAX_EXPERTS];
        for (int64_t g = 0; g < G; g++) {
            uint64_t two[MODEL_MAX_EXPERTS / 64] = {0};
            const int64_t a = best_free(sel_score + g * per, per, two);
            two[a / 64] |= 1ull << (a % 64);
            gs[g] = sel_score[g * per + a];
            if (!s->group_max) gs[g] += sel_score[g * per + best_free(sel_score + g * per, per, two)];
        }
        uint64_t gtaken[MODEL_MAX_EXPERTS / 64] = {0};
        for (int64_t r = 0; r < s->n_group_used; r++) {
            const int64_t g = best_free(gs, G, gtaken);
            gtaken[g / 64] |= 1ull << (g % 64);
        }
        for (int64_t g = 0; g < G; g++)
            if (!(gtaken[g / 64] >> (g % 64) & 1))
                for (int64_t e = g * per; e < (g + 1) * per; e++) taken[e / 64] |= 1ull << (e % 64);
    }
    float sum = 0.0f;
    for (int64_t r = 0; r < k; r++) {
        const int64_t e = best_free(sel_score, E, taken);
        taken[e / 64] |= 1ull << (e % 64);
        sel[r] = (int32_t)e;
        w[r] = p[e];
        sum += w[r];
    }
    for (int64_t r = 0; r < k; r++) w[r] = (s->normalise ? w[r] / sum : w[r]) * s->scale;
}

/* (token, rank) pairs sorted by expert, tokens ascending within an expert: each pair's
 * sorted slot, and the experts' counts and first slots. */
static void group_slots(moe_state *s, int64_t T) {
    const int64_t E = s->E, k = s->k;
    memset(s->count, 0, sizeof(int64_t) * (size_t)E);
    for (int64_t i = 0; i < T * k; i++) s->count[s->sel[i]]++;
    s->start[0] = 0;
    for (int64_t e = 0; e < E; e++) {
        s->start[e + 1] = s->start[e] + s->count[e];
        s->fill[e] = s->start[e];
        int64_t c = s->count[e];
        if (c) s->seen[e] |= 1ull << (c >= 64 ? 63 : c - 1);
    }
    for (int64_t i = 0; i < T * k; i++) s->slot[i] = s->fill[s->sel[i]]++;
    s->n_rows = T * k;
}

/* group_slots, and xg gets each pair's input row. */
static void group_by_expert(moe_state *s, const float *xn, int64_t T) {
    const int64_t k = s->k, D = s->D;
    group_slots(s, T);
    for (int64_t i = 0; i < T * k; i++) memcpy(s->xg + s->slot[i] * D, xn + (i / k) * D, sizeof(float) * (size_t)D);
}

static void route_rows(moe_state *s, const layer_weights *L, int64_t T) {
    for (int64_t t = 0; t < T; t++)
        if (s->deepseek) route_token_deepseek(s, t, L->exp_probs_b);
        else route_token(s, t, s->normalise);
}


/* SiLU(gate) * up over the sorted rows, ROWS_PER_TASK rows a task: each row on its own, so
 * the split cannot change a bit. */
static void silu_task(void *ctx, int64_t task) {
    moe_state *s = ctx;
    const int64_t n = s->n_rows, F = s->F;
    for (int64_t p = task * ROWS_PER_TASK; p < n && p < (task + 1) * ROWS_PER_TASK; p++)
        row_silu_mul(s->g + p * F, s->u + p * F, s->g + p * F, F);
}

void moe_run_experts(moe_state *s, threadpool *tp, const layer_weights *L, const float *xn, int64_t T, moe_matmul_fn mm,
                     void *scratch) {
    const int64_t D = s->D, F = s->F;
    mm(tp, &L->router, xn, T, D, s->logits, s->E, scratch);
    route_rows(s, L, T);
    group_by_expert(s, xn, T);
    /* Every expert's weights serve all of its tokens at once; all experts go to the pool
     * in one run (gate and up of an expert share its quantised rows). */
    const bool grouped = mm == cpu_matmul && s->E <= CPU_MATMUL_MAX_GROUPS / 2;
    int ng = 0;
    for (int64_t e = 0; e < s->E; e++) {
        const int64_t c = s->count[e], p = s->start[e];
        if (!c) continue;
        if (grouped) {
            s->groups[ng++] = (cpu_matmul_group){&L->exp_gate[e], s->xg + p * D, c, D, s->g + p * F, F};
            s->groups[ng++] = (cpu_matmul_group){&L->exp_up[e], s->xg + p * D, c, D, s->u + p * F, F};
            continue;
        }
        const cpu_weight *w[] = {&L->exp_gate[e], &L->exp_up[e]};
        float *const y[] = {s->g + p * F, s->u + p * F};
        const int64_t ldy[] = {F, F};
        if (mm == cpu_matmul) cpu_matmul_multi(tp, 2, w, s->xg + p * D, c, D, y, ldy, scratch);
        else
            for (int i = 0; i < 2; i++) mm(tp, w[i], s->xg + p * D, c, D, y[i], ldy[i], scratch);
    }
    if (grouped) cpu_matmul_grouped(tp, ng, s->groups, scratch);
    const int64_t n_tasks = (s->n_rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    if (s->n_rows < ROWS_PARALLEL_MIN)
        for (int64_t i = 0; i < n_tasks; i++) silu_task(s, i);
    else threadpool_run(tp, silu_task, s, n_tasks);
    ng = 0;
    for (int64_t e = 0; e < s->E; e++) {
        const int64_t c = s->count[e], p = s->start[e];
        if (c && grouped) s->groups[ng++] = (cpu_matmul_group){&L->exp_down[e], s->g + p * F, c, F, s->y + p * D, D};
        else if (c) mm(tp, &L->exp_down[e], s->g + p * F, c, F, s->y + p * D, D, scratch);
    }
    if (grouped) cpu_matmul_grouped(tp, ng, s->groups, scratch);
}

/* The order (ranks 0..k-1 permuted) in which token t's expert outputs are summed: rank
 * order, or under MOE_COMBINE_BY_LOAD the control's load order. */
static void combine_order(const moe_state *s, int64_t t, int *order) {
    const int64_t k = s->k;
    const int32_t *sel = s->sel + t * k;
    for (int r = 0; r < k; r++) order[r] = r;
    if (s->combine == MOE_COMBINE_BY_LOAD) /* the negative control: most loaded expert first */
        for (int r = 1; r < k; r++)
            for (int q = r; q > 0; q--) {
                int64_t a = s->count[sel[order[q - 1]]], b = s->count[sel[order[q]]];
                if (a > b || (a == b && sel[order[q - 1]] < sel[order[q]])) break;
                int x = order[q - 1];
                order[q - 1] = order[q];
                order[q] = x;
            }
}

void moe_combine_row(const moe_state *s, int64_t t, float *out) {
    const int64_t k = s->k, D = s->D;
    int order[MODEL_MAX_EXPERTS_USED];
    combine_order(s, t, order);
    for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
    for (int r = 0; r < k; r++) {
        const float w = s->wts[t * k + order[r]], *y = s->y + s->slot[t * k + order[r]] * D;
        for (int64_t d = 0; d < D; d++) out[d] += w * y[d];
    }
}
