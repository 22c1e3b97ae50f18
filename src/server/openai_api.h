/* OpenAI API bodies: parsing /v1/completions and /v1/chat/completions requests
 * (openai_request.c, the shared fields through src/request/), and writing responses, stream
 * chunks and error objects (openai_api.c; cJSON, logprobs as raw float32 text). */
#ifndef INVAR_SERVER_OPENAI_API_H
#define INVAR_SERVER_OPENAI_API_H
#include <stdbool.h>
#include <stddef.h>

#include "server/server.h"
#include "server/text_tracker.h"

typedef struct {
    int status;                 /* HTTP status */
    char message[256];
    const char *type;           /* invalid_request_error, ... */
    const char *param;          /* may be NULL; else points at param_buf */
    char param_buf[80];
    const char *code;           /* may be NULL */
} api_error;

typedef struct {
    bool chat, stream, include_usage, logprobs, echo;
    int top_logprobs;
    int n;     /* candidates per prompt: best_of (n unless given) */
    int n_out; /* choices per prompt returned: n (<= the n candidates) */
    int n_prompts;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    char **prompt_texts;        /* per prompt, for echo (owned) */
    char id[48];
    long long created;
    srv_call *call;             /* n_prompts * n choices, prompts tokenized */
} api_request;

/* 0, or -1 with e filled (then nothing needs freeing). */
int api_parse(srv_state *s, const char *body, size_t len, bool chat, api_request *r, api_error *e);
void api_request_free(api_request *r);   /* not the call */

void api_error_set(api_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
char *api_error_json(const api_error *e);

const char *api_finish_reason(invar_finish f, bool stopped);

/* The whole non-streaming response; tt[i] and finish[i] per choice. */
char *api_response_json(srv_state *s, const api_request *r, const text_tracker *tt, const invar_finish *finish);
/* One streamed chunk for choice `index`: text delta (NULL: none), the tracker's tokens
 * [from, to) with their logprobs, finish reason (NULL while running), role (chat first chunk). */
char *api_chunk_json(srv_state *s, const api_request *r, int index, const char *delta, const text_tracker *tt,
                     int64_t from, int64_t to, const char *finish, bool role);
char *api_usage_chunk_json(srv_state *s, const api_request *r, int64_t prompt_tokens, int64_t completion_tokens,
                           int64_t cached_tokens);

#endif
