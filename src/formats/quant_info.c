/* Block geometry of every ggml tensor type id we know, so the GGUF parser can
 * validate sizes even for types the engine cannot compute with. */
#include "formats/quant.h"

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");

/* align: the alignment the element or block struct needs where the kernels read it in
 * place (a multiple of it is what every tensor's data must start at). Blocks of ggml's
 * fp16 scale + bytes layout need 2; types with float / int32 / 64-bit fields more. */
typedef struct {
    const char *name;
    uint16_t block_elems; /* 0: unknown / retired id */
    uint16_t block_bytes;
    uint8_t align;
    bool supported;
} type_info;

#define A_HALF 2 /* a block that starts with or holds a uint16_t fp16 scale */
_Static_assert(_Alignof(block_q4_0) == A_HALF && _Alignof(block_q4_1) == A_HALF &&
                   _Alignof(block_q8_0) == A_HALF && _Alignof(block_q4_K) == A_HALF &&
                   _Alignof(block_q6_K) == A_HALF,
               "block alignment");

static const type_info k_types[] = {
    [0]  = {"F32", 1, 4, _Alignof(float), true},
    [1]  = {"F16", 1, 2, _Alignof(uint16_t), true},
    [2]  = {"Q4_0", 32, 18, A_HALF, true},
    [3]  = {"Q4_1", 32, 20, A_HALF, true},
    /* 4, 5: retired Q4_2 / Q4_3 */
    [6]  = {"Q5_0", 32, 22, A_HALF, false},
    [7]  = {"Q5_1", 32, 24, A_HALF, false},
    [8]  = {"Q8_0", 32, 34, A_HALF, true},
    [9]  = {"Q8_1", 32, 40, A_HALF, false},
    [10] = {"Q2_K", 256, 84, A_HALF, false},
    [11] = {"Q3_K", 256, 110, A_HALF, false},
    [12] = {"Q4_K", 256, 144, A_HALF, true},
    [13] = {"Q5_K", 256, 176, A_HALF, false},
    [14] = {"Q6_K", 256, 210, A_HALF, true},
    [15] = {"Q8_K", 256, 292, 4, false}, /* float scale */
    [16] = {"IQ2_XXS", 256, 66, A_HALF, false},
    [17] = {"IQ2_XS", 256, 74, A_HALF, false},
    [18] = {"IQ3_XXS", 256, 98, A_HALF, false},
    [19] = {"IQ1_S", 256, 50, A_HALF, false},
    [20] = {"IQ4_NL", 32, 18, A_HALF, false},
    [21] = {"IQ3_S", 256, 110, A_HALF, false},
    [22] = {"IQ2_S", 256, 82, A_HALF, false},
    [23] = {"IQ4_XS", 256, 136, A_HALF, false},
    [24] = {"I8", 1, 1, 1, false},
    [25] = {"I16", 1, 2, 2, false},
    [26] = {"I32", 1, 4, 4, false},
    [27] = {"I64", 1, 8, 8, false},
    [28] = {"F64", 1, 8, 8, false},
    [29] = {"IQ1_M", 256, 56, A_HALF, false},
    [30] = {"BF16", 1, 2, _Alignof(uint16_t), true},
    /* 31..33: retired Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 (repacked at load time now) */
    [34] = {"TQ1_0", 256, 54, A_HALF, false},
    [35] = {"TQ2_0", 256, 66, A_HALF, false},
    /* 36..38: retired IQ4_NL_4_4 / _4_8 / _8_8 */
    [39] = {"MXFP4", 32, 17, 1, false}, /* a byte exponent + bytes */
};

static const type_info *lookup(uint32_t type) {
    if (type >= sizeof k_types / sizeof k_types[0]) return NULL;
    const type_info *t = &k_types[type];
    return t->block_elems ? t : NULL;
}

bool quant_type_info(uint32_t type, size_t *block_elems, size_t *block_bytes, const char **name) {
    const type_info *t = lookup(type);
    if (!t) return false;
    if (block_elems) *block_elems = t->block_elems;
    if (block_bytes) *block_bytes = t->block_bytes;
    if (name) *name = t->name;
    return true;
}

size_t quant_type_align(uint32_t type) {
    const type_info *t = lookup(type);
    return t ? t->align : 0;
}

bool quant_type_supported(uint32_t type) {
    const type_info *t = lookup(type);
    return t && t->supported;
}

size_t quant_row_bytes(uint32_t type, int64_t n) {
    const type_info *t = lookup(type);
    if (!t || n <= 0 || n % t->block_elems != 0) return 0;
    uint64_t blocks = (uint64_t)n / t->block_elems;
    if (blocks > SIZE_MAX / t->block_bytes) return 0;
    return (size_t)blocks * t->block_bytes;
}
