/* The engine: queue, scheduler and per-request state around the ragged forward pass.
 *
 * Each step: queued requests are admitted in arrival order (reusing prefix-cached KV
 * blocks), running requests contribute their pending tokens (decodes first, then prefill
 * chunks in arrival order, within the token budget), KV blocks are allocated for them,
 * preempting the most recently admitted requests when blocks run out, one forward computes
 * all tokens, and every request whose pending tokens are all in the cache samples its next
 * token. A request that asked for prompt logprobs also gets the logits row of each prompt
 * position it computes, turned into the next prompt token's logprob at once (its chunk is
 * cut so that a step never asks for more rows than the backend holds). Nothing a request
 * computes depends on the others: the forward pass and the sampler are per-token / per-row
 * by construction, a prefix-cache hit reuses bits that the same tokens at the same
 * positions produce anyway, and a preempted request recomputes them. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "kernels/cpu/attention.h"
#include "sampling/sampler.h"
#include "engine/block_pool.h"
#include "engine/engine_internal.h"
#include "engine/engine_testing.h"
#include "engine/spec_draft.h"
#include "engine/spec_ngram.h"
#include "engine/spec_rejection.h"
#include "model/weight_update.h"
#include "invar.h"

typedef enum { REQ_QUEUED, REQ_RUNNING, REQ_DONE } req_state;

typedef struct {
    int64_t id;
    req_state state;
    invar_sampling samp;
    int32_t *seq;               /* prompt followed by generated tokens */
    int64_t n_prompt, n_seq, cap_seq;
    int64_t n_cached;           /* tokens of seq whose K/V are in the cache */
    int32_t *blocks;            /* block table: ceil(cap_seq / KV_BLOCK) entries */
    int64_t n_blocks;           /* blocks held */
    block_hash *hashes;         /* hash chain of seq's full blocks */
    int64_t n_hashed;           /* blocks of seq hashed so far */
    int64_t n_registered;       /* full computed blocks offered to the prefix cache */
    int64_t take;               /* tokens scheduled in the current step */
    int32_t n_draft;            /* drafted tokens waiting in seq[n_seq, n_seq + n_draft) */
    int64_t row0, n_rows;       /* this step's sampling rows: row0 .. row0 + n_rows - 1 */
    int64_t n_emit;             /* of their tokens, those this step emits */
    int32_t spec_misses;        /* verifications in a row that kept no draft */
    int32_t spec_wait;          /* decode steps to run without drafts before trying again */
    draft_seq dseq;             /* its state in the draft model (INVAR_SPEC_DRAFT) */
    float *plp;                 /* prompt logprobs: plp[p] = logprob of seq[p + 1] */
    invar_token_info *plp_top;  /* with top_logprobs: their alternatives, likewise */
    int64_t n_plp;              /* delivered so far, in order (kept across preemption) */
    int64_t plp_want;           /* n_prompt - 1 if asked for, else 0 */
    int64_t n_cached_prompt;    /* prefix-cache hits of its first start; -1 until then */
    invar_token_info *out;
    int64_t n_out;
    invar_finish finish;
    char error[200];
} request;

/* Requests by id. Ids only grow and a server serves requests forever, so this holds only
 * the requests not yet released, sorted by id (a new id is the largest: appended). A
 * release leaves a hole; holes are compacted away once they outnumber the live requests,
 * so memory follows the live count, not the count ever served. */
typedef struct {
    int64_t id;
    request *r;                 /* NULL once released */
} req_slot;

struct invar_engine {
    pthread_mutex_t lock;       /* recursive: callbacks may call back in */
    /* A step holds `lock` for a whole forward pass and the engine thread takes it again at
     * once (a mutex is not fair), so a reader of the stats (/metrics) waiting on it could
     * starve behind back-to-back steps. Each call that changes them publishes a copy here. */
    pthread_mutex_t stats_lock;
    invar_engine_stats stats;
    invar_model *im;
    invar_engine_config cfg;
    backend *be;                /* the device: weights, forward pass, logits, sampling */
    backend_opts be_opts;       /* what it was made with (made again after a weight update) */
    backend_kv *kv;             /* its paged KV storage, indexed by the block pool's ids */
    block_pool pool;
    sample_row *rows;           /* per sampling row of a step: parameters and position */
    invar_token_info *infos;    /* per sampling row of a step */
    req_slot *slots;            /* by id, ascending */
    int64_t n_slots, cap_slots, n_holes;
    int64_t next_id;
    int64_t *running;           /* ids, in admission order */
    int64_t n_running;
    int64_t first_queued;       /* no queued request has a lower id */
    int64_t max_logits;         /* logits rows the backend holds per forward */
    /* per-step batch buffers: sampling rows first, then prompt-logprob rows */
    int32_t *b_tokens, *b_pos, *b_logit_rows;
    const int32_t **b_tables;
    int64_t *b_logit_req;       /* ids of the sampling rows' requests */
    int64_t *b_logit_pos;       /* the position each sampling row chooses a token for */
    int32_t *b_plp_rows, *b_plp_tok, *b_plp_pos;
    request **b_plp_req;        /* valid until the step's callbacks run */
    float *b_plp_out;
    int32_t *b_plp_ntop; /* alternatives each prompt-logprob row reports (0: none) */
    invar_token_info *b_plp_top;
    invar_token_cb cb;
    void *cb_user;
    int64_t n_active;           /* queued or running */
    int64_t preemptions, tokens_computed, tokens_generated;
    int64_t spec_steps, spec_drafted, spec_accepted;
    spec_draft *draft;          /* the draft model, if the config names one */
    draft_job *draft_jobs;      /* per running sequence */
    invar_testing_drafter test_drafter; /* tests: replaces the real drafts */
    void *test_drafter_user;
    bool spec_rejection;        /* NEGATIVE CONTROL (tests): spec_rejection.h */
    bool shared_history;        /* NEGATIVE CONTROL (tests): every row penalised by row 0's history */
    int32_t *eog;               /* the model's end-of-generation ids (min_tokens masks them) */
    int32_t n_eog;
    float *rej_logits, *rej_work;
    bool testing_stale_kv;      /* NEGATIVE CONTROL (tests): weight updates keep caches */
    bool broken;                /* a weight update could not remake the backend: step fails */
    char error[256];
};

