/* A ragged batch: tokens of many sequences (prefill chunks and decode steps mixed), each
 * with its position and its sequence's KV block table. Every backend's forward pass takes
 * this description; what a token computes depends only on its own sequence. */
#ifndef INVAR_MODEL_BATCH_H
#define INVAR_MODEL_BATCH_H
#include <stdint.h>

typedef struct {
    int64_t n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *const *block_tables; /* per token: its sequence's block table */
    int64_t n_logits;
    const int32_t *logit_rows;          /* token indices whose logits are wanted */
} fwd_batch;

#endif
