/* Between text and token ids, through the public API: what a request's prompt tokenizes to,
 * and what generated tokens read as (for JSON: always valid UTF-8). */
#ifndef INVAR_REQUEST_TOKEN_TEXT_H
#define INVAR_REQUEST_TOKEN_TEXT_H
#include <stdbool.h>
#include <stdint.h>

#include "invar.h"

/* Tokenizes a raw prompt (BOS per the model); malloc'd ids, NULL on failure. A chat goes
 * through invar_chat_tokenize instead, which never parses special tokens in contents. */
int32_t *req_tokenize(const invar_model *m, const char *text, bool parse_special, int64_t *n_out);
/* Text of generated tokens, end-of-generation tokens dropped, invalid UTF-8 replaced by
 * U+FFFD; malloc'd, NULL when out of memory. */
char *req_tokens_text(const invar_model *m, const invar_token_info *toks, int64_t n);
/* Text of one token (invalid UTF-8 replaced; a token over 256 bytes reads as ""); malloc'd.
 * raw, if not NULL, receives its bytes (up to 256) and *n_raw their count. */
char *req_token_text(const invar_model *m, int32_t id, unsigned char *raw, int *n_raw);

#endif
