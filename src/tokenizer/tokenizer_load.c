/* Builds a tokenizer from a tok_spec (vocabulary, merges, token types, special ids and
 * the pre-tokenizer), whichever file it was read from. Everything is copied. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err_msg.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_tables.h"

static uint64_t str_hash(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed: only used at load time */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return tok_hash64(h);
}

static uint64_t table_size_for(uint64_t n) {
    uint64_t size = 16;
    while (size < 2 * n + 1) size *= 2; /* load factor <= 1/2 */
    return size;
}

int32_t tok_lookup(const struct tokenizer *t, const char *s, size_t len) {
    uint64_t i = str_hash(s, len) & t->vocab_mask;
    for (;;) {
        int32_t id = t->vocab_slots[i];
        if (id < 0) return -1;
        size_t tl = t->text_off[id + 1] - t->text_off[id];
        if (tl == len && memcmp(t->text + t->text_off[id], s, len) == 0) return id;
        i = (i + 1) & t->vocab_mask;
    }
}

/* Later duplicates win, as in a dict built from the token list. */
static void vocab_insert(struct tokenizer *t, int32_t id) {
    const char *s = t->text + t->text_off[id];
    size_t len = t->text_off[id + 1] - t->text_off[id];
    uint64_t i = str_hash(s, len) & t->vocab_mask;
    for (;;) {
        int32_t cur = t->vocab_slots[i];
        if (cur < 0) { t->vocab_slots[i] = id; return; }
        size_t cl = t->text_off[cur + 1] - t->text_off[cur];
        if (cl == len && memcmp(t->text + t->text_off[cur], s, len) == 0) {
            t->vocab_slots[i] = id;
            return;
        }
        i = (i + 1) & t->vocab_mask;
    }
}

/* First occurrence of a pair keeps its (better) rank. */
static void merge_insert(struct tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = tok_pair_key(a, b);
    uint64_t i = tok_hash64(key) & t->merge_mask;
    for (;;) {
        merge_slot *s = &t->merge_slots[i];
        if (s->key == key) return;
        if (s->key == 0) { *s = (merge_slot){key, rank, id}; return; }
        i = (i + 1) & t->merge_mask;
    }
}

/* Appends the raw bytes a token stands for. Control / user-defined tokens are stored
 * as plain text; the others are in the byte-level alphabet, where each character is
 * one byte (characters outside it are kept as their UTF-8). */
static size_t token_raw_bytes(const char *s, size_t len, uint8_t type, char *out) {
    if (type == TOKTYPE_CONTROL || type == TOKTYPE_USER_DEFINED) {
        memcpy(out, s, len);
        return len;
    }
    size_t o = 0, i = 0;
    const unsigned char *u = (const unsigned char *)s;
    while (i < len) {
        uint32_t cp;
        int l = utf8_decode(u + i, len - i, &cp);
        if (l == 0) { out[o++] = s[i++]; continue; }
        int b = codepoint_to_byte(cp);
        if (b >= 0) out[o++] = (char)b;
        else { memcpy(out + o, s + i, (size_t)l); o += (size_t)l; }
        i += (size_t)l;
    }
    return o;
}

typedef struct {
    unsigned char first;
    uint32_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *pa, const void *pb) {
    const special_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1; /* longest first */
    return a->id < b->id ? -1 : (a->id > b->id);
}

static bool is_eog_text(const char *s, size_t len) {
    static const char *const names[] = {
        "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
        "<end_of_turn>", "<|end|>", "</s>",
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (strlen(names[k]) == len && memcmp(names[k], s, len) == 0) return true;
    return false;
}

static int load_vocab(struct tokenizer *t, const tok_spec *sp, char *err, size_t errlen) {
    uint64_t n = (uint64_t)sp->n_vocab;
    if (sp->n_vocab <= 0 || n > (uint64_t)INT32_MAX / 2)
        return err_fail(err, errlen, "tokenizer: bad vocabulary size %lld", (long long)sp->n_vocab);
    t->n_vocab = sp->n_vocab;
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        total += sp->tokens[i].len;
        if (total > UINT32_MAX / 2) return err_fail(err, errlen, "tokenizer: vocabulary too large");
    }
    t->text = malloc(total + 1);
    t->text_off = malloc((n + 1) * sizeof *t->text_off);
    t->bytes = malloc(total + 1);
    t->bytes_off = malloc((n + 1) * sizeof *t->bytes_off);
    t->type = malloc(n);
    t->eog = calloc(n, 1);
    if (!t->text || !t->text_off || !t->bytes || !t->bytes_off || !t->type || !t->eog)
        return err_fail(err, errlen, "tokenizer: out of memory");

    uint32_t off = 0, boff = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s = sp->tokens[i].s;
        size_t len = sp->tokens[i].len;
        uint8_t ty = sp->types[i];
        t->type[i] = (ty >= 1 && ty <= 6) ? ty : TOKTYPE_NORMAL;
        t->text_off[i] = off;
        if (len) memcpy(t->text + off, s, len);
        off += (uint32_t)len;
        t->bytes_off[i] = boff;
        /* Raw bytes are never longer than the text: each char yields <= its own length. */
        boff += (uint32_t)token_raw_bytes(s, len, t->type[i], t->bytes + boff);
    }
    t->text_off[n] = off;
    t->bytes_off[n] = boff;

    t->vocab_mask = table_size_for(n) - 1;
    t->vocab_slots = malloc((t->vocab_mask + 1) * sizeof *t->vocab_slots);
    if (!t->vocab_slots) return err_fail(err, errlen, "tokenizer: out of memory");
    memset(t->vocab_slots, 0xFF, (t->vocab_mask + 1) * sizeof *t->vocab_slots);
    for (int32_t i = 0; i < t->n_vocab; i++) vocab_insert(t, i);
    return 0;
}

