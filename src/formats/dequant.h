/* The reference dequantisers behind quant_traits.dequant (formats-internal): nb blocks
 * from src (any alignment) to nb * block_elems floats. */
#ifndef INVAR_FORMATS_DEQUANT_H
#define INVAR_FORMATS_DEQUANT_H
#include <stdint.h>

void dequant_f32(const uint8_t *x, float *y, int64_t nb);
void dequant_f16(const uint8_t *x, float *y, int64_t nb);
void dequant_bf16(const uint8_t *x, float *y, int64_t nb);
void dequant_q8_0(const uint8_t *x, float *y, int64_t nb);
void dequant_q4_0(const uint8_t *x, float *y, int64_t nb);
void dequant_q4_1(const uint8_t *x, float *y, int64_t nb);
void dequant_q4_K(const uint8_t *x, float *y, int64_t nb);
void dequant_q6_K(const uint8_t *x, float *y, int64_t nb);

#endif
