#include "model/weight_update.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/quant.h"

#define FAIL(...)                           \
    do {                                    \
        snprintf(err, errlen, __VA_ARGS__); \
        return -1;                          \
    } while (0)

/* The data of a replaced matrix or embedding, which the model's views point into. Keyed by
 * the weight it backs, so a second update of the same weight frees the first one's data. */
struct weight_override {
    const void *key;
    void *data;
    gguf_tensor t; /* token_embd's replacement (m->tok_embd points here) */
};

typedef enum { SLOT_MATRIX, SLOT_VECTOR, SLOT_EMBED } slot_kind;

/* Where a named weight lives in the model, and its shape: ne0 elements per row, rows rows. */
typedef struct {
    slot_kind kind;
    cpu_weight *w; /* SLOT_MATRIX */
    float **vec;   /* SLOT_VECTOR: float32 copy */
    int64_t ne0, rows;
} slot;

typedef struct {
    const char *suffix;
    slot s;
} layer_slot;

#define LAYER_SLOTS 14

static void layer_slots(model *m, int64_t il, layer_slot *t) {
    const model_config *c = &m->cfg;
    layer_weights *L = &m->layers[il];
    int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    layer_slot all[LAYER_SLOTS] = {
        {"attn_q.weight", {SLOT_MATRIX, &L->wq, NULL, c->n_embd, qd}},
        {"attn_k.weight", {SLOT_MATRIX, &L->wk, NULL, c->n_embd, kvd}},
        {"attn_v.weight", {SLOT_MATRIX, &L->wv, NULL, c->n_embd, kvd}},
        {"attn_output.weight", {SLOT_MATRIX, &L->wo, NULL, qd, c->n_embd}},
        {"ffn_gate.weight", {SLOT_MATRIX, &L->gate, NULL, c->n_embd, c->n_ff}},
        {"ffn_up.weight", {SLOT_MATRIX, &L->up, NULL, c->n_embd, c->n_ff}},
        {"ffn_down.weight", {SLOT_MATRIX, &L->down, NULL, c->n_ff, c->n_embd}},
        {"attn_norm.weight", {SLOT_VECTOR, NULL, &L->attn_norm, c->n_embd, 1}},
        {"ffn_norm.weight", {SLOT_VECTOR, NULL, &L->ffn_norm, c->n_embd, 1}},
        {"attn_q.bias", {SLOT_VECTOR, NULL, &L->bq, qd, 1}},
        {"attn_k.bias", {SLOT_VECTOR, NULL, &L->bk, kvd, 1}},
        {"attn_v.bias", {SLOT_VECTOR, NULL, &L->bv, kvd, 1}},
        {"attn_q_norm.weight", {SLOT_VECTOR, NULL, &L->q_norm, c->head_dim, 1}},
        {"attn_k_norm.weight", {SLOT_VECTOR, NULL, &L->k_norm, c->head_dim, 1}},
    };
    memcpy(t, all, sizeof all);
}

/* An optional vector the model was loaded without is not there to replace, nor is the
 * dense FFN of a routed (MoE) layer. */
static bool slot_present(const slot *s) {
    return s->kind == SLOT_VECTOR ? *s->vec != NULL : s->kind != SLOT_MATRIX || s->w->data != NULL;
}

static int find_slot(model *m, const char *name, slot *s, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    if (!strcmp(name, "token_embd.weight")) {
        *s = (slot){SLOT_EMBED, NULL, NULL, c->n_embd, c->n_vocab};
        return 0;
    }
    if (!strcmp(name, "output_norm.weight")) {
        *s = (slot){SLOT_VECTOR, NULL, &m->output_norm, c->n_embd, 1};
        return 0;
    }
    if (!strcmp(name, "output.weight")) {
        if (m->output_tied) FAIL("weight update: the model ties output.weight to token_embd.weight; update that");
        *s = (slot){SLOT_MATRIX, &m->output, NULL, c->n_embd, c->n_vocab};
        return 0;
    }
    if (c->mla.kv_lora) FAIL("weight update: %s: the weights of a %s model cannot be replaced yet", name, c->arch_name);
    if (!strcmp(name, "rope_freqs.weight"))
        FAIL("weight update: rope_freqs.weight cannot be replaced (the RoPE table is built from it at load)");
    long long il;
    int at = 0;
    char canon[32];
    /* "blk.<layer>.<suffix>", the layer written as GGUF writes it (no sign, no leading 0) */
    if (sscanf(name, "blk.%lld.%n", &il, &at) == 1 && at > 0 && il >= 0 && il < c->n_layer &&
        snprintf(canon, sizeof canon, "blk.%lld.", il) == at && !strncmp(name, canon, (size_t)at)) {
        layer_slot t[LAYER_SLOTS];
        layer_slots(m, il, t);
        for (int i = 0; i < LAYER_SLOTS; i++)
            if (!strcmp(name + at, t[i].suffix) && slot_present(&t[i].s)) {
                *s = t[i].s;
                return 0;
            }
    }
    if (c->n_expert && (strstr(name, "_exps.") || strstr(name, "ffn_gate_inp.")))
        FAIL("weight update: %s: the router and expert tensors of a mixture-of-experts model cannot be replaced yet",
             name);
    FAIL("weight update: the model has no tensor %s", name);
}

