#include "server/openai_api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/request_json.h"

static atomic_llong next_id = 1;

void api_error_set(api_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->param = param;
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

void api_request_free(api_request *r) {
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompt_texts ? r->prompt_texts[i] : NULL);
    free(r->prompt_texts);
    r->n_stops = r->n_prompts = 0;
    r->prompt_texts = NULL;
}

/* ---- parsing -------------------------------------------------------------------------- */

#define BAD_TYPE(e, key, what) \
    (api_error_set(e, 400, "invalid_request_error", key, "invalid_type", "'%s' must be %s", key, what), -1)

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_int(const cJSON *o, const char *key, double lo, double hi, int64_t *out, api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) return BAD_TYPE(e, key, "an integer");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        api_error_set(e, 400, "invalid_request_error", key, "invalid_value", "'%s' must be in [%.0f, %.0f]", key, lo, hi);
        return -1;
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_num(const cJSON *o, const char *key, double lo, double hi, float *out, api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return BAD_TYPE(e, key, "a number");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        api_error_set(e, 400, "invalid_request_error", key, "invalid_value", "'%s' must be in [%g, %g]", key, lo, hi);
        return -1;
    }
    *out = (float)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, bool *out, api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD_TYPE(e, key, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Renders and tokenizes a chat: the template's markup has special tokens, the message
 * contents never do (a message cannot forge "<|im_end|>" and open a system turn). Returns
 * the rendered text, the tokens in *toks / *n_toks; NULL with e set on failure. */
static char *render_chat(srv_state *s, const cJSON *msgs, int32_t **toks, int64_t *n_toks, api_error *e) {
    int n = cJSON_GetArraySize(msgs);
    if (!cJSON_IsArray(msgs) || n <= 0) {
        api_error_set(e, 400, "invalid_request_error", "messages", "invalid_type", "'messages' must be a non-empty array");
        return NULL;
    }
    invar_chat_message *cm = calloc((size_t)n, sizeof *cm);
    char **owned = calloc((size_t)n, sizeof *owned);
    char *text = NULL;
    if (!cm || !owned) goto done;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsString(role)) {
            api_error_set(e, 400, "invalid_request_error", "messages", "invalid_type", "messages[%d].role must be a string", i);
            goto done;
        }
        cm[i].role = role->valuestring;
        if (cJSON_IsString(content)) {
            cm[i].content = content->valuestring;
        } else if (cJSON_IsArray(content)) { /* content parts: concatenate the text ones */
            size_t len = 0;
            const cJSON *p;
            cJSON_ArrayForEach(p, content) {
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(t)) {
                    api_error_set(e, 400, "invalid_request_error", "messages", "invalid_type",
                                  "messages[%d].content: only text parts are supported", i);
                    goto done;
                }
                len += strlen(t->valuestring);
            }
            owned[i] = calloc(len + 1, 1);
            if (!owned[i]) goto done;
            cJSON_ArrayForEach(p, content) strcat(owned[i], cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
            cm[i].content = owned[i];
        } else if (!content || cJSON_IsNull(content)) {
            cm[i].content = "";
        } else {
            api_error_set(e, 400, "invalid_request_error", "messages", "invalid_type",
                          "messages[%d].content must be a string or an array of text parts", i);
            goto done;
        }
        i++;
    }
    char err[200];
    if (invar_chat_tokenize(s->model, cm, (size_t)n, true, toks, n_toks, &text, err, sizeof err) == -1)
        api_error_set(e, 400, "invalid_request_error", "messages", NULL, "chat template: %s", err);
done:
    if (!text && e->status == 0) api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int k = 0; owned && k < n; k++) free(owned[k]);
    free(owned);
    free(cm);
    return text;
}

/* Prompts of a completions request: a string, an array of strings, or token ids
 * (an array of integers, or an array of such arrays). Fills texts (NULL for token prompts). */
