/* JSON request parsing and result printing for `invar batch` (cJSON). */
#ifndef INVAR_CLI_REQUEST_JSON_H
#define INVAR_CLI_REQUEST_JSON_H
#include <cjson/cJSON.h>
#include "jobs.h"

/* Fills j (prompt tokens + sampling) from one JSON object. Returns NULL on success or a
 * static/err-buffer message describing what is wrong with the request. */
/* Parses text[0, len) as one JSON value with nothing but whitespace after it; NULL if it is
 * not JSON, or (with *trailing set) if other bytes follow the value: `{..} junk` is no request. */
cJSON *json_parse_whole(const char *text, size_t len, bool *trailing);
const char *request_from_json(const invar_model *m, const cJSON *obj, job *j, char *err, size_t errlen);
/* Tokenizes text (BOS per the model); malloc'd ids or NULL. Only for raw prompts: a chat
 * goes through invar_chat_tokenize, which never parses special tokens in contents. */
int32_t *tokenize_alloc(const invar_model *m, const char *text, bool parse_special, int64_t *n_out);
/* One result line (no trailing newline); malloc'd. id may be NULL. with_timing adds
 * "timing": {first_token_s, done_s} (seconds since the batch started). */
char *result_to_json(const invar_model *m, const cJSON *id, const job *j, int64_t line, bool with_timing);

#endif
