#include "tokenizer/normalize.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static bool put(buf *b, const void *s, size_t n) {
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 64;
        while (n > cap - b->n) {
            if (cap > SIZE_MAX / 2) return false;
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

/* NFC of one run of valid UTF-8, appended. */
static bool put_nfc(buf *b, const char *s, size_t n) {
    if (!n) return true;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    bool ok = m >= 0 && put(b, dst, (size_t)m); /* the run is valid, so the only error is memory */
    free(dst);
    return ok;
}

int nfc_normalize(const char *s, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = len;
    size_t i = 0;
    while (i < len && !((unsigned char)s[i] & 0x80)) i++;
    if (i == len) return 0;
    buf b = {0};
    size_t run = 0; /* start of the current run of valid characters */
    bool ok = true;
    for (i = 0; i < len && ok;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        ok = put_nfc(&b, s + run, i - run) && put(&b, s + i, 1);
        run = ++i;
    }
    ok = ok && put_nfc(&b, s + run, len - run);
    if (!ok) {
        free(b.p);
        return -1;
    }
    if (!b.p) b.p = malloc(1); /* the text was only invalid bytes and nothing: keep *out non-NULL */
    if (!b.p) return -1;
    *out = b.p;
    *out_len = b.n;
    return 0;
}
