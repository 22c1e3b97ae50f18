/* The sampling half of a request: numbers and flags into invar_sampling, each range checked
 * here (the engine would reject the same values later, with no field name to report). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request/request_internal.h"

int req_fail(req_error *e, req_error_kind kind, const char *param, const char *fmt, ...) {
    e->kind = kind;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

const cJSON *req_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int bad_type(req_error *e, const char *key, const char *what) {
    return req_fail(e, REQ_ERR_TYPE, key, "'%s' must be %s", key, what);
}

/* An integer in [lo, hi]; *given tells whether the field was there. */
int req_get_int(const cJSON *o, const char *key, double lo, double hi, int64_t *out, bool *given, req_error *e) {
    const cJSON *v = req_field(o, key);
    if (given) *given = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) return bad_type(e, key, "an integer");
    if (v->valuedouble < lo || v->valuedouble > hi)
        return req_fail(e, REQ_ERR_VALUE, key, "'%s' must be in [%.0f, %.0f]", key, lo, hi);
    *out = (int64_t)v->valuedouble;
    return 0;
}

/* A finite number in [lo, hi], or (lo_open) in (lo, hi]. */
int req_get_num(const cJSON *o, const char *key, double lo, bool lo_open, double hi, float *out, req_error *e) {
    const cJSON *v = req_field(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bad_type(e, key, "a number");
    double x = v->valuedouble;
    if (x < lo || (lo_open && x == lo) || x > hi)
        return req_fail(e, REQ_ERR_VALUE, key, "'%s' must be in %c%g, %g]", key, lo_open ? '(' : '[', lo, hi);
    *out = (float)x;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, bool *out, req_error *e) {
    const cJSON *v = req_field(o, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return bad_type(e, key, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* logprobs: a count of alternatives (batch, completions) or chat's boolean + top_logprobs. */
static int get_logprobs(const cJSON *o, req_kind kind, req_decoded *d, req_error *e) {
    int64_t top = 0;
    if (kind != REQ_CHAT) {
        bool given;
        if (req_get_int(o, "logprobs", 0, INVAR_MAX_TOP_LOGPROBS, &top, &given, e)) return -1;
        d->logprobs = given;
    } else {
        if (get_bool(o, "logprobs", &d->logprobs, e)) return -1;
        if (req_get_int(o, "top_logprobs", 0, INVAR_MAX_TOP_LOGPROBS, &top, NULL, e)) return -1;
        if (top && !d->logprobs)
            return req_fail(e, REQ_ERR_VALUE, "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    }
    d->samp.top_logprobs = (int32_t)top;
    return 0;
}

/* speculate: "off" | "ngram" | "draft"; spec_tokens: drafted tokens per step. */
static int get_speculation(const cJSON *o, req_decoded *d, req_error *e) {
    const cJSON *v = req_field(o, "speculate");
    if (v) {
        static const char *names[] = {"off", "ngram", "draft"};
        if (!cJSON_IsString(v)) return bad_type(e, "speculate", "a string");
        int mode = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(v->valuestring, names[i])) mode = i;
        if (mode < 0) return req_fail(e, REQ_ERR_VALUE, "speculate", "'speculate' must be \"off\", \"ngram\" or \"draft\"");
        d->samp.speculate = (invar_spec_mode)mode;
        d->speculate_given = true;
    }
    int64_t k = 0;
    if (req_get_int(o, "spec_tokens", 1, INVAR_MAX_SPEC_TOKENS, &k, &d->spec_tokens_given, e)) return -1;
    if (d->spec_tokens_given) d->samp.spec_tokens = (int32_t)k;
    return 0;
}

void req_default_speculation(req_decoded *d, invar_spec_mode mode, int32_t spec_tokens) {
    if (!d->speculate_given) d->samp.speculate = mode;
    if (!d->spec_tokens_given) d->samp.spec_tokens = spec_tokens;
}

static int decode_sampling(const invar_model *m, const cJSON *o, req_kind kind, req_decoded *d, req_error *e) {
    invar_sampling *s = &d->samp;
    int64_t v = 0;
    bool given = false;
    if (req_get_int(o, "max_tokens", 1, REQ_MAX_TOKENS, &v, &given, e)) return -1;
    if (given) s->max_tokens = (int32_t)v, d->max_tokens_given = true;
    bool chat = kind == REQ_CHAT || (kind == REQ_BATCH && req_field(o, "messages"));
    if (chat && req_get_int(o, "max_completion_tokens", 1, REQ_MAX_TOKENS, &v, &given, e)) return -1;
    if (chat && given) s->max_tokens = (int32_t)v, d->max_tokens_given = true;
    if (req_get_num(o, "temperature", 0, false, 100, &s->temperature, e)) return -1;
    if (req_get_num(o, "top_p", 0, true, 1, &s->top_p, e)) return -1;
    if (req_get_num(o, "min_p", 0, false, 1, &s->min_p, e)) return -1;
    v = 0;
    if (req_get_int(o, "top_k", -1, 1 << 30, &v, NULL, e)) return -1;
    s->top_k = v < 0 ? 0 : (int32_t)v;
    if (req_get_u64(o, "seed", &s->seed, e)) return -1;
    if (get_bool(o, "ignore_eos", &s->ignore_eos, e)) return -1;
    if (get_speculation(o, d, e)) return -1;
    if (req_decode_processing(m, o, d, e)) return -1;
    return get_logprobs(o, kind, d, e);
}

int req_decode(const invar_model *m, const cJSON *o, req_kind kind, req_decoded *out, req_error *e) {
    return req_decode_limit(m, o, kind, REQ_MAX_PROMPTS, out, e);
}

int req_decode_limit(const invar_model *m, const cJSON *o, req_kind kind, int max_prompts, req_decoded *out,
                     req_error *e) {
    memset(out, 0, sizeof *out);
    memset(e, 0, sizeof *e);
    invar_sampling_default(&out->samp);
    if (!cJSON_IsObject(o)) return req_fail(e, REQ_ERR_TYPE, NULL, "the request must be a JSON object");
    if (req_check_fields(o, kind, e) || decode_sampling(m, o, kind, out, e) ||
        req_decode_prompts(m, o, kind, max_prompts, out, e)) {
        req_decoded_free(out);
        return -1;
    }
    return 0;
}

void req_decoded_free(req_decoded *d) {
    for (int i = 0; d->prompts && i < d->n_prompts; i++) {
        free(d->prompts[i].ids);
        free(d->prompts[i].text);
    }
    free(d->prompts);
    d->prompts = NULL;
    d->n_prompts = 0;
}

cJSON *req_parse_json(const char *text, size_t len, bool *trailing) {
    const char *end = NULL;
    *trailing = false;
    cJSON *o = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!o) return NULL;
    size_t k = (size_t)(end - text);
    while (k < len && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r' || text[k] == '\n')) k++;
    if (k == len) {
        req_keep_exact_numbers(o, text, len);
        return o;
    }
    cJSON_Delete(o);
    *trailing = true;
    return NULL;
}
