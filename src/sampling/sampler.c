#include "sampling/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/cpu/rowops.h"
#include "sampling/rng.h"

const char *sampler_check(const invar_sampling *s) {
    if (s->max_tokens <= 0) return "max_tokens must be > 0";
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature)) return "temperature must be a finite number >= 0";
    if (s->top_k < 0) return "top_k must be >= 0";
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f)) return "top_p must be in (0, 1]";
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f)) return "min_p must be in [0, 1]";
    if (s->top_logprobs < 0 || s->top_logprobs > INVAR_MAX_TOP_LOGPROBS) return "top_logprobs must be in [0, 20]";
    if ((int)s->speculate < (int)INVAR_SPEC_OFF || (int)s->speculate > (int)INVAR_SPEC_DRAFT)
        return "unknown speculation mode";
    _Static_assert(INVAR_MAX_SPEC_TOKENS == 16, "the message below names the bound");
    if (s->spec_tokens < 0 || s->spec_tokens > INVAR_MAX_SPEC_TOKENS) return "spec_tokens must be in [0, 16]";
    if (!(s->presence_penalty >= -2.0f && s->presence_penalty <= 2.0f)) return "presence_penalty must be in [-2, 2]";
    if (!(s->frequency_penalty >= -2.0f && s->frequency_penalty <= 2.0f)) return "frequency_penalty must be in [-2, 2]";
    if (!(s->repetition_penalty > 0.0f && s->repetition_penalty <= 10.0f))
        return "repetition_penalty must be in (0, 10]";
    if (s->min_tokens < 0 || s->min_tokens > s->max_tokens) return "min_tokens must be in [0, max_tokens]";
    if (s->n_stop_token_ids < 0 || s->n_stop_token_ids > INVAR_MAX_STOP_TOKEN_IDS) return "too many stop_token_ids";
    if (s->n_logit_bias < 0 || s->n_logit_bias > INVAR_MAX_LOGIT_BIAS) return "too many logit_bias entries";
    for (int32_t i = 0; i < s->n_logit_bias; i++)
        if (!(s->logit_bias[i].bias >= -100.0f && s->logit_bias[i].bias <= 100.0f))
            return "logit_bias values must be in [-100, 100]";
    return NULL;
}

bool sampler_processes(const invar_sampling *s) {
    return s->presence_penalty != 0.0f || s->frequency_penalty != 0.0f || s->repetition_penalty != 1.0f ||
           s->min_tokens > 0 || s->n_logit_bias > 0;
}

/* Every step walks the history in position order and touches each distinct id once, so the
 * row is a pure function of (logits, parameters, history): nothing is shared between rows. */