void invar_engine_config_default(invar_engine_config *c) {
    *c = (invar_engine_config){.n_threads = 0, .max_batch = 16, .max_batch_tokens = 512, .n_ctx = 0,
                               .kv_mem_mb = 1024, .kv_blocks = 0, .no_prefix_cache = false,
                               .device = INVAR_DEVICE_CPU, .cuda_device = 0, .cuda_gemm_cublas = false, .cuda_no_graphs = false,
                               .kv_type = INVAR_KV_F32};
}

static void publish_stats(invar_engine *e);

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); invar_engine_free(e); return -1; } while (0)

int invar_engine_create(invar_model *im, const invar_engine_config *cfg_in, invar_engine **out,
                        char *err, size_t errlen) {
    *out = NULL;
    invar_engine *e = calloc(1, sizeof *e);
    if (!e) return -1;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&e->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_mutex_init(&e->stats_lock, NULL);
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    if (cfg_in) cfg = *cfg_in;
    const model *m = im->m;
    if (cfg.n_threads <= 0) cfg.n_threads = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    if (cfg.n_threads <= 0) cfg.n_threads = 1;
    if (cfg.n_ctx <= 0 || cfg.n_ctx > m->rope_len) cfg.n_ctx = (int32_t)m->rope_len;
    if (cfg.max_batch <= 0) FAIL("max_batch must be > 0");
    if (cfg.max_batch_tokens < cfg.max_batch) cfg.max_batch_tokens = cfg.max_batch;
    if (cfg.kv_mem_mb <= 0 && cfg.kv_blocks <= 0) FAIL("kv_mem_mb must be > 0");
    if (cfg.spec_step_tokens < 0) FAIL("spec_step_tokens must be >= 0");
    if (cfg.kv_type != INVAR_KV_F32 && cfg.kv_type != INVAR_KV_F16) FAIL("kv_type must be f32 or f16");
    if (cfg.spec_step_tokens == 0) cfg.spec_step_tokens = cfg.device == INVAR_DEVICE_CUDA ? 64 : 4;
    e->im = im;
    e->cfg = cfg;
    /* Logits rows: a step's sequences plus prompt-logprob rows, or a scoring chunk
     * (invar_engine_score). Not max_batch_tokens: rows cost n_vocab floats each, and plan()
     * cuts prompt-logprob chunks to the rows there are. >= max_batch, so every running
     * sequence always has its sampling row. */
    int64_t max_logits = cfg.max_batch > ENGINE_SCORE_CHUNK ? cfg.max_batch : ENGINE_SCORE_CHUNK;
    if (max_logits > cfg.max_batch_tokens) max_logits = cfg.max_batch_tokens;
    e->max_logits = max_logits;
    backend_opts bo = {.n_threads = cfg.n_threads, .max_tokens = cfg.max_batch_tokens, .max_logits = max_logits,
                       .cuda_device = cfg.cuda_device, .cuda_gemm_cublas = cfg.cuda_gemm_cublas,
                       .cuda_graphs = !cfg.cuda_no_graphs,
                       .kv_type = cfg.kv_type == INVAR_KV_F16 ? ATTN_KV_F16 : ATTN_KV_F32};
    char berr[200];
    e->be_opts = bo;
    if (backend_create(cfg.device, im->m, &bo, &e->be, berr, sizeof berr)) FAIL("%s", berr);
    int64_t n_blocks = cfg.kv_blocks > 0
                           ? cfg.kv_blocks
                           : (int64_t)((size_t)cfg.kv_mem_mb * 1024 * 1024 / e->be->ops->kv_bytes_per_block(e->be));
    if (n_blocks < 1) FAIL("KV budget of %lld MiB holds no block", (long long)cfg.kv_mem_mb);
    if (n_blocks > INT32_MAX) FAIL("KV budget too large");
    if (e->be->ops->kv_create(e->be, n_blocks, &e->kv)) FAIL("%s", e->be->error);
    if (block_pool_init(&e->pool, n_blocks, !cfg.no_prefix_cache)) FAIL("out of memory");
    /* The draft model's KV has as many blocks as the target's: every sequence the target
     * holds fits (the draft has no prefix cache, so one that does not just drafts less). */
    if (cfg.draft_model) {
        if (spec_draft_create(cfg.draft_model->m, m, cfg.n_threads, cfg.max_batch_tokens, cfg.max_batch, n_blocks,
                              &e->draft, berr, sizeof berr))
            FAIL("%s", berr);
        e->draft_jobs = malloc(sizeof(draft_job) * (size_t)cfg.max_batch);
        if (!e->draft_jobs) FAIL("out of memory");
    }
    /* Row buffers hold a row per token (more than the backend's rows), so that a plan
     * over the backend's rows is caught before the forward, not by overwriting memory. */
    size_t T = (size_t)cfg.max_batch_tokens, L = T;
    /* Sampling rows: one per running sequence, and one per drafted token it verifies. */
    e->rows = malloc(sizeof(sample_row) * (size_t)max_logits);
    e->infos = malloc(sizeof(invar_token_info) * (size_t)max_logits);
    e->running = malloc(sizeof(int64_t) * (size_t)cfg.max_batch);
    e->b_tokens = malloc(sizeof(int32_t) * T);
    e->b_pos = malloc(sizeof(int32_t) * T);
    e->b_tables = malloc(sizeof(*e->b_tables) * T);
    e->b_logit_rows = malloc(sizeof(int32_t) * L);
    e->b_logit_req = malloc(sizeof(int64_t) * L);
    e->b_logit_pos = malloc(sizeof(int64_t) * L);
    e->b_plp_rows = malloc(sizeof(int32_t) * L);
    e->b_plp_tok = malloc(sizeof(int32_t) * L);
    e->b_plp_pos = malloc(sizeof(int32_t) * L);
    e->b_plp_req = malloc(sizeof(request *) * L);
    e->b_plp_out = malloc(sizeof(float) * L);
    e->b_plp_ntop = malloc(sizeof(int32_t) * L);
    e->b_plp_top = malloc(sizeof(invar_token_info) * L);
    if (!e->rows || !e->infos || !e->running || !e->b_tokens || !e->b_pos || !e->b_tables || !e->b_logit_rows ||
        !e->b_logit_req || !e->b_logit_pos || !e->b_plp_rows || !e->b_plp_tok || !e->b_plp_pos || !e->b_plp_req ||
        !e->b_plp_out || !e->b_plp_ntop || !e->b_plp_top)
        FAIL("out of memory");
    const int32_t V = m->cfg.n_vocab;
    for (int32_t t = 0; t < V; t++) e->n_eog += tokenizer_is_eog(m->tok, t);
    e->eog = malloc(sizeof(int32_t) * (size_t)(e->n_eog ? e->n_eog : 1));
    if (!e->eog) FAIL("out of memory");
    for (int32_t t = 0, k = 0; t < V; t++)
        if (tokenizer_is_eog(m->tok, t)) e->eog[k++] = t;
    publish_stats(e);
    *out = e;
    return 0;
}
#undef FAIL

