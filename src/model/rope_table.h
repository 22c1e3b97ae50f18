#ifndef INVAR_ROPE_TABLE_H
#define INVAR_ROPE_TABLE_H
#include <stdint.h>
#include "formats/gguf.h"
#include "model/config.h"

/* The one RoPE table: cos/sin for every position and frequency, computed in double
 * once at load and shared by every token, so no path recomputes angles differently.
 * freq_factors (Llama-3 rope_freqs.weight) may be NULL. Returns malloc'd table. */
float *rope_table_build(const model_config *c, const float *freq_factors, int64_t n_pos);

/* The n_rot/2 factors of Llama-3.1 rope scaling (c->rope_llama3), rounded to float as a GGUF's
 * rope_freqs.weight stores them: frequency i is divided by out[i]. Wavelengths shorter than
 * original_ctx / high_freq_factor keep 1, longer than original_ctx / low_freq_factor take
 * factor, and the band between blends the two smoothly. */
void rope_llama3_factors(const model_config *c, float *out);

#endif
