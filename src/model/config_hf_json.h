/* config.json readers shared by config_hf.c and config_hf_deepseek.c: each bounds or checks
 * what it reads and writes "config.json: ..." into err on failure (-1). A JSON null counts as
 * absent (these files write null for "the default"). */
#ifndef INVAR_MODEL_CONFIG_HF_JSON_H
#define INVAR_MODEL_CONFIG_HF_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "model/config.h"

const cJSON *hf_item(const cJSON *o, const char *key); /* NULL if absent or null */
int hf_get_int(const cJSON *cfg, const char *key, int64_t lo, int64_t hi, bool required, int64_t def, int64_t *out,
               char *err, size_t errlen);
int hf_get_float(const cJSON *o, const char *key, double lo, double hi, float def, float *out, char *err,
                 size_t errlen);
bool hf_get_bool(const cJSON *o, const char *key, bool def);
/* A boolean that must be one when present. */
int hf_get_strict_bool(const cJSON *o, const char *key, bool def, bool *out, char *err, size_t errlen);

/* model_type deepseek_v3, or deepseek_v2 if v2 (config_hf_deepseek.c): dims, MLA, rope
 * (YaRN) and routing. */
int hf_read_deepseek(const cJSON *cfg, bool v2, model_config *c, char *err, size_t errlen);

#endif
