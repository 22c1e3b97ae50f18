/* The raw text of top-level integer fields. cJSON keeps numbers as doubles, which hold
 * integers exactly only up to 2^53; a seed is an unsigned 64-bit integer, so
 * req_parse_json swaps the parsed value of such a field for its raw text (a cJSON_Raw
 * item) and the decoder reads the digits itself. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "request/request_internal.h"

/* Fields read as exact integers. */
static const char *const EXACT_FIELDS[] = {"seed"};

/* Skips a JSON string starting at text[k] == '"'; returns the index after its closing quote.
 * The text has been parsed by cJSON already, so it is well formed. */
static size_t skip_string(const char *t, size_t len, size_t k, bool *escaped) {
    *escaped = false;
    for (k++; k < len && t[k] != '"'; k++)
        if (t[k] == '\\') *escaped = true, k++;
    return k + 1;
}

static size_t skip_ws(const char *t, size_t len, size_t k) {
    while (k < len && (t[k] == ' ' || t[k] == '\t' || t[k] == '\r' || t[k] == '\n')) k++;
    return k;
}

/* Replaces the first top-level `key: <number>` of o by its raw text. */
static void keep_raw(cJSON *o, const char *key, const char *t, size_t len) {
    const size_t kl = strlen(key);
    int depth = 0;
    for (size_t k = 0; k < len;) {
        const char c = t[k];
        if (c == '"') {
            bool esc;
            size_t end = skip_string(t, len, k, &esc);
            size_t after = skip_ws(t, len, end);
            if (depth == 1 && after < len && t[after] == ':' && !esc && end - k - 2 == kl &&
                !memcmp(t + k + 1, key, kl)) {
                size_t v = skip_ws(t, len, after + 1), w = v;
                while (w < len && (t[w] == '-' || t[w] == '+' || t[w] == '.' || t[w] == 'e' || t[w] == 'E' ||
                                   (t[w] >= '0' && t[w] <= '9')))
                    w++;
                const cJSON *item = cJSON_GetObjectItemCaseSensitive(o, key);
                if (w > v && w - v < 64 && cJSON_IsNumber(item)) {
                    char buf[64];
                    memcpy(buf, t + v, w - v);
                    buf[w - v] = 0;
                    cJSON *raw = cJSON_CreateRaw(buf);
                    if (raw) cJSON_ReplaceItemInObjectCaseSensitive(o, key, raw);
                }
                return; /* the first occurrence is the one cJSON returns */
            }
            k = end;
            continue;
        }
        if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
        k++;
    }
}

void req_keep_exact_numbers(cJSON *o, const char *text, size_t len) {
    if (!cJSON_IsObject(o)) return;
    for (size_t i = 0; i < sizeof EXACT_FIELDS / sizeof *EXACT_FIELDS; i++)
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, EXACT_FIELDS[i])))
            keep_raw(o, EXACT_FIELDS[i], text, len);
}

#define U64_RANGE "'%s' must be an integer in [0, 18446744073709551615]"

int req_get_u64(const cJSON *o, const char *key, uint64_t *out, req_error *e) {
    const cJSON *v = req_field(o, key);
    if (!v) return 0;
    if (cJSON_IsRaw(v)) { /* the digits as written */
        const char *s = v->valuestring;
        if (s[0] == '-') return req_fail(e, REQ_ERR_VALUE, key, U64_RANGE, key);
        uint64_t x = 0;
        size_t n = 0;
        for (; s[n] >= '0' && s[n] <= '9'; n++) {
            const uint64_t d = (uint64_t)(s[n] - '0');
            if (x > (UINT64_MAX - d) / 10) return req_fail(e, REQ_ERR_VALUE, key, U64_RANGE, key);
            x = x * 10 + d;
        }
        if (n > 0 && s[n] == 0) {
            *out = x;
            return 0;
        }
        /* 1.0, 1e3: a fraction or an exponent; a seed is written as digits */
        const double f = strtod(s, NULL); /* a raw item holds no parsed value */
        if (f != floor(f)) return req_fail(e, REQ_ERR_TYPE, key, U64_RANGE, key);
        return req_fail(e, REQ_ERR_VALUE, key, "'%s' must be written as a plain integer (digits only)", key);
    }
    if (!cJSON_IsNumber(v)) return req_fail(e, REQ_ERR_TYPE, key, U64_RANGE, key);
    /* A number req_parse_json did not see (a tree built in memory): exact up to 2^53. */
    if (v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 || v->valuedouble != (double)(uint64_t)v->valuedouble)
        return req_fail(e, REQ_ERR_VALUE, key, U64_RANGE, key);
    *out = (uint64_t)v->valuedouble;
    return 0;
}
