#ifndef INVAR_ROPE_TABLE_H
#define INVAR_ROPE_TABLE_H
#include <stdint.h>
#include "formats/gguf.h"
#include "model/config.h"

/* The one RoPE table: cos/sin for every position and frequency, computed in double
 * once at load and shared by every token, so no path recomputes angles differently.
 * freq_factors (Llama-3 rope_freqs.weight) may be NULL. Returns malloc'd table. */
float *rope_table_build(const model_config *c, const float *freq_factors, int64_t n_pos);

#endif