static void request_free(request *r) {
    if (!r) return;
    free(r->seq);
    free(r->blocks);
    free(r->dseq.blocks);
    free(r->hashes);
    free(r->plp);
    free(r->plp_top);
    free(r->out);
    free(r);
}

/* First slot whose id is >= id. */
static int64_t slot_lower_bound(const invar_engine *e, int64_t id) {
    int64_t lo = 0, hi = e->n_slots;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (e->slots[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The request with this id; NULL if released or never issued. */
static request *req_get(const invar_engine *e, int64_t id) {
    int64_t i = slot_lower_bound(e, id);
    return i < e->n_slots && e->slots[i].id == id ? e->slots[i].r : NULL;
}

static int slot_append(invar_engine *e, request *r) {
    if (e->n_slots == e->cap_slots) {
        int64_t cap = e->cap_slots ? e->cap_slots * 2 : 64;
        req_slot *ns = realloc(e->slots, sizeof *ns * (size_t)cap);
        if (!ns) return -1;
        e->slots = ns;
        e->cap_slots = cap;
    }
    e->slots[e->n_slots++] = (req_slot){r->id, r};
    return 0;
}

/* Drops the holes (order kept) and gives back storage the live requests do not need. */
static void slots_compact(invar_engine *e) {
    int64_t w = 0;
    for (int64_t i = 0; i < e->n_slots; i++)
        if (e->slots[i].r) e->slots[w++] = e->slots[i];
    e->n_slots = w;
    e->n_holes = 0;
    if (e->cap_slots > 64 && e->cap_slots > 4 * w) {
        int64_t cap = 2 * w > 64 ? 2 * w : 64;
        req_slot *ns = realloc(e->slots, sizeof *ns * (size_t)cap);
        if (ns) e->slots = ns, e->cap_slots = cap;
    }
}

static void slot_clear(invar_engine *e, int64_t id) {
    int64_t i = slot_lower_bound(e, id);
    if (i == e->n_slots || e->slots[i].id != id || !e->slots[i].r) return;
    e->slots[i].r = NULL;
    if (++e->n_holes > 32 && 2 * e->n_holes > e->n_slots) slots_compact(e);
}

void invar_engine_free(invar_engine *e) {
    if (!e) return;
    for (int64_t i = 0; i < e->n_slots; i++) request_free(e->slots[i].r);
    free(e->slots);
    if (e->be) e->be->ops->kv_destroy(e->be, e->kv);
    backend_destroy(e->be);
    block_pool_free(&e->pool);
    spec_draft_free(e->draft);
    free(e->draft_jobs);
    free(e->rows);
    free(e->infos);
    free(e->running);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_tables);
    free(e->b_logit_rows);
    free(e->b_logit_req);
    free(e->b_logit_pos);
    free(e->eog);
    free(e->rej_logits);
    free(e->rej_work);
    free(e->b_plp_rows);
    free(e->b_plp_tok);
    free(e->b_plp_pos);
    free(e->b_plp_req);
    free(e->b_plp_out);
    free(e->b_plp_ntop);
    free(e->b_plp_top);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->stats_lock);
    free(e);
}

void invar_engine_set_callback(invar_engine *e, invar_token_cb cb, void *user) {
    pthread_mutex_lock(&e->lock);
    e->cb = cb;
    e->cb_user = user;
    pthread_mutex_unlock(&e->lock);
}

const char *invar_engine_error(const invar_engine *e) { return e->error; }
const char *invar_engine_device_info(const invar_engine *e) { return e->be->info; }

static int64_t blocks_for(int64_t n_tokens) { return (n_tokens + KV_BLOCK - 1) / KV_BLOCK; }

/* Under e->lock, by every call that changes what the stats count. */
static void publish_stats(invar_engine *e) {
    invar_engine_stats st = {0}, *s = &st;
    for (int64_t i = slot_lower_bound(e, e->first_queued); i < e->n_slots; i++)
        if (e->slots[i].r && e->slots[i].r->state == REQ_QUEUED) s->n_queued++;
    for (int64_t i = 0; i < e->n_running; i++) {
        const request *r = req_get(e, e->running[i]);
        if (r && r->state == REQ_RUNNING) s->n_running++;
    }
    s->kv_blocks_total = e->pool.n_total;
    s->kv_blocks_free = block_pool_available(&e->pool);
    s->prefix_blocks_hit = e->pool.hits;
    s->prefix_blocks_looked_up = e->pool.lookups;
    s->preemptions = e->preemptions;
    s->tokens_computed = e->tokens_computed;
    s->tokens_generated = e->tokens_generated;
    s->spec_steps = e->spec_steps;
    s->spec_drafted = e->spec_drafted;
    s->spec_accepted = e->spec_accepted;
    pthread_mutex_lock(&e->stats_lock);
    e->stats = st;
    pthread_mutex_unlock(&e->stats_lock);
}

void invar_engine_get_stats(invar_engine *e, invar_engine_stats *s) {
    pthread_mutex_lock(&e->stats_lock);
    *s = e->stats;
    pthread_mutex_unlock(&e->stats_lock);
}

static void release_blocks(invar_engine *e, request *r) {
    for (int64_t b = r->n_blocks - 1; b >= 0; b--) block_pool_release(&e->pool, r->blocks[b]);
    r->n_blocks = 0;
    r->n_cached = 0;
    r->n_registered = 0;
    if (r->dseq.blocks) draft_seq_release(e->draft, &r->dseq);
}

static void finish(invar_engine *e, request *r, invar_finish why) {
    if (r->state != REQ_DONE) e->n_active--;
    r->finish = why;
    r->state = REQ_DONE;
    release_blocks(e, r);
}

static void reject(invar_engine *e, request *r, const char *msg) {
    snprintf(r->error, sizeof r->error, "%s", msg);
    finish(e, r, INVAR_FINISH_ERROR);
}

static const char *validate(const invar_engine *e, const int32_t *prompt, int64_t n_prompt,
                            const invar_sampling *s, char *msg, size_t cap) {
    const char *bad = sampler_check(s);
    int64_t V = e->im->m->cfg.n_vocab;
    if (bad) return bad;
    if (n_prompt <= 0) return "empty prompt";
    if (n_prompt >= e->cfg.n_ctx) {
        snprintf(msg, cap, "prompt of %lld tokens does not fit the context of %d tokens", (long long)n_prompt,
                 e->cfg.n_ctx);
        return msg;
    }
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            snprintf(msg, cap, "token id %d out of range [0, %lld)", prompt[i], (long long)V);
            return msg;
        }
    if (s->speculate == INVAR_SPEC_DRAFT && !e->draft) return "speculate=draft needs an engine with a draft model";
    for (int32_t i = 0; i < s->n_logit_bias; i++)
        if (s->logit_bias[i].token < 0 || s->logit_bias[i].token >= V) {
            snprintf(msg, cap, "logit_bias token id %d out of range [0, %lld)", s->logit_bias[i].token, (long long)V);
            return msg;
        }
    for (int32_t i = 0; i < s->n_stop_token_ids; i++)
        if (s->stop_token_ids[i] < 0 || s->stop_token_ids[i] >= V) {
            snprintf(msg, cap, "stop token id %d out of range [0, %lld)", s->stop_token_ids[i], (long long)V);
            return msg;
        }
    int64_t need = blocks_for(n_prompt + s->max_tokens < e->cfg.n_ctx ? n_prompt + s->max_tokens : e->cfg.n_ctx);
    if (need > e->pool.n_total) {
        snprintf(msg, cap, "request needs %lld KV blocks, more than the whole budget of %lld", (long long)need,
                 (long long)e->pool.n_total);
        return msg;
    }
    return NULL;
}

