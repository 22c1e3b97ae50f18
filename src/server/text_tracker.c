#include "server/text_tracker.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

void tt_init(text_tracker *t, const char *const *stops, int n_stops) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n_stops && i < SRV_MAX_STOPS; i++)
        if (stops[i] && stops[i][0]) t->stops[t->n_stops++] = stops[i];
}

void tt_free(text_tracker *t) {
    free(t->raw);
    free(t->tok_start);
    free(t->toks);
    memset(t, 0, sizeof *t);
}

static bool reserve(text_tracker *t, size_t extra) {
    if (t->len + extra + 1 <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + extra + 1) cap *= 2;
    char *p = realloc(t->raw, cap);
    if (!p) return false;
    t->raw = p;
    t->cap = cap;
    return true;
}

static size_t max_stop_len(const text_tracker *t) {
    size_t mx = 0;
    for (int i = 0; i < t->n_stops; i++) {
        size_t l = strlen(t->stops[i]);
        if (l > mx) mx = l;
    }
    return mx;
}

bool tt_add(text_tracker *t, const invar_model *m, const invar_token_info *toks, int64_t n) {
    if (t->stopped || n <= 0) return true;
    size_t *ts = realloc(t->tok_start, sizeof *ts * (size_t)(t->n_tokens + n));
    if (!ts) return false;
    t->tok_start = ts;
    invar_token_info *ti = realloc(t->toks, sizeof *ti * (size_t)(t->n_tokens + n));
    if (!ti) return false;
    t->toks = ti;
    size_t mx = max_stop_len(t);
    for (int64_t i = 0; i < n; i++) {
        size_t before = t->len;
        t->toks[t->n_tokens] = toks[i];
        t->tok_start[t->n_tokens++] = before;
        if (!invar_token_is_eog(m, toks[i].token)) {
            char buf[256];
            int b = invar_token_bytes(m, toks[i].token, buf, sizeof buf);
            if (b > 0) {
                if (!reserve(t, (size_t)b)) return false;
                if ((size_t)b <= sizeof buf) memcpy(t->raw + t->len, buf, (size_t)b);
                else invar_token_bytes(m, toks[i].token, t->raw + t->len, (size_t)b);
                t->len += (size_t)b;
            }
        }
        t->n_kept = t->n_tokens;
        if (!t->n_stops || t->len == before) continue;
        /* A stop string ending in the new bytes starts at most mx-1 bytes earlier. */
        size_t from = before + 1 > mx ? before + 1 - mx : 0;
        size_t best = (size_t)-1;
        for (int k = 0; k < t->n_stops; k++) {
            size_t l = strlen(t->stops[k]);
            if (t->len - from < l) continue;
            const char *hit = memmem(t->raw + from, t->len - from, t->stops[k], l);
            if (hit && (size_t)(hit - t->raw) < best) best = (size_t)(hit - t->raw);
        }
        if (best != (size_t)-1) {
            t->len = best;
            t->stopped = true;
            /* Report the tokens whose text starts before the cut (at least the first). */
            int64_t kept = 0;
            while (kept < t->n_tokens && (t->tok_start[kept] < best || kept == 0)) kept++;
            t->n_kept = kept;
            return true;
        }
    }
    return true;
}

/* Length of the UTF-8 sequence a lead byte starts (0 for a continuation/invalid byte). */
static size_t seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

size_t tt_safe_end(const text_tracker *t, bool final) {
    if (final || t->stopped) return t->len;
    size_t hold = max_stop_len(t); /* keep back hold-1 bytes: they may begin a stop string */
    hold = hold ? hold - 1 : 0;
    size_t end = t->len > hold ? t->len - hold : 0;
    if (end <= t->emitted) return t->emitted;
    /* Do not split a character: step back over a trailing incomplete sequence. */
    const unsigned char *r = (const unsigned char *)t->raw;
    for (size_t back = 1; back <= 3 && back <= end - t->emitted; back++) {
        unsigned char c = r[end - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = seq_len(c);
        if (need > back) end -= back;
        break;
    }
    return end < t->emitted ? t->emitted : end;
}

char *tt_text(const text_tracker *t, size_t from, size_t to) {
    if (to < from) to = from;
    return utf8_sanitize(t->raw ? t->raw + from : "", to - from);
}
