/* A tokenizer from a Hugging Face model directory: tokenizer.json (byte-level BPE: vocab,
 * merges, added tokens, the pre-tokenizer it names), tokenizer_config.json (BOS/EOS,
 * add_bos_token, chat template) and generation_config.json (the ids that end generation).
 * Only what invar reproduces exactly is accepted; anything else is refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err_msg.h"
#include "formats/json_file.h"
#include "tokenizer/tokenizer_internal.h"

#define MAX_TOKENIZER_JSON (256u << 20)
#define MAX_SMALL_JSON (16u << 20)
#define MAX_VOCAB (1 << 24) /* ids a tokenizer.json may use (the largest real ones are ~256k) */
#define MAX_EOG_IDS 64

/* The split regexes invar's pre-tokenizers implement (pretokenize.h), as tokenizer.json spells them. */
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const cJSON *item(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static bool is_type(const cJSON *o, const char *type) {
    const char *t = cJSON_GetStringValue(item(o, "type"));
    return t && !strcmp(t, type);
}

/* A boolean option: absent or null counts as def. */
static bool flag(const cJSON *o, const char *key, bool def) {
    const cJSON *v = item(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* A string option that must be absent, null or "". */
static bool unset_str(const cJSON *o, const char *key) {
    const cJSON *v = item(o, key);
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0]);
}

/* ByteLevel as the last step: no prefix space; use_regex says whether it also splits. */
static bool byte_level(const cJSON *p, bool use_regex) {
    return is_type(p, "ByteLevel") && !flag(p, "add_prefix_space", true) && flag(p, "use_regex", true) == use_regex;
}

static bool split_regex(const cJSON *p, const char *regex) {
    const cJSON *pat = item(p, "pattern");
    const char *b = cJSON_GetStringValue(item(p, "behavior"));
    const char *re = cJSON_GetStringValue(item(pat, "Regex"));
    return is_type(p, "Split") && re && !strcmp(re, regex) && b && !strcmp(b, "Isolated") && !flag(p, "invert", false);
}

/* Maps the pre_tokenizer to one of invar's (pretokenize.h). */
static int pre_tokenizer_kind(const cJSON *p, pretok_kind *kind, char *err, size_t errlen) {
    if (byte_level(p, true)) {
        *kind = PRETOK_GPT2;
        return 0;
    }
    const cJSON *seq = item(p, "pretokenizers");
    if (is_type(p, "Sequence") && cJSON_GetArraySize(seq) == 2) {
        const cJSON *a = seq->child, *b = seq->child->next;
        if (is_type(a, "Digits") && flag(a, "individual_digits", false) && byte_level(b, true)) {
            *kind = PRETOK_SMOLLM;
            return 0;
        }
        if (split_regex(a, LLAMA3_REGEX) && byte_level(b, false)) {
            *kind = PRETOK_LLAMA3;
            return 0;
        }
        if (split_regex(a, QWEN2_REGEX) && byte_level(b, false)) {
            *kind = PRETOK_QWEN2;
            return 0;
        }
    }
    return err_fail(err, errlen,
                    "tokenizer.json: unsupported pre_tokenizer (supported: ByteLevel as GPT-2; "
                    "Digits(individual_digits) + ByteLevel as SmolLM; Split with the Llama-3 or Qwen2 regex + "
                    "ByteLevel(use_regex=false); all without add_prefix_space)");
}

/* The normalizer: none, NFC, or a Sequence of those (Qwen2 and Qwen3 name NFC alone). */
static int read_normalizer(const cJSON *n, bool *nfc, char *err, size_t errlen) {
    if (!n || cJSON_IsNull(n)) return 0;
    if (is_type(n, "NFC")) {
        *nfc = true;
        return 0;
    }
    const cJSON *parts = item(n, "normalizers");
    if (is_type(n, "Sequence") && cJSON_IsArray(parts)) {
        for (const cJSON *p = parts->child; p; p = p->next) /* NFC twice is NFC once */
            if (read_normalizer(p, nfc, err, errlen)) return -1;
        return 0;
    }
    const char *type = cJSON_GetStringValue(item(n, "type"));
    return err_fail(err, errlen, "tokenizer.json: normalizer '%.40s' is not supported (none, NFC, or a "
                    "Sequence of NFC)", type ? type : "?");
}

typedef struct {
    int32_t n;           /* ids 0..n-1 */
    tok_text *tokens;
    uint8_t *types;
    uint64_t n_merges;
    tok_text *merges;
    char *pads;          /* "[PAD<id>]" names of ids no file uses, back to back */
} hf_vocab;

static void vocab_free(hf_vocab *v) {
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->pads);
}