static int load_merges(struct tokenizer *t, const tok_spec *sp, char *err, size_t errlen) {
    uint64_t n = sp->n_merges;
    if (n > (uint64_t)INT32_MAX / 4) return err_fail(err, errlen, "tokenizer: too many merges");
    t->merge_mask = table_size_for(n) - 1;
    t->merge_slots = calloc(t->merge_mask + 1, sizeof *t->merge_slots);
    char *buf = NULL;
    size_t bufcap = 0;
    if (!t->merge_slots) return err_fail(err, errlen, "tokenizer: out of memory");
    for (uint64_t r = 0; r < n; r++) {
        tok_text l = sp->merges[2 * r], rt = sp->merges[2 * r + 1];
        if (l.len == 0 || rt.len == 0) continue;
        if (l.len + rt.len > bufcap) {
            bufcap = 2 * (l.len + rt.len);
            char *nb = realloc(buf, bufcap);
            if (!nb) {
                free(buf);
                return err_fail(err, errlen, "tokenizer: out of memory");
            }
            buf = nb;
        }
        memcpy(buf, l.s, l.len);
        memcpy(buf + l.len, rt.s, rt.len);
        int32_t a = tok_lookup(t, l.s, l.len), b = tok_lookup(t, rt.s, rt.len);
        int32_t ab = tok_lookup(t, buf, l.len + rt.len);
        if (a < 0 || b < 0 || ab < 0) continue; /* unusable merge: skipped */
        merge_insert(t, a, b, (int32_t)r, ab);
    }
    free(buf);
    return 0;
}

static int load_specials(struct tokenizer *t) {
    int32_t count = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOKTYPE_CONTROL || t->type[i] == TOKTYPE_USER_DEFINED) &&
            t->text_off[i + 1] > t->text_off[i])
            count++;
    size_t alloc = (size_t)(count ? count : 1);
    special_key *keys = malloc(alloc * sizeof *keys);
    t->special_ids = malloc(alloc * sizeof *t->special_ids);
    if (!keys || !t->special_ids) { free(keys); return -1; }
    int32_t k = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOKTYPE_CONTROL || t->type[i] == TOKTYPE_USER_DEFINED) &&
            t->text_off[i + 1] > t->text_off[i])
            keys[k++] = (special_key){(unsigned char)t->text[t->text_off[i]],
                                      t->text_off[i + 1] - t->text_off[i], i};
    qsort(keys, (size_t)count, sizeof *keys, cmp_special);
    for (k = 0; k < count; k++) t->special_ids[k] = keys[k].id;
    k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < count && keys[k].first < b) k++;
        t->special_start[b] = (uint32_t)k;
    }
    free(keys);
    return 0;
}

static int32_t valid_id(int32_t id, int32_t n_vocab) { return id >= 0 && id < n_vocab ? id : -1; }

int tokenizer_build(const tok_spec *sp, tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_fail(err, errlen, "tokenizer: out of memory");
    t->pre = sp->pre;
    t->ignore_merges = sp->ignore_merges;
    t->fuse_unk = sp->fuse_unk;
    t->nfc = sp->nfc;
    if (load_vocab(t, sp, err, errlen) != 0 || load_merges(t, sp, err, errlen) != 0) {
        tokenizer_free(t);
        return -1;
    }
    if (load_specials(t) != 0) {
        tokenizer_free(t);
        return err_fail(err, errlen, "tokenizer: out of memory");
    }
    for (int b = 0; b < 256; b++) {
        unsigned char u[4];
        int l = utf8_encode(byte_to_codepoint((unsigned char)b), u);
        t->byte_id[b] = tok_lookup(t, (const char *)u, (size_t)l);
    }
    t->bos = valid_id(sp->bos, t->n_vocab);
    t->eos = valid_id(sp->eos, t->n_vocab);
    t->eot = valid_id(sp->eot, t->n_vocab);
    t->eom = valid_id(sp->eom, t->n_vocab);
    t->unk = valid_id(sp->unk, t->n_vocab);
    t->pad = valid_id(sp->pad, t->n_vocab);
    t->add_bos = sp->add_bos;

    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    for (size_t k = 0; k < sp->n_eog_ids; k++)
        if (valid_id(sp->eog_ids[k], t->n_vocab) >= 0) t->eog[sp->eog_ids[k]] = 1;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] == TOKTYPE_CONTROL &&
            is_eog_text(t->text + t->text_off[i], t->text_off[i + 1] - t->text_off[i]))
            t->eog[i] = 1;
    *out = t;
    return 0;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->text_off);
    free(t->bytes);
    free(t->bytes_off);
    free(t->type);
    free(t->eog);
    free(t->vocab_slots);
    free(t->merge_slots);
    free(t->special_ids);
    free(t);
}
