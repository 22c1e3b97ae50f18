/* The kernel table: per weight type, how its weights are packed, how its activations
 * are prepared, and the kernel of each ISA. The block geometry comes from formats'
 * table (a row of quant_type_table). A type absent here is refused by cpu_weight_view.
 * Adding a type: its formats row and dequantiser, a row here with at least a scalar
 * kernel (the unit sequence and pack function for a quantised type), and a weight
 * generator in tests/unit/test_matmul_common.h; the matmul tests then cover it. */
#include "formats/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"

_Static_assert(CPU_ISA_SCALAR == 0 && CPU_ISA_AVX2 == 1 && CPU_ISA_AVX512 == 2 && MM_N_ISA == 3,
               "run[] is indexed by cpu_isa");

#define TYPE(T) .q = &quant_type_table[INVAR_T_##T]
#define RUN(t) .run = {mm_scalar_##t, mm_avx2_##t, mm_avx512_##t}
#define FLOAT(T, t) [INVAR_T_##T] = {TYPE(T), .quantised = 0, .rec_bytes = MM_FREC(INVAR_T_##T), RUN(t)}
#define QUANT(T, t, rec, ...) \
    [INVAR_T_##T] = {TYPE(T), .quantised = 1, .rec_bytes = rec, .pack = mm_pack_##t, .unit = mm_unit_##t, RUN(t), __VA_ARGS__}

static const mm_kernel k_kernels[QUANT_TYPE_END] = {
    FLOAT(F32, f32),
    FLOAT(F16, f16),
    FLOAT(BF16, bf16),
    /* Panel aux: Q4_0's nibbles and Q8_0's (w ^ 0x80) bytes carry an offset of 8 / 128. */
    QUANT(Q8_0, q8_0, MM_REC_Q8_0, .panel = MM_PANEL_OFFSET, .panel_offset = -128),
    QUANT(Q4_0, q4_0, MM_REC_Q4_0, .panel = MM_PANEL_OFFSET, .panel_offset = -8),
    QUANT(Q4_1, q4_1, MM_REC_Q4_1, .panel = MM_PANEL_SUM),
    /* K-quants: panels from 2 rows; one row (decode) keeps the row layout, which their
     * one-row kernels stream faster. Q6_K's quants carry an offset of 32 per half. */
    QUANT(Q4_K, q4_K, MM_REC_Q4_K, .panel = MM_PANEL_SUM, .panel_min_m = 2),
    QUANT(Q5_K, q5_K, MM_REC_Q5_K, .panel = MM_PANEL_SUM, .panel_min_m = 2),
    QUANT(Q6_K, q6_K, MM_REC_Q6_K, .panel = MM_PANEL_HALVES, .panel_offset = -32, .panel_min_m = 2),
    /* The decoded types share one record layout and kernel per form and unit size; panels
     * from 2 rows, as the K-quants, their bytes carrying the offset 128 (per half where the
     * halves have their own scales, per block for the ONE types). */
#define DECODED(t, T, UE, NIB, ONE, NOMIN)                                                        \
    QUANT(T, t, MM_REC_DECODED(UE, NIB, ONE, NOMIN), .panel = (ONE) ? MM_PANEL_WHOLE : MM_PANEL_HALVES, \
          .panel_offset = -128, .panel_min_m = 2),
    MM_DECODED(DECODED)
#undef DECODED
};

const mm_kernel *mm_kernel_of(uint32_t type) {
    if (type >= QUANT_TYPE_END) return NULL;
    const mm_kernel *k = &k_kernels[type];
    return k->run[CPU_ISA_SCALAR] ? k : NULL;
}