static int check_model(const cJSON *m, char *err, size_t errlen) {
    if (!cJSON_IsObject(m)) return err_fail(err, errlen, "tokenizer.json: no model object");
    const cJSON *type = item(m, "type");
    if (type && !is_type(m, "BPE"))
        return err_fail(err, errlen, "tokenizer.json: model type '%.40s' is not supported (byte-level BPE only)",
                        cJSON_IsString(type) ? type->valuestring : "?");
    const cJSON *dropout = item(m, "dropout");
    if (dropout && !cJSON_IsNull(dropout)) return err_fail(err, errlen, "tokenizer.json: BPE dropout is not supported");
    if (flag(m, "byte_fallback", false))
        return err_fail(err, errlen, "tokenizer.json: byte_fallback BPE (SentencePiece style) is not supported");
    if (!unset_str(m, "continuing_subword_prefix") || !unset_str(m, "end_of_word_suffix"))
        return err_fail(err, errlen, "tokenizer.json: BPE subword prefixes/suffixes are not supported");
    if (!cJSON_IsObject(item(m, "vocab")) || !cJSON_IsArray(item(m, "merges")))
        return err_fail(err, errlen, "tokenizer.json: the BPE model needs a vocab object and a merges array");
    return 0;
}

/* Places tokens[id] = text; two different texts for one id is an error. */
static int place(hf_vocab *v, int64_t id, const char *s, uint8_t type, bool override, char *err, size_t errlen) {
    tok_text *t = &v->tokens[id];
    size_t len = strlen(s);
    if (t->s && !override && (t->len != len || memcmp(t->s, s, len)))
        return err_fail(err, errlen, "tokenizer.json: id %lld is used by two tokens", (long long)id);
    *t = (tok_text){s, len};
    v->types[id] = type;
    return 0;
}

static int max_id(const cJSON *vocab, const cJSON *added, int64_t *out, char *err, size_t errlen) {
    int64_t top = -1, id;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!json_exact_int(e, 0, MAX_VOCAB - 1, &id))
            return err_fail(err, errlen, "tokenizer.json: vocab entry '%.40s' has no valid id (0 to %d)", e->string,
                            MAX_VOCAB - 1);
        if (id > top) top = id;
    }
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        if (!json_exact_int(item(a, "id"), 0, MAX_VOCAB - 1, &id) || !cJSON_IsString(item(a, "content")))
            return err_fail(err, errlen, "tokenizer.json: an added token has no valid id and content");
        if (id > top) top = id;
    }
    *out = top;
    return 0;
}

/* Added tokens are matched in the raw text; one that tokenizers matches in the normalized
 * text instead (normalized: true, the default for non-special ones) is refused when there is
 * a normalizer, since NFC can join its last character with what follows. */
static int read_added(hf_vocab *v, const cJSON *added, bool normalizer, char *err, size_t errlen) {
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        int64_t id;
        json_exact_int(item(a, "id"), 0, MAX_VOCAB - 1, &id); /* checked by max_id */
        const char *content = cJSON_GetStringValue(item(a, "content"));
        if (flag(a, "lstrip", false) || flag(a, "rstrip", false) || flag(a, "single_word", false))
            return err_fail(err, errlen,
                            "tokenizer.json: added token '%.40s' uses lstrip/rstrip/single_word, which "
                            "invar does not implement",
                            content);
        /* Special ones are markup (matched only where special tokens are parsed), the others
         * added words, as GGUF's CONTROL / USER_DEFINED. */
        uint8_t type = flag(a, "special", false) ? TOKTYPE_CONTROL : TOKTYPE_USER_DEFINED;
        if (normalizer && flag(a, "normalized", type != TOKTYPE_CONTROL))
            return err_fail(err, errlen, "tokenizer.json: added token '%.40s' is matched after normalization "
                            "(normalized: true), which invar does not implement", content);
        if (!content[0]) return err_fail(err, errlen, "tokenizer.json: added token %lld is empty", (long long)id);
        if (place(v, id, content, type, true, err, errlen)) return -1;
    }
    return 0;
}

