/* The CPU backend: the ragged forward pass of model/forward.c on the CPU kernels, float32
 * or float16 KV pools (backend_opts.kv_type), and the sampler run over the thread pool. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rowops.h"
#include "sampling/sampler.h"
#include "backend/backend.h"

typedef struct {
    backend base;
    threadpool *tp;
    fwd_state *fwd;
    float *logits;          /* [max_logits][n_vocab] */
    int32_t *work_idx;      /* sampler work space, one vocab-sized slot per thread */
    float *work_p;          /* two vocab-sized rows per thread */
    bool draw_by_row;       /* tests only: backend_cpu_set_draw_by_row */
} cpu_backend;

struct backend_kv {
    kv_storage s;
};

static cpu_backend *cpu(backend *b) { return (cpu_backend *)b; }

static void cpu_destroy(backend *b) {
    cpu_backend *c = cpu(b);
    threadpool_destroy(c->tp);
    fwd_state_free(c->fwd);
    free(c->logits);
    free(c->work_idx);
    free(c->work_p);
    free(c);
}

static size_t cpu_kv_bytes_per_block(const backend *b) { return kv_bytes_per_block(&b->m->cfg, b->opts.kv_type); }

static int cpu_kv_create(backend *b, int64_t n_blocks, backend_kv **out) {
    backend_kv *kv = calloc(1, sizeof *kv);
    if (!kv || kv_storage_init(&kv->s, &b->m->cfg, n_blocks, b->opts.kv_type)) {
        free(kv);
        snprintf(b->error, sizeof b->error, "cannot allocate %lld KV blocks", (long long)n_blocks);
        return -1;
    }
    *out = kv;
    return 0;
}

static void cpu_kv_destroy(backend *b, backend_kv *kv) {
    (void)b;
    if (!kv) return;
    kv_storage_free(&kv->s);
    free(kv);
}

static int cpu_forward(backend *b, backend_kv *kv, const fwd_batch *batch) {
    cpu_backend *c = cpu(b);
    b->n_logits = 0;
    if (model_forward(b->m, c->fwd, c->tp, &kv->s, batch, c->logits)) {
        snprintf(b->error, sizeof b->error, "forward pass rejected its batch");
        return -1;
    }
    b->n_logits = batch->n_logits;
    return 0;
}

/* A row's token depends only on that row, its request's parameters and position, so the
 * rows can be spread over the pool: task `slot` (one per thread at most) takes rows in turn
 * and uses work space `slot`. */
typedef struct {
    cpu_backend *c;
    const sample_row *rows;
    invar_token_info *out;
    int64_t n_rows;
    _Atomic int64_t next;
} sample_ctx;

static void sample_task(void *p, int64_t slot) {
    sample_ctx *x = p;
    const int64_t V = x->c->base.m->cfg.n_vocab;
    for (int64_t i; (i = atomic_fetch_add(&x->next, 1)) < x->n_rows;) {
        /* The negative control keys the draw by the row's place in the step (tests only). */
        const int64_t pos = x->rows[i].position + (x->c->draw_by_row ? i : 0);
        sampler_choose(x->c->logits + i * V, V, x->rows[i].s, pos, sample_row_history(&x->rows[i]), &x->out[i],
                       x->c->work_idx + slot * V, x->c->work_p + slot * 2 * V);
    }
}


static int cpu_sample(backend *b, int64_t n, const sample_row *rows, invar_token_info *out) {
    if (!backend_rows_ok(b, n)) return -1;
    cpu_backend *c = cpu(b);
    sample_ctx x = {c, rows, out, n, 0};
    const int64_t slots = threadpool_size(c->tp);
    if (n > 0) threadpool_run(c->tp, sample_task, &x, n < slots ? n : slots);
    return 0;
}