static int64_t submit_locked(invar_engine *e, const int32_t *prompt, int64_t n_prompt, const invar_sampling *s) {
    request *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->id = e->next_id;
    r->state = REQ_DONE; /* until it is fully set up */
    r->samp = *s;
    r->n_prompt = n_prompt > 0 ? n_prompt : 0;
    r->n_cached_prompt = -1;
    if (slot_append(e, r)) {
        free(r);
        return -1;
    }
    e->next_id++;
    char msg[200];
    const char *bad = validate(e, prompt, n_prompt, s, msg, sizeof msg);
    if (bad) return reject(e, r, bad), r->id;
    r->cap_seq = n_prompt + s->max_tokens < e->cfg.n_ctx ? n_prompt + s->max_tokens : e->cfg.n_ctx;
    r->seq = malloc(sizeof(int32_t) * (size_t)r->cap_seq);
    r->out = malloc(sizeof(invar_token_info) * (size_t)(r->cap_seq - n_prompt)); /* at most this many */
    r->blocks = malloc(sizeof(int32_t) * (size_t)blocks_for(r->cap_seq));
    r->hashes = malloc(sizeof(block_hash) * (size_t)blocks_for(r->cap_seq));
    r->plp_want = s->prompt_logprobs ? n_prompt - 1 : 0;
    r->plp = r->plp_want ? malloc(sizeof(float) * (size_t)r->plp_want) : NULL;
    if (r->plp_want && s->top_logprobs > 0) r->plp_top = malloc(sizeof(invar_token_info) * (size_t)r->plp_want);
    if (s->speculate == INVAR_SPEC_DRAFT) r->dseq.blocks = malloc(sizeof(int32_t) * (size_t)blocks_for(r->cap_seq));
    if (!r->seq || !r->out || !r->blocks || !r->hashes ||
        (r->plp_want && (!r->plp || (s->top_logprobs > 0 && !r->plp_top))) ||
        (s->speculate == INVAR_SPEC_DRAFT && !r->dseq.blocks))
        return reject(e, r, "out of memory"), r->id;
    memcpy(r->seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
    r->n_seq = n_prompt;
    r->state = REQ_QUEUED;
    e->n_active++;
    return r->id;
}

int64_t invar_engine_submit(invar_engine *e, const int32_t *prompt, int64_t n_prompt, const invar_sampling *s) {
    pthread_mutex_lock(&e->lock);
    int64_t id = submit_locked(e, prompt, n_prompt, s);
    publish_stats(e);
    pthread_mutex_unlock(&e->lock);
    return id;
}

int invar_engine_cancel(invar_engine *e, int64_t id) {
    pthread_mutex_lock(&e->lock);
    int rc = -1;
    request *r = req_get(e, id);
    if (r) {
        if (r->state != REQ_DONE) finish(e, r, INVAR_FINISH_CANCELLED);
        rc = 0;
    }
    publish_stats(e);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* Hash chain of seq's full blocks up to n_full (computed once per block). */
static void hash_blocks(request *r, int64_t n_full) {
    for (; r->n_hashed < n_full; r->n_hashed++) {
        block_hash prev = r->n_hashed ? r->hashes[r->n_hashed - 1] : (block_hash){0, 0};
        r->hashes[r->n_hashed] = block_hash_next(prev, r->seq + r->n_hashed * KV_BLOCK, KV_BLOCK);
    }
}

/* Starts a queued request: takes the longest cached prefix of whole blocks (leaving at least
 * one token to compute, whose logits it needs), if the rest of its prompt fits. */
static bool start(invar_engine *e, request *r) {
    int64_t n_full = (r->n_seq - 1) / KV_BLOCK;
    /* A hit skips computing its positions, but a prompt-logprobs request needs the logits row
     * of every position whose logprob it still owes: it takes hits only for blocks wholly
     * before n_plp (delivered before a preemption) and recomputes the rest. */
    if (r->n_plp < r->plp_want && n_full > r->n_plp / KV_BLOCK) n_full = r->n_plp / KV_BLOCK;
    hash_blocks(r, n_full);
    int64_t hits = 0;
    while (hits < n_full) {
        int32_t id = block_pool_lookup(&e->pool, r->hashes[hits]);
        if (id < 0) break;
        r->blocks[hits++] = id;
    }
    r->n_blocks = hits;
    if (blocks_for(r->n_seq) - hits > block_pool_available(&e->pool)) {
        release_blocks(e, r);
        return false;
    }
    r->n_cached = hits * KV_BLOCK;
    r->n_registered = hits;
    if (r->n_cached_prompt < 0) r->n_cached_prompt = r->n_cached;
    r->state = REQ_RUNNING;
    e->running[e->n_running++] = r->id;
    return true;
}

static void admit(invar_engine *e) {
    int64_t w = 0;
    for (int64_t i = 0; i < e->n_running; i++) {
        const request *r = req_get(e, e->running[i]); /* NULL once released */
        if (r && r->state == REQ_RUNNING) e->running[w++] = e->running[i];
    }
    e->n_running = w;
    int64_t i = slot_lower_bound(e, e->first_queued);
    while (i < e->n_slots && (!e->slots[i].r || e->slots[i].r->state != REQ_QUEUED)) i++;
    e->first_queued = i < e->n_slots ? e->slots[i].id : e->next_id;
    /* Arrival order, preempted requests included (they keep their ids): the oldest first. */
    for (; i < e->n_slots && e->n_running < e->cfg.max_batch; i++) {
        request *r = e->slots[i].r;
        if (!r || r->state != REQ_QUEUED) continue;
        if (!start(e, r)) break;
    }
}

/* Frees the running request admitted last and puts it back in the queue: it will recompute
 * its K/V (prompt and generated tokens), which gives the same bits. */
static void preempt_last(invar_engine *e) {
    request *v = req_get(e, e->running[--e->n_running]);
    release_blocks(e, v);
    v->state = REQ_QUEUED;
    v->take = 0;
    if (v->id < e->first_queued) e->first_queued = v->id;
    e->preemptions++;
}

/* First position of the next chunk whose logits row a prompt-logprobs request still owes
 * (position p's row gives the logprob of token p + 1). */
static int64_t plp_first(const request *r) { return r->n_cached > r->n_plp ? r->n_cached : r->n_plp; }

/* Prompt-logprob rows of a chunk of `take` tokens from n_cached. */
static int64_t plp_rows(const request *r, int64_t take) {
    int64_t end = r->n_cached + take < r->plp_want ? r->n_cached + take : r->plp_want;
    return end > plp_first(r) ? end - plp_first(r) : 0;
}

/* Logits rows such a chunk needs: its prompt-logprob rows, and the sampling row if it
 * reaches the last pending token. */
static int64_t rows_for(const request *r, int64_t take) {
    return plp_rows(r, take) + (r->n_cached + take == r->n_seq);
}

/* The longest start of a chunk of `take` tokens whose rows fit in `rows`: it ends just
 * before the token that would need one row more. */
static int64_t fit_rows(const request *r, int64_t take, int64_t rows) {
    if (rows_for(r, take) <= rows) return take;
    int64_t stop = rows < plp_rows(r, take) ? plp_first(r) + rows : r->n_seq - 1;
    return stop - r->n_cached;
}

/* Decides how many tokens each running request computes this step. Pass 0: decodes (one
 * pending token), pass 1: prefill chunks, so a long prompt never delays running decodes.
 * Within the token budget and the backend's logits rows: decodes need one row each (at most
 * max_batch <= max_logits), so the oldest prefill always gets at least one row and one
 * token. */
static void plan(invar_engine *e) {
    int64_t budget = e->cfg.max_batch_tokens, rows = e->max_logits;
    for (int64_t i = 0; i < e->n_running; i++) req_get(e, e->running[i])->take = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < e->n_running && budget > 0; i++) {
            request *r = req_get(e, e->running[i]);
            int64_t pending = r->n_seq - r->n_cached;
            if (pending == 0 || (pass == 0) != (pending == 1)) continue;
            r->take = fit_rows(r, pending < budget ? pending : budget, rows);
            budget -= r->take;
            rows -= rows_for(r, r->take);
        }
    /* Pass 2: the drafted tokens of decodes, a logits row each, from what is left, so that
     * speculation never delays a prefill, and within spec_step_tokens with the decodes, past
     * which a forward's extra tokens cost more than the kept drafts save. */
    int64_t spec = e->cfg.spec_step_tokens;
    for (int64_t i = 0; i < e->n_running; i++) {
        const request *r = req_get(e, e->running[i]);
        spec -= r->take == 1 && r->n_seq - r->n_cached == 1;
    }
    for (int64_t i = 0; i < e->n_running && budget > 0 && rows > 0 && spec > 0; i++) {
        request *r = req_get(e, e->running[i]);
        if (r->take != 1 || r->n_seq - r->n_cached != 1 || r->n_draft == 0) continue;
        int64_t extra = r->n_draft < budget ? r->n_draft : budget;
        if (extra > rows) extra = rows;
        if (extra > spec) extra = spec;
        spec -= extra;
        r->take += extra;
        budget -= extra;
        rows -= extra;
    }
}

/* Drafted tokens a decoding request may verify this step: a step emits at most one token
 * more than it verifies, and never past the request's end (cap_seq). */
static int32_t draft_room(request *r) {
    if (r->samp.speculate == INVAR_SPEC_OFF || r->n_seq - r->n_cached != 1) return 0;
    if (r->spec_wait > 0) return r->spec_wait--, 0;
    int64_t k = r->samp.spec_tokens > 0 ? r->samp.spec_tokens : INVAR_DEFAULT_SPEC_TOKENS;
    if (r->spec_misses > 0) k = 1; /* after a miss, a one-token probe: the cheapest forward */
    int64_t room = r->cap_seq - r->n_seq - 1;
    return (int32_t)(k < room ? k : room);
}

/* Each speculating decode's drafts, written after its sequence (seq has room up to cap_seq).
 * What is drafted changes only how many tokens a step keeps, never which. */
static int propose_drafts(invar_engine *e) {
    const int64_t V = e->im->m->cfg.n_vocab;
    int64_t n_jobs = 0;
    for (int64_t i = 0; i < e->n_running; i++) {
        request *r = req_get(e, e->running[i]);
        r->n_draft = 0;
        const int32_t k = draft_room(r);
        if (k <= 0) continue;
        int32_t *out = r->seq + r->n_seq, n = 0;
        if (e->test_drafter) n = e->test_drafter(e->test_drafter_user, r->id, r->seq, r->n_seq, k, out);
        else if (r->samp.speculate == INVAR_SPEC_NGRAM) n = ngram_propose(r->seq, r->n_seq, k, out);
        else e->draft_jobs[n_jobs++] = (draft_job){r->seq, r->n_seq, k, &r->dseq, 0}; /* batched below */
        if (n > k) n = k;
        int32_t valid = 0;
        while (valid < n && out[valid] >= 0 && out[valid] < V) valid++;
        r->n_draft = valid;
    }
    if (n_jobs == 0) return 0;
    if (spec_draft_propose(e->draft, e->draft_jobs, n_jobs, e->error, sizeof e->error)) return -1;
    for (int64_t i = 0, j = 0; i < e->n_running && j < n_jobs; i++) {
        request *r = req_get(e, e->running[i]);
        if (&r->dseq == e->draft_jobs[j].ds) r->n_draft = e->draft_jobs[j++].n_out;
    }
    return 0;
}

/* Gives every planned request the blocks its tokens need, preempting from the back of the
 * running list when the pool is dry, and planning again after each preemption. */
static void allocate(invar_engine *e) {
    for (;;) {
        plan(e);
        bool ok = true;
        for (int64_t i = 0; i < e->n_running && ok; i++) {
            request *r = req_get(e, e->running[i]);
            int64_t need = blocks_for(r->n_cached + r->take);
            while (r->n_blocks < need) {
                int32_t id = block_pool_alloc(&e->pool);
                if (id < 0) {
                    ok = false;
                    break;
                }
                r->blocks[r->n_blocks++] = id;
            }
        }
        if (ok || e->n_running == 0) return;
        preempt_last(e);
    }
}

/* Offers newly completed full blocks to the prefix cache. */
static void register_blocks(invar_engine *e, request *r) {
    int64_t n_full = r->n_cached / KV_BLOCK;
    hash_blocks(r, n_full);
    for (; r->n_registered < n_full; r->n_registered++)
        block_pool_register(&e->pool, r->blocks[r->n_registered], r->hashes[r->n_registered]);
}

/* Records a token and finishes the request if it is done. The callback runs last and r is
 * not touched after it, so a callback may cancel or release requests, this one included. */
static void emit(invar_engine *e, request *r, const invar_token_info *info) {
    r->out[r->n_out++] = *info;
    r->seq[r->n_seq++] = info->token;
    e->tokens_generated++;
    const model *m = e->im->m;
    bool stop = !r->samp.ignore_eos && tokenizer_is_eog(m->tok, info->token);
    for (int32_t i = 0; i < r->samp.n_stop_token_ids; i++) stop |= info->token == r->samp.stop_token_ids[i];
    if (stop) finish(e, r, INVAR_FINISH_STOP);
    else if (r->n_out >= r->samp.max_tokens || r->n_seq >= e->cfg.n_ctx) finish(e, r, INVAR_FINISH_LENGTH);
    if (e->cb) e->cb(e->cb_user, r->id, info);
}

/* Samples every logits row of a step into e->infos (rows of requests cancelled meanwhile
 * are sampled too and ignored: a row's result depends on nothing but that row). Callbacks
 * run afterwards, in row order, on the calling thread (emit). */
static int sample_rows(invar_engine *e, int64_t n_rows) {
    for (int64_t i = 0; i < n_rows; i++) {
        const request *r = req_get(e, e->b_logit_req[i]);
        e->rows[i] = (sample_row){&r->samp, e->b_logit_pos[i], {0}};
        /* Penalties read the request's own tokens before the row's position (its drafts
         * included: a row after a rejected draft is discarded anyway). */
        if (sampler_processes(&r->samp))
            e->rows[i].hist = (sampler_history){r->seq, e->b_logit_pos[i], r->n_prompt, e->eog, e->n_eog};
        if (e->shared_history && i > 0 && e->rows[0].hist.seq && e->rows[i].hist.seq) e->rows[i].hist = e->rows[0].hist;
    }
    return e->be->ops->sample(e->be, n_rows, e->rows, e->infos);
}

/* Lays out the planned tokens (same order as plan()) and their logits rows: a sampling row
 * for each request whose pending tokens are all in, and a prompt-logprob row for each owed
 * prompt position. Returns the token count. */
static int64_t build_batch(invar_engine *e, int64_t *n_sample, int64_t *n_plp) {
    int64_t T = 0;
    *n_sample = *n_plp = 0;
    for (int64_t i = 0; i < e->n_running; i++) req_get(e, e->running[i])->n_rows = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < e->n_running; i++) {
            request *r = req_get(e, e->running[i]);
            const bool decode = r->n_seq - r->n_cached == 1; /* its token and any drafts after it */
            if (r->take == 0 || (pass == 0) != decode) continue;
            const int64_t p0 = plp_first(r), p1 = p0 + plp_rows(r, r->take);
            r->row0 = *n_sample;
            for (int64_t j = 0; j < r->take; j++) {
                int64_t p = r->n_cached + j;
                if (p >= p0 && p < p1) {
                    e->b_plp_rows[*n_plp] = (int32_t)T;
                    e->b_plp_tok[*n_plp] = r->seq[p + 1];
                    e->b_plp_pos[*n_plp] = (int32_t)p;
                    e->b_plp_req[(*n_plp)++] = r;
                }
                e->b_tokens[T] = r->seq[p];
                e->b_pos[T] = (int32_t)p;
                e->b_tables[T] = r->blocks;
                if (decode) { /* every token of a decode chooses the token after it */
                    e->b_logit_rows[*n_sample] = (int32_t)T;
                    e->b_logit_pos[*n_sample] = p + 1;
                    e->b_logit_req[(*n_sample)++] = r->id;
                }
                T++;
            }
            r->n_cached += r->take;
            r->take = 0;
            if (!decode && r->n_cached == r->n_seq) {
                e->b_logit_rows[*n_sample] = (int32_t)(T - 1);
                e->b_logit_pos[*n_sample] = r->n_seq;
                e->b_logit_req[(*n_sample)++] = r->id;
            }
            r->n_rows = *n_sample - r->row0;
        }
    return T;
}

