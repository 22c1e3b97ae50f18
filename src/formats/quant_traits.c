/* The weight type table: block geometry of every ggml tensor type id we know (so the
 * GGUF parser can validate sizes even for types the engine cannot compute with) and
 * the reference dequantiser of those it can. */
#include "formats/quant.h"

#include "formats/dequant.h"
#include "formats/quant_decode.h"

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");

/* align: the alignment the element or block struct needs where the kernels read it in
 * place (a multiple of it is what every tensor's data must start at). Blocks of ggml's
 * fp16 scale + bytes layout need 2; types with float / int32 / 64-bit fields more. */
#define A_HALF 2 /* a block that starts with or holds a uint16_t fp16 scale */
_Static_assert(_Alignof(block_q4_0) == A_HALF && _Alignof(block_q4_1) == A_HALF &&
                   _Alignof(block_q8_0) == A_HALF && _Alignof(block_q4_K) == A_HALF &&
                   _Alignof(block_q6_K) == A_HALF,
               "block alignment");

/* Types the engine computes with; the others carry no dequantiser. */
#define BLOCK(T) sizeof(block_##T), A_HALF, dequant_##T, NULL, NULL
/* Types read through their integer form (quant_decode.c). */
#define DECODED(t, bytes, align) bytes, align, dequant_##t, quant_decode_##t, NULL
/* ... whose q takes at most 16 values, listed by code. */
#define DECODED16(t, bytes, align, codes) bytes, align, dequant_##t, quant_decode_##t, codes

const quant_traits quant_type_table[QUANT_TYPE_END] = {
    [0]  = {"F32", 1, 4, _Alignof(float), dequant_f32, NULL, NULL},
    [1]  = {"F16", 1, 2, _Alignof(uint16_t), dequant_f16, NULL, NULL},
    [2]  = {"Q4_0", 32, BLOCK(q4_0)},
    [3]  = {"Q4_1", 32, BLOCK(q4_1)},
    /* 4, 5: retired Q4_2 / Q4_3 */
    [6]  = {"Q5_0", 32, DECODED(q5_0, 22, A_HALF)},
    [7]  = {"Q5_1", 32, DECODED(q5_1, 24, A_HALF)},
    [8]  = {"Q8_0", 32, BLOCK(q8_0)},
    /* ggml's block_q8_1 (fp16 d, fp16 s = d * sum(q), 32 int8) is 36 bytes; it began as
     * two floats (40), which gguf-py's size table still lists. ggml uses it only for
     * activations, so no file holds it; invar's own int8 activations are mm_xq. */
    [9]  = {"Q8_1", 32, 36, A_HALF, NULL, NULL, NULL},
    [10] = {"Q2_K", 256, DECODED16(q2_K, 84, A_HALF, quant_codes_q2_K)},
    [11] = {"Q3_K", 256, DECODED16(q3_K, 110, A_HALF, quant_codes_q3_K)},
    [12] = {"Q4_K", 256, BLOCK(q4_K)},
    [13] = {"Q5_K", 256, DECODED(q5_K, 176, A_HALF)},
    [14] = {"Q6_K", 256, BLOCK(q6_K)},
    [15] = {"Q8_K", 256, 292, 4, NULL, NULL, NULL}, /* float scale */
    [16] = {"IQ2_XXS", 256, 66, A_HALF, NULL, NULL, NULL},
    [17] = {"IQ2_XS", 256, 74, A_HALF, NULL, NULL, NULL},
    [18] = {"IQ3_XXS", 256, 98, A_HALF, NULL, NULL, NULL},
    [19] = {"IQ1_S", 256, 50, A_HALF, NULL, NULL, NULL},
    [20] = {"IQ4_NL", 32, DECODED16(iq4_nl, 18, A_HALF, quant_codes_iq4)},
    [21] = {"IQ3_S", 256, 110, A_HALF, NULL, NULL, NULL},
    [22] = {"IQ2_S", 256, 82, A_HALF, NULL, NULL, NULL},
    [23] = {"IQ4_XS", 256, DECODED16(iq4_xs, 136, A_HALF, quant_codes_iq4)},
    [24] = {"I8", 1, 1, 1, NULL, NULL, NULL},
    [25] = {"I16", 1, 2, 2, NULL, NULL, NULL},
    [26] = {"I32", 1, 4, 4, NULL, NULL, NULL},
    [27] = {"I64", 1, 8, 8, NULL, NULL, NULL},
    [28] = {"F64", 1, 8, 8, NULL, NULL, NULL},
    [29] = {"IQ1_M", 256, 56, A_HALF, NULL, NULL, NULL},
    [30] = {"BF16", 1, 2, _Alignof(uint16_t), dequant_bf16, NULL, NULL},
    /* 31..33: retired Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 (repacked at load time now) */
    [34] = {"TQ1_0", 256, 54, A_HALF, NULL, NULL, NULL},
    [35] = {"TQ2_0", 256, 66, A_HALF, NULL, NULL, NULL},
    /* 36..38: retired IQ4_NL_4_4 / _4_8 / _8_8 */
    [39] = {"MXFP4", 32, DECODED16(mxfp4, 17, 1, quant_codes_mxfp4)}, /* a byte exponent + bytes */
};

const quant_traits *quant_traits_of(uint32_t type) {
    if (type >= QUANT_TYPE_END) return NULL;
    const quant_traits *t = &quant_type_table[type];
    return t->block_elems ? t : NULL;
}

bool quant_type_info(uint32_t type, size_t *block_elems, size_t *block_bytes, const char **name) {
    const quant_traits *t = quant_traits_of(type);
    if (!t) return false;
    if (block_elems) *block_elems = t->block_elems;
    if (block_bytes) *block_bytes = t->block_bytes;
    if (name) *name = t->name;
    return true;
}

const char *quant_type_name(uint32_t type) {
    const quant_traits *t = quant_traits_of(type);
    return t ? t->name : "unknown";
}

size_t quant_type_align(uint32_t type) {
    const quant_traits *t = quant_traits_of(type);
    return t ? t->align : 0;
}

bool quant_type_supported(uint32_t type) {
    const quant_traits *t = quant_traits_of(type);
    return t && t->dequant;
}

size_t quant_row_bytes(uint32_t type, int64_t n) {
    const quant_traits *t = quant_traits_of(type);
    if (!t || n <= 0 || n % t->block_elems != 0) return 0;
    uint64_t blocks = (uint64_t)n / t->block_elems;
    if (blocks > SIZE_MAX / t->block_bytes) return 0;
    return (size_t)blocks * t->block_bytes;
}
