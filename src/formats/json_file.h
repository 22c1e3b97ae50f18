/* Small JSON files of a model directory (config.json, tokenizer.json, ...), parsed with cJSON. */
#ifndef INVAR_JSON_FILE_H
#define INVAR_JSON_FILE_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reads and parses path (at most max_bytes). NULL on failure with "path: reason" in err;
 * *absent (when not NULL) says the file does not exist, so optional files can be skipped. */
cJSON *json_file_read(const char *path, size_t max_bytes, bool *absent, char *err, size_t errlen);

/* A JSON number that is an exact integer in [lo, hi] (cJSON keeps numbers as doubles). */
bool json_exact_int(const cJSON *j, int64_t lo, int64_t hi, int64_t *out);

#endif
