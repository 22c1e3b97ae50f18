#ifndef INVAR_ENGINE_INTERNAL_H
#define INVAR_ENGINE_INTERNAL_H
#include "backend/backend.h"
#include "model/model.h"

struct invar_model {
    model *m;
};

/* Tokens per forward when scoring (any value gives the same bits; this bounds memory). */
#define ENGINE_SCORE_CHUNK 256

/* One sequence through a backend, in chunks, on KV storage of its own: the scoring and
 * reference path (sequence_logits.c). Logits of positions first..n-1 go to out. */
int sequence_logits(backend *be, const int32_t *tokens, int64_t n, int64_t chunk, int64_t first, float *out,
                    char *err, size_t errlen);
/* Logprob of each continuation token after prompt + the continuation before it. */
int sequence_score(backend *be, const int32_t *prompt, int64_t n_prompt, const int32_t *cont, int64_t n_cont,
                   float *logprobs, char *err, size_t errlen);

#endif
