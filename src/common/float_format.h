/* float32 as JSON number text that reads back as the same float32 (logprobs are compared as
 * printed, so the text must carry every bit). */
#ifndef INVAR_COMMON_FLOAT_FORMAT_H
#define INVAR_COMMON_FLOAT_FORMAT_H
#include <stddef.h>

/* The fewest significant digits (6 to 9) that strtof reads back as v; +-inf as +-1e309
 * (JSON has no infinity; a JSON reader gives +-inf back). */
void format_f32(char *buf, size_t cap, float v);

#endif
