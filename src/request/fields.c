/* Which fields a request may have. A field nobody reads would be silently ignored, and a
 * client would get behaviour it did not ask for without knowing: every other field is an
 * error that names it. The lists are docs/server.md's tables. */
#include <stdio.h>
#include <string.h>

#include "request/request_internal.h"

/* Read by the decoder for every kind. */
static const char *const COMMON[] = {"max_tokens",
                                     "temperature",
                                     "top_p",
                                     "top_k",
                                     "min_p",
                                     "seed",
                                     "ignore_eos",
                                     "logprobs",
                                     "speculate",
                                     "spec_tokens",
                                     "presence_penalty",
                                     "frequency_penalty",
                                     "repetition_penalty",
                                     "logit_bias",
                                     "min_tokens",
                                     "stop_token_ids",
                                     NULL};
/* Kind by kind: the decoder's own fields and those the caller reads (server: model, n,
 * stream...; batch: id). `user` is an end-user tag for the operator's logs: it changes
 * nothing in the output. */
static const char *const COMPLETION[] = {"prompt",
                                         "parse_special",
                                         "model",
                                         "n",
                                         "best_of",
                                         "stream",
                                         "stream_options",
                                         "echo",
                                         "stop",
                                         "user",
                                         "messages" /* refused by the decoder with a clearer message */,
                                         NULL};
static const char *const CHAT[] = {"messages",
                                   "max_completion_tokens",
                                   "top_logprobs",
                                   "model",
                                   "n",
                                   "stream",
                                   "stream_options",
                                   "stop",
                                   "user",
                                   "prompt",
                                   "parse_special" /* likewise */,
                                   NULL};
static const char *const BATCH[] = {"prompt", "messages", "parse_special", "max_completion_tokens", "id", NULL};

/* Known OpenAI fields this server does not implement, with the reason given back. */
static const struct {
    const char *name, *why;
} UNSUPPORTED[] = {
    {"suffix", "insertion (a suffix after the completion) is not supported"},
    {"tools", "tool calling is not supported"},
    {"tool_choice", "tool calling is not supported"},
    {"functions", "function calling is not supported"},
    {"function_call", "function calling is not supported"},
    {"response_format", "structured output is not supported"},
};

static bool listed(const char *const *list, const char *key) {
    for (; *list; list++)
        if (!strcmp(*list, key)) return true;
    return false;
}

int req_check_fields(const cJSON *o, req_kind kind, req_error *e) {
    const char *const *own = kind == REQ_COMPLETION ? COMPLETION : kind == REQ_CHAT ? CHAT : BATCH;
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        const char *k = it->string ? it->string : "";
        if (listed(COMMON, k) || listed(own, k)) continue;
        for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof *UNSUPPORTED; i++)
            if (!strcmp(UNSUPPORTED[i].name, k))
                return req_fail(e, REQ_ERR_UNSUPPORTED, UNSUPPORTED[i].name, "'%s': %s", k, UNSUPPORTED[i].why);
        /* the name is client bytes: the callers' JSON writers make it valid UTF-8 */
        req_fail(e, REQ_ERR_UNSUPPORTED, NULL, "unsupported field '%.64s' (docs/server.md lists the fields)", k);
        snprintf(e->field_buf, sizeof e->field_buf, "%s", k);
        e->param = e->field_buf;
        return -1;
    }
    return 0;
}