/* Ids no file names become "[PAD<id>]" tokens that nothing encodes to (as GGUF converters write). */
static int fill_pads(hf_vocab *v, char *err, size_t errlen) {
    size_t holes = 0;
    for (int32_t i = 0; i < v->n; i++) holes += !v->tokens[i].s;
    if (!holes) return 0;
    v->pads = malloc(holes * 16);
    if (!v->pads) return err_fail(err, errlen, "tokenizer: out of memory");
    char *p = v->pads;
    for (int32_t i = 0; i < v->n; i++) {
        if (v->tokens[i].s) continue;
        int l = snprintf(p, 16, "[PAD%d]", (int)i);
        v->tokens[i] = (tok_text){p, (size_t)l};
        v->types[i] = TOKTYPE_UNUSED;
        p += l + 1;
    }
    return 0;
}

static int read_merges(hf_vocab *v, const cJSON *merges, char *err, size_t errlen) {
    uint64_t n = (uint64_t)cJSON_GetArraySize(merges);
    v->merges = calloc(2 * n + 2, sizeof *v->merges);
    if (!v->merges) return err_fail(err, errlen, "tokenizer: out of memory");
    uint64_t r = 0;
    for (const cJSON *m = merges->child; m; m = m->next, r++) {
        tok_text *lr = &v->merges[2 * r];
        if (cJSON_IsString(m)) { /* "left right" */
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return err_fail(err, errlen, "tokenizer.json: merge %llu '%.40s' is not two tokens",
                                (unsigned long long)r, s);
            lr[0] = (tok_text){s, (size_t)(sp - s)};
            lr[1] = (tok_text){sp + 1, strlen(sp + 1)};
        } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            lr[0] = (tok_text){m->child->valuestring, strlen(m->child->valuestring)};
            lr[1] = (tok_text){m->child->next->valuestring, strlen(m->child->next->valuestring)};
        } else {
            return err_fail(err, errlen, "tokenizer.json: merge %llu is neither \"a b\" nor [\"a\", \"b\"]",
                            (unsigned long long)r);
        }
    }
    v->n_merges = n;
    return 0;
}

static int read_vocab(hf_vocab *v, const cJSON *root, int32_t n_vocab, bool normalizer, char *err, size_t errlen) {
    const cJSON *model = item(root, "model"), *added = item(root, "added_tokens");
    if (check_model(model, err, errlen)) return -1;
    if (added && !cJSON_IsArray(added)) return err_fail(err, errlen, "tokenizer.json: added_tokens is not an array");
    const cJSON *vocab = item(model, "vocab");
    int64_t top = -1;
    if (max_id(vocab, added, &top, err, errlen)) return -1;
    if (n_vocab > MAX_VOCAB)
        return err_fail(err, errlen, "tokenizer.json: %d embedding rows is more than the %d tokens supported",
                        (int)n_vocab, MAX_VOCAB);
    if (n_vocab > 0 && top >= n_vocab)
        return err_fail(err, errlen, "tokenizer.json: token id %lld is beyond the model's %d embedding rows",
                        (long long)top, (int)n_vocab);
    v->n = n_vocab > 0 ? n_vocab : (int32_t)(top + 1);
    if (v->n <= 0) return err_fail(err, errlen, "tokenizer.json: the vocabulary is empty");
    v->tokens = calloc((size_t)v->n, sizeof *v->tokens);
    v->types = malloc((size_t)v->n);
    if (!v->tokens || !v->types) return err_fail(err, errlen, "tokenizer: out of memory");
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int64_t id;
        json_exact_int(e, 0, MAX_VOCAB - 1, &id);
        if (place(v, id, e->string, TOKTYPE_NORMAL, false, err, errlen)) return -1;
    }
    if (read_added(v, added, normalizer, err, errlen) || fill_pads(v, err, errlen)) return -1;
    return read_merges(v, item(model, "merges"), err, errlen);
}