/* The alternatives of the prompt-logprob rows whose requests asked for them. */
static int plp_tops(invar_engine *e, int64_t first, int64_t n_plp) {
    bool any = false;
    for (int64_t j = 0; j < n_plp; j++) {
        e->b_plp_ntop[j] = e->b_plp_req[j]->plp_top ? e->b_plp_req[j]->samp.top_logprobs : 0;
        any |= e->b_plp_ntop[j] > 0;
    }
    return any ? e->be->ops->top_logprobs(e->be, first, n_plp, e->b_plp_ntop, e->b_plp_top) : 0;
}

/* Hands each prompt-logprob row to its request. Rows come in position order and continue
 * from n_plp (recomputed positions before it ask for none), so none is lost or repeated. */
static void store_prompt_logprobs(invar_engine *e, int64_t n_plp) {
    for (int64_t j = 0; j < n_plp; j++) {
        request *r = e->b_plp_req[j];
        r->plp[e->b_plp_pos[j]] = e->b_plp_out[j];
        if (r->plp_top) {
            invar_token_info *t = &r->plp_top[e->b_plp_pos[j]];
            *t = e->b_plp_top[j];
            t->token = e->b_plp_tok[j];
            t->logprob = e->b_plp_out[j];
        }
        r->n_plp = e->b_plp_pos[j] + 1;
    }
}

