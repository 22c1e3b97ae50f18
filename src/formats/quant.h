/* Weight block formats (ggml type ids) and their reference dequantisation.
 * The dequant functions are the scalar ground truth the SIMD kernels are tested against. */
#ifndef INVAR_QUANT_H
#define INVAR_QUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    INVAR_T_F32 = 0, INVAR_T_F16 = 1, INVAR_T_Q4_0 = 2, INVAR_T_Q4_1 = 3,
    INVAR_T_Q5_0 = 6, INVAR_T_Q5_1 = 7, INVAR_T_Q8_0 = 8, INVAR_T_Q8_1 = 9,
    INVAR_T_Q2_K = 10, INVAR_T_Q3_K = 11, INVAR_T_Q4_K = 12, INVAR_T_Q5_K = 13,
    INVAR_T_Q6_K = 14, INVAR_T_Q8_K = 15, INVAR_T_IQ4_NL = 20, INVAR_T_IQ4_XS = 23,
    INVAR_T_BF16 = 30, INVAR_T_MXFP4 = 39
};

/* A weight block in integer form, the one shape every "decoded" type is read in (the
 * types with a quant_traits.decode): element e of the block is
 *     y[e] = (d * s[e/16]) * q[e] - (dmin * m[e/16])
 * with small integers q, s, m (types without a minimum: dmin = 0, m = 0; one scale per
 * 32 elements: s[2j] = s[2j+1]). It is the layout-specific part of such a type: the
 * reference dequantiser and the matmul's packing and reference sequence all start here,
 * and the float formula above is exactly gguf's per-type expression (see dequant.c). */
typedef struct {
    float d, dmin;
    int8_t q[256]; /* |q| <= 127 */
    int8_t s[16];  /* per 16 elements */
    int8_t m[16];
} quant_iblock;
typedef void (*quant_decode_fn)(const uint8_t *blk, quant_iblock *out);

/* One row per ggml type id: what every layer needs to know about a weight type. The
 * kernels keep their own table keyed by the same ids (kernels/cpu/matmul_traits.c) and
 * point into this one; adding a type is a row in each, and the tests iterate both. */
typedef struct {
    const char *name;
    uint16_t block_elems; /* 0: unknown or retired id (quant_traits_of gives NULL) */
    uint16_t block_bytes;
    /* Alignment (bytes) a tensor of this type must start at: its element or block struct's. */
    uint8_t align;
    /* Reference dequantisation of nb blocks (src any alignment); NULL: the engine cannot
     * compute with this type (the parser still validates its sizes). */
    void (*dequant)(const uint8_t *src, float *dst, int64_t nb);
    /* Integer form of one block (src any alignment), or NULL (types with their own
     * kernels and dequantiser). */
    quant_decode_fn decode;
    /* For a decoded type whose q takes at most 16 values: q by 4-bit code (16 entries), so
     * the matmul can hold one nibble a weight; NULL otherwise. */
    const int8_t *codes;
} quant_traits;

#define QUANT_TYPE_END 40 /* every known id is below this */
/* Indexed by id; an unknown id's row is all zero. Exposed so that other tables can point
 * at a row in their static initialisers; look ids up with quant_traits_of. */
extern const quant_traits quant_type_table[QUANT_TYPE_END];
/* The row of a known id, or NULL. */
const quant_traits *quant_traits_of(uint32_t type);

/* Conveniences over the table. */
/* Block geometry and name; false for unknown ids. Any out pointer may be NULL. */
bool quant_type_info(uint32_t type, size_t *block_elems, size_t *block_bytes, const char **name);
/* The type's name, or "unknown" (for error messages). */
const char *quant_type_name(uint32_t type);
/* Alignment of a tensor of this type (see quant_traits.align); 0 for unknown ids. */
size_t quant_type_align(uint32_t type);
/* True if dequant_row (and so the model) supports this type. */
bool quant_type_supported(uint32_t type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or type unknown. */
size_t quant_row_bytes(uint32_t type, int64_t n);
/* Reference dequantisation of one row of n elements (n multiple of the block size).
 * src may be unaligned. Unsupported types fill dst with NaN so misuse is visible. */
void dequant_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Q4_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed scale bytes. */
void quant_q4_K_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *mn);

/* fp16 conversions follow F16C (vcvtph2ps/vcvtps2ph) bit for bit, signalling NaNs
 * become quiet. bf16 keeps subnormals (unlike vcvtneps2bf16, which flushes them). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);    /* round to nearest even */
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);    /* round to nearest even */

/* ggml block layouts (little-endian, packed). */
typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;              /* 18 B / 32 */
typedef struct { uint16_t d, m; uint8_t qs[16]; } block_q4_1;           /* 20 B / 32 */
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;               /* 34 B / 32 */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K; /* 144 B / 256 */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } block_q5_K; /* 176 B / 256 */
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } block_q6_K; /* 210 B / 256 */

#endif
