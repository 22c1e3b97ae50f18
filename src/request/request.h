/* Request decoding: one JSON request object -> prompt tokens + sampling parameters, the chat
 * template applied to messages. The one reader of these fields for `invar batch` and the
 * OpenAI server (and any C caller that takes JSON requests), so the two cannot disagree on a
 * field; what is particular to HTTP (model, n, stream, stop, echo) stays in src/server/.
 *
 * Fields (null is the same as absent; a field not listed here nor read by the caller for
 * that kind (fields.c) is REQ_ERR_UNSUPPORTED, naming it):
 *   max_tokens      integer in [1, 2^24]; with messages max_completion_tokens too (it wins)
 *   temperature     number in [0, 100] (0: greedy)
 *   top_p           number in (0, 1];   min_p  number in [0, 1]
 *   top_k           integer in [-1, 2^30] (-1 and 0: off)
 *   seed            integer in [0, 2^64 - 1], read from its digits (req_parse_json keeps them)
 *   ignore_eos      boolean
 *   presence_penalty, frequency_penalty  numbers in [-2, 2]; repetition_penalty in (0, 10]
 *   min_tokens      integer in [0, max_tokens] (an absent max_tokens grows to it)
 *   stop_token_ids  up to INVAR_MAX_STOP_TOKEN_IDS token ids
 *   logit_bias      {"token id": number in [-100, 100]}, up to INVAR_MAX_LOGIT_BIAS entries
 *   speculate       "off", "ngram" or "draft": speculative decoding (docs/speculation.md; the
 *                   output is the same either way); absent: the caller's default
 *   spec_tokens     integer in [1, 16]: drafted tokens per step; absent: the caller's default
 *   logprobs        REQ_BATCH, REQ_COMPLETION: the number of alternatives per token, 0 to 20;
 *                   REQ_CHAT: a boolean, with top_logprobs 0 to 20 (which needs logprobs true)
 *   prompt          a string (special tokens parsed unless parse_special is false) or an
 *                   array of token ids in [0, n_vocab); REQ_COMPLETION also an array of
 *                   those, up to REQ_MAX_PROMPTS
 *   messages        a non-empty array of {role: string, content: string or an array of
 *                   {type: "text", text: string} parts (joined)}; special tokens are parsed
 *                   in the template's markup only, never in contents
 * A request has prompt or messages (REQ_BATCH: either; never both), and every prompt at
 * least one token. */
#ifndef INVAR_REQUEST_H
#define INVAR_REQUEST_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "invar.h"

#define REQ_MAX_PROMPTS 64
#define REQ_MAX_TOKENS (1 << 24)

typedef enum {
    REQ_BATCH,      /* invar batch: one prompt, or messages; logprobs is a count */
    REQ_COMPLETION, /* /v1/completions: prompt (one or several); logprobs is a count */
    REQ_CHAT        /* /v1/chat/completions: messages; logprobs is a boolean + top_logprobs */
} req_kind;

typedef enum {
    REQ_ERR_TYPE = 1,    /* a field of the wrong JSON type */
    REQ_ERR_VALUE,       /* the right type, a value out of range or not allowed here */
    REQ_ERR_MISSING,     /* a required field is absent */
    REQ_ERR_TEMPLATE,    /* the chat template cannot render these messages (e.g. a bad role) */
    REQ_ERR_UNSUPPORTED, /* a field this decoder does not implement (docs/server.md) */
    REQ_ERR_NOMEM
} req_error_kind;

typedef struct {
    req_error_kind kind;
    const char *param; /* the field at fault (a static string, or field_buf); NULL: the request */
    char message[256];
    char field_buf[72]; /* an unknown field's name, cut to fit */
} req_error;

typedef struct {
    int32_t *ids;       /* owned */
    int64_t n_ids;
    char *text;         /* owned: the prompt as text (valid UTF-8): the string given, the
                           token ids' text, or the chat as rendered */
} req_prompt;

typedef struct {
    invar_sampling samp;    /* invar_sampling_default() where the request says nothing */
    bool max_tokens_given;  /* else samp.max_tokens is the default and the caller may pick */
    bool speculate_given, spec_tokens_given; /* else the caller's defaults may apply */
    bool logprobs;          /* asked for: a count (0 included) or chat's true */
    bool chat;              /* the prompt is a rendered chat */
    int n_prompts;          /* >= 1 */
    req_prompt *prompts;    /* owned */
} req_decoded;

/* Decodes o. 0, or -1 with e filled and nothing left to free. */
int req_decode(const invar_model *m, const cJSON *o, req_kind kind, req_decoded *out, req_error *e);
/* The same with REQ_COMPLETION's prompt count limited to max_prompts (req_decode: 64). */
int req_decode_limit(const invar_model *m, const cJSON *o, req_kind kind, int max_prompts, req_decoded *out,
                     req_error *e);
void req_decoded_free(req_decoded *d);
/* The caller's speculation (a command line's) for the fields the request did not give. */
void req_default_speculation(req_decoded *d, invar_spec_mode mode, int32_t spec_tokens);

/* Parses text[0, len) as one JSON value with nothing but whitespace after it; NULL if it is
 * not JSON, or (with *trailing set) if other bytes follow the value: `{..} junk` is no request. */
cJSON *req_parse_json(const char *text, size_t len, bool *trailing);

#endif