/* Keeps the drafted tokens that equal the tokens chosen at their positions. Row j of a
 * verifying request chose the token of position n_seq + j with the request's parameters and
 * its (seed, position) draw, and its logits are the bits plain decoding computes there as
 * long as every draft before it was kept (a token's logits do not depend on how its sequence
 * was split into forwards). So the kept drafts and the first row after them are exactly the
 * tokens plain decoding emits, and the rows after that are dropped. The dropped tokens' KV
 * positions are rolled back: they are overwritten before anything attends to them, and the
 * blocks past what the next step needs go back to the pool (they were never registered). */
static void verify_drafts(invar_engine *e, request *r) {
    const int64_t n_draft = r->n_rows - 1;
    const int32_t *draft = r->seq + r->n_seq;
    int64_t kept = 0;
    if (e->spec_rejection && r->samp.temperature > 0.0f) { /* the negative control */
        const int64_t V = e->im->m->cfg.n_vocab;
        kept = spec_rejection_verify(e->rej_logits + r->row0 * V, V, &r->samp, r->n_seq, draft, n_draft,
                                     e->infos + r->row0, e->rej_work);
    } else {
        while (kept < n_draft && e->infos[r->row0 + kept].token == draft[kept]) kept++;
    }
    e->spec_steps++;
    e->spec_drafted += n_draft;
    e->spec_accepted += kept;
    /* Drafts that keep failing (free text the sequence does not repeat) only cost their rows:
     * back off exponentially, 1, 3, 7 ... up to 31 decode steps, until one is kept again. */
    r->spec_misses = kept ? 0 : r->spec_misses < 5 ? r->spec_misses + 1 : 5;
    r->spec_wait = (1 << r->spec_misses) - 1;
    r->n_cached = r->n_seq + kept; /* the last kept token's KV is in; the next step computes its successor's */
    const int64_t keep = blocks_for(r->n_cached + 1);
    while (r->n_blocks > keep) block_pool_release(&e->pool, r->blocks[--r->n_blocks]);
    r->n_emit = kept + 1;
}

