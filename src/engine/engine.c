/* The engine: queue, scheduler and per-request state around the ragged forward pass.
 *
 * Each step: running requests contribute their pending tokens (decodes first, then
 * prefill chunks in arrival order, within the token budget), one forward computes them
 * all, and every request whose pending tokens are all in the cache samples its next
 * token. Nothing a request computes depends on the others: the forward pass and the
 * sampler are per-token / per-row by construction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/cpu/attention.h"
#include "../model/forward.h"
#include "engine_internal.h"
#include "invar.h"
#include "engine_testing.h"
#include "kv_blocks.h"
#include "sampler.h"

typedef enum { REQ_QUEUED, REQ_RUNNING, REQ_DONE } req_state;

typedef struct {
    int64_t id;
    req_state state;
    invar_sampling samp;
    int32_t *seq;               /* prompt followed by generated tokens */
    int64_t n_prompt, n_seq, cap_seq;
    int64_t n_cached;           /* tokens of seq whose K/V are in the cache */
    int32_t *blocks;            /* block table */
    int64_t n_blocks;
    invar_token_info *out;
    int64_t n_out;
    invar_finish finish;
    char error[200];
} request;

struct invar_engine {
    invar_model *im;
    invar_engine_config cfg;
    threadpool *tp;
    kv_storage kv;
    kv_blocks blocks;
    fwd_state *fwd;
    float *logits;
    int32_t *work_idx;
    float *work_p;
    request **reqs;             /* by id; NULL once released */
    int64_t n_reqs, cap_reqs;
    int64_t *running;           /* ids, in admission order */
    int64_t n_running;
    int64_t next_queued;        /* lowest id that may still be queued */
    /* per-step batch buffers */
    int32_t *b_tokens, *b_pos, *b_logit_rows;
    const int32_t **b_tables;
    int64_t *b_logit_req;
    invar_token_cb cb;
    void *cb_user;
    char error[256];
};

void invar_engine_config_default(invar_engine_config *c) {
    *c = (invar_engine_config){.n_threads = 0, .max_batch = 16, .max_batch_tokens = 512, .n_ctx = 0,
                               .kv_mem_mb = 1024};
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); invar_engine_free(e); return -1; } while (0)

int invar_engine_create(invar_model *im, const invar_engine_config *cfg_in, invar_engine **out,
                        char *err, size_t errlen) {
    *out = NULL;
    invar_engine *e = calloc(1, sizeof *e);
    if (!e) return -1;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    if (cfg_in) cfg = *cfg_in;
    const model *m = im->m;
    if (cfg.n_threads <= 0) cfg.n_threads = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    if (cfg.n_threads <= 0) cfg.n_threads = 1;
    if (cfg.n_ctx <= 0 || cfg.n_ctx > m->rope_len) cfg.n_ctx = (int32_t)m->rope_len;
    if (cfg.max_batch <= 0) FAIL("max_batch must be > 0");
    if (cfg.max_batch_tokens < cfg.max_batch) cfg.max_batch_tokens = cfg.max_batch;
    if (cfg.kv_mem_mb <= 0) FAIL("kv_mem_mb must be > 0");
    e->im = im;
    e->cfg = cfg;
    int64_t n_blocks = (int64_t)((size_t)cfg.kv_mem_mb * 1024 * 1024 / kv_bytes_per_block(&m->cfg));
    if (n_blocks < 1) FAIL("KV budget of %lld MiB holds no block", (long long)cfg.kv_mem_mb);
    if (kv_storage_init(&e->kv, &m->cfg, n_blocks)) FAIL("cannot allocate %lld MiB of KV cache", (long long)cfg.kv_mem_mb);
    if (kv_blocks_init(&e->blocks, n_blocks)) FAIL("out of memory");
    e->tp = threadpool_create(cfg.n_threads);
    e->fwd = fwd_state_create(m, cfg.max_batch_tokens, cfg.max_batch);
    size_t V = (size_t)m->cfg.n_vocab, T = (size_t)cfg.max_batch_tokens;
    e->logits = malloc(sizeof(float) * V * (size_t)cfg.max_batch);
    e->work_idx = malloc(sizeof(int32_t) * V);
    e->work_p = malloc(sizeof(float) * V);
    e->running = malloc(sizeof(int64_t) * (size_t)cfg.max_batch);
    e->b_tokens = malloc(sizeof(int32_t) * T);
    e->b_pos = malloc(sizeof(int32_t) * T);
    e->b_tables = malloc(sizeof(*e->b_tables) * T);
    e->b_logit_rows = malloc(sizeof(int32_t) * (size_t)cfg.max_batch);
    e->b_logit_req = malloc(sizeof(int64_t) * (size_t)cfg.max_batch);
    if (!e->tp || !e->fwd || !e->logits || !e->work_idx || !e->work_p || !e->running || !e->b_tokens ||
        !e->b_pos || !e->b_tables || !e->b_logit_rows || !e->b_logit_req)
        FAIL("out of memory");
    *out = e;
    return 0;
}
#undef FAIL

