#include "server/openai_api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/float_format.h"
#include "common/utf8.h"
#include "request/token_text.h"

void api_error_set(api_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->param = NULL;
    if (param) { /* a copy: the name may live in a decoder's error that goes away */
        snprintf(e->param_buf, sizeof e->param_buf, "%s", param);
        e->param = e->param_buf;
    }
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

char *api_error_json(const api_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    /* The message may quote client bytes (a model name) or be cut mid-character by the
     * fixed buffer: JSON strings must be valid UTF-8. */
    char *msg = utf8_sanitize(e->message, strlen(e->message));
    cJSON_AddStringToObject(o, "message", msg ? msg : "");
    free(msg);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
    if (e->param) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (e->code) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- responses ------------------------------------------------------------------------ */

const char *api_finish_reason(invar_finish f, bool stopped) {
    if (stopped) return "stop";
    switch (f) {
    case INVAR_FINISH_LENGTH: return "length";
    case INVAR_FINISH_ERROR: return "error";
    default: return "stop";
    }
}

static void add_f32(cJSON *o, const char *key, float v) {
    char buf[32];
    format_f32(buf, sizeof buf, v);
    if (key) cJSON_AddItemToObject(o, key, cJSON_CreateRaw(buf));
    else cJSON_AddItemToArray(o, cJSON_CreateRaw(buf));
}

static cJSON *chat_token_entry(srv_state *s, int32_t id, float lp, bool top) {
    cJSON *o = cJSON_CreateObject();
    unsigned char raw[256];
    int n = 0;
    char *t = req_token_text(s->model, id, raw, &n);
    cJSON_AddStringToObject(o, "token", t ? t : "");
    free(t);
    add_f32(o, "logprob", lp);
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(raw[i]));
    (void)top;
    return o;
}

/* A completion token's top_logprobs: the best n alternatives and, like OpenAI's, always the
 * sampled token (so logprobs: 0 gives a one-entry dict), up to n + 1 entries; tokens whose
 * texts coincide keep the first (best) entry. */
static cJSON *top_dict(srv_state *s, const invar_token_info *t, int n) {
    cJSON *d = cJSON_CreateObject();
    for (int k = 0; k <= t->n_top && k <= n; k++) {
        const bool sampled = k == t->n_top || k == n;
        const int32_t id = sampled ? t->token : t->top_ids[k];
        char *tk = req_token_text(s->model, id, NULL, NULL);
        if (!cJSON_GetObjectItemCaseSensitive(d, tk ? tk : ""))
            add_f32(d, tk ? tk : "", sampled ? t->logprob : t->top_logprobs[k]);
        free(tk);
    }
    return d;
}

/* Logprobs of the tracker's tokens [from, to), end-of-generation tokens left out (they
 * add no text). Chat: {"content": [...]}; completions: the legacy parallel arrays. */

/* The prompt tokens of an echoed completion: the first has no logprob; the others come from
 * the engine (lps[k - 1], n_lps of them), computed in the prompt's prefill. */
static void echo_entries(srv_state *s, const api_request *r, const srv_choice *ch, const srv_choice *first,
                         cJSON *tokens, cJSON *tlp, cJSON *tops, cJSON *offs) {
    const float *lps = first->plp;
    const int64_t n_lps = first->n_plp;
    size_t off = 0;
    for (int64_t k = 0; k < ch->n_prompt; k++) {
        char *txt = req_token_text(s->model, ch->prompt[k], NULL, NULL);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(txt ? txt : ""));
        if (k == 0 || k > n_lps) cJSON_AddItemToArray(tlp, cJSON_CreateNull());
        else add_f32(tlp, NULL, lps[k - 1]);
        /* the first token has no alternatives (nothing before it predicts it) */
        if (k == 0 || k > n_lps) cJSON_AddItemToArray(tops, cJSON_CreateNull());
        else if (first->plp_top) cJSON_AddItemToArray(tops, top_dict(s, &first->plp_top[k - 1], r->top_logprobs));
        else {
            const invar_token_info only = {.token = ch->prompt[k], .logprob = lps[k - 1], .n_top = 0};
            cJSON_AddItemToArray(tops, top_dict(s, &only, 0));
        }
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += txt ? strlen(txt) : 0;
        free(txt);
    }
}

