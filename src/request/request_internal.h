/* Shared by the request decoder's files: error helpers and the prompt half of decoding. */
#ifndef INVAR_REQUEST_INTERNAL_H
#define INVAR_REQUEST_INTERNAL_H
#include "request/request.h"

/* Sets e; returns -1 so a failing check can `return req_fail(...)`. */
int req_fail(req_error *e, req_error_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The value of key, NULL when absent or null. */
const cJSON *req_field(const cJSON *o, const char *key);

/* An integer in [lo, hi] (*given: whether the field was there); a finite number in [lo, hi]
 * or, lo_open, (lo, hi]; an unsigned 64-bit integer read from its digits (exact_number.c). */
int req_get_int(const cJSON *o, const char *key, double lo, double hi, int64_t *out, bool *given, req_error *e);
int req_get_num(const cJSON *o, const char *key, double lo, bool lo_open, double hi, float *out, req_error *e);
int req_get_u64(const cJSON *o, const char *key, uint64_t *out, req_error *e);
/* Swaps top-level fields that must be exact integers (seed) for their raw text. */
void req_keep_exact_numbers(cJSON *o, const char *text, size_t len);
/* Every field of o is one this kind of request reads, else REQ_ERR_UNSUPPORTED naming it. */
int req_check_fields(const cJSON *o, req_kind kind, req_error *e);
/* presence/frequency/repetition_penalty, logit_bias, min_tokens, stop_token_ids. */
int req_decode_processing(const invar_model *m, const cJSON *o, req_decoded *d, req_error *e);

/* prompt / messages / parse_special into out->prompts, out->n_prompts, out->chat. */
int req_decode_prompts(const invar_model *m, const cJSON *o, req_kind kind, int max_prompts, req_decoded *out,
                       req_error *e);

#endif