/* Sets how many of a request's rows this step emits (its drafts' verification). */
static void verify(invar_engine *e, request *r) {
    r->n_emit = r->n_rows > 0;
    if (r->n_rows > 1) verify_drafts(e, r);
    /* The draft model's K/V past the kept tokens was computed for tokens that may change. */
    if (r->dseq.blocks && r->n_rows > 0) draft_seq_rollback(e->draft, &r->dseq, r->n_cached);
}

/* The negative control reads the logits rows it decides on (tests only). */
static int read_rejection_rows(invar_engine *e, int64_t n_sample) {
    if (!e->spec_rejection || n_sample == 0) return 0;
    const size_t V = (size_t)e->im->m->cfg.n_vocab;
    if (!e->rej_logits) e->rej_logits = malloc(sizeof(float) * V * (size_t)e->max_logits);
    if (!e->rej_work) e->rej_work = malloc(sizeof(float) * V);
    if (!e->rej_logits || !e->rej_work) {
        snprintf(e->be->error, sizeof e->be->error, "out of memory");
        return -1;
    }
    return e->be->ops->read_logits(e->be, n_sample, e->rej_logits);
}

/* Emits each sampling row group's kept tokens in row order. A callback may cancel or
 * release any request, so each token looks its request up again; a finished request
 * (end-of-generation, max_tokens, a stop string that cancelled it) emits nothing more. */
static void emit_rows(invar_engine *e, int64_t n_sample) {
    for (int64_t i = 0; i < n_sample;) {
        const int64_t id = e->b_logit_req[i];
        int64_t end = i + 1;
        while (end < n_sample && e->b_logit_req[end] == id) end++;
        const request *r = req_get(e, id);
        const int64_t n_emit = r ? r->n_emit : 0;
        for (int64_t t = 0; t < n_emit; t++) {
            request *q = req_get(e, id);
            if (!q || q->state != REQ_RUNNING) break; /* cancelled or released by a callback */
            emit(e, q, &e->infos[i + t]);
        }
        i = end;
    }
}

static int step_locked(invar_engine *e) {
    if (e->broken) return -1; /* e->error says why */
    admit(e);
    if (propose_drafts(e)) return -1;
    allocate(e);
    int64_t n_sample, n_plp;
    const int64_t T = build_batch(e, &n_sample, &n_plp);
    if (T == 0) return (int)e->n_active;
    if (n_sample + n_plp > e->max_logits) { /* plan() keeps within it */
        snprintf(e->error, sizeof e->error, "internal: %lld logits rows, the backend holds %lld",
                 (long long)(n_sample + n_plp), (long long)e->max_logits);
        return -1;
    }
    memcpy(e->b_logit_rows + n_sample, e->b_plp_rows, sizeof(int32_t) * (size_t)n_plp);
    fwd_batch b = {T, e->b_tokens, e->b_pos, e->b_tables, n_sample + n_plp, e->b_logit_rows};
    if (e->be->ops->forward(e->be, e->kv, &b) || sample_rows(e, n_sample) ||
        (n_plp && e->be->ops->token_logprobs(e->be, n_sample, n_plp, e->b_plp_tok, e->b_plp_out)) ||
        (n_plp && plp_tops(e, n_sample, n_plp)) || read_rejection_rows(e, n_sample)) {
        snprintf(e->error, sizeof e->error, "%s", e->be->error);
        return -1;
    }
    e->tokens_computed += T;
    store_prompt_logprobs(e, n_plp);
    /* Verification first: blocks are registered only up to the tokens kept. */
    for (int64_t i = 0; i < e->n_running; i++) verify(e, req_get(e, e->running[i]));
    for (int64_t i = 0; i < e->n_running; i++) register_blocks(e, req_get(e, e->running[i]));
    emit_rows(e, n_sample);
    return (int)e->n_active;
}

int invar_engine_step(invar_engine *e) {
    pthread_mutex_lock(&e->lock);
    int left = step_locked(e);
    publish_stats(e);
    pthread_mutex_unlock(&e->lock);
    return left;
}

