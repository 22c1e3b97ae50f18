/* Block geometry of every ggml tensor type id we know, so the GGUF parser can
 * validate sizes even for types the engine cannot compute with. */
#include "formats/quant.h"

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");

typedef struct {
    const char *name;
    uint16_t block_elems; /* 0: unknown / retired id */
    uint16_t block_bytes;
    bool supported;
} type_info;

static const type_info k_types[] = {
    [0]  = {"F32", 1, 4, true},
    [1]  = {"F16", 1, 2, true},
    [2]  = {"Q4_0", 32, 18, true},
    [3]  = {"Q4_1", 32, 20, true},
    /* 4, 5: retired Q4_2 / Q4_3 */
    [6]  = {"Q5_0", 32, 22, false},
    [7]  = {"Q5_1", 32, 24, false},
    [8]  = {"Q8_0", 32, 34, true},
    [9]  = {"Q8_1", 32, 40, false},
    [10] = {"Q2_K", 256, 84, false},
    [11] = {"Q3_K", 256, 110, false},
    [12] = {"Q4_K", 256, 144, true},
    [13] = {"Q5_K", 256, 176, false},
    [14] = {"Q6_K", 256, 210, true},
    [15] = {"Q8_K", 256, 292, false},
    [16] = {"IQ2_XXS", 256, 66, false},
    [17] = {"IQ2_XS", 256, 74, false},
    [18] = {"IQ3_XXS", 256, 98, false},
    [19] = {"IQ1_S", 256, 50, false},
    [20] = {"IQ4_NL", 32, 18, false},
    [21] = {"IQ3_S", 256, 110, false},
    [22] = {"IQ2_S", 256, 82, false},
    [23] = {"IQ4_XS", 256, 136, false},
    [24] = {"I8", 1, 1, false},
    [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},
    [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},
    [29] = {"IQ1_M", 256, 56, false},
    [30] = {"BF16", 1, 2, true},
    /* 31..33: retired Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 (repacked at load time now) */
    [34] = {"TQ1_0", 256, 54, false},
    [35] = {"TQ2_0", 256, 66, false},
    /* 36..38: retired IQ4_NL_4_4 / _4_8 / _8_8 */
    [39] = {"MXFP4", 32, 17, false},
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
