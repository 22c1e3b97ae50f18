/* Byte-level BPE tokenizer built from GGUF metadata (tokenizer.ggml.*) or a Hugging Face
 * model directory (tokenizer.json and its config files). */
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
/* Reads dir/tokenizer.json (byte-level BPE with a pre-tokenizer invar implements, no
 * normalizer; anything else is refused by name), tokenizer_config.json (bos/eos token,
 * add_bos_token) and generation_config.json (eos_token_id: every listed id ends generation).
 * n_vocab > 0: the model's embedding rows; ids no file uses up to there are unused padding
 * tokens. 0: as many ids as the files name. */
int tokenizer_load_hf(const char *dir, int32_t n_vocab, tokenizer **out, char *err, size_t errlen);
/* The chat template of a Hugging Face directory (tokenizer_config.json's chat_template, the
 * "default" one of a list, or chat_template.jinja): malloc'd into *tmpl, or NULL if there is
 * none. -1 with a message if a file is unreadable. */
int tokenizer_hf_chat_template(const char *dir, char **tmpl, char *err, size_t errlen);
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
