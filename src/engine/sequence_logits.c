/* Logits of every position of one sequence: the reference-test and scoring path. */
#include <stdio.h>
#include <stdlib.h>

#include "../kernels/cpu/attention.h"
#include "../model/forward.h"
#include "engine_internal.h"
#include "invar.h"

int invar_model_logits(const invar_model *im, const int32_t *tokens, int64_t n, int64_t chunk,
                       int32_t n_threads, float *out, char *err, size_t errlen) {
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
    if (!table || !pos || !rows || !tables || !tp || !fs || !kv_ok) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    for (int64_t b = 0; rc == 0 && b < n_blocks; b++) table[b] = (int32_t)b;
    for (int64_t s0 = 0; rc == 0 && s0 < n; s0 += chunk) {
        int64_t len = n - s0 < chunk ? n - s0 : chunk;
        for (int64_t t = 0; t < len; t++) {
            pos[t] = (int32_t)(s0 + t);
            rows[t] = (int32_t)t;
            tables[t] = table;
        }
        fwd_batch batch = {len, tokens + s0, pos, tables, len, rows};
        if (model_forward(m, fs, tp, &kv, &batch, out + s0 * m->cfg.n_vocab)) {
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
