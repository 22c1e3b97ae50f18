/* Shared by the request decoder's files: error helpers and the prompt half of decoding. */
#ifndef INVAR_REQUEST_INTERNAL_H
#define INVAR_REQUEST_INTERNAL_H
#include "request/request.h"

/* Sets e; returns -1 so a failing check can `return req_fail(...)`. */
int req_fail(req_error *e, req_error_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The value of key, NULL when absent or null. */
const cJSON *req_field(const cJSON *o, const char *key);

/* prompt / messages / parse_special into out->prompts, out->n_prompts, out->chat. */
int req_decode_prompts(const invar_model *m, const cJSON *o, req_kind kind, req_decoded *out, req_error *e);

#endif
