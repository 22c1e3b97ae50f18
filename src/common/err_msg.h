/* The one way a loader writes its error line into the caller's buffer (err, errlen): the
 * parsers of every file format and tokenizer report through it. */
#ifndef INVAR_COMMON_ERR_MSG_H
#define INVAR_COMMON_ERR_MSG_H
#include <stddef.h>

/* Formats the message into err (nothing when err is NULL or errlen is 0) and returns code,
 * so a failing check is one line: return err_fail_code(ST_ERR_FORMAT, err, errlen, ...). */
__attribute__((format(printf, 4, 5))) int err_fail_code(int code, char *err, size_t errlen, const char *fmt, ...);

/* The same, returning -1 (the usual failure). */
__attribute__((format(printf, 3, 4))) int err_fail(char *err, size_t errlen, const char *fmt, ...);

#endif
