/* An OpenAI request body into a call: the fields every request has (prompt, messages,
 * sampling) through the shared decoder (src/request/), then what is particular to this API:
 * model, n, stream, stop, echo, the context check and the default length. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "request/request.h"
#include "server/openai_api.h"

static atomic_llong next_id = 1;

void api_request_free(api_request *r) {
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompt_texts ? r->prompt_texts[i] : NULL);
    free(r->prompt_texts);
    r->n_stops = r->n_prompts = 0;
    r->prompt_texts = NULL;
}

#define BAD_TYPE(e, key, what) \
    (api_error_set(e, 400, "invalid_request_error", key, "invalid_type", "'%s' must be %s", key, what), -1)

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_bool(const cJSON *o, const char *key, bool *out, api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD_TYPE(e, key, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* The decoder's error as an OpenAI error object. */
static void from_req_error(api_error *e, const req_error *re) {
    const char *code = NULL;
    switch (re->kind) {
    case REQ_ERR_NOMEM: api_error_set(e, 500, "server_error", NULL, NULL, "%s", re->message); return;
    case REQ_ERR_TYPE: code = "invalid_type"; break;
    case REQ_ERR_VALUE: code = "invalid_value"; break;
    case REQ_ERR_MISSING: code = "missing_required_parameter"; break;
    case REQ_ERR_TEMPLATE: break;
    case REQ_ERR_UNSUPPORTED: code = "unsupported_parameter"; break;
    }
    api_error_set(e, 400, "invalid_request_error", re->param, code, "%s", re->message);
}

static int parse_stop(const cJSON *o, api_request *r, api_error *e) {
    const cJSON *v = field(o, "stop");
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        if (v->valuestring[0]) r->stops[r->n_stops++] = strdup(v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v)) return BAD_TYPE(e, "stop", "a string or an array of strings");
    if (cJSON_GetArraySize(v) > SRV_MAX_STOPS) {
        api_error_set(e, 400, "invalid_request_error", "stop", "invalid_value", "at most %d stop strings", SRV_MAX_STOPS);
        return -1;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it)) return BAD_TYPE(e, "stop", "a string or an array of strings");
        if (it->valuestring[0]) r->stops[r->n_stops++] = strdup(it->valuestring);
    }
    return 0;
}