static int collect_prompts(srv_state *s, const cJSON *p, int32_t ***toks, int64_t **lens, char ***texts, int *n,
                           api_error *e) {
    const cJSON *items[64];
    int k = 0;
    bool single_ids = false;
    if (cJSON_IsString(p)) items[k++] = p;
    else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) {
        const cJSON *first = p->child;
        if (cJSON_IsNumber(first)) {
            single_ids = true;
            items[k++] = p;
        } else {
            const cJSON *it;
            cJSON_ArrayForEach(it, p) {
                if (k == 64) {
                    api_error_set(e, 400, "invalid_request_error", "prompt", "invalid_value", "at most 64 prompts per request");
                    return -1;
                }
                if (!cJSON_IsString(it) && !cJSON_IsArray(it)) return BAD_TYPE(e, "prompt", "a string, an array of strings or token ids");
                items[k++] = it;
            }
        }
    } else {
        return BAD_TYPE(e, "prompt", "a string, an array of strings or token ids");
    }
    (void)single_ids;
    *toks = calloc((size_t)k, sizeof **toks);
    *lens = calloc((size_t)k, sizeof **lens);
    *texts = calloc((size_t)k, sizeof **texts);
    *n = k;
    if (!*toks || !*lens || !*texts) goto oom;
    for (int i = 0; i < k; i++) {
        const cJSON *it = items[i];
        if (cJSON_IsString(it)) {
            (*texts)[i] = utf8_sanitize(it->valuestring, strlen(it->valuestring)); /* echoed into JSON */
            (*toks)[i] = tokenize_alloc(s->model, it->valuestring, true, &(*lens)[i]); /* raw prompt */
            if (!(*texts)[i] || !(*toks)[i]) goto oom;
            continue;
        }
        int m = cJSON_GetArraySize(it);
        if (m <= 0) {
            api_error_set(e, 400, "invalid_request_error", "prompt", "invalid_value", "empty token prompt");
            return -1;
        }
        (*toks)[i] = malloc(sizeof(int32_t) * (size_t)m);
        if (!(*toks)[i]) goto oom;
        int j = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, it) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= invar_model_n_vocab(s->model))
                return BAD_TYPE(e, "prompt", "token ids in [0, n_vocab)");
            (*toks)[i][j++] = (int32_t)t->valuedouble;
        }
        (*lens)[i] = m;
        /* Echo of a token prompt: its text. */
        invar_token_info *ti = calloc((size_t)m, sizeof *ti);
        if (!ti) goto oom;
        for (int q = 0; q < m; q++) ti[q].token = (*toks)[i][q];
        (*texts)[i] = cli_tokens_text(s->model, ti, m);
        free(ti);
    }
    return 0;
oom:
    api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
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

