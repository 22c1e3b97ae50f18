/* UTF-8 clean-up for text that goes into JSON (token bytes, client strings, file names). */
#ifndef INVAR_COMMON_UTF8_H
#define INVAR_COMMON_UTF8_H
#include <stddef.h>

/* s[0, len) with every invalid byte replaced by U+FFFD (overlong forms, surrogates and code
 * points past U+10FFFF are invalid); malloc'd and NUL-terminated, NULL when out of memory. */
char *utf8_sanitize(const char *s, size_t len);

#endif
