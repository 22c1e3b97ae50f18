/* The prompt half of a request: a raw prompt (text or token ids, one or several) or a chat
 * (messages through the model's template), each into token ids and the text it reads as. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "request/request_internal.h"
#include "request/token_text.h"

static int nomem(req_error *e) {
    return req_fail(e, REQ_ERR_NOMEM, NULL, "out of memory");
}

static int alloc_prompts(req_decoded *d, int n, req_error *e) {
    d->prompts = calloc((size_t)n, sizeof *d->prompts);
    if (!d->prompts) return nomem(e);
    d->n_prompts = n;
    return 0;
}

/* One message's content: a string, or text parts joined (*owned then holds the joined text). */
static int message_content(const cJSON *content, int i, const char **out, char **owned, req_error *e) {
    if (cJSON_IsString(content)) {
        *out = content->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(content))
        return req_fail(e, REQ_ERR_TYPE, "messages", "messages[%d].content must be a string or an array of text parts",
                        i);
    size_t len = 0;
    const cJSON *p;
    int j = 0;
    cJSON_ArrayForEach(p, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return req_fail(e, REQ_ERR_TYPE, "messages", "messages[%d].content: only text parts are supported", i);
        /* Nothing a client sends is silently ignored: a part's other keys are refused. */
        const cJSON *k;
        cJSON_ArrayForEach(k, p) {
            if (strcmp(k->string, "type") && strcmp(k->string, "text"))
                return req_fail(e, REQ_ERR_UNSUPPORTED, "messages",
                                "messages[%d].content[%d]: unsupported key '%.64s' in a text part", i, j, k->string);
        }
        len += strlen(text->valuestring);
        j++;
    }
    if (!(*owned = malloc(len + 1))) return nomem(e);
    size_t at = 0;
    cJSON_ArrayForEach(p, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t l = strlen(t);
        memcpy(*owned + at, t, l);
        at += l;
    }
    (*owned)[at] = 0;
    *out = *owned;
    return 0;
}

/* Renders and tokenizes a chat: the template's markup has special tokens, the message
 * contents never do (a message cannot forge "<|im_end|>" and open a system turn). */
static int chat_prompt(const invar_model *m, const cJSON *msgs, req_decoded *d, req_error *e) {
    int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : 0;
    if (n <= 0) return req_fail(e, REQ_ERR_TYPE, "messages", "'messages' must be a non-empty array");
    invar_chat_message *cm = calloc((size_t)n, sizeof *cm);
    char **owned = calloc((size_t)n, sizeof *owned);
    int rc = cm && owned ? 0 : nomem(e);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, msgs) {
        if (rc) break;
        const cJSON *key;
        cJSON_ArrayForEach(key, it) { /* a key the template would not read is refused, not dropped */
            if (key->string && (!strcmp(key->string, "role") || !strcmp(key->string, "content"))) continue;
            rc = req_fail(e, REQ_ERR_UNSUPPORTED, "messages",
                          "messages[%d]: unsupported field '%.64s' (a message has "
                          "role and content only)",
                          i, key->string ? key->string : "");
            break;
        }
        if (rc) break;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        if (!cJSON_IsString(role)) {
            rc = req_fail(e, REQ_ERR_TYPE, "messages", "messages[%d].role must be a string", i);
            break;
        }
        /* OpenAI's newer name for the system role */
        cm[i].role = strcmp(role->valuestring, "developer") ? role->valuestring : "system";
        rc = message_content(cJSON_GetObjectItemCaseSensitive(it, "content"), i, &cm[i].content, &owned[i], e);
        i++;
    }
    if (!rc) rc = alloc_prompts(d, 1, e);
    if (!rc) {
        req_prompt *p = &d->prompts[0];
        char err[200];
        int r = invar_chat_tokenize(m, cm, (size_t)n, true, &p->ids, &p->n_ids, &p->text, err, sizeof err);
        if (r == -1) rc = req_fail(e, REQ_ERR_TEMPLATE, "messages", "chat template: %s", err);
        else if (r) rc = nomem(e);
        d->chat = true;
    }
    for (int k = 0; owned && k < n; k++) free(owned[k]);
    free(owned);
    free(cm);
    return rc;
}

static int text_prompt(const invar_model *m, const cJSON *s, bool parse_special, req_prompt *p, req_error *e) {
    p->text = utf8_sanitize(s->valuestring, strlen(s->valuestring)); /* the caller may echo it into JSON */
    p->ids = req_tokenize(m, s->valuestring, parse_special, &p->n_ids);
    return p->text && p->ids ? 0 : nomem(e);
}

