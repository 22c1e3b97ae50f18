#include "common/err_msg.h"

#include <stdarg.h>
#include <stdio.h>

static void put(char *err, size_t errlen, const char *fmt, va_list ap) {
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
}

int err_fail_code(int code, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    put(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

int err_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    put(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
