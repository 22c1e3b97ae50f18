/* Pre-tokenizers: split text into the pieces that BPE then encodes independently.
 * Each is a hand-written matcher equivalent to the model family's split regex. */
#ifndef INVAR_PRETOKENIZE_H
#define INVAR_PRETOKENIZE_H
#include <stddef.h>

typedef enum {
    /* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRETOK_GPT2 = 0,
    /* SmolLM / StarCoder: every \p{N} character is its own piece, then GPT-2 on the rest. */
    PRETOK_SMOLLM,
    /* Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
     *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_LLAMA3,
    /* Qwen2: as Llama-3 but \p{N} (one digit per piece). */
    PRETOK_QWEN2
} pretok_kind;

/* Maps a tokenizer.ggml.pre value to a kind; 0 on success, -1 if unknown. */
int pretok_kind_from_name(const char *name, size_t len, pretok_kind *out);

/* Called for each piece in order; a non-zero return stops the split and is returned. */
typedef int (*pretok_emit_fn)(void *ctx, const char *piece, size_t len);

/* Splits text[0..len) (any bytes: an invalid UTF-8 byte is a character of its own,
 * in no class). Pieces are non-empty and cover the text exactly. */
int pretok_split(pretok_kind kind, const char *text, size_t len, pretok_emit_fn emit, void *ctx);

#endif
