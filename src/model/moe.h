/* A routed (mixture-of-experts) FFN layer over a ragged batch, batch-invariant by
 * construction (docs/invariance.md):
 *   route    the router's logits (one matmul row per token), top-k by logit (ties: lower
 *            expert id), softmax weights: each a function of the token's row only;
 *   group    the (token, rank) pairs sorted by expert (a counting sort), so each expert's
 *            quantised weights are read once for all the tokens routed to it; an expert's
 *            rows are ordinary matmul rows, whose bits do not depend on how many there are;
 *   combine  per token, sum_r w_r * y_r in rank order (the router's order for that token),
 *            never in the order or by the load the experts happen to have in the batch.
 * No capacity limit: every token gets all its k experts. */
#ifndef INVAR_MODEL_MOE_H
#define INVAR_MODEL_MOE_H
#include <stdint.h>
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threadpool.h"
#include "model/model.h"

/* MOE_COMBINE_BY_LOAD is a NEGATIVE CONTROL (tests only): a token's expert outputs are
 * summed in the order of the experts' loads in this forward (most tokens first), so the
 * rounding follows the batch's composition. */
typedef enum { MOE_COMBINE_RANK, MOE_COMBINE_BY_LOAD } moe_combine_mode;

typedef void (*moe_matmul_fn)(threadpool *tp, const cpu_weight *w, const float *x, int64_t m, int64_t ldx, float *y,
                              int64_t ldy, void *scratch);

typedef struct moe_state moe_state;

/* Buffers for up to max_tokens tokens; NULL when out of memory. */
moe_state *moe_state_create(const model_config *c, int64_t max_tokens);
void moe_state_free(moe_state *s);
void moe_state_set_combine(moe_state *s, moe_combine_mode mode);

/* Routes the T rows of xn (stride n_embd) and runs every expert on its tokens: after it,
 * moe_combine_row gives each token's layer output. mm is the forward's matmul (cpu_matmul,
 * or a test's replacement); scratch holds cpu_matmul_scratch_bytes for T rows of every
 * weight of the layer. */
void moe_run_experts(moe_state *s, threadpool *tp, const layer_weights *L, const float *xn, int64_t T, moe_matmul_fn mm,
                     void *scratch);
/* out[n_embd] = token t's weighted sum of its experts' outputs. Rows may run concurrently. */
void moe_combine_row(const moe_state *s, int64_t t, float *out);


/* Tests: seen[e] has bit c-1 set when some forward gave expert e exactly c tokens in one
 * layer (bit 63: 64 or more); accumulated since the state was made. n_expert entries. */
const uint64_t *moe_counts_seen(const moe_state *s);

#endif
