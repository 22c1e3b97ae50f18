/* invar batch's JSON: one request line into a job (through the shared request decoder,
 * src/request/), one job into a result line (cJSON). */
#ifndef INVAR_CLI_BATCH_JSON_H
#define INVAR_CLI_BATCH_JSON_H
#include <cjson/cJSON.h>

#include "cli/cli_spec.h"
#include "cli/jobs.h"

/* Fills j (prompt tokens + sampling) from one JSON object (max_tokens 64 if it gives none;
 * speculation from spec, if not NULL, where it gives none).
 * Returns NULL on success or what is wrong with the request (in err). */
const char *batch_request(const invar_model *m, const cJSON *obj, const cli_spec *spec, job *j, char *err,
                          size_t errlen);
/* One result line (no trailing newline); malloc'd. id may be NULL. with_timing adds
 * "timing": {first_token_s, done_s} (seconds since the batch started). */
char *result_to_json(const invar_model *m, const cJSON *id, const job *j, int64_t line, bool with_timing);

#endif