static void request_free(request *r) {
    if (!r) return;
    free(r->seq);
    free(r->blocks);
    free(r->out);
    free(r);
}

void invar_engine_free(invar_engine *e) {
    if (!e) return;
    for (int64_t i = 0; i < e->n_reqs; i++) request_free(e->reqs[i]);
    free(e->reqs);
    threadpool_destroy(e->tp);
    kv_storage_free(&e->kv);
    kv_blocks_free(&e->blocks);
    fwd_state_free(e->fwd);
    free(e->logits);
    free(e->work_idx);
    free(e->work_p);
    free(e->running);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_tables);
    free(e->b_logit_rows);
    free(e->b_logit_req);
    free(e);
}

void invar_engine_set_callback(invar_engine *e, invar_token_cb cb, void *user) {
    e->cb = cb;
    e->cb_user = user;
}

const char *invar_engine_error(const invar_engine *e) { return e->error; }

static int64_t blocks_needed(const invar_engine *e, const request *r) {
    int64_t n = r->n_prompt + r->samp.max_tokens;
    if (n > e->cfg.n_ctx) n = e->cfg.n_ctx;
    return (n + KV_BLOCK - 1) / KV_BLOCK;
}

static void finish(invar_engine *e, request *r, invar_finish why) {
    r->finish = why;
    r->state = REQ_DONE;
    kv_blocks_release(&e->blocks, r->blocks, r->n_blocks);
    r->n_blocks = 0;
}

static void reject(invar_engine *e, request *r, const char *msg) {
    snprintf(r->error, sizeof r->error, "%s", msg);
    finish(e, r, INVAR_FINISH_ERROR);
}

int64_t invar_engine_submit(invar_engine *e, const int32_t *prompt, int64_t n_prompt, const invar_sampling *s) {
    if (e->n_reqs == e->cap_reqs) {
        int64_t cap = e->cap_reqs ? e->cap_reqs * 2 : 64;
        request **nr = realloc(e->reqs, sizeof *nr * (size_t)cap);
        if (!nr) return -1;
        e->reqs = nr;
        e->cap_reqs = cap;
    }
    request *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->id = e->n_reqs;
    r->samp = *s;
    r->n_prompt = n_prompt > 0 ? n_prompt : 0;
    e->reqs[e->n_reqs++] = r;

    char msg[200];
    const char *bad = sampler_check(s);
    int64_t V = e->im->m->cfg.n_vocab;
    if (bad) return reject(e, r, bad), r->id;
    if (n_prompt <= 0) return reject(e, r, "empty prompt"), r->id;
    if (n_prompt >= e->cfg.n_ctx) {
        snprintf(msg, sizeof msg, "prompt of %lld tokens does not fit the context of %d tokens",
                 (long long)n_prompt, e->cfg.n_ctx);
        return reject(e, r, msg), r->id;
    }
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            snprintf(msg, sizeof msg, "token id %d out of range [0, %lld)", prompt[i], (long long)V);
            return reject(e, r, msg), r->id;
        }
    if (blocks_needed(e, r) > e->blocks.n_total) {
        snprintf(msg, sizeof msg, "request needs %lld KV blocks, more than the whole budget of %lld",
                 (long long)blocks_needed(e, r), (long long)e->blocks.n_total);
        return reject(e, r, msg), r->id;
    }
    r->cap_seq = n_prompt + s->max_tokens;
    if (r->cap_seq > e->cfg.n_ctx) r->cap_seq = e->cfg.n_ctx;
    r->seq = malloc(sizeof(int32_t) * (size_t)r->cap_seq);
    r->out = malloc(sizeof(invar_token_info) * (size_t)(r->cap_seq - n_prompt)); /* at most this many */
    r->blocks = malloc(sizeof(int32_t) * (size_t)blocks_needed(e, r));
    if (!r->seq || !r->out || !r->blocks) return reject(e, r, "out of memory"), r->id;
    memcpy(r->seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
    r->n_seq = n_prompt;
    r->state = REQ_QUEUED;
    return r->id;
}

int invar_engine_cancel(invar_engine *e, int64_t id) {
    if (id < 0 || id >= e->n_reqs || !e->reqs[id]) return -1;
    request *r = e->reqs[id];
    if (r->state == REQ_DONE) return 0;
    finish(e, r, INVAR_FINISH_CANCELLED);
    return 0;
}

