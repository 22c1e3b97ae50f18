/* A tokenizer from GGUF tokenizer.ggml.* metadata: vocabulary, merges ("left right"),
 * token types, special ids and the pre-tokenizer name, handed to tokenizer_build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err_msg.h"
#include "tokenizer/tokenizer_internal.h"

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

static int read_vocab(const gguf_file *f, tok_spec *sp, tok_text **tokens, uint8_t **types, char *err,
                      size_t errlen) {
    gguf_value_type et;
    uint64_t n;
    if (!gguf_get_arr_info(f, "tokenizer.ggml.tokens", &et, &n) || et != GGUF_T_STRING)
        return err_fail(err, errlen, "tokenizer: missing tokenizer.ggml.tokens string array");
    if (n == 0 || n > (uint64_t)INT32_MAX / 2)
        return err_fail(err, errlen, "tokenizer: bad vocabulary size %llu", (unsigned long long)n);
    *tokens = malloc(n * sizeof **tokens);
    *types = malloc(n);
    if (!*tokens || !*types) return err_fail(err, errlen, "tokenizer: out of memory");
    const void *tt_data = NULL;
    gguf_value_type tt = GGUF_T_UINT8;
    uint64_t ntypes = 0;
    if (gguf_get_arr_info(f, "tokenizer.ggml.token_type", &tt, &ntypes) && ntypes == n)
        tt_data = gguf_get_arr_data(f, "tokenizer.ggml.token_type");
    for (uint64_t i = 0; i < n; i++) {
        if (!gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &(*tokens)[i].s, &(*tokens)[i].len))
            return err_fail(err, errlen, "tokenizer: unreadable token %llu", (unsigned long long)i);
        int64_t ty = TOKTYPE_NORMAL;
        if (tt_data && !arr_int(tt_data, tt, i, &ty)) ty = TOKTYPE_NORMAL;
        (*types)[i] = (ty >= 1 && ty <= 6) ? (uint8_t)ty : TOKTYPE_NORMAL;
    }
    sp->n_vocab = (int32_t)n;
    sp->tokens = *tokens;
    sp->types = *types;
    return 0;
}

static int read_merges(const gguf_file *f, tok_spec *sp, tok_text **merges, char *err, size_t errlen) {
    gguf_value_type et;
    uint64_t n = 0;
    if (!gguf_get_arr_info(f, "tokenizer.ggml.merges", &et, &n) || et != GGUF_T_STRING)
        return err_fail(err, errlen, "tokenizer: missing tokenizer.ggml.merges string array");
    if (n > (uint64_t)INT32_MAX / 4) return err_fail(err, errlen, "tokenizer: too many merges");
    *merges = calloc(2 * n + 2, sizeof **merges);
    if (!*merges) return err_fail(err, errlen, "tokenizer: out of memory");
    for (uint64_t r = 0; r < n; r++) {
        const char *s;
        size_t len;
        if (!gguf_get_arr_str(f, "tokenizer.ggml.merges", r, &s, &len))
            return err_fail(err, errlen, "tokenizer: unreadable merge %llu", (unsigned long long)r);
        /* "left right": byte-level tokens never contain a literal space, so the first
         * space separates the two halves (none, or an empty half: the merge is skipped). */
        const char *space = memchr(s, ' ', len);
        if (!space) continue;
        size_t la = (size_t)(space - s);
        (*merges)[2 * r] = (tok_text){s, la};
        (*merges)[2 * r + 1] = (tok_text){space + 1, len - la - 1};
    }
    sp->n_merges = n;
    sp->merges = *merges;
    return 0;
}

int tokenizer_load(const gguf_file *f, tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    const char *model;
    size_t mlen;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model, &mlen))
        return err_fail(err, errlen, "tokenizer: missing tokenizer.ggml.model");
    if (mlen != 4 || memcmp(model, "gpt2", 4) != 0)
        return err_fail(err, errlen, "tokenizer: unsupported tokenizer model '%.*s' (only byte-level BPE 'gpt2')",
                        (int)(mlen > 64 ? 64 : mlen), model);
    tok_spec sp = {.fuse_unk = true};
    const char *pre;
    size_t plen;
    sp.pre = PRETOK_GPT2; /* files without tokenizer.ggml.pre use the GPT-2 split */
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, &plen) && pretok_kind_from_name(pre, plen, &sp.pre) != 0)
        return err_fail(err, errlen,
                        "tokenizer: unsupported pre-tokenizer '%.*s' (supported: smollm, gpt2, "
                        "default, starcoder, llama3, llama-bpe, qwen2)",
                        (int)(plen > 64 ? 64 : plen), pre);
    /* Llama-3's tokenizer.json sets ignore_merges (a piece that is a vocabulary token is that
     * token, even where no merge reaches it); its GGUF conversions drop the flag, so the
     * pre-tokenizer implies it, as Hugging Face and llama.cpp both encode those files. */
    sp.ignore_merges = sp.pre == PRETOK_LLAMA3;
    tok_text *tokens = NULL, *merges = NULL;
    uint8_t *types = NULL;
    int rc = -1;
    if (read_vocab(f, &sp, &tokens, &types, err, errlen) == 0 && read_merges(f, &sp, &merges, err, errlen) == 0) {
        sp.bos = special_id(f, "tokenizer.ggml.bos_token_id", sp.n_vocab);
        sp.eos = special_id(f, "tokenizer.ggml.eos_token_id", sp.n_vocab);
        sp.eot = special_id(f, "tokenizer.ggml.eot_token_id", sp.n_vocab);
        sp.eom = special_id(f, "tokenizer.ggml.eom_token_id", sp.n_vocab);
        sp.unk = special_id(f, "tokenizer.ggml.unknown_token_id", sp.n_vocab);
        sp.pad = special_id(f, "tokenizer.ggml.padding_token_id", sp.n_vocab);
        bool add_bos = false;
        sp.add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos) && add_bos;
        rc = tokenizer_build(&sp, out, err, errlen);
    }
    free(tokens);
    free(types);
    free(merges);
    return rc;
}
