#include "cli/batch_json.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/float_format.h"
#include "request/request.h"
#include "request/token_text.h"

const char *batch_request(const invar_model *m, const cJSON *o, const cli_spec *spec, job *j, char *err,
                          size_t errlen) {
    req_decoded d;
    req_error e;
    if (req_decode(m, o, REQ_BATCH, &d, &e)) {
        snprintf(err, errlen, "%s", e.message);
        return err;
    }
    if (spec) req_default_speculation(&d, spec->mode, spec->tokens);
    j->samp = d.samp;
    j->prompt = d.prompts[0].ids; /* ownership moves to the job */
    j->n_prompt = d.prompts[0].n_ids;
    d.prompts[0].ids = NULL;
    req_decoded_free(&d);
    return NULL;
}

static const char *finish_name(invar_finish f) {
    switch (f) {
    case INVAR_FINISH_STOP: return "stop";
    case INVAR_FINISH_LENGTH: return "length";
    case INVAR_FINISH_CANCELLED: return "cancelled";
    case INVAR_FINISH_ERROR: return "error";
    default: return "none";
    }
}

static cJSON *f32_json(float v) {
    char buf[32];
    format_f32(buf, sizeof buf, v);
    return cJSON_CreateRaw(buf);
}

char *result_to_json(const invar_model *m, const cJSON *id, const job *j, int64_t line, bool with_timing) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
    if (j->finish == INVAR_FINISH_ERROR || j->error) {
        cJSON_AddNumberToObject(o, "line", (double)line);
        cJSON_AddStringToObject(o, "error", j->error ? j->error : "error");
        cJSON_AddStringToObject(o, "finish_reason", "error");
    } else {
        cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
        cJSON *lps = cJSON_AddArrayToObject(o, "logprobs");
        cJSON *tops = j->samp.top_logprobs > 0 ? cJSON_CreateArray() : NULL;
        for (int64_t i = 0; i < j->n_toks; i++) {
            const invar_token_info *t = &j->toks[i];
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(t->token));
            cJSON_AddItemToArray(lps, f32_json(t->logprob));
            if (tops) {
                cJSON *alts = cJSON_CreateArray();
                for (int32_t r = 0; r < t->n_top; r++) {
                    cJSON *a = cJSON_CreateObject();
                    cJSON_AddNumberToObject(a, "id", t->top_ids[r]);
                    cJSON_AddItemToObject(a, "logprob", f32_json(t->top_logprobs[r]));
                    cJSON_AddItemToArray(alts, a);
                }
                cJSON_AddItemToArray(tops, alts);
            }
        }
        if (tops) cJSON_AddItemToObject(o, "top_logprobs", tops);
        char *text = req_tokens_text(m, j->toks, j->n_toks);
        cJSON_AddStringToObject(o, "text", text ? text : "");
        free(text);
        cJSON_AddStringToObject(o, "finish_reason", finish_name(j->finish));
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)j->n_prompt);
        if (with_timing) {
            cJSON *t = cJSON_AddObjectToObject(o, "timing");
            cJSON_AddNumberToObject(t, "first_token_s", j->t_first);
            cJSON_AddNumberToObject(t, "done_s", j->t_done);
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
