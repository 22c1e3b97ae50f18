/* Builds a tokenizer from GGUF tokenizer.ggml.* metadata: vocabulary, merges, token
 * types, special ids and the pre-tokenizer name. Everything is copied out of the file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_tables.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

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

/* Reads element i of an integer array of any integer type. */
static bool arr_int(const void *data, gguf_value_type type, uint64_t i, int64_t *out) {
    const unsigned char *p = data;
    switch (type) {
    case GGUF_T_INT8: { int8_t v; memcpy(&v, p + i, 1); *out = v; return true; }
    case GGUF_T_UINT8: { uint8_t v; memcpy(&v, p + i, 1); *out = v; return true; }
    case GGUF_T_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); *out = v; return true; }
    case GGUF_T_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); *out = v; return true; }
    case GGUF_T_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); *out = v; return true; }
    case GGUF_T_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); *out = v; return true; }
    case GGUF_T_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); *out = v; return true; }
    case GGUF_T_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); *out = (int64_t)v; return true; }
    default: return false;
    }
}

static int32_t special_id(const gguf_file *f, const char *key, int32_t n_vocab) {
    int64_t v;
    if (!gguf_get_i64(f, key, &v) || v < 0 || v >= n_vocab) return -1;
    return (int32_t)v;
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

static int load_vocab(struct tokenizer *t, const gguf_file *f, char *err, size_t errlen) {
    gguf_value_type et;
    uint64_t n;
    if (!gguf_get_arr_info(f, "tokenizer.ggml.tokens", &et, &n) || et != GGUF_T_STRING)
        return fail(err, errlen, "tokenizer: missing tokenizer.ggml.tokens string array");
    if (n == 0 || n > (uint64_t)INT32_MAX / 2)
        return fail(err, errlen, "tokenizer: bad vocabulary size %llu", (unsigned long long)n);
    t->n_vocab = (int32_t)n;
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (!gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len))
            return fail(err, errlen, "tokenizer: unreadable token %llu", (unsigned long long)i);
        total += len;
        if (total > UINT32_MAX / 2) return fail(err, errlen, "tokenizer: vocabulary too large");
    }
    t->text = malloc(total + 1);
    t->text_off = malloc((n + 1) * sizeof *t->text_off);
    t->bytes = malloc(total + 1);
    t->bytes_off = malloc((n + 1) * sizeof *t->bytes_off);
    t->type = malloc(n);
    t->eog = calloc(n, 1);
    if (!t->text || !t->text_off || !t->bytes || !t->bytes_off || !t->type || !t->eog)
        return fail(err, errlen, "tokenizer: out of memory");

    const void *types = NULL;
    gguf_value_type tt = GGUF_T_UINT8;
    uint64_t ntypes = 0;
    if (gguf_get_arr_info(f, "tokenizer.ggml.token_type", &tt, &ntypes) && ntypes == n)
        types = gguf_get_arr_data(f, "tokenizer.ggml.token_type");

    uint32_t off = 0, boff = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len);
        int64_t ty = TOKTYPE_NORMAL;
        if (types && !arr_int(types, tt, i, &ty)) ty = TOKTYPE_NORMAL;
        t->type[i] = (ty >= 1 && ty <= 6) ? (uint8_t)ty : TOKTYPE_NORMAL;
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
    if (!t->vocab_slots) return fail(err, errlen, "tokenizer: out of memory");
    memset(t->vocab_slots, 0xFF, (t->vocab_mask + 1) * sizeof *t->vocab_slots);
    for (int32_t i = 0; i < t->n_vocab; i++) vocab_insert(t, i);
    return 0;
}

static int load_merges(struct tokenizer *t, const gguf_file *f, char *err, size_t errlen) {
    gguf_value_type et;
    uint64_t n = 0;
    if (!gguf_get_arr_info(f, "tokenizer.ggml.merges", &et, &n) || et != GGUF_T_STRING)
        return fail(err, errlen, "tokenizer: missing tokenizer.ggml.merges string array");
    if (n > (uint64_t)INT32_MAX / 4) return fail(err, errlen, "tokenizer: too many merges");
    t->merge_mask = table_size_for(n) - 1;
    t->merge_slots = calloc(t->merge_mask + 1, sizeof *t->merge_slots);
    char *buf = NULL;
    size_t bufcap = 0;
    if (!t->merge_slots) return fail(err, errlen, "tokenizer: out of memory");
    for (uint64_t r = 0; r < n; r++) {
        const char *s;
        size_t len;
        if (!gguf_get_arr_str(f, "tokenizer.ggml.merges", r, &s, &len)) {
            free(buf);
            return fail(err, errlen, "tokenizer: unreadable merge %llu", (unsigned long long)r);
        }
        /* "left right": byte-level tokens never contain a literal space, so the first
         * space separates the two halves. */
        const char *sp = memchr(s, ' ', len);
        if (!sp || sp == s || sp == s + len - 1) continue;
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        if (la + lb > bufcap) {
            bufcap = 2 * (la + lb);
            char *nb = realloc(buf, bufcap);
            if (!nb) { free(buf); return fail(err, errlen, "tokenizer: out of memory"); }
            buf = nb;
        }
        memcpy(buf, s, la);
        memcpy(buf + la, sp + 1, lb);
        int32_t a = tok_lookup(t, s, la), b = tok_lookup(t, sp + 1, lb);
        int32_t ab = tok_lookup(t, buf, la + lb);
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

int tokenizer_load(const gguf_file *f, tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    const char *model;
    size_t mlen;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model, &mlen))
        return fail(err, errlen, "tokenizer: missing tokenizer.ggml.model");
    if (mlen != 4 || memcmp(model, "gpt2", 4) != 0)
        return fail(err, errlen, "tokenizer: unsupported tokenizer model '%.*s' (only byte-level BPE 'gpt2')",
                    (int)(mlen > 64 ? 64 : mlen), model);
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) return fail(err, errlen, "tokenizer: out of memory");

    const char *pre;
    size_t plen;
    t->pre = PRETOK_GPT2; /* files without tokenizer.ggml.pre use the GPT-2 split */
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, &plen) &&
        pretok_kind_from_name(pre, plen, &t->pre) != 0) {
        fail(err, errlen, "tokenizer: unsupported pre-tokenizer '%.*s' (supported: smollm, gpt2, "
             "default, starcoder, llama3, llama-bpe, qwen2)", (int)(plen > 64 ? 64 : plen), pre);
        free(t);
        return -1;
    }
    if (load_vocab(t, f, err, errlen) != 0 || load_merges(t, f, err, errlen) != 0) {
        tokenizer_free(t);
        return -1;
    }
    if (load_specials(t) != 0) {
        tokenizer_free(t);
        return fail(err, errlen, "tokenizer: out of memory");
    }
    for (int b = 0; b < 256; b++) {
        unsigned char u[4];
        int l = utf8_encode(byte_to_codepoint((unsigned char)b), u);
        t->byte_id[b] = tok_lookup(t, (const char *)u, (size_t)l);
    }
    t->bos = special_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab);
    t->eos = special_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab);
    t->eot = special_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab);
    t->eom = special_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab);
    t->unk = special_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab);
    t->pad = special_id(f, "tokenizer.ggml.padding_token_id", t->n_vocab);
    bool add_bos = false;
    t->add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos) && add_bos;

    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
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