/* One tensor's new form, made before anything is swapped in. */
typedef struct {
    slot s;
    const void *key;
    void *data;   /* copy of the tensor (matrix, embedding) */
    float *vec;   /* SLOT_VECTOR */
    cpu_weight w; /* SLOT_MATRIX; SLOT_EMBED of a tied model: the output matrix */
    gguf_tensor t;
} prepared;

static const void *slot_key(model *m, const slot *s) {
    return s->kind == SLOT_MATRIX   ? (const void *)s->w
           : s->kind == SLOT_VECTOR ? (const void *)s->vec
                                    : (const void *)&m->tok_embd;
}

static int check_shape(const gguf_tensor *t, const slot *s, char *err, size_t errlen) {
    if (t->n_dims < 1 || t->n_dims > 4) FAIL("weight update: %s has %u dimensions", t->name, (unsigned)t->n_dims);
    int64_t rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) {
        if (t->ne[d] < 1 || t->ne[d] > s->rows || rows > s->rows / t->ne[d]) rows = -1;
        if (rows < 0) break;
        rows *= t->ne[d];
    }
    if (t->ne[0] != s->ne0 || rows != s->rows)
        FAIL("weight update: %s must have %lld x %lld elements (ne0 x rows)", t->name, (long long)s->ne0,
             (long long)s->rows);
    if (!quant_type_supported(t->type))
        FAIL("weight update: %s: unsupported type %s (ggml type %u)", t->name, quant_type_name(t->type),
             (unsigned)t->type);
    size_t rb = quant_row_bytes(t->type, t->ne[0]);
    if (rb == 0)
        FAIL("weight update: %s: %lld is not a whole number of %s blocks", t->name, (long long)t->ne[0],
             quant_type_name(t->type));
    if (!t->data || t->nbytes != (uint64_t)rb * (uint64_t)rows)
        FAIL("weight update: %s: %llu bytes of data, a %s tensor of this shape has %llu", t->name,
             (unsigned long long)t->nbytes, quant_type_name(t->type),
             (unsigned long long)rb * (unsigned long long)rows);
    return 0;
}

static int matrix(model *m, cpu_weight *w, const char *name, uint32_t type, int64_t rows, int64_t k, const void *data,
                  char *err, size_t errlen) {
    char e2[200];
    if (cpu_weight_view(w, type, rows, k, data, e2, sizeof e2) || (m->cpu_bound && cpu_weight_pack(w, e2, sizeof e2)))
        FAIL("weight update: %s: %s", name, e2);
    return 0;
}

static int prepare(model *m, const gguf_tensor *t, prepared *p, char *err, size_t errlen) {
    if (!t->name) FAIL("weight update: a tensor without a name");
    if (find_slot(m, t->name, &p->s, err, errlen) || check_shape(t, &p->s, err, errlen)) return -1;
    p->key = slot_key(m, &p->s);
    if (p->s.kind == SLOT_VECTOR) {
        p->vec = malloc(sizeof(float) * (size_t)p->s.ne0);
        if (!p->vec) FAIL("out of memory");
        dequant_row(t->type, t->data, p->vec, p->s.ne0);
        return 0;
    }
    p->data = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!p->data) FAIL("out of memory");
    memcpy(p->data, t->data, (size_t)t->nbytes);
    p->t = *t;
    p->t.name = "token_embd.weight";
    p->t.data = p->data;
    if (p->s.kind == SLOT_MATRIX || m->output_tied)
        return matrix(m, &p->w, t->name, t->type, p->s.rows, p->s.ne0, p->data, err, errlen);
    return 0;
}

static void prepared_free(prepared *p) {
    free(p->data);
    free(p->vec);
    cpu_weight_free(&p->w);
}

static struct weight_override *override_for(model *m, const void *key) {
    for (size_t i = 0; i < m->n_overrides; i++)
        if (m->overrides[i]->key == key) return m->overrides[i];
    return NULL;
}

