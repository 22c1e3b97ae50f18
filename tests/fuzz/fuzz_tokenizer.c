/* libFuzzer target for the tokenizer on the default model's vocabulary: any byte string
 * must encode without crashing (special-token parsing on, off, and in markup spans), every
 * id must be in range, and decoding must give back the input whenever every byte has a token.
 * The NFC normalizer (tokenizer.json's) takes any bytes too, and is idempotent. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "tokenizer/normalize.h"
#include "tokenizer/tokenizer.h"

static tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *env = getenv("INVAR_MODEL");
    char path[4096];
    if (env && *env) snprintf(path, sizeof path, "%s", env);
    else snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", INVAR_SOURCE_DIR);
    char err[256];
    gguf_file *f;
    if (gguf_open(path, &f, err, sizeof err) || tokenizer_load(f, &g_tok, err, sizeof err)) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, err);
        abort();
    }
    gguf_close(f);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    const char *text = (const char *)data;
    char *norm = NULL, *again = NULL;
    size_t nlen = 0, alen = 0;
    if (nfc_normalize(text, size, &norm, &nlen) == 0 && norm) {
        if (nfc_normalize(norm, nlen, &again, &alen) || (again && (alen != nlen || memcmp(again, norm, nlen))))
            __builtin_trap();
        free(again);
    }
    free(norm);
    int32_t ids[4096 + 2];
    const int32_t n_vocab = tokenizer_n_vocab(g_tok);
    for (int special = 0; special < 2; special++) {
        int64_t n = tokenizer_encode(g_tok, text, size, false, special, ids, 4096 + 2);
        if (n < 0 || n > (int64_t)size) __builtin_trap(); /* byte-level BPE: at most one id per byte */
        bool all_known = true;
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= n_vocab) __builtin_trap();
            if (ids[i] == 0) all_known = false; /* <unk>: a byte the vocabulary lacks */
        }
        char out[4096 * 4 + 1];
        int64_t len = tokenizer_decode(g_tok, ids, n, false, out, sizeof out);
        if (len < 0) __builtin_trap();
        if (all_known && !special && (len != (int64_t)size || memcmp(out, data, size))) __builtin_trap();
    }
    /* Markup spans (as a chat template gives them) cut from the input's own bytes: any
     * sorted set of spans, some past the end, must encode within the same bounds. */
    tok_span spans[8];
    size_t n_spans = 0, at = 0;
    for (size_t i = 0; i + 1 < size && n_spans < 8; i += 97) {
        size_t start = at + data[i] % 64, end = start + 1 + data[i + 1] % 64;
        spans[n_spans++] = (tok_span){start, end};
        at = end + 1;
    }
    int64_t n = tokenizer_encode_marked(g_tok, text, size, false, spans, n_spans, ids, 4096 + 2);
    if (n < 0 || n > (int64_t)size) __builtin_trap();
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) __builtin_trap();
    return 0;
}
