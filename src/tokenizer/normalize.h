/* The normalizers a tokenizer.json may name before its pre-tokenizer (Qwen2/Qwen3: NFC). */
#ifndef INVAR_TOKENIZER_NORMALIZE_H
#define INVAR_TOKENIZER_NORMALIZE_H
#include <stddef.h>

/* Unicode NFC (canonical decomposition, then canonical composition; utf8proc) of s[0, len).
 * Invalid UTF-8 bytes are kept as they are and end the run around them (nothing composes
 * across one), as the pre-tokenizer treats them: characters of their own. *out is NULL
 * when the text is its own NFC (ASCII, checked cheaply), else a malloc'd copy of *out_len
 * bytes. 0, or -1 when out of memory. */
int nfc_normalize(const char *s, size_t len, char **out, size_t *out_len);

#endif
