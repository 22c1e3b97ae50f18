#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "../kernels/cpu/rowops.h"
#include "rng.h"

const char *sampler_check(const invar_sampling *s) {
    if (s->max_tokens <= 0) return "max_tokens must be > 0";
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature)) return "temperature must be a finite number >= 0";
    if (s->top_k < 0) return "top_k must be >= 0";
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f)) return "top_p must be in (0, 1]";
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f)) return "min_p must be in [0, 1]";
    if (s->top_logprobs < 0 || s->top_logprobs > INVAR_MAX_TOP_LOGPROBS) return "top_logprobs must be in [0, 20]";
    return NULL;
}

/* Total order: larger logit first, then lower id. Ties never depend on the sort algorithm. */
static int by_logit_desc(const void *a, const void *b, void *ctx) {
    const float *logits = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = logits[i], y = logits[j];
    if (x > y) return -1;
    if (x < y) return 1;
    return (i > j) - (i < j);
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

/* The n best ids in the same total order, by insertion into a sorted list (n <= 20). */
static void top_n(const float *x, int64_t n_vocab, int32_t n, int32_t *ids) {
    int32_t have = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        if (have == n && !(x[i] > x[ids[n - 1]])) continue; /* ties keep the lower id */
        int32_t r = have < n ? have++ : n - 1;
        while (r > 0 && x[i] > x[ids[r - 1]]) {
            ids[r] = ids[r - 1];
            r--;
        }
        ids[r] = (int32_t)i;
    }
}

static int32_t sample(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                      int32_t *idx, float *p) {
    /* Tokens whose weight exp((l - max) / T) underflows to exactly 0 cannot be drawn and add
     * nothing to any sum, so dropping them before the sort changes no result. */
    const float mx = logits[argmax(logits, n_vocab)];
    int64_t n = 0;
    for (int64_t i = 0; i < n_vocab; i++)
        if ((logits[i] - mx) / s->temperature >= -104.0f) idx[n++] = (int32_t)i;
    qsort_r(idx, (size_t)n, sizeof *idx, by_logit_desc, (void *)logits);
    if (s->top_k > 0 && s->top_k < n) n = s->top_k;

    /* Probabilities at temperature, summed in sorted order (fixed by the total order). */
    double total = 0.0;
    for (int64_t r = 0; r < n; r++) {
        p[r] = invar_expf((logits[idx[r]] - mx) / s->temperature);
        total += p[r];
    }
    if (s->min_p > 0.0f) { /* p[0] is the largest: keep p >= min_p * p_max */
        int64_t keep = 1;
        while (keep < n && p[keep] >= s->min_p * p[0]) keep++;
        total = 0.0;
        for (int64_t r = 0; r < keep; r++) total += p[r];
        n = keep;
    }
    if (s->top_p < 1.0f) { /* smallest prefix whose mass reaches top_p */
        double cum = 0.0, target = (double)s->top_p * total;
        int64_t keep = 0;
        while (keep < n) {
            cum += p[keep++];
            if (cum >= target) break;
        }
        n = keep;
        total = cum;
    }
    double u = rng_uniform(s->seed, (uint64_t)position) * total, cum = 0.0;
    for (int64_t r = 0; r < n; r++) {
        cum += p[r];
        if (u < cum) return idx[r];
    }
    return idx[n - 1];
}

void sampler_choose(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                    invar_token_info *info, int32_t *work_idx, float *work_p) {
    int32_t tok = s->temperature == 0.0f ? argmax(logits, n_vocab)
                                         : sample(logits, n_vocab, s, position, work_idx, work_p);
    float lse = row_logsumexp(logits, n_vocab);
    info->token = tok;
    info->logprob = logits[tok] - lse;
    info->n_top = s->top_logprobs;
    if (info->n_top > 0) {
        top_n(logits, n_vocab, info->n_top, info->top_ids);
        for (int32_t r = 0; r < info->n_top; r++) info->top_logprobs[r] = logits[info->top_ids[r]] - lse;
    }
}
