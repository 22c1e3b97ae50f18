#include "request_json.h"
#include "common/float_format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t *tokenize_alloc(const invar_model *m, const char *text, bool parse_special, int64_t *n_out) {
    size_t len = strlen(text);
    int64_t cap = (int64_t)len + 8;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return NULL;
    int64_t n = invar_tokenize(m, text, len, true, parse_special, ids, cap);
    if (n > cap) { /* cannot happen for byte-level BPE (<= 1 token per byte), but be safe */
        int32_t *bigger = realloc(ids, sizeof(int32_t) * (size_t)n);
        if (!bigger) { free(ids); return NULL; }
        ids = bigger;
        n = invar_tokenize(m, text, len, true, parse_special, ids, n);
    }
    if (n < 0) { free(ids); return NULL; }
    *n_out = n;
    return ids;
}

cJSON *json_parse_whole(const char *text, size_t len, bool *trailing) {
    const char *end = NULL;
    *trailing = false;
    cJSON *o = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!o) return NULL;
    size_t k = (size_t)(end - text);
    while (k < len && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r' || text[k] == '\n')) k++;
    if (k == len) return o;
    cJSON_Delete(o);
    *trailing = true;
    return NULL;
}

static const char *get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return key;
    *out = (int32_t)v->valuedouble;
    return NULL;
}

static const char *get_float(const cJSON *o, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return key;
    *out = (float)v->valuedouble;
    return NULL;
}

/* The chat prompt of a messages array into j->prompt: the template's markup has special
 * tokens, the contents never do. NULL, or what is wrong (in err). */
static const char *chat_prompt(const invar_model *m, const cJSON *msgs, job *j, char *err, size_t errlen) {
    int n = cJSON_GetArraySize(msgs);
    if (n <= 0) return "'messages' must be a non-empty array";
    invar_chat_message *cm = calloc((size_t)n, sizeof *cm);
    if (!cm) return "out of memory";
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
            snprintf(err, errlen, "messages[%d] needs string 'role' and 'content'", i);
            free(cm);
            return err;
        }
        cm[i].role = role->valuestring;
        cm[i].content = content->valuestring;
        i++;
    }
    int rc = invar_chat_tokenize(m, cm, (size_t)n, true, &j->prompt, &j->n_prompt, NULL, err, errlen);
    free(cm);
    return rc ? err : NULL;
}

const char *request_from_json(const invar_model *m, const cJSON *o, job *j, char *err, size_t errlen) {
    if (!cJSON_IsObject(o)) return "request must be a JSON object";
    invar_sampling *s = &j->samp;
    invar_sampling_default(s);
    const char *bad = NULL;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (!bad) bad = get_int(o, "max_tokens", INT32_MIN, INT32_MAX, &s->max_tokens);
    if (!bad) bad = get_float(o, "temperature", &s->temperature);
    if (!bad) bad = get_int(o, "top_k", INT32_MIN, INT32_MAX, &s->top_k);
    if (!bad) bad = get_float(o, "top_p", &s->top_p);
    if (!bad) bad = get_float(o, "min_p", &s->min_p);
    if (!bad) bad = get_int(o, "logprobs", 0, INVAR_MAX_TOP_LOGPROBS, &s->top_logprobs);
    if (!bad && seed && !cJSON_IsNull(seed)) {
        /* Seeds up to 2^53 are exact in JSON doubles. */
        if (!cJSON_IsNumber(seed) || seed->valuedouble < 0 || seed->valuedouble > 9007199254740992.0 ||
            seed->valuedouble != floor(seed->valuedouble))
            bad = "seed";
        else
            s->seed = (uint64_t)seed->valuedouble;
    }
    const cJSON *ign = cJSON_GetObjectItemCaseSensitive(o, "ignore_eos");
    if (!bad && ign && !cJSON_IsNull(ign)) {
        if (!cJSON_IsBool(ign)) bad = "ignore_eos";
        else s->ignore_eos = cJSON_IsTrue(ign);
    }
    if (bad) {
        snprintf(err, errlen, "field '%s' has the wrong type or range", bad);
        return err;
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(o, "parse_special");
    if (prompt && msgs) return "give either 'prompt' or 'messages', not both";
    if (special && !cJSON_IsNull(special) && (!cJSON_IsBool(special) || msgs))
        return "'parse_special' must be a boolean, and goes with 'prompt' only (chat contents never parse special tokens)";
    if (cJSON_IsArray(msgs)) return chat_prompt(m, msgs, j, err, errlen);
    if (!cJSON_IsString(prompt)) return "request needs a string 'prompt' or an array 'messages'";
    /* A raw prompt is the caller's own text: special tokens are parsed unless asked not to. */
    j->prompt = tokenize_alloc(m, prompt->valuestring, !cJSON_IsFalse(special), &j->n_prompt);
    if (!j->prompt) return "tokenization failed";
    return NULL;
}

static const char *finish_name(invar_finish f) {
    switch (f) {
    case INVAR_FINISH_STOP: return "stop";
    case INVAR_FINISH_LENGTH: return "length";
    case INVAR_FINISH_CANCELLED: return "cancelled";
    case INVAR_FINISH_ERROR: return "error";
    default: return "none";
    }
}

static cJSON *f32_json(float v) {
    char buf[32];
    format_f32(buf, sizeof buf, v);
    return cJSON_CreateRaw(buf);
}

char *result_to_json(const invar_model *m, const cJSON *id, const job *j, int64_t line, bool with_timing) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
    if (j->finish == INVAR_FINISH_ERROR || j->error) {
        cJSON_AddNumberToObject(o, "line", (double)line);
        cJSON_AddStringToObject(o, "error", j->error ? j->error : "error");
        cJSON_AddStringToObject(o, "finish_reason", "error");
    } else {
        cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
        cJSON *lps = cJSON_AddArrayToObject(o, "logprobs");
        cJSON *tops = j->samp.top_logprobs > 0 ? cJSON_CreateArray() : NULL;
        for (int64_t i = 0; i < j->n_toks; i++) {
            const invar_token_info *t = &j->toks[i];
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(t->token));
            cJSON_AddItemToArray(lps, f32_json(t->logprob));
            if (tops) {
                cJSON *alts = cJSON_CreateArray();
                for (int32_t r = 0; r < t->n_top; r++) {
                    cJSON *a = cJSON_CreateObject();
                    cJSON_AddNumberToObject(a, "id", t->top_ids[r]);
                    cJSON_AddItemToObject(a, "logprob", f32_json(t->top_logprobs[r]));
                    cJSON_AddItemToArray(alts, a);
                }
                cJSON_AddItemToArray(tops, alts);
            }
        }
        if (tops) cJSON_AddItemToObject(o, "top_logprobs", tops);
        char *text = cli_tokens_text(m, j->toks, j->n_toks);
        cJSON_AddStringToObject(o, "text", text ? text : "");
        free(text);
        cJSON_AddStringToObject(o, "finish_reason", finish_name(j->finish));
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)j->n_prompt);
        if (with_timing) {
            cJSON *t = cJSON_AddObjectToObject(o, "timing");
            cJSON_AddNumberToObject(t, "first_token_s", j->t_first);
            cJSON_AddNumberToObject(t, "done_s", j->t_done);
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
