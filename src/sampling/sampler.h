/* Token choice from one row of logits. Pure function of (logits row, parameters,
 * position): per-request, so invariant by construction. */
#ifndef INVAR_SAMPLER_H
#define INVAR_SAMPLER_H
#include <stdint.h>
#include "invar.h"

/* Returns a message for invalid parameters, NULL if fine. */
const char *sampler_check(const invar_sampling *s);

/* Chooses a token for the given absolute position and fills info (token, its raw-model
 * logprob, top alternatives). work: n_vocab ints and n_vocab floats of scratch. */
void sampler_choose(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                    invar_token_info *info, int32_t *work_idx, float *work_p);
/* The same with the row's log-sum-exp given: a backend that reduces the row elsewhere (the
 * GPU) passes its own, so every logprob it reports (sampled, greedy, scored) is
 * sampler_logprob(logit, that lse). */
void sampler_choose_lse(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                        float lse, invar_token_info *info, int32_t *work_idx, float *work_p);

/* A token's reported logprob: one float32 subtraction, the same on every path. */
static inline float sampler_logprob(float logit, float lse) { return logit - lse; }

#endif
