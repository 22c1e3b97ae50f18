#include "engine/spec_draft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "tokenizer/tokenizer.h"

struct spec_draft {
    backend *be;
    backend_kv *kv;
    block_pool pool;
    int64_t max_tokens, max_seqs;
    int32_t *tokens, *pos, *rows;
    const int32_t **tables;
    int64_t *row_job;
    sample_row *srows;
    invar_token_info *infos;
    invar_sampling greedy;
};

static int64_t blocks_for(int64_t n) { return (n + KV_BLOCK - 1) / KV_BLOCK; }

/* Same vocabulary: same size and the same bytes for every id, so that a drafted id means
 * the token the target would mean by it. */
static int same_vocab(const model *a, const model *b, char *err, size_t errlen) {
    if (a->cfg.n_vocab != b->cfg.n_vocab) {
        snprintf(err, errlen, "draft model has %lld tokens, the model %lld: they must share the vocabulary",
                 (long long)a->cfg.n_vocab, (long long)b->cfg.n_vocab);
        return 0;
    }
    char x[256], y[256];
    for (int32_t id = 0; id < a->cfg.n_vocab; id++) {
        int nx = tokenizer_token_bytes(a->tok, id, x, sizeof x), ny = tokenizer_token_bytes(b->tok, id, y, sizeof y);
        if (nx != ny || (nx > 0 && memcmp(x, y, (size_t)(nx < (int)sizeof x ? nx : (int)sizeof x)) != 0)) {
            snprintf(err, errlen, "draft model's token %d differs from the model's: they must share the vocabulary",
                     id);
            return 0;
        }
    }
    return 1;
}

void spec_draft_free(spec_draft *d) {
    if (!d) return;
    if (d->be) {
        if (d->kv) d->be->ops->kv_destroy(d->be, d->kv);
        backend_destroy(d->be);
    }
    block_pool_free(&d->pool);
    free(d->tokens), free(d->pos), free(d->rows), free(d->tables), free(d->row_job), free(d->srows), free(d->infos);
    free(d);
}

int spec_draft_create(model *draft, const model *target, int32_t n_threads, int64_t max_tokens, int64_t max_seqs,
                      int64_t n_blocks, spec_draft **out, char *err, size_t errlen) {
    *out = NULL;
    if (!same_vocab(draft, target, err, errlen)) return -1;
    spec_draft *d = calloc(1, sizeof *d);
    if (!d) return snprintf(err, errlen, "out of memory"), -1;
    d->max_tokens = max_tokens;
    d->max_seqs = max_seqs;
    backend_opts o = {.n_threads = n_threads, .max_tokens = max_tokens, .max_logits = max_seqs};
    if (backend_cpu_create(draft, &o, &d->be, err, errlen)) {
        spec_draft_free(d);
        return -1;
    }
    if (d->be->ops->kv_create(d->be, n_blocks, &d->kv) || block_pool_init(&d->pool, n_blocks, false)) {
        snprintf(err, errlen, "draft model KV: %s", d->kv ? "out of memory" : d->be->error);
        spec_draft_free(d);
        return -1;
    }
    const size_t T = (size_t)max_tokens, S = (size_t)max_seqs;
    d->tokens = malloc(sizeof(int32_t) * T), d->pos = malloc(sizeof(int32_t) * T);
    d->tables = malloc(sizeof(*d->tables) * T), d->rows = malloc(sizeof(int32_t) * S);
    d->row_job = malloc(sizeof(int64_t) * S), d->srows = malloc(sizeof(sample_row) * S);
    d->infos = malloc(sizeof(invar_token_info) * S);
    if (!d->tokens || !d->pos || !d->tables || !d->rows || !d->row_job || !d->srows || !d->infos) {
        snprintf(err, errlen, "out of memory");
        spec_draft_free(d);
        return -1;
    }
    invar_sampling_default(&d->greedy);
    *out = d;
    return 0;
}

void draft_seq_release(spec_draft *d, draft_seq *s) {
    while (s->n_blocks > 0) block_pool_release(&d->pool, s->blocks[--s->n_blocks]);
    s->n_cached = 0;
}

void draft_seq_rollback(spec_draft *d, draft_seq *s, int64_t n_valid) {
    if (s->n_cached <= n_valid) return;
    s->n_cached = n_valid;
    const int64_t keep = blocks_for(n_valid);
    while (s->n_blocks > keep) block_pool_release(&d->pool, s->blocks[--s->n_blocks]);
}

/* Blocks for positions up to n; false (and nothing held past n) if the pool is dry. */
static bool reserve(spec_draft *d, draft_seq *s, int64_t n) {
    while (s->n_blocks < blocks_for(n)) {
        int32_t id = block_pool_alloc(&d->pool);
        if (id < 0) return false;
        s->blocks[s->n_blocks++] = id;
    }
    return true;
}

int spec_draft_propose(spec_draft *d, draft_job *jobs, int64_t n, char *err, size_t errlen) {
    bool *done = calloc((size_t)(n > 0 ? n : 1), sizeof *done);
    if (!done) return snprintf(err, errlen, "out of memory"), -1;
    for (int64_t j = 0; j < n; j++) {
        jobs[j].n_out = 0;
        done[j] = jobs[j].k <= 0;
        /* The sequence may have changed past what the draft computed (a rejected draft). */
        draft_seq_rollback(d, jobs[j].ds, jobs[j].n_seq - 1);
    }
    int rc = 0;
    for (;;) {
        int64_t T = 0, R = 0;
        for (int64_t j = 0; j < n && T < d->max_tokens; j++) {
            if (done[j]) continue;
            draft_job *b = &jobs[j];
            draft_seq *s = b->ds;
            const int64_t end = b->n_seq + b->n_out; /* tokens known: the sequence and drafts so far */
            int64_t take = end - s->n_cached;
            if (take > d->max_tokens - T) take = d->max_tokens - T;
            if (!reserve(d, s, s->n_cached + take)) { /* no room: draft what it has */
                draft_seq_release(d, s);
                done[j] = true;
                continue;
            }
            for (int64_t t = 0; t < take; t++) {
                d->tokens[T] = b->seq[s->n_cached + t];
                d->pos[T] = (int32_t)(s->n_cached + t);
                d->tables[T] = s->blocks;
                T++;
            }
            s->n_cached += take;
            if (s->n_cached == end) { /* its last token's logits choose the next draft */
                d->rows[R] = (int32_t)(T - 1);
                d->srows[R] = (sample_row){&d->greedy, end, {0}};
                d->row_job[R++] = j;
            }
        }
        if (T == 0) break;
        fwd_batch batch = {T, d->tokens, d->pos, d->tables, R, d->rows};
        if (d->be->ops->forward(d->be, d->kv, &batch) || d->be->ops->sample(d->be, R, d->srows, d->infos)) {
            snprintf(err, errlen, "draft model: %s", d->be->error);
            rc = -1;
            break;
        }
        for (int64_t r = 0; r < R; r++) {
            draft_job *b = &jobs[d->row_job[r]];
            b->seq[b->n_seq + b->n_out++] = d->infos[r].token;
            if (b->n_out == b->k) done[d->row_job[r]] = true; /* the last draft is never fed */
        }
    }
    free(done);
    return rc;
}
