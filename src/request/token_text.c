#include "request/token_text.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

int32_t *req_tokenize(const invar_model *m, const char *text, bool parse_special, int64_t *n_out) {
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

char *req_tokens_text(const invar_model *m, const invar_token_info *toks, int64_t n) {
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (int64_t i = 0; i < n; i++) {
        if (invar_token_is_eog(m, toks[i].token)) continue;
        for (;;) {
            int b = invar_token_bytes(m, toks[i].token, buf + len, cap - len);
            if (b < 0) break;
            if ((size_t)b <= cap - len) {
                len += (size_t)b;
                break;
            }
            cap = cap * 2 + (size_t)b;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
    }
    char *clean = utf8_sanitize(buf, len);
    free(buf);
    return clean;
}

char *req_token_text(const invar_model *m, int32_t id, unsigned char *raw, int *n_raw) {
    char buf[256];
    int b = invar_token_bytes(m, id, buf, sizeof buf);
    if (b < 0 || b > (int)sizeof buf) b = 0;
    if (raw) memcpy(raw, buf, (size_t)b);
    if (n_raw) *n_raw = b;
    return utf8_sanitize(buf, (size_t)b);
}