/* The fields only this API has. */
static int parse_api_fields(srv_state *s, const cJSON *o, bool chat, api_request *r, api_error *e) {
    const cJSON *model = field(o, "model");
    if (model) {
        if (!cJSON_IsString(model)) return BAD_TYPE(e, "model", "a string");
        if (strcmp(model->valuestring, s->model_name) && strcmp(model->valuestring, "default")) {
            api_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%s' does not exist (this server has '%s')", model->valuestring, s->model_name);
            return -1;
        }
    }
    if (get_bool(o, "stream", &r->stream, e)) return -1;
    const cJSON *so = field(o, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return BAD_TYPE(e, "stream_options", "an object");
        if (!r->stream) {
            api_error_set(e, 400, "invalid_request_error", "stream_options", "invalid_value",
                          "'stream_options' is only allowed with 'stream': true");
            return -1;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, so) {
            if (strcmp(it->string, "include_usage")) {
                api_error_set(e, 400, "invalid_request_error", "stream_options", "unsupported_parameter",
                              "'stream_options' supports include_usage only");
                return -1;
            }
        }
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    const cJSON *n = field(o, "n");
    if (n) {
        if (!cJSON_IsNumber(n) || n->valuedouble != floor(n->valuedouble)) return BAD_TYPE(e, "n", "an integer");
        if (n->valuedouble < 1 || n->valuedouble > SRV_MAX_N) {
            api_error_set(e, 400, "invalid_request_error", "n", "invalid_value", "'n' must be in [1, %d]", SRV_MAX_N);
            return -1;
        }
        r->n = r->n_out = (int)n->valuedouble;
    }
    /* best_of: candidates per prompt (candidate i samples with seed + i), of which the n
     * with the highest mean logprob are returned (api_response_json); not with stream. */
    const cJSON *bo = field(o, "best_of");
    if (bo) {
        if (!cJSON_IsNumber(bo) || bo->valuedouble != floor(bo->valuedouble))
            return BAD_TYPE(e, "best_of", "an integer");
        if (bo->valuedouble < r->n_out || bo->valuedouble > SRV_MAX_N) {
            api_error_set(e, 400, "invalid_request_error", "best_of", "invalid_value", "'best_of' must be in [n, %d]",
                          SRV_MAX_N);
            return -1;
        }
        r->n = (int)bo->valuedouble;
        if (r->stream && r->n > r->n_out) {
            api_error_set(e, 400, "invalid_request_error", "best_of", "invalid_value",
                          "'best_of' greater than 'n' cannot be streamed");
            return -1;
        }
    }
    if (!chat && get_bool(o, "echo", &r->echo, e)) return -1;
    return parse_stop(o, r, e);
}

/* Each prompt and its max_tokens fit the context. */
static int check_context(srv_state *s, const req_decoded *d, api_error *e) {
    int64_t want = d->max_tokens_given ? d->samp.max_tokens : 0;
    for (int i = 0; i < d->n_prompts; i++) {
        int64_t len = d->prompts[i].n_ids;
        if (len >= s->n_ctx || len + want > s->n_ctx) {
            api_error_set(e, 400, "invalid_request_error", d->chat ? "messages" : "prompt", "context_length_exceeded",
                          "This model's maximum context length is %d tokens; the prompt has %lld tokens and "
                          "max_tokens is %lld",
                          s->n_ctx, (long long)len, (long long)want);
            return -1;
        }
    }
    return 0;
}

/* The call: choice i of a prompt samples with seed + i. */
static int build_call(srv_state *s, const req_decoded *d, api_request *r, api_error *e) {
    const int max_choices = s->max_prompts > SRV_MAX_N ? s->max_prompts : SRV_MAX_N;
    if (r->n * r->n_prompts > max_choices) {
        api_error_set(e, 400, "invalid_request_error", "n", "invalid_value",
                      "at most %d choices (n x prompts) per request", max_choices);
        return -1;
    }
    r->call = srv_call_new(r->n * r->n_prompts);
    if (!r->call) goto oom;
    for (int p = 0; p < r->n_prompts; p++)
        for (int i = 0; i < r->n; i++) {
            const req_prompt *rp = &d->prompts[p];
            srv_choice *ch = &r->call->choices[p * r->n + i];
            ch->samp = d->samp;
            ch->samp.seed = d->samp.seed + (uint64_t)i; /* choice i of n draws with seed + i */
            /* Default length: OpenAI's 16 for completions, the rest of the context for chat. */
            int64_t mt = d->max_tokens_given ? d->samp.max_tokens : r->chat ? s->n_ctx - rp->n_ids : 16;
            if (!d->max_tokens_given && mt < d->samp.min_tokens) mt = d->samp.min_tokens;
            if (mt > s->n_ctx - rp->n_ids) mt = s->n_ctx - rp->n_ids;
            ch->samp.max_tokens = (int32_t)mt;
            if (ch->samp.min_tokens > mt) ch->samp.min_tokens = (int32_t)mt; /* the context ends it first */
            /* echo + logprobs: the engine computes the prompt's logprobs during this
             * choice's own prefill (one choice per prompt; streams carry none). */
            ch->samp.prompt_logprobs = r->echo && r->logprobs && !r->stream && i == 0;
            ch->n_prompt = rp->n_ids;
            ch->prompt = malloc(sizeof(int32_t) * (size_t)rp->n_ids);
            if (!ch->prompt) goto oom;
            memcpy(ch->prompt, rp->ids, sizeof(int32_t) * (size_t)rp->n_ids);
        }
    return 0;
oom:
    api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

int api_parse(srv_state *s, const char *body, size_t len, bool chat, api_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->chat = chat;
    r->n = r->n_out = 1;
    r->created = (long long)time(NULL);
    snprintf(r->id, sizeof r->id, "%s-%lld", chat ? "chatcmpl" : "cmpl", (long long)atomic_fetch_add(&next_id, 1));
    bool trailing;
    cJSON *o = req_parse_json(body, len, &trailing);
    if (!o) {
        api_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                      trailing ? "The body is not valid JSON: unexpected data after the JSON value"
                               : "The body is not valid JSON");
        return -1;
    }
    req_decoded d = {0};
    req_error re;
    int rc = -1;
    if (!cJSON_IsObject(o)) {
        api_error_set(e, 400, "invalid_request_error", NULL, "invalid_type", "The body must be a JSON object");
        goto out;
    }
    if (parse_api_fields(s, o, chat, r, e)) goto out;
    if (req_decode_limit(s->model, o, chat ? REQ_CHAT : REQ_COMPLETION, s->max_prompts, &d, &re)) {
        from_req_error(e, &re);
        goto out;
    }
    req_default_speculation(&d, s->spec_mode, s->spec_tokens); /* the command line's, unless given */
    r->logprobs = d.logprobs;
    r->top_logprobs = d.samp.top_logprobs;
    r->prompt_texts = calloc((size_t)d.n_prompts, sizeof *r->prompt_texts);
    if (!r->prompt_texts) {
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    r->n_prompts = d.n_prompts;
    for (int i = 0; i < d.n_prompts; i++) { /* for echo; ownership moves to r */
        r->prompt_texts[i] = d.prompts[i].text;
        d.prompts[i].text = NULL;
    }
    if (check_context(s, &d, e) || build_call(s, &d, r, e)) goto out;
    rc = 0;
out:
    req_decoded_free(&d);
    cJSON_Delete(o);
    if (rc) {
        if (r->call) { /* never submitted: free it directly */
            srv_call *c = r->call;
            r->call = NULL;
            pthread_mutex_lock(&s->mu);
            s->active_calls++; /* srv_call_finish balances it */
            pthread_mutex_unlock(&s->mu);
            srv_call_finish(s, c, false, false);
        }
        api_request_free(r);
    }
    return rc;
}