/* Admission in arrival order: a request starts once its whole KV need is reserved. */
static void admit(invar_engine *e) {
    int64_t w = 0;
    for (int64_t i = 0; i < e->n_running; i++) {
        const request *r = e->reqs[e->running[i]]; /* NULL once released */
        if (r && r->state == REQ_RUNNING) e->running[w++] = e->running[i];
    }
    e->n_running = w;
    while (e->next_queued < e->n_reqs) {
        request *r = e->reqs[e->next_queued];
        if (r && r->state == REQ_QUEUED) {
            if (e->n_running == e->cfg.max_batch) return;
            int64_t need = blocks_needed(e, r);
            if (kv_blocks_take(&e->blocks, r->blocks, need)) return;
            r->n_blocks = need;
            r->state = REQ_RUNNING;
            e->running[e->n_running++] = r->id;
        }
        e->next_queued++;
    }
}

/* Records a token and finishes the request if it is done. The callback runs last and r is
 * not touched after it, so a callback may cancel or release requests, this one included. */
static void emit(invar_engine *e, request *r, const invar_token_info *info) {
    r->out[r->n_out++] = *info;
    r->seq[r->n_seq++] = info->token;
    const model *m = e->im->m;
    if (!r->samp.ignore_eos && tokenizer_is_eog(m->tok, info->token)) finish(e, r, INVAR_FINISH_STOP);
    else if (r->n_out >= r->samp.max_tokens || r->n_seq >= e->cfg.n_ctx) finish(e, r, INVAR_FINISH_LENGTH);
    if (e->cb) e->cb(e->cb_user, r->id, info);
}

int invar_engine_step(invar_engine *e) {
    admit(e);
    int64_t budget = e->cfg.max_batch_tokens, T = 0, n_logits = 0;
    /* Pass 0 schedules decodes (one pending token), pass 1 prefill chunks: a long prompt
     * never delays the running decodes. */
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < e->n_running && budget > 0; i++) {
            request *r = e->reqs[e->running[i]];
            int64_t pending = r->n_seq - r->n_cached;
            if (pending == 0 || (pass == 0) != (pending == 1)) continue;
            int64_t take = pending < budget ? pending : budget;
            for (int64_t j = 0; j < take; j++) {
                int64_t p = r->n_cached + j;
                e->b_tokens[T] = r->seq[p];
                e->b_pos[T] = (int32_t)p;
                e->b_tables[T] = r->blocks;
                T++;
            }
            r->n_cached += take;
            budget -= take;
            if (r->n_cached == r->n_seq) {
                e->b_logit_rows[n_logits] = (int32_t)(T - 1);
                e->b_logit_req[n_logits++] = r->id;
            }
        }
    }
    if (T > 0) {
        fwd_batch b = {T, e->b_tokens, e->b_pos, e->b_tables, n_logits, e->b_logit_rows};
        if (model_forward(e->im->m, e->fwd, e->tp, &e->kv, &b, e->logits)) {
            snprintf(e->error, sizeof e->error, "forward pass rejected its batch");
            return -1;
        }
        const int64_t V = e->im->m->cfg.n_vocab;
        for (int64_t i = 0; i < n_logits; i++) {
            request *r = e->reqs[e->b_logit_req[i]];
            if (!r || r->state != REQ_RUNNING) continue; /* cancelled or released by a callback */
            invar_token_info info;
            sampler_choose(e->logits + i * V, V, &r->samp, r->n_seq, &info, e->work_idx, e->work_p);
            emit(e, r, &info);
        }
    }
    int left = 0;
    for (int64_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i] && e->reqs[i]->state != REQ_DONE) left++;
    return left;
}

int invar_engine_result(const invar_engine *e, int64_t id, invar_result *out) {
    if (id < 0 || id >= e->n_reqs || !e->reqs[id]) return -1;
    const request *r = e->reqs[id];
    *out = (invar_result){r->state == REQ_DONE ? r->finish : INVAR_FINISH_NONE,
                          r->finish == INVAR_FINISH_ERROR ? r->error : NULL, r->n_out, r->out, r->n_prompt};
    return 0;
}

void invar_engine_release(invar_engine *e, int64_t id) {
    if (id < 0 || id >= e->n_reqs || !e->reqs[id]) return;
    if (e->reqs[id]->state != REQ_DONE) invar_engine_cancel(e, id);
    request_free(e->reqs[id]);
    e->reqs[id] = NULL;
}

void invar_engine_testing_set_matmul(invar_engine *e, matmul_fn fn) { fwd_state_set_matmul(e->fwd, fn); }