/* Id of a token given as "text" or {"content": "text"} (tokenizer_config.json), -1 if none. */
static int32_t token_id(const hf_vocab *v, const cJSON *tok) {
    const char *s = cJSON_IsObject(tok) ? cJSON_GetStringValue(item(tok, "content")) : cJSON_GetStringValue(tok);
    if (!s) return -1;
    size_t len = strlen(s);
    for (int32_t i = 0; i < v->n; i++) /* added tokens are plain text, so this is the right match */
        if (v->tokens[i].len == len && v->types[i] != TOKTYPE_UNUSED && !memcmp(v->tokens[i].s, s, len)) return i;
    return -1;
}

/* The post_processor's single-sequence template: nothing, or a BOS special token before it. */
static int bos_from_post_processor(const cJSON *pp, const hf_vocab *v, int32_t *bos, bool *add_bos, char *err,
                                   size_t errlen) {
    if (is_type(pp, "Sequence")) {
        for (const cJSON *p = item(pp, "processors") ? item(pp, "processors")->child : NULL; p; p = p->next)
            if (bos_from_post_processor(p, v, bos, add_bos, err, errlen)) return -1;
        return 0;
    }
    if (!pp || cJSON_IsNull(pp) || is_type(pp, "ByteLevel")) return 0;
    if (is_type(pp, "TemplateProcessing")) {
        const cJSON *single = item(pp, "single");
        int n = cJSON_GetArraySize(single);
        const cJSON *last = n > 0 ? cJSON_GetArrayItem(single, n - 1) : NULL;
        if (n == 1 && item(last, "Sequence")) return 0;
        const cJSON *first = n == 2 ? item(single->child, "SpecialToken") : NULL;
        if (first && item(last, "Sequence")) {
            *bos = token_id(v, item(first, "id"));
            *add_bos = *bos >= 0;
            if (*bos >= 0) return 0;
        }
    }
    return err_fail(err, errlen,
                    "tokenizer.json: unsupported post_processor (supported: none, ByteLevel, or a "
                    "template that adds one special token before the text)");
}

/* Generation-ending ids of generation_config.json's eos_token_id (an id or a list). */
static size_t gen_eos_ids(const cJSON *gen, int32_t *ids) {
    const cJSON *e = item(gen, "eos_token_id");
    size_t n = 0;
    int64_t id;
    if (cJSON_IsArray(e)) {
        for (const cJSON *x = e->child; x && n < MAX_EOG_IDS; x = x->next)
            if (json_exact_int(x, 0, MAX_VOCAB - 1, &id)) ids[n++] = (int32_t)id;
    } else if (json_exact_int(e, 0, MAX_VOCAB - 1, &id)) {
        ids[n++] = (int32_t)id;
    }
    return n;
}

/* Optional JSON file of the directory: NULL and no error if absent. */
static cJSON *read_optional(const char *dir, const char *name, int *rc, char *err, size_t errlen) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        *rc = err_fail(err, errlen, "%s: path too long", dir);
        return NULL;
    }
    bool absent;
    cJSON *j = json_file_read(path, MAX_SMALL_JSON, &absent, err, errlen);
    if (!j && !absent) *rc = -1;
    return j;
}