/* An array of token ids, each in [0, n_vocab). */
static int ids_prompt(const invar_model *m, const cJSON *a, req_prompt *p, req_error *e) {
    int n = cJSON_GetArraySize(a);
    if (n <= 0) return req_fail(e, REQ_ERR_VALUE, "prompt", "empty token prompt");
    if (!(p->ids = malloc(sizeof(int32_t) * (size_t)n))) return nomem(e);
    int j = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, a) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= invar_model_n_vocab(m))
            return req_fail(e, REQ_ERR_TYPE, "prompt", "'prompt' must be token ids in [0, n_vocab)");
        p->ids[j++] = (int32_t)t->valuedouble;
    }
    p->n_ids = n;
    invar_token_info *ti = calloc((size_t)n, sizeof *ti);
    if (!ti) return nomem(e);
    for (int q = 0; q < n; q++) ti[q].token = p->ids[q];
    p->text = req_tokens_text(m, ti, n);
    free(ti);
    return p->text ? 0 : nomem(e);
}

/* A string, token ids, or (REQ_COMPLETION) an array of either. */
static int raw_prompts(const invar_model *m, const cJSON *p, req_kind kind, bool parse_special, int max_prompts,
                       req_decoded *d, req_error *e) {
    const char *what = kind == REQ_COMPLETION ? "a string, an array of strings or token ids"
                                              : "a string or an array of token ids";
    int k = 0;
    const bool single = cJSON_IsString(p) || (cJSON_IsArray(p) && cJSON_IsNumber(p->child));
    if (single) {
        k = 1;
    } else if (kind == REQ_COMPLETION && cJSON_IsArray(p) && p->child) {
        const cJSON *it;
        cJSON_ArrayForEach(it, p) {
            if (k == max_prompts)
                return req_fail(e, REQ_ERR_VALUE, "prompt",
                                "at most %d prompts per request (the server's --max-prompts-per-request)", max_prompts);
            if (!cJSON_IsString(it) && !cJSON_IsArray(it)) return req_fail(e, REQ_ERR_TYPE, "prompt", "'prompt' must be %s", what);
            k++;
        }
    } else {
        return req_fail(e, REQ_ERR_TYPE, "prompt", "'prompt' must be %s", what);
    }
    if (alloc_prompts(d, k, e)) return -1;
    const cJSON *it = single ? p : p->child;
    for (int i = 0; i < k; i++, it = it->next) {
        int rc = cJSON_IsString(it) ? text_prompt(m, it, parse_special, &d->prompts[i], e)
                                    : ids_prompt(m, it, &d->prompts[i], e);
        if (rc) return -1;
    }
    return 0;
}

int req_decode_prompts(const invar_model *m, const cJSON *o, req_kind kind, int max_prompts, req_decoded *out,
                       req_error *e) {
    const cJSON *prompt = req_field(o, "prompt"), *msgs = req_field(o, "messages");
    const cJSON *special = req_field(o, "parse_special");
    if (prompt && msgs) return req_fail(e, REQ_ERR_VALUE, "prompt", "give either 'prompt' or 'messages', not both");
    if (kind == REQ_CHAT && !msgs) return req_fail(e, REQ_ERR_MISSING, "messages", "'messages' is required");
    if (kind == REQ_COMPLETION && !prompt) return req_fail(e, REQ_ERR_MISSING, "prompt", "'prompt' is required");
    if (!prompt && !msgs)
        return req_fail(e, REQ_ERR_MISSING, "prompt", "the request needs a 'prompt' or a 'messages' array");
    if (special && (!cJSON_IsBool(special) || msgs))
        return req_fail(e, REQ_ERR_VALUE, "parse_special",
                        "'parse_special' must be a boolean, and goes with 'prompt' only (chat contents never parse "
                        "special tokens)");
    /* A raw prompt is the caller's own text: special tokens are parsed unless asked not to. */
    int rc = msgs ? chat_prompt(m, msgs, out, e)
                  : raw_prompts(m, prompt, kind, !cJSON_IsFalse(special), max_prompts, out, e);
    if (rc) return -1;
    for (int i = 0; i < out->n_prompts; i++)
        if (out->prompts[i].n_ids <= 0)
            return req_fail(e, REQ_ERR_VALUE, msgs ? "messages" : "prompt", "the prompt is empty");
    return 0;
}
