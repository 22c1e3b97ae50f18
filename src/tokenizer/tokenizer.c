/* Encoding (special-token split -> pre-tokenizer -> BPE) and decoding. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/normalize.h"
#include "tokenizer/tokenizer_internal.h"

int32_t tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }
bool tokenizer_add_bos(const tokenizer *t) { return t->add_bos; }

bool tokenizer_is_eog(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

bool tokenizer_is_special(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab &&
           (t->type[id] == TOKTYPE_CONTROL || t->type[id] == TOKTYPE_USER_DEFINED);
}

typedef struct {
    const tokenizer *t;
    int32_t *out;
    int64_t cap;
    int64_t n;
    bpe_scratch scratch;
} encode_ctx;

static void push_id(void *p, int32_t id) {
    encode_ctx *c = p;
    if (id < 0) return; /* a byte with no token and no unk token: nothing to emit */
    if (c->n < c->cap) c->out[c->n] = id;
    c->n++;
}

static int encode_piece(void *p, const char *piece, size_t len) {
    encode_ctx *c = p;
    return bpe_encode_piece(c->t, &c->scratch, (const unsigned char *)piece, len, push_id, c);
}

static int encode_plain(encode_ctx *c, const char *text, size_t len) {
    if (len == 0) return 0;
    char *norm = NULL;
    if (c->t->nfc && nfc_normalize(text, len, &norm, &len)) return -1;
    int rc = pretok_split(c->t->pre, norm ? norm : text, len, encode_piece, c);
    free(norm);
    return rc;
}

/* Id of the longest special token whose text starts at s[0..n), or -1. Control tokens
 * count only if they end within ctl_room bytes (inside markup; 0 without parse_special);
 * user-defined tokens always do (they are added words of the vocabulary, not markup). */
static int32_t match_special(const tokenizer *t, const char *s, size_t n, size_t ctl_room, size_t *mlen) {
    unsigned char b = (unsigned char)s[0];
    for (uint32_t k = t->special_start[b]; k < t->special_start[b + 1]; k++) {
        int32_t id = t->special_ids[k];
        size_t l = t->text_off[id + 1] - t->text_off[id];
        if (t->type[id] == TOKTYPE_CONTROL && l > ctl_room) continue;
        if (l <= n && memcmp(t->text + t->text_off[id], s, l) == 0) {
            *mlen = l;
            return id;
        }
    }
    return -1;
}

int64_t tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_bos,
                         bool parse_special, int32_t *out, int64_t cap) {
    tok_span all = {0, len};
    return tokenizer_encode_marked(t, text, len, add_bos, &all, parse_special ? 1 : 0, out, cap);
}

int64_t tokenizer_encode_marked(const tokenizer *t, const char *text, size_t len, bool add_bos,
                                const tok_span *markup, size_t n_markup, int32_t *out, int64_t cap) {
    if (!t || (!text && len) || (!out && cap > 0) || cap < 0 || (!markup && n_markup)) return -1;
    encode_ctx c = {t, out, cap, 0, {0}};
    if (add_bos && t->bos >= 0) push_id(&c, t->bos);
    if (len == 0) return c.n; /* text may be NULL: no pointer arithmetic on it */
    size_t seg = 0, i = 0, k = 0;
    int rc = 0;
    while (i < len && rc == 0) {
        unsigned char b = (unsigned char)text[i];
        if (t->special_start[b] == t->special_start[b + 1]) { i++; continue; }
        while (k < n_markup && markup[k].end <= i) k++;
        size_t end = k < n_markup && markup[k].start <= i ? markup[k].end : i; /* markup ends here */
        if (end > len) end = len;
        size_t ml = 0;
        int32_t id = match_special(t, text + i, len - i, end - i, &ml);
        if (id < 0) { i++; continue; }
        rc = encode_plain(&c, text + seg, i - seg);
        push_id(&c, id);
        i += ml;
        seg = i;
    }
    if (rc == 0) rc = encode_plain(&c, text + seg, len - seg);
    bpe_scratch_free(&c.scratch);
    return rc == 0 ? c.n : -1;
}

int tokenizer_token_bytes(const tokenizer *t, int32_t id, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    size_t len = t->bytes_off[id + 1] - t->bytes_off[id];
    if (buf && cap) memcpy(buf, t->bytes + t->bytes_off[id], len < cap ? len : cap);
    return (int)len;
}

int64_t tokenizer_decode(const tokenizer *t, const int32_t *ids, int64_t n, bool skip_special,
                         char *out, size_t cap) {
    if (!t || (n > 0 && !ids)) return -1;
    if (!out) cap = 0;
    size_t total = 0;
    for (int64_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= t->n_vocab) continue; /* invalid ids decode to nothing */
        if (skip_special && t->type[id] == TOKTYPE_CONTROL) continue;
        size_t len = t->bytes_off[id + 1] - t->bytes_off[id];
        if (cap > 0 && total < cap - 1) {
            size_t room = cap - 1 - total;
            memcpy(out + total, t->bytes + t->bytes_off[id], len < room ? len : room);
        }
        total += len;
    }
    if (cap > 0) out[total < cap - 1 ? total : cap - 1] = '\0';
    return (int64_t)total;
}