void sampler_process(const float *logits, int64_t n_vocab, const invar_sampling *s, const sampler_history *h,
                     float *out, int32_t *counts) {
    for (int64_t i = 0; i < n_vocab; i++) out[i] = logits[i];
    const int32_t *seq = h->seq;
    if (s->repetition_penalty != 1.0f) {
        const float p = s->repetition_penalty;
        for (int64_t k = 0; k < h->n_seq; k++) counts[seq[k]] = 1;
        for (int64_t k = 0; k < h->n_seq; k++) {
            const int32_t t = seq[k];
            if (!counts[t]) continue;
            out[t] = out[t] > 0.0f ? out[t] / p : out[t] * p;
            counts[t] = 0;
        }
    }
    if (s->frequency_penalty != 0.0f || s->presence_penalty != 0.0f) {
        for (int64_t k = h->n_prompt; k < h->n_seq; k++) counts[seq[k]] = 0;
        for (int64_t k = h->n_prompt; k < h->n_seq; k++) counts[seq[k]]++;
        for (int64_t k = h->n_prompt; k < h->n_seq; k++) {
            const int32_t t = seq[k];
            if (!counts[t]) continue;
            out[t] -= (float)counts[t] * s->frequency_penalty + s->presence_penalty;
            counts[t] = 0;
        }
    }
    for (int32_t i = 0; i < s->n_logit_bias; i++) out[s->logit_bias[i].token] += s->logit_bias[i].bias;
    if (h->n_seq - h->n_prompt < s->min_tokens) {
        for (int32_t i = 0; i < h->n_eog; i++) out[h->eog[i]] = -INFINITY;
        for (int32_t i = 0; i < s->n_stop_token_ids; i++) out[s->stop_token_ids[i]] = -INFINITY;
    }
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

/* Ids with weight >= cut, in id order; returns how many and their weight sum. */
static int64_t collect(const float *w, int64_t n_vocab, float cut, int32_t *idx, double *mass) {
    int64_t n = 0;
    double m = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        if (w[i] >= cut) idx[n++] = (int32_t)i, m += w[i];
    *mass = m;
    return n;
}

/* Temperature sampling with top-k, min-p and top-p. Weights w = exp((l - max) / T) are in
 * (0, 1], the largest is 1. Truncation needs only a top prefix of the order (logit desc,
 * id asc), so only the ids above a weight cut are sorted: the cut is lowered until that
 * set provably holds the prefix. Every sum runs in a fixed order (id order, or the sorted
 * order), so the draw is a pure function of the logits row, the parameters and position. */
static int32_t sample(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                      int32_t *idx, float *w) {
    const float mx = logits[(int32_t)row_argmax(logits, n_vocab)];
    double total = 0.0;
    for (int64_t i = 0; i < n_vocab; i++) w[i] = (logits[i] - mx) / s->temperature;
    invar_expf_n(w, 0.0f, w, n_vocab);
    for (int64_t i = 0; i < n_vocab; i++) total += w[i];
    const bool truncate = s->top_k > 0 || s->min_p > 0.0f || s->top_p < 1.0f;
    if (!truncate) { /* plain temperature: walk in id order */
        double u = rng_uniform(s->seed, (uint64_t)position) * total, cum = 0.0;
        int32_t last = 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            if (w[i] <= 0.0f) continue;
            cum += w[i];
            last = (int32_t)i;
            if (u < cum) return last;
        }
        return last;
    }
    /* Candidate set: ids with w >= cut. {w >= cut} is a prefix of the order because w
     * grows with the logit. */
    int64_t n = 0;
    double mass = 0.0;
    for (float cut = 0x1p-10f;; cut *= 0x1p-10f) {
        float c = cut > s->min_p ? cut : s->min_p;
        n = collect(w, n_vocab, c, idx, &mass);
        if (c == s->min_p || cut == 0.0f) break;                    /* exact: all that min-p keeps */
        if (s->top_k > 0 && n >= s->top_k) break;                   /* holds the top-k prefix */
        /* holds the top-p prefix (with min-p on, top-p is measured against everything min-p
         * keeps, so the loop must reach the exact min-p set instead) */
        if (s->top_k == 0 && s->min_p == 0.0f && mass >= (double)s->top_p * total * (1.0 + 1e-9)) break;
    }
    qsort_r(idx, (size_t)n, sizeof *idx, by_logit_desc, (void *)logits);
    if (s->top_k > 0 && s->top_k < n) n = s->top_k;
    /* Mass that top-p is measured against: the whole distribution, or what top-k/min-p kept. */
    double kept = total;
    if (s->top_k > 0 || s->min_p > 0.0f) {
        kept = 0.0;
        for (int64_t r = 0; r < n; r++) kept += w[idx[r]];
    }
    double cum = 0.0;
    int64_t keep = 0;
    if (s->top_p < 1.0f) {
        double target = (double)s->top_p * kept;
        while (keep < n) {
            cum += w[idx[keep++]];
            if (cum >= target) break;
        }
    } else {
        keep = n;
        cum = kept;
    }
    double u = rng_uniform(s->seed, (uint64_t)position) * cum, c2 = 0.0;
    for (int64_t r = 0; r < keep; r++) {
        c2 += w[idx[r]];
        if (u < c2) return idx[r];
    }
    return idx[keep - 1];
}

void sampler_choose(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                    const sampler_history *h, invar_token_info *info, int32_t *work_idx, float *work_p) {
    sampler_choose_lse(logits, n_vocab, s, position, h, row_logsumexp(logits, n_vocab), info, work_idx, work_p);
}

void sampler_top(const float *logits, int64_t n_vocab, int32_t n, float lse, int32_t *ids, float *logprobs) {
    if (n <= 0) return;
    top_n(logits, n_vocab, n, ids);
    for (int32_t r = 0; r < n; r++) logprobs[r] = sampler_logprob(logits[ids[r]], lse);
}

void sampler_choose_lse(const float *logits, int64_t n_vocab, const invar_sampling *s, int64_t position,
                        const sampler_history *h, float lse, invar_token_info *info, int32_t *work_idx, float *work_p) {
    /* The processed copy chooses the token; what is reported comes from the raw row. */
    const float *choose = logits;
    if (h && sampler_processes(s)) {
        sampler_process(logits, n_vocab, s, h, work_p + n_vocab, work_idx);
        choose = work_p + n_vocab;
    }
    int32_t tok = s->temperature == 0.0f ? (int32_t)row_argmax(choose, n_vocab)
                                         : sample(choose, n_vocab, s, position, work_idx, work_p);
    info->token = tok;
    info->logprob = sampler_logprob(logits[tok], lse);
    info->n_top = s->top_logprobs;
    sampler_top(logits, n_vocab, info->n_top, lse, info->top_ids, info->top_logprobs);
}