static int parse_fields(srv_state *s, const cJSON *o, bool chat, api_request *r, invar_sampling *sp, int64_t *max_tokens,
                        api_error *e) {
    const cJSON *model = field(o, "model");
    if (model) {
        if (!cJSON_IsString(model)) return BAD_TYPE(e, "model", "a string");
        if (strcmp(model->valuestring, s->model_name) && strcmp(model->valuestring, "default")) {
            api_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%s' does not exist (this server has '%s')", model->valuestring, s->model_name);
            return -1;
        }
    }
    int64_t v = 1;
    if (get_bool(o, "stream", &r->stream, e)) return -1;
    const cJSON *so = field(o, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return BAD_TYPE(e, "stream_options", "an object");
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    if (get_int(o, "n", 1, 128, &v, e)) return -1;
    r->n = (int)v;
    if (get_int(o, "max_tokens", 1, 1 << 24, max_tokens, e)) return -1;
    if (chat && get_int(o, "max_completion_tokens", 1, 1 << 24, max_tokens, e)) return -1;
    if (get_num(o, "temperature", 0, 100, &sp->temperature, e)) return -1;
    if (get_num(o, "top_p", 0, 1, &sp->top_p, e)) return -1;
    if (get_num(o, "min_p", 0, 1, &sp->min_p, e)) return -1;
    v = 0;
    if (get_int(o, "top_k", -1, 1 << 30, &v, e)) return -1;
    sp->top_k = v < 0 ? 0 : (int32_t)v;
    int64_t seed = 0;
    if (get_int(o, "seed", -9007199254740992.0, 9007199254740992.0, &seed, e)) return -1;
    sp->seed = (uint64_t)seed;
    if (get_bool(o, "ignore_eos", &sp->ignore_eos, e)) return -1;
    if (chat) {
        if (get_bool(o, "logprobs", &r->logprobs, e)) return -1;
        v = 0;
        if (get_int(o, "top_logprobs", 0, INVAR_MAX_TOP_LOGPROBS, &v, e)) return -1;
        r->top_logprobs = (int)v;
        if (r->top_logprobs && !r->logprobs) {
            api_error_set(e, 400, "invalid_request_error", "top_logprobs", "invalid_value",
                          "'top_logprobs' needs 'logprobs' set to true");
            return -1;
        }
    } else {
        v = -1;
        if (get_int(o, "logprobs", 0, INVAR_MAX_TOP_LOGPROBS, &v, e)) return -1;
        r->logprobs = v >= 0;
        r->top_logprobs = v > 0 ? (int)v : 0;
        if (get_bool(o, "echo", &r->echo, e)) return -1;
    }
    sp->top_logprobs = r->top_logprobs;
    return parse_stop(o, r, e);
}

int api_parse(srv_state *s, const char *body, size_t len, bool chat, api_request *r, api_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->chat = chat;
    r->n = 1;
    r->created = (long long)time(NULL);
    snprintf(r->id, sizeof r->id, "%s-%lld", chat ? "chatcmpl" : "cmpl", (long long)atomic_fetch_add(&next_id, 1));
    bool trailing;
    cJSON *o = json_parse_whole(body, len, &trailing);
    if (!o) {
        api_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                      trailing ? "The body is not valid JSON: unexpected data after the JSON value"
                               : "The body is not valid JSON");
        return -1;
    }
    int32_t **toks = NULL;
    int64_t *lens = NULL;
    int rc = -1;
    invar_sampling sp;
    invar_sampling_default(&sp);
    sp.speculate = s->spec_mode;
    sp.spec_tokens = s->spec_tokens;
    int64_t max_tokens = -1;
    if (!cJSON_IsObject(o)) {
        api_error_set(e, 400, "invalid_request_error", NULL, "invalid_type", "The body must be a JSON object");
        goto out;
    }
    if (parse_fields(s, o, chat, r, &sp, &max_tokens, e)) goto out;
    if (chat) {
        const cJSON *msgs = field(o, "messages");
        if (!msgs) {
            api_error_set(e, 400, "invalid_request_error", "messages", "missing_required_parameter", "'messages' is required");
            goto out;
        }
        toks = calloc(1, sizeof *toks);
        lens = calloc(1, sizeof *lens);
        r->prompt_texts = calloc(1, sizeof *r->prompt_texts);
        if (!toks || !lens || !r->prompt_texts) {
            api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            goto out;
        }
        r->n_prompts = 1;
        if (!(r->prompt_texts[0] = render_chat(s, msgs, &toks[0], &lens[0], e))) goto out;
    } else {
        const cJSON *p = field(o, "prompt");
        if (!p) {
            api_error_set(e, 400, "invalid_request_error", "prompt", "missing_required_parameter", "'prompt' is required");
            goto out;
        }
        if (collect_prompts(s, p, &toks, &lens, &r->prompt_texts, &r->n_prompts, e)) goto out;
    }
    for (int i = 0; i < r->n_prompts; i++) {
        if (lens[i] <= 0) {
            api_error_set(e, 400, "invalid_request_error", "prompt", "invalid_value", "the prompt is empty");
            goto out;
        }
        int64_t want = max_tokens > 0 ? max_tokens : 0;
        if (lens[i] >= s->n_ctx || lens[i] + want > s->n_ctx) {
            api_error_set(e, 400, "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded",
                          "This model's maximum context length is %d tokens; the prompt has %lld tokens and "
                          "max_tokens is %lld",
                          s->n_ctx, (long long)lens[i], (long long)want);
            goto out;
        }
    }
    if (r->n * r->n_prompts > 128) {
        api_error_set(e, 400, "invalid_request_error", "n", "invalid_value", "at most 128 choices per request");
        goto out;
    }
    r->call = srv_call_new(r->n * r->n_prompts);
    if (!r->call) {
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    for (int p = 0; p < r->n_prompts; p++)
        for (int i = 0; i < r->n; i++) {
            srv_choice *ch = &r->call->choices[p * r->n + i];
            ch->samp = sp;
            ch->samp.seed = sp.seed + (uint64_t)i; /* choice i of n draws with seed + i */
            /* Default length: OpenAI's 16 for completions, the rest of the context for chat. */
            int64_t mt = max_tokens > 0 ? max_tokens : chat ? s->n_ctx - lens[p] : 16;
            if (mt > s->n_ctx - lens[p]) mt = s->n_ctx - lens[p];
            ch->samp.max_tokens = (int32_t)mt;
            /* echo + logprobs: the engine computes the prompt's logprobs during this
             * choice's own prefill (one choice per prompt; streams carry none). */
            ch->samp.prompt_logprobs = r->echo && r->logprobs && !r->stream && i == 0;
            ch->n_prompt = lens[p];
            ch->prompt = malloc(sizeof(int32_t) * (size_t)lens[p]);
            if (!ch->prompt) {
                api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
                goto out;
            }
            memcpy(ch->prompt, toks[p], sizeof(int32_t) * (size_t)lens[p]);
        }
    rc = 0;
out:
    for (int i = 0; toks && i < r->n_prompts; i++) free(toks[i]);
    free(toks);
    free(lens);
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

static char *token_text(srv_state *s, int32_t id, unsigned char *raw, int *n_raw) {
    char buf[256];
    int b = invar_token_bytes(s->model, id, buf, sizeof buf);
    if (b < 0 || b > (int)sizeof buf) b = 0;
    if (raw) memcpy(raw, buf, (size_t)b);
    if (n_raw) *n_raw = b;
    return utf8_sanitize(buf, (size_t)b);
}

static cJSON *chat_token_entry(srv_state *s, int32_t id, float lp, bool top) {
    cJSON *o = cJSON_CreateObject();
    unsigned char raw[256];
    int n = 0;
    char *t = token_text(s, id, raw, &n);
    cJSON_AddStringToObject(o, "token", t ? t : "");
    free(t);
    add_f32(o, "logprob", lp);
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(raw[i]));
    (void)top;
    return o;
}

/* Logprobs of the tracker's tokens [from, to), end-of-generation tokens left out (they
 * add no text). Chat: {"content": [...]}; completions: the legacy parallel arrays. */
static char *token_text(srv_state *s, int32_t id, unsigned char *raw, int *n_raw);

/* The prompt tokens of an echoed completion: the first has no logprob; the others come from
 * the engine (lps[k - 1], n_lps of them), computed in the prompt's prefill. */
static void echo_entries(srv_state *s, const srv_choice *ch, const float *lps, int64_t n_lps, cJSON *tokens,
                         cJSON *tlp, cJSON *tops, cJSON *offs) {
    size_t off = 0;
    for (int64_t k = 0; k < ch->n_prompt; k++) {
        char *txt = token_text(s, ch->prompt[k], NULL, NULL);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(txt ? txt : ""));
        if (k == 0 || k > n_lps) cJSON_AddItemToArray(tlp, cJSON_CreateNull());
        else add_f32(tlp, NULL, lps[k - 1]);
        cJSON_AddItemToArray(tops, cJSON_CreateNull());
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
        echo_entries(s, ch, first->plp, first->n_plp, tokens, tlp, tops, offs);
    }
    for (int64_t i = from; i < to; i++) {
        const invar_token_info *t = &tt->toks[i];
        if (invar_token_is_eog(s->model, t->token)) continue;
        char *txt = token_text(s, t->token, NULL, NULL);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(txt ? txt : ""));
        free(txt);
        add_f32(tlp, NULL, t->logprob);
        if (r->top_logprobs > 0) {
            cJSON *d = cJSON_CreateObject();
            for (int k = 0; k < t->n_top && k < r->top_logprobs; k++) {
                char *tk = token_text(s, t->top_ids[k], NULL, NULL);
                if (!cJSON_GetObjectItemCaseSensitive(d, tk ? tk : "")) add_f32(d, tk ? tk : "", t->top_logprobs[k]);
                free(tk);
            }
            cJSON_AddItemToArray(tops, d);
        } else {
            cJSON_AddItemToArray(tops, cJSON_CreateNull());
        }
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

static void add_usage(cJSON *o, int64_t prompt, int64_t completion) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
}

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *api_response_json(srv_state *s, const api_request *r, const text_tracker *tt, const invar_finish *finish) {
    cJSON *o = envelope(s, r, r->chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (int i = 0; i < r->call->n_choices; i++) {
        const srv_choice *ch = &r->call->choices[i];
        if (i % r->n == 0) prompt_tokens += ch->n_prompt;
        completion_tokens += tt[i].n_kept;
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
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
    add_usage(o, prompt_tokens, completion_tokens);
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

char *api_usage_chunk_json(srv_state *s, const api_request *r, int64_t prompt_tokens, int64_t completion_tokens) {
    cJSON *o = envelope(s, r, r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, prompt_tokens, completion_tokens);
    return print_free(o);
}