/* Swaps one prepared tensor in; cannot fail (its override entry exists already). */
static void swap_in(model *m, prepared *p) {
    if (p->s.kind == SLOT_VECTOR) {
        free(*p->s.vec);
        *p->s.vec = p->vec;
        p->vec = NULL;
        return;
    }
    struct weight_override *o = override_for(m, p->key);
    free(o->data);
    o->data = p->data;
    p->data = NULL;
    if (p->s.kind == SLOT_EMBED) {
        o->t = p->t;
        m->tok_embd = &o->t;
    }
    cpu_weight *target = p->s.kind == SLOT_MATRIX ? p->s.w : m->output_tied ? &m->output : NULL;
    if (target) {
        cpu_weight_free(target);
        *target = p->w;
        p->w = (cpu_weight){0};
    }
}

/* An override entry for every matrix and embedding in the list, so that swap_in cannot fail. */
static int reserve_overrides(model *m, const prepared *ps, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ps[i].s.kind == SLOT_VECTOR || override_for(m, ps[i].key)) continue;
        struct weight_override **grown = realloc(m->overrides, sizeof *grown * (m->n_overrides + 1));
        if (!grown) return -1;
        m->overrides = grown;
        struct weight_override *o = calloc(1, sizeof *o);
        if (!o) return -1;
        o->key = ps[i].key;
        m->overrides[m->n_overrides++] = o;
    }
    return 0;
}

static int update_locked(model *m, const gguf_tensor *ts, size_t n, char *err, size_t errlen) {
    if (n == 0) return 0;
    prepared *ps = calloc(n, sizeof *ps);
    if (!ps) FAIL("out of memory");
    int rc = 0;
    size_t done = 0;
    for (; done < n && rc == 0; done++) {
        rc = prepare(m, &ts[done], &ps[done], err, errlen);
        for (size_t j = 0; j < done && rc == 0; j++)
            if (ps[j].key == ps[done].key) {
                snprintf(err, errlen, "weight update: %s given twice", ts[done].name);
                rc = -1;
            }
    }
    if (rc == 0 && reserve_overrides(m, ps, n)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    if (rc == 0)
        for (size_t i = 0; i < n; i++) swap_in(m, &ps[i]);
    for (size_t i = 0; i < done; i++) prepared_free(&ps[i]);
    free(ps);
    return rc;
}

int model_update_weights(model *m, const gguf_tensor *ts, size_t n, char *err, size_t errlen) {
    pthread_mutex_lock(&m->bind_lock); /* no model_bind_cpu packs half the old weights meanwhile */
    int rc = update_locked(m, ts, n, err, errlen);
    pthread_mutex_unlock(&m->bind_lock);
    return rc;
}

int model_update_weights_from_gguf(model *m, const gguf_file *f, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    if (m->output_tied && gguf_find_tensor(f, "output.weight"))
        FAIL("weight update: the file has output.weight, the model ties its output to token_embd.weight");
    size_t cap = 3 + (size_t)c->n_layer * LAYER_SLOTS, n = 0;
    gguf_tensor *ts = malloc(sizeof *ts * cap);
    char(*names)[64] = malloc(sizeof *names * cap);
    if (!ts || !names) {
        free(ts), free(names);
        FAIL("out of memory");
    }
    const char *top[] = {"token_embd.weight", "output_norm.weight", m->output_tied ? NULL : "output.weight"};
    for (size_t i = 0; i < 3; i++)
        if (top[i]) snprintf(names[n++], 64, "%s", top[i]);
    for (int64_t il = 0; il < c->n_layer; il++) {
        layer_slot t[LAYER_SLOTS];
        layer_slots(m, il, t);
        for (int i = 0; i < LAYER_SLOTS; i++)
            if (slot_present(&t[i].s)) snprintf(names[n++], 64, "blk.%lld.%s", (long long)il, t[i].suffix);
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, names[i]);
        if (t) {
            ts[i] = *t;
            continue;
        }
        snprintf(err, errlen, "weight update: the file has no tensor %s", names[i]);
        rc = -1;
    }
    if (rc == 0) rc = model_update_weights(m, ts, n, err, errlen);
    free(ts);
    free(names);
    return rc;
}

void model_free_overrides(model *m) {
    for (size_t i = 0; i < m->n_overrides; i++) {
        free(m->overrides[i]->data);
        free(m->overrides[i]);
    }
    free(m->overrides);
    m->overrides = NULL;
    m->n_overrides = 0;
}