static cJSON *logprobs_json(srv_state *s, const api_request *r, const text_tracker *tt, int64_t from, int64_t to,
                            size_t text_base, int choice) {
    cJSON *lp = cJSON_CreateObject();
    if (r->chat) {
        cJSON *content = cJSON_AddArrayToObject(lp, "content");
        for (int64_t i = from; i < to; i++) {
            const invar_token_info *t = &tt->toks[i];
            if (invar_token_is_eog(s->model, t->token)) continue;
            cJSON *ent = chat_token_entry(s, t->token, t->logprob, false);
            cJSON *tops = cJSON_AddArrayToObject(ent, "top_logprobs");
            for (int k = 0; k < t->n_top && k < r->top_logprobs; k++)
                cJSON_AddItemToArray(tops, chat_token_entry(s, t->top_ids[k], t->top_logprobs[k], true));
            cJSON_AddItemToArray(content, ent);
        }
        return lp;
    }
    cJSON *tokens = cJSON_AddArrayToObject(lp, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(lp, "text_offset");
    if (choice >= 0 && r->echo) { /* the prompt's first choice asked the engine for them */
        const srv_choice *ch = &r->call->choices[choice], *first = &r->call->choices[choice / r->n * r->n];
        echo_entries(s, r, ch, first, tokens, tlp, tops, offs);
    }
    for (int64_t i = from; i < to; i++) {
        const invar_token_info *t = &tt->toks[i];
        if (invar_token_is_eog(s->model, t->token)) continue;
        char *txt = req_token_text(s->model, t->token, NULL, NULL);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(txt ? txt : ""));
        free(txt);
        add_f32(tlp, NULL, t->logprob);
        cJSON_AddItemToArray(tops, top_dict(s, t, r->top_logprobs));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(text_base + tt->tok_start[i])));
    }
    return lp;
}

static cJSON *envelope(srv_state *s, const api_request *r, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", s->model_name);
    cJSON_AddStringToObject(o, "system_fingerprint", "invar");
    return o;
}

/* cached: prompt tokens whose K/V came from the prefix cache (whole 16-token blocks). */
static void add_usage(cJSON *o, int64_t prompt, int64_t completion, int64_t cached) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
}

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* A candidate's mean logprob per kept token (0 for none), summed in token order. */
static double mean_logprob(const text_tracker *tt) {
    double sum = 0.0;
    for (int64_t k = 0; k < tt->n_kept; k++) sum += tt->toks[k].logprob;
    return tt->n_kept ? sum / (double)tt->n_kept : 0.0;
}

/* best_of: the n_out candidates of prompt p with the highest mean logprob, best first (ties:
 * the lower candidate), into pick[0, n_out) as choice indices. */
static void pick_best(const api_request *r, const text_tracker *tt, int p, int *pick) {
    int n = 0;
    for (int c = p * r->n; c < (p + 1) * r->n; c++) {
        const double m = mean_logprob(&tt[c]);
        int at = n < r->n_out ? n++ : r->n_out;
        while (at > 0 && m > mean_logprob(&tt[pick[at - 1]])) {
            if (at < r->n_out) pick[at] = pick[at - 1];
            at--;
        }
        if (at < r->n_out) pick[at] = c;
    }
}

char *api_response_json(srv_state *s, const api_request *r, const text_tracker *tt, const invar_finish *finish) {
    cJSON *o = envelope(s, r, r->chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0;
    for (int i = 0; i < r->call->n_choices; i++) { /* every candidate's tokens count */
        if (i % r->n == 0) prompt_tokens += r->call->choices[i].n_prompt, cached += r->call->choices[i].n_cached;
        completion_tokens += tt[i].n_kept;
    }
    int pick[SRV_MAX_N];
    for (int out = 0; out < r->n_prompts * r->n_out; out++) {
        const int k = out % r->n_out;
        if (k == 0) pick_best(r, tt, out / r->n_out, pick);
        const int i = r->n == r->n_out ? out : pick[k];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", out);
        char *text = tt_text(&tt[i], 0, tt[i].len);
        size_t base = 0;
        if (r->chat) {
            cJSON *msg = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", text ? text : "");
        } else {
            const char *echo = r->echo ? r->prompt_texts[i / r->n] : "";
            size_t el = strlen(echo), tl = text ? strlen(text) : 0;
            char *full = malloc(el + tl + 1);
            if (full) {
                memcpy(full, echo, el);
                memcpy(full + el, text ? text : "", tl + 1);
            }
            base = el;
            cJSON_AddStringToObject(c, "text", full ? full : "");
            free(full);
        }
        free(text);
        if (r->logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, r, &tt[i], 0, tt[i].n_kept, base, i));
        else cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddStringToObject(c, "finish_reason", api_finish_reason(finish[i], tt[i].stopped));
        cJSON_AddItemToArray(choices, c);
    }
    add_usage(o, prompt_tokens, completion_tokens, cached);
    return print_free(o);
}

char *api_chunk_json(srv_state *s, const api_request *r, int index, const char *delta, const text_tracker *tt,
                     int64_t from, int64_t to, const char *finish, bool role) {
    cJSON *o = envelope(s, r, r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (r->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (delta) cJSON_AddStringToObject(d, "content", delta);
    } else {
        cJSON_AddStringToObject(c, "text", delta ? delta : "");
    }
    if (r->logprobs && to > from) cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, r, tt, from, to, 0, -1));
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    return print_free(o);
}

char *api_usage_chunk_json(srv_state *s, const api_request *r, int64_t prompt_tokens, int64_t completion_tokens,
                           int64_t cached_tokens) {
    cJSON *o = envelope(s, r, r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, prompt_tokens, completion_tokens, cached_tokens);
    return print_free(o);
}
