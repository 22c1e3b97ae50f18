/* Logits of every position of one sequence: the reference-test and scoring path, on any
 * backend. It runs the same forward as the engine, so its bits are the engine's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "engine/engine_internal.h"
#include "engine/engine_testing.h"
#include "invar.h"

typedef struct {
    int32_t *table, *pos, *rows;
    const int32_t **tables;
} chunk_bufs;

static void bufs_free(chunk_bufs *c) {
    free(c->table);
    free(c->pos);
    free(c->rows);
    free(c->tables);
}

int sequence_logits(backend *be, const int32_t *tokens, int64_t n, int64_t chunk, int64_t first, float *out,
                    char *err, size_t errlen) {
    const model *m = be->m;
    if (n <= 0 || n > m->rope_len) {
        snprintf(err, errlen, "sequence of %lld tokens outside [1, %lld]", (long long)n, (long long)m->rope_len);
        return -1;
    }
    const int64_t cap = be->opts.max_tokens < be->opts.max_logits ? be->opts.max_tokens : be->opts.max_logits;
    if (chunk <= 0 || chunk > n) chunk = n;
    if (chunk > cap) chunk = cap;
    const int64_t n_blocks = (n + KV_BLOCK - 1) / KV_BLOCK;
    chunk_bufs c = {malloc(sizeof(int32_t) * (size_t)n_blocks), malloc(sizeof(int32_t) * (size_t)chunk),
                    malloc(sizeof(int32_t) * (size_t)chunk), malloc(sizeof(int32_t *) * (size_t)chunk)};
    backend_kv *kv = NULL;
    if (!c.table || !c.pos || !c.rows || !c.tables) {
        bufs_free(&c);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (be->ops->kv_create(be, n_blocks, &kv)) {
        bufs_free(&c);
        snprintf(err, errlen, "%s", be->error);
        return -1;
    }
    for (int64_t b = 0; b < n_blocks; b++) c.table[b] = (int32_t)b;
    int rc = 0;
    for (int64_t s0 = 0; rc == 0 && s0 < n; s0 += chunk) {
        int64_t len = n - s0 < chunk ? n - s0 : chunk;
        int64_t n_rows = 0;
        for (int64_t t = 0; t < len; t++) {
            c.pos[t] = (int32_t)(s0 + t);
            c.tables[t] = c.table;
            if (s0 + t >= first) c.rows[n_rows++] = (int32_t)t;
        }
        int64_t out_row = n_rows ? s0 + len - n_rows - first : 0; /* first wanted row of this chunk */
        fwd_batch batch = {len, tokens + s0, c.pos, c.tables, n_rows, c.rows};
        if (be->ops->forward(be, kv, &batch) ||
            (n_rows && be->ops->read_logits(be, n_rows, out + out_row * m->cfg.n_vocab))) {
            snprintf(err, errlen, "%s", be->error);
            rc = -1;
        }
    }
    be->ops->kv_destroy(be, kv);
    bufs_free(&c);
    return rc;
}

/* Scoring keeps only one logprob per row, so it reads them chunk by chunk instead of
 * whole logits rows. */