static int cpu_token_logprobs(backend *b, int64_t first, int64_t n, const int32_t *tokens, float *out) {
    if (first < 0 || !backend_rows_ok(b, first + n)) return -1;
    const int64_t V = b->m->cfg.n_vocab;
    for (int64_t i = 0; i < n; i++) {
        const float *row = cpu(b)->logits + (first + i) * V;
        out[i] = sampler_logprob(row[tokens[i]], row_logsumexp(row, V));
    }
    return 0;
}

static int cpu_top_logprobs(backend *b, int64_t first, int64_t n, const int32_t *n_top, invar_token_info *out) {
    if (first < 0 || !backend_rows_ok(b, first + n)) return -1;
    const int64_t V = b->m->cfg.n_vocab;
    for (int64_t i = 0; i < n; i++) {
        if (n_top[i] <= 0) continue;
        const float *row = cpu(b)->logits + (first + i) * V;
        out[i].n_top = n_top[i];
        sampler_top(row, V, n_top[i], row_logsumexp(row, V), out[i].top_ids, out[i].top_logprobs);
    }
    return 0;
}

static int cpu_read_logits(backend *b, int64_t n, float *out) {
    if (!backend_rows_ok(b, n)) return -1;
    memcpy(out, cpu(b)->logits, sizeof(float) * (size_t)n * (size_t)b->m->cfg.n_vocab);
    return 0;
}

static const backend_ops cpu_ops = {
    "cpu",       cpu_destroy, cpu_kv_bytes_per_block, cpu_kv_create,    cpu_kv_destroy,
    cpu_forward, cpu_sample,  cpu_token_logprobs,     cpu_top_logprobs, cpu_read_logits};

int backend_cpu_create(model *m, const backend_opts *o, backend **out, char *err, size_t errlen) {
    *out = NULL;
    if (model_bind_cpu(m, err, errlen)) return -1;
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->base = (backend){.ops = &cpu_ops, .m = m, .opts = *o};
    size_t V = (size_t)m->cfg.n_vocab;
    c->tp = threadpool_create(o->n_threads);
    c->fwd = fwd_state_create(m, o->max_tokens, o->max_logits);
    c->logits = malloc(sizeof(float) * V * (size_t)o->max_logits);
    c->work_idx = malloc(sizeof(int32_t) * V * (size_t)o->n_threads);
    c->work_p = malloc(sizeof(float) * 2 * V * (size_t)o->n_threads);
    if (!c->tp || !c->fwd || !c->logits || !c->work_idx || !c->work_p) {
        cpu_destroy(&c->base);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *out = &c->base;
    return 0;
}

int backend_cpu_set_matmul(backend *b, matmul_fn fn) {
    if (b->ops != &cpu_ops) return -1;
    fwd_state_set_matmul(cpu(b)->fwd, fn);
    return 0;
}

int backend_cpu_set_attention(backend *b, attn_split_mode mode) {
    if (b->ops != &cpu_ops) return -1;
    fwd_state_set_attention(cpu(b)->fwd, mode);
    return 0;
}

int backend_cpu_set_moe_combine(backend *b, moe_combine_mode mode) {
    return b->ops == &cpu_ops ? fwd_state_set_moe_combine(cpu(b)->fwd, mode) : -1;
}

const uint64_t *backend_cpu_moe_counts_seen(backend *b) {
    return b->ops == &cpu_ops ? fwd_state_moe_counts_seen(cpu(b)->fwd) : NULL;
}

int backend_cpu_set_mla_prefill_plain(backend *b, bool on) {
    return b->ops == &cpu_ops ? fwd_state_set_mla_prefill_plain(cpu(b)->fwd, on) : -1;
}

int backend_cpu_set_kv_round_by_batch(backend *b, bool on) {
    if (b->ops != &cpu_ops) return -1;
    fwd_state_set_kv_round_by_batch(cpu(b)->fwd, on);
    return 0;
}

int backend_cpu_set_draw_by_row(backend *b, bool on) {
    if (b->ops != &cpu_ops) return -1;
    cpu(b)->draw_by_row = on;
    return 0;
}
