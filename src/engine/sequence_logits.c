/* Logits of every position of one sequence: the reference-test and scoring path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/attention.h"
#include "../kernels/cpu/rowops.h"
#include "../model/forward.h"
#include "engine_internal.h"
#include "engine_testing.h"
#include "invar.h"

/* Forward of one sequence in chunks; writes the logits of positions first..n-1. */
static int sequence_forward(const invar_model *im, const int32_t *tokens, int64_t n, int64_t chunk,
                            int32_t n_threads, int64_t first, float *out, matmul_fn mm, char *err,
                            size_t errlen) {
    const model *m = im->m;
    if (n <= 0 || n > m->rope_len) {
        snprintf(err, errlen, "sequence of %lld tokens outside [1, %lld]", (long long)n, (long long)m->rope_len);
        return -1;
    }
    if (chunk <= 0 || chunk > n) chunk = n;
    int64_t n_blocks = (n + KV_BLOCK - 1) / KV_BLOCK;
    kv_storage kv;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)chunk);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)chunk);
    const int32_t **tables = malloc(sizeof(*tables) * (size_t)chunk);
    threadpool *tp = threadpool_create(n_threads > 0 ? n_threads : 1);
    fwd_state *fs = fwd_state_create(m, chunk, chunk);
    int kv_ok = kv_storage_init(&kv, &m->cfg, n_blocks) == 0;
    int rc = 0;
    if (fs && mm) fwd_state_set_matmul(fs, mm);
    if (!table || !pos || !rows || !tables || !tp || !fs || !kv_ok) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    for (int64_t b = 0; rc == 0 && b < n_blocks; b++) table[b] = (int32_t)b;
    for (int64_t s0 = 0; rc == 0 && s0 < n; s0 += chunk) {
        int64_t len = n - s0 < chunk ? n - s0 : chunk;
        int64_t n_rows = 0;
        for (int64_t t = 0; t < len; t++) {
            pos[t] = (int32_t)(s0 + t);
            tables[t] = table;
            if (s0 + t >= first) rows[n_rows++] = (int32_t)t;
        }
        int64_t out_row = n_rows ? s0 + len - n_rows - first : 0; /* first wanted row of this chunk */
        fwd_batch batch = {len, tokens + s0, pos, tables, n_rows, rows};
        if (model_forward(m, fs, tp, &kv, &batch, out + out_row * m->cfg.n_vocab)) {
            snprintf(err, errlen, "invalid token id in the sequence");
            rc = -1;
        }
    }
    if (kv_ok) kv_storage_free(&kv);
    fwd_state_free(fs);
    threadpool_destroy(tp);
    free(table);
    free(pos);
    free(rows);
    free(tables);
    return rc;
}

int invar_model_logits(const invar_model *im, const int32_t *tokens, int64_t n, int64_t chunk,
                       int32_t n_threads, float *out, char *err, size_t errlen) {
    return sequence_forward(im, tokens, n, chunk, n_threads, 0, out, NULL, err, errlen);
}

int invar_score_testing(const invar_model *im, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                        int64_t n_cont, int32_t n_threads, float *logprobs, matmul_fn mm, char *err,
                        size_t errlen) {
    const model *m = im->m;
    if (n_prompt <= 0 || n_cont <= 0) {
        snprintf(err, errlen, "score needs a non-empty prompt and continuation");
        return -1;
    }
    int64_t n = n_prompt + n_cont - 1; /* the last continuation token is never fed */
    const int64_t V = m->cfg.n_vocab;
    for (int64_t i = 0; i < n_cont; i++)
        if (cont[i] < 0 || cont[i] >= V) {
            snprintf(err, errlen, "continuation token id %d out of range", cont[i]);
            return -1;
        }
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)n);
    const int64_t chunk = 256;
    float *logits = malloc(sizeof(float) * (size_t)(n_cont * V));
    int rc = -1;
    if (!seq || !logits) {
        snprintf(err, errlen, "out of memory");
    } else {
        memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
        memcpy(seq + n_prompt, cont, sizeof(int32_t) * (size_t)(n_cont - 1));
        rc = sequence_forward(im, seq, n, chunk, n_threads, n_prompt - 1, logits, mm, err, errlen);
        /* The same expression the sampler reports: logit - logsumexp of the row. */
        for (int64_t i = 0; rc == 0 && i < n_cont; i++) {
            const float *row = logits + i * V;
            logprobs[i] = row[cont[i]] - row_logsumexp(row, V);
        }
    }
    free(seq);
    free(logits);
    return rc;
}

int invar_score(const invar_model *im, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                int64_t n_cont, int32_t n_threads, float *logprobs, char *err, size_t errlen) {
    return invar_score_testing(im, prompt, n_prompt, cont, n_cont, n_threads, logprobs, NULL, err, errlen);
}
