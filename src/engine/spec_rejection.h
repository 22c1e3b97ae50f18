/* NEGATIVE CONTROL, tests only: the textbook speculative-sampling rule (accept a drafted
 * token x with probability min(1, p(x) / q(x)), else draw from the residual max(0, p - q)),
 * for a draft that proposes x with certainty (q(x) = 1). It keeps the output's distribution,
 * but not its bits: which tokens come out depends on what the draft proposed. The engine
 * runs it instead of its exact verification when a test asks (engine_testing.h), so that
 * the speculation tests show they can see the difference. */
#ifndef INVAR_SPEC_REJECTION_H
#define INVAR_SPEC_REJECTION_H
#include <stdint.h>

#include "invar.h"

/* logits: n_draft + 1 rows of one request, row j scoring position pos0 + j, whose drafted
 * token is draft[j] (j < n_draft). info[0..n_draft] hold what the exact sampler chose; rows
 * the rule decides otherwise are rewritten (token and logprob). Returns the accepted count.
 * Temperature sampling only (top-k/top-p/min-p are not applied to p). work: n_vocab floats. */
int64_t spec_rejection_verify(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t pos0,
                              const int32_t *draft, int64_t n_draft, invar_token_info *info, float *work);

#endif