int invar_engine_result(invar_engine *e, int64_t id, invar_result *out) {
    pthread_mutex_lock(&e->lock);
    int rc = -1;
    const request *r = req_get(e, id);
    if (r) {
        *out = (invar_result){r->state == REQ_DONE ? r->finish : INVAR_FINISH_NONE,
                              r->finish == INVAR_FINISH_ERROR ? r->error : NULL,
                              r->n_out,
                              r->out,
                              r->n_prompt,
                              r->n_plp,
                              r->plp,
                              r->plp_top,
                              r->n_cached_prompt > 0 ? r->n_cached_prompt : 0};
        rc = 0;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

void invar_engine_release(invar_engine *e, int64_t id) {
    pthread_mutex_lock(&e->lock);
    request *r = req_get(e, id);
    if (r) {
        if (r->state != REQ_DONE) finish(e, r, INVAR_FINISH_CANCELLED);
        request_free(r);
        slot_clear(e, id);
    }
    publish_stats(e);
    pthread_mutex_unlock(&e->lock);
}


int invar_engine_testing_set_matmul(invar_engine *e, matmul_fn fn) { return backend_cpu_set_matmul(e->be, fn); }

struct backend *invar_engine_testing_backend(invar_engine *e) { return e->be; }

int64_t invar_engine_testing_request_slots(invar_engine *e) {
    pthread_mutex_lock(&e->lock);
    int64_t n = e->cap_slots;
    pthread_mutex_unlock(&e->lock);
    return n;
}

void invar_engine_testing_set_drafter(invar_engine *e, invar_testing_drafter fn, void *user) {
    pthread_mutex_lock(&e->lock);
    e->test_drafter = fn;
    e->test_drafter_user = user;
    pthread_mutex_unlock(&e->lock);
}

void invar_engine_testing_set_spec_rejection(invar_engine *e, bool on) {
    pthread_mutex_lock(&e->lock);
    e->spec_rejection = on;
    pthread_mutex_unlock(&e->lock);
}

void invar_engine_testing_set_shared_history(invar_engine *e, bool on) {
    pthread_mutex_lock(&e->lock);
    e->shared_history = on;
    pthread_mutex_unlock(&e->lock);
}

void invar_engine_testing_set_stale_kv(invar_engine *e, bool on) {
    pthread_mutex_lock(&e->lock);
    e->testing_stale_kv = on;
    pthread_mutex_unlock(&e->lock);
}

int invar_engine_testing_set_cuda_gemm(invar_engine *e, int mode) {
    return backend_cuda_set_gemm_mode(e->be, (backend_gemm_mode)mode);
}

int invar_engine_score(invar_engine *e, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                       int64_t n_cont, float *logprobs, char *err, size_t errlen) {
    pthread_mutex_lock(&e->lock);
    int rc = e->broken ? (snprintf(err, errlen, "%s", e->error), -1)
                       : sequence_score(e->be, prompt, n_prompt, cont, n_cont, logprobs, err, errlen);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int invar_engine_logits(invar_engine *e, const int32_t *tokens, int64_t n, int64_t chunk, float *out, char *err,
                        size_t errlen) {
    pthread_mutex_lock(&e->lock);
    int rc = e->broken ? (snprintf(err, errlen, "%s", e->error), -1)
                       : sequence_logits(e->be, tokens, n, chunk, 0, out, err, errlen);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* After the model's weights changed: no K/V computed with the old ones may be read again.
 * Every running request goes back to the queue without its blocks (it recomputes its
 * sequence, as after a preemption), the prefix cache is emptied, and the backend is made
 * anew: it binds the new weights (the CUDA one uploads them) and sizes its buffers for their
 * types. */
static int weights_changed(invar_engine *e, char *err, size_t errlen) {
    if (e->testing_stale_kv) return 0;
    while (e->n_running > 0) {
        request *r = req_get(e, e->running[--e->n_running]);
        if (!r || r->state != REQ_RUNNING) continue;
        release_blocks(e, r);
        r->state = REQ_QUEUED;
        r->take = 0;
        if (r->id < e->first_queued) e->first_queued = r->id;
    }
    block_pool_drop_cache(&e->pool);
    backend *be;
    backend_kv *kv = NULL;
    char berr[200];
    if (backend_create(e->cfg.device, e->im->m, &e->be_opts, &be, berr, sizeof berr)) {
        snprintf(err, errlen, "weight update: %s", berr);
    } else if (be->ops->kv_create(be, e->pool.n_total, &kv)) {
        snprintf(err, errlen, "weight update: %s", be->error);
        backend_destroy(be);
    } else {
        e->be->ops->kv_destroy(e->be, e->kv);
        backend_destroy(e->be);
        e->be = be;
        e->kv = kv;
        return 0;
    }
    /* The old backend was sized for the old weights: this engine cannot run any more. */
    e->broken = true;
    snprintf(e->error, sizeof e->error, "%s (the engine cannot run after it)", err);
    return -1;
}

int invar_engine_update_weights(invar_engine *e, const invar_tensor *tensors, size_t n, char *err, size_t errlen) {
    gguf_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    if (!ts) return snprintf(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < n; i++) {
        const invar_tensor *t = &tensors[i];
        ts[i] = (gguf_tensor){.name = t->name,
                              .n_dims = t->n_dims > 0 && t->n_dims <= 4 ? (uint32_t)t->n_dims : 0,
                              .type = t->type,
                              .data = t->data,
                              .nbytes = t->n_bytes};
        for (int d = 0; d < 4; d++) ts[i].ne[d] = d < t->n_dims ? t->ne[d] : 1;
    }
    pthread_mutex_lock(&e->lock);
    int rc = e->broken ? (snprintf(err, errlen, "%s", e->error), -1)
                       : model_update_weights(e->im->m, ts, n, err, errlen);
    if (rc == 0) rc = weights_changed(e, err, errlen);
    publish_stats(e);
    pthread_mutex_unlock(&e->lock);
    free(ts);
    return rc;
}

int invar_engine_load_weights(invar_engine *e, const char *path, char *err, size_t errlen) {
    gguf_file *f;
    if (gguf_open(path, &f, err, errlen)) return -1;
    pthread_mutex_lock(&e->lock);
    int rc = e->broken ? (snprintf(err, errlen, "%s", e->error), -1)
                       : model_update_weights_from_gguf(e->im->m, f, err, errlen);
    if (rc == 0) rc = weights_changed(e, err, errlen);
    publish_stats(e);
    pthread_mutex_unlock(&e->lock);
    gguf_close(f);
    return rc;
}
