#include "engine/spec_rejection.h"

#include "kernels/cpu/rowops.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"

/* A different stream from the sampler's draws, for the accept/reject coin. */
#define COIN_SALT 0x5bd1e9955bd1e995ULL

static void set_token(invar_token_info *info, const float *row, int64_t n_vocab, int32_t tok) {
    info->token = tok;
    info->logprob = sampler_logprob(row[tok], row_logsumexp(row, n_vocab));
}

int64_t spec_rejection_verify(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t pos0,
                              const int32_t *draft, int64_t n_draft, invar_token_info *info, float *work) {
    for (int64_t j = 0; j < n_draft; j++) {
        const float *row = logits + j * n_vocab;
        const float mx = row[row_argmax(row, n_vocab)];
        for (int64_t i = 0; i < n_vocab; i++) work[i] = (row[i] - mx) / s->temperature;
        invar_expf_n(work, 0.0f, work, n_vocab);
        double total = 0.0;
        for (int64_t i = 0; i < n_vocab; i++) total += work[i];
        const int32_t x = draft[j];
        if (rng_uniform(s->seed ^ COIN_SALT, (uint64_t)(pos0 + j)) < work[x] / total) {
            set_token(&info[j], row, n_vocab, x);
            continue;
        }
        /* Rejected: draw from p without x, renormalised. */
        double u = rng_uniform(s->seed, (uint64_t)(pos0 + j)) * (total - work[x]), cum = 0.0;
        int32_t tok = x == 0 ? 1 : 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            if (i == x || work[i] <= 0.0f) continue;
            cum += work[i];
            tok = (int32_t)i;
            if (u < cum) break;
        }
        set_token(&info[j], row, n_vocab, tok);
        return j;
    }
    return n_draft;
}