static int build(const char *dir, const cJSON *root, int32_t n_vocab, tokenizer **out, char *err, size_t errlen) {
    tok_spec sp = {.bos = -1, .eos = -1, .eot = -1, .eom = -1, .unk = -1, .pad = -1};
    if (read_normalizer(item(root, "normalizer"), &sp.nfc, err, errlen)) return -1;
    const cJSON *dec = item(root, "decoder");
    if (dec && !cJSON_IsNull(dec) && !is_type(dec, "ByteLevel"))
        return err_fail(err, errlen, "tokenizer.json: decoder is not ByteLevel (byte-level BPE only)");
    if (pre_tokenizer_kind(item(root, "pre_tokenizer"), &sp.pre, err, errlen)) return -1;
    hf_vocab v = {0};
    int rc = read_vocab(&v, root, n_vocab, sp.nfc, err, errlen);
    cJSON *cfg = NULL, *gen = NULL;
    if (rc == 0) rc = bos_from_post_processor(item(root, "post_processor"), &v, &sp.bos, &sp.add_bos, err, errlen);
    if (rc == 0) cfg = read_optional(dir, "tokenizer_config.json", &rc, err, errlen);
    if (rc == 0) gen = read_optional(dir, "generation_config.json", &rc, err, errlen);
    int32_t eog[MAX_EOG_IDS];
    if (rc == 0) {
        const cJSON *model = item(root, "model");
        sp.unk = token_id(&v, item(model, "unk_token"));
        sp.ignore_merges = flag(model, "ignore_merges", false);
        sp.fuse_unk = flag(model, "fuse_unk", false);
        int32_t b = token_id(&v, item(cfg, "bos_token")), e = token_id(&v, item(cfg, "eos_token"));
        int64_t id;
        if (b < 0 && json_exact_int(item(gen, "bos_token_id"), 0, v.n - 1, &id)) b = (int32_t)id;
        if (b >= 0) sp.bos = b;
        if (cJSON_IsBool(item(cfg, "add_bos_token"))) sp.add_bos = cJSON_IsTrue(item(cfg, "add_bos_token"));
        sp.n_eog_ids = gen_eos_ids(gen, eog);
        sp.eog_ids = eog;
        sp.eos = e >= 0 ? e : sp.n_eog_ids ? eog[0] : -1;
        sp.pad = token_id(&v, item(cfg, "pad_token"));
        sp.n_vocab = v.n;
        sp.tokens = v.tokens;
        sp.types = v.types;
        sp.n_merges = v.n_merges;
        sp.merges = v.merges;
        rc = tokenizer_build(&sp, out, err, errlen);
    }
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    vocab_free(&v);
    return rc;
}

int tokenizer_load_hf(const char *dir, int32_t n_vocab, tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= sizeof path)
        return err_fail(err, errlen, "%s: path too long", dir);
    cJSON *root = json_file_read(path, MAX_TOKENIZER_JSON, NULL, err, errlen);
    if (!root) return -1;
    int rc = build(dir, root, n_vocab, out, err, errlen);
    cJSON_Delete(root);
    return rc;
}

int tokenizer_hf_chat_template(const char *dir, char **tmpl, char *err, size_t errlen) {
    *tmpl = NULL;
    int rc = 0;
    cJSON *cfg = read_optional(dir, "tokenizer_config.json", &rc, err, errlen);
    if (rc) return -1;
    const cJSON *t = item(cfg, "chat_template");
    const char *s = cJSON_GetStringValue(t);
    /* A list of named templates: the "default" one. */
    for (const cJSON *x = cJSON_IsArray(t) ? t->child : NULL; x && !s; x = x->next)
        if (cJSON_GetStringValue(item(x, "name")) && !strcmp(item(x, "name")->valuestring, "default"))
            s = cJSON_GetStringValue(item(x, "template"));
    if (s) {
        *tmpl = strdup(s);
        if (!*tmpl) rc = err_fail(err, errlen, "out of memory");
    } else {
        /* Newer transformers save the template beside the config as chat_template.jinja. */
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/chat_template.jinja", dir) < sizeof path) {
            FILE *f = fopen(path, "rb");
            if (f) {
                char *buf = malloc(MAX_SMALL_JSON + 1);
                size_t n = buf ? fread(buf, 1, MAX_SMALL_JSON, f) : 0;
                if (buf) buf[n] = 0;
                if (!buf) rc = err_fail(err, errlen, "out of memory");
                else if (!feof(f)) rc = err_fail(err, errlen, "%s: too large or unreadable", path);
                if (rc == 0) *tmpl = buf;
                else free(buf);
                fclose(f);
            }
        }
    }
    cJSON_Delete(cfg);
    return rc;
}
