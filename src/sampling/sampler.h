/* Token choice from one row of logits. Pure function of (logits row, parameters,
 * position): per-request, so invariant by construction. */
#ifndef INVAR_SAMPLER_H
#define INVAR_SAMPLER_H
#include <stdbool.h>
#include <stdint.h>
#include "invar.h"

/* Returns a message for invalid parameters, NULL if fine. */
const char *sampler_check(const invar_sampling *s);

/* What the logits processing of invar_sampling (penalties, min_tokens) reads: the request's
 * own tokens before the position being chosen, seq[0, n_seq), of which the first n_prompt
 * are the prompt, and the model's end-of-generation ids. */
typedef struct {
    const int32_t *seq;
    int64_t n_seq, n_prompt;
    const int32_t *eog;
    int32_t n_eog;
} sampler_history;

/* True if s asks for any logits processing (then sampling needs a sampler_history). */
bool sampler_processes(const invar_sampling *s);
/* Writes the processed row (invar.h: the fixed order) into out; counts: n_vocab ints of
 * scratch, returned as they were found except at the history's token ids (left at 0). */
void sampler_process(const float *logits, int64_t n_vocab, const invar_sampling *s, const sampler_history *h,
                     float *out, int32_t *counts);

/* Chooses a token for the given absolute position and fills info (token, its raw-model
 * logprob, top alternatives). h: the request's tokens, NULL when sampler_processes(s) is
 * false. work: n_vocab ints and 2 * n_vocab floats of scratch. */
void sampler_choose(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                    const sampler_history *h, invar_token_info *info, int32_t *work_idx, float *work_p);
/* The same with the row's log-sum-exp given: a backend that reduces the row elsewhere (the
 * GPU) passes its own, so every logprob it reports (sampled, greedy, scored) is
 * sampler_logprob(logit, that lse). */
void sampler_choose_lse(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                        const sampler_history *h, float lse, invar_token_info *info, int32_t *work_idx, float *work_p);
/* The n (<= INVAR_MAX_TOP_LOGPROBS) best ids of a row (larger logit first, then lower id)
 * with their logprobs against lse. */
void sampler_top(const float *logits, int64_t n_vocab, int32_t n, float lse, int32_t *ids, float *logprobs);

/* A token's reported logprob: one float32 subtraction, the same on every path. */
static inline float sampler_logprob(float logit, float lse) { return logit - lse; }

#endif
