/* The logits-processing half of a request: penalties, logit_bias, min_tokens and
 * stop_token_ids into invar_sampling, each checked here with the field's name (the engine
 * checks the same bounds again for C callers). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "request/request_internal.h"

/* logit_bias: {"token id": bias, ...}, ids in [0, n_vocab), biases in [-100, 100]. */
static int get_logit_bias(const invar_model *m, const cJSON *o, invar_sampling *s, req_error *e) {
    const cJSON *v = req_field(o, "logit_bias");
    if (!v) return 0;
    if (!cJSON_IsObject(v))
        return req_fail(e, REQ_ERR_TYPE, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    const int32_t V = invar_model_n_vocab(m);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (s->n_logit_bias == INVAR_MAX_LOGIT_BIAS)
            return req_fail(e, REQ_ERR_VALUE, "logit_bias", "'logit_bias' has more than %d entries",
                            INVAR_MAX_LOGIT_BIAS);
        const char *k = it->string;
        char *end = NULL;
        errno = 0;
        long id = k && k[0] >= '0' && k[0] <= '9' ? strtol(k, &end, 10) : -1;
        if (id < 0 || errno || *end || id >= V)
            return req_fail(
                e, REQ_ERR_VALUE, "logit_bias",
                "'logit_bias' keys must be token ids in [0, %d), written as decimal integers; got \"%.40s\"", V,
                k ? k : "");
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return req_fail(e, REQ_ERR_TYPE, "logit_bias", "'logit_bias' values must be numbers");
        if (it->valuedouble < -100 || it->valuedouble > 100)
            return req_fail(e, REQ_ERR_VALUE, "logit_bias", "'logit_bias' values must be in [-100, 100]");
        s->logit_bias[s->n_logit_bias++] = (invar_logit_bias){(int32_t)id, (float)it->valuedouble};
    }
    return 0;
}

/* stop_token_ids: an array of token ids in [0, n_vocab). */
static int get_stop_ids(const invar_model *m, const cJSON *o, invar_sampling *s, req_error *e) {
    const cJSON *v = req_field(o, "stop_token_ids");
    if (!v) return 0;
    if (!cJSON_IsArray(v))
        return req_fail(e, REQ_ERR_TYPE, "stop_token_ids", "'stop_token_ids' must be an array of token ids");
    const int32_t V = invar_model_n_vocab(m);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (s->n_stop_token_ids == INVAR_MAX_STOP_TOKEN_IDS)
            return req_fail(e, REQ_ERR_VALUE, "stop_token_ids", "at most %d stop_token_ids", INVAR_MAX_STOP_TOKEN_IDS);
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
            it->valuedouble >= V)
            return req_fail(e, REQ_ERR_VALUE, "stop_token_ids", "'stop_token_ids' must be token ids in [0, %d)", V);
        s->stop_token_ids[s->n_stop_token_ids++] = (int32_t)it->valuedouble;
    }
    return 0;
}

int req_decode_processing(const invar_model *m, const cJSON *o, req_decoded *d, req_error *e) {
    invar_sampling *s = &d->samp;
    if (req_get_num(o, "presence_penalty", -2, false, 2, &s->presence_penalty, e)) return -1;
    if (req_get_num(o, "frequency_penalty", -2, false, 2, &s->frequency_penalty, e)) return -1;
    if (req_get_num(o, "repetition_penalty", 0, true, 10, &s->repetition_penalty, e)) return -1;
    int64_t v = 0;
    if (req_get_int(o, "min_tokens", 0, REQ_MAX_TOKENS, &v, NULL, e)) return -1;
    s->min_tokens = (int32_t)v;
    if (d->max_tokens_given && s->min_tokens > s->max_tokens)
        return req_fail(e, REQ_ERR_VALUE, "min_tokens", "'min_tokens' (%d) must not exceed max_tokens (%d)",
                        s->min_tokens, s->max_tokens);
    if (s->min_tokens > s->max_tokens) s->max_tokens = s->min_tokens; /* the default length is the caller's */
    return get_logit_bias(m, o, s, e) || get_stop_ids(m, o, s, e) ? -1 : 0;
}
