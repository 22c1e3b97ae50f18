/* Byte-level BPE tokenizer built from GGUF metadata (tokenizer.ggml.*). */
#ifndef INVAR_TOKENIZER_H
#define INVAR_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "formats/gguf.h"

typedef struct tokenizer tokenizer;

/* Reads tokens, merges, token types and tokenizer.ggml.pre from f (the tokenizer copies
 * what it needs; f may be closed afterwards). 0 on success, else message in err. */
int tokenizer_load(const gguf_file *f, tokenizer **out, char *err, size_t errlen);
void tokenizer_free(tokenizer *t);

int32_t tokenizer_n_vocab(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);   /* -1 if none */
int32_t tokenizer_eos(const tokenizer *t);
bool tokenizer_add_bos(const tokenizer *t);  /* tokenizer.ggml.add_bos_token */
/* End of generation: eos, eot, and control tokens such as <|im_end|> / <|eot_id|>. */
bool tokenizer_is_eog(const tokenizer *t, int32_t id);
bool tokenizer_is_special(const tokenizer *t, int32_t id); /* control / user-defined */

/* Encodes UTF-8 text (invalid UTF-8 is tokenized byte-wise, never rejected).
 * parse_special: text like "<|im_start|>" becomes its special token.
 * Writes up to cap ids; returns the total count (may exceed cap: call again), -1 on error. */
int64_t tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_bos,
                         bool parse_special, int32_t *out, int64_t cap);

/* A byte range [start, end) of a text. */
typedef struct {
    size_t start, end;
} tok_span;

/* tokenizer_encode where control tokens are matched only if they lie wholly inside one of
 * the markup spans (sorted, not overlapping): a chat template's own markup. Elsewhere
 * their text is ordinary text, so a message cannot forge "<|im_end|>". With the whole text
 * as one span this is parse_special true; with none, false. */
int64_t tokenizer_encode_marked(const tokenizer *t, const char *text, size_t len, bool add_bos,
                                const tok_span *markup, size_t n_markup, int32_t *out, int64_t cap);

/* Raw bytes of one token (byte-level mapping undone). Returns the byte count
 * (may exceed cap; nothing past cap written), -1 for an invalid id. */
int tokenizer_token_bytes(const tokenizer *t, int32_t id, char *buf, size_t cap);

/* Concatenated bytes of ids; skip_special drops control tokens. Returns total
 * byte count (may exceed cap), always NUL-terminates within cap when cap > 0. */
int64_t tokenizer_decode(const tokenizer *t, const int32_t *ids, int64_t n, bool skip_special,
                         char *out, size_t cap);

#endif
