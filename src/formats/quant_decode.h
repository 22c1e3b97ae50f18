/* Integer-form decoders (quant_traits.decode) of the types read through quant_iblock,
 * and their reference dequantisers (formats-internal). */
#ifndef INVAR_FORMATS_QUANT_DECODE_H
#define INVAR_FORMATS_QUANT_DECODE_H
#include <stdint.h>

#include "formats/quant.h"

#define QUANT_DECODED(X) X(q5_0) X(q5_1) X(q2_K) X(q3_K) X(q5_K) X(iq4_nl) X(iq4_xs) X(mxfp4)

#define QUANT_DECODE_DECL(t)                                        \
    void quant_decode_##t(const uint8_t *blk, quant_iblock *out);   \
    void dequant_##t(const uint8_t *x, float *y, int64_t nb);
QUANT_DECODED(QUANT_DECODE_DECL)
#undef QUANT_DECODE_DECL

/* quant_traits.codes of the types with at most 16 values of q. */
extern const int8_t quant_codes_iq4[16], quant_codes_mxfp4[16], quant_codes_q2_K[16], quant_codes_q3_K[16];

#endif