int sequence_score(backend *be, const int32_t *prompt, int64_t n_prompt, const int32_t *cont, int64_t n_cont,
                   float *logprobs, char *err, size_t errlen) {
    const model *m = be->m;
    if (n_prompt <= 0 || n_cont <= 0) {
        snprintf(err, errlen, "score needs a non-empty prompt and continuation");
        return -1;
    }
    const int64_t n = n_prompt + n_cont - 1; /* the last continuation token is never fed */
    if (n > m->rope_len) {
        snprintf(err, errlen, "sequence of %lld tokens outside [1, %lld]", (long long)n, (long long)m->rope_len);
        return -1;
    }
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= m->cfg.n_vocab) {
            snprintf(err, errlen, "prompt token id %d out of range", prompt[i]);
            return -1;
        }
    for (int64_t i = 0; i < n_cont; i++)
        if (cont[i] < 0 || cont[i] >= m->cfg.n_vocab) {
            snprintf(err, errlen, "continuation token id %d out of range", cont[i]);
            return -1;
        }
    int64_t chunk = ENGINE_SCORE_CHUNK;
    if (chunk > be->opts.max_tokens) chunk = be->opts.max_tokens;
    if (chunk > be->opts.max_logits) chunk = be->opts.max_logits;
    const int64_t n_blocks = (n + KV_BLOCK - 1) / KV_BLOCK;
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)n);
    chunk_bufs c = {malloc(sizeof(int32_t) * (size_t)n_blocks), malloc(sizeof(int32_t) * (size_t)chunk),
                    malloc(sizeof(int32_t) * (size_t)chunk), malloc(sizeof(int32_t *) * (size_t)chunk)};
    backend_kv *kv = NULL;
    int rc = 0;
    if (!seq || !c.table || !c.pos || !c.rows || !c.tables) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    } else if (be->ops->kv_create(be, n_blocks, &kv)) {
        snprintf(err, errlen, "%s", be->error);
        rc = -1;
    }
    if (rc == 0) {
        memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
        memcpy(seq + n_prompt, cont, sizeof(int32_t) * (size_t)(n_cont - 1));
        for (int64_t b = 0; b < n_blocks; b++) c.table[b] = (int32_t)b;
    }
    const int64_t first = n_prompt - 1;
    for (int64_t s0 = 0; rc == 0 && s0 < n; s0 += chunk) {
        int64_t len = n - s0 < chunk ? n - s0 : chunk, n_rows = 0;
        for (int64_t t = 0; t < len; t++) {
            c.pos[t] = (int32_t)(s0 + t);
            c.tables[t] = c.table;
            if (s0 + t >= first) c.rows[n_rows++] = (int32_t)t;
        }
        int64_t out_row = n_rows ? s0 + len - n_rows - first : 0;
        fwd_batch batch = {len, seq + s0, c.pos, c.tables, n_rows, c.rows};
        if (be->ops->forward(be, kv, &batch) ||
            (n_rows && be->ops->token_logprobs(be, 0, n_rows, cont + out_row, logprobs + out_row))) {
            snprintf(err, errlen, "%s", be->error);
            rc = -1;
        }
    }
    if (kv) be->ops->kv_destroy(be, kv);
    bufs_free(&c);
    free(seq);
    return rc;
}

/* A CPU backend for one sequence of up to `chunk` tokens a forward. */
static int temp_cpu_backend(const invar_model *im, int64_t chunk, int32_t n_threads, backend **out, char *err,
                            size_t errlen) {
    backend_opts o = {.n_threads = n_threads > 0 ? n_threads : 1, .max_tokens = chunk, .max_logits = chunk};
    return backend_cpu_create(im->m, &o, out, err, errlen);
}

int invar_model_logits(const invar_model *im, const int32_t *tokens, int64_t n, int64_t chunk,
                       int32_t n_threads, float *out, char *err, size_t errlen) {
    if (n <= 0 || n > im->m->rope_len) {
        snprintf(err, errlen, "sequence of %lld tokens outside [1, %lld]", (long long)n, (long long)im->m->rope_len);
        return -1;
    }
    if (chunk <= 0 || chunk > n) chunk = n;
    backend *be;
    if (temp_cpu_backend(im, chunk, n_threads, &be, err, errlen)) return -1;
    int rc = sequence_logits(be, tokens, n, chunk, 0, out, err, errlen);
    backend_destroy(be);
    return rc;
}

int invar_score_testing(const invar_model *im, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                        int64_t n_cont, int32_t n_threads, float *logprobs, matmul_fn mm, char *err,
                        size_t errlen) {
    backend *be;
    if (temp_cpu_backend(im, ENGINE_SCORE_CHUNK, n_threads, &be, err, errlen)) return -1;
    if (mm) backend_cpu_set_matmul(be, mm);
    int rc = sequence_score(be, prompt, n_prompt, cont, n_cont, logprobs, err, errlen);
    backend_destroy(be);
    return rc;
}

int invar_score_testing_mla_prefill_plain(const invar_model *im, const int32_t *prompt, int64_t n_prompt,
                                          const int32_t *cont, int64_t n_cont, int32_t n_threads, float *logprobs,
                                          char *err, size_t errlen) {
    backend *be;
    if (temp_cpu_backend(im, ENGINE_SCORE_CHUNK, n_threads, &be, err, errlen)) return -1;
    int rc = backend_cpu_set_mla_prefill_plain(be, true);
    if (rc) snprintf(err, errlen, "the model has no MLA layers");
    else rc = sequence_score(be, prompt, n_prompt, cont, n_cont, logprobs, err, errlen);
    backend_destroy(be);
    return rc;
}

int invar_score(const invar_model *im, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                int64_t n_cont, int32_t n_threads, float *logprobs, char *err, size_t errlen) {
    return invar_score_testing(im, prompt, n_prompt, cont, n_cont, n_threads, logprobs, NULL, err, errlen);
}
