/* Helpers shared by the matmul tests: the weight types under test (every type with a
 * row in the kernel table), random valid weight rows of each, random activations, and a
 * tiny deterministic PRNG. */
#ifndef TEST_MATMUL_COMMON_H
#define TEST_MATMUL_COMMON_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"

/* Every type cpu_matmul supports, in id order: a type added to the kernel table is
 * tested by every matmul test (it needs a generator in mm_gen below). */
typedef struct {
    uint32_t id[QUANT_TYPE_END];
    size_t n;
} mm_type_list;

static mm_type_list mm_types(void) {
    mm_type_list l = {{0}, 0};
    for (uint32_t t = 0; t < QUANT_TYPE_END; t++)
        if (cpu_matmul_supports(t)) l.id[l.n++] = t;
    return l;
}

static uint64_t mm_rng_state = 0x9E3779B97F4A7C15ull;
static void mm_seed(uint64_t s) { mm_rng_state = s * 0x9E3779B97F4A7C15ull + 1; }
static uint32_t mm_rand(void) {
    mm_rng_state ^= mm_rng_state << 13;
    mm_rng_state ^= mm_rng_state >> 7;
    mm_rng_state ^= mm_rng_state << 17;
    return (uint32_t)(mm_rng_state >> 16);
}
/* Uniform in [-1, 1). */
static float mm_randf(void) { return (float)(mm_rand() & 0xFFFFFF) / 8388608.0f - 1.0f; }

static int64_t mm_block_elems(uint32_t type) { return quant_traits_of(type)->block_elems; }
static size_t mm_row_bytes(uint32_t type, int64_t k) { return quant_row_bytes(type, k); }

/* Moderate positive fp16 scale. */
static uint16_t mm_rand_scale(float lo, float hi) {
    float u = (mm_randf() + 1.0f) * 0.5f;
    return f32_to_fp16(lo + (hi - lo) * u);
}

static void mm_fill_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)mm_rand();
}

/* One random row of k weights of each type: all quants random, scales moderate. */
typedef void (*mm_gen_fn)(uint8_t *row, int64_t k);

static void mm_gen_f32(uint8_t *row, int64_t k) {
    for (int64_t i = 0; i < k; i++) ((float *)row)[i] = mm_randf();
}

static void mm_gen_f16(uint8_t *row, int64_t k) {
    for (int64_t i = 0; i < k; i++) { uint16_t h = f32_to_fp16(mm_randf()); memcpy(row + 2 * i, &h, 2); }
}

static void mm_gen_bf16(uint8_t *row, int64_t k) {
    for (int64_t i = 0; i < k; i++) { uint16_t h = f32_to_bf16(mm_randf()); memcpy(row + 2 * i, &h, 2); }
}

static void mm_gen_q8_0(uint8_t *row, int64_t k) {
    for (int64_t b = 0; b < k / 32; b++) {
        block_q8_0 *B = (block_q8_0 *)row + b;
        mm_fill_bytes((uint8_t *)B->qs, 32); /* includes -128 */
        B->d = mm_rand_scale(0.002f, 0.01f);
    }
}

static void mm_gen_q4_0(uint8_t *row, int64_t k) {
    for (int64_t b = 0; b < k / 32; b++) {
        block_q4_0 *B = (block_q4_0 *)row + b;
        mm_fill_bytes(B->qs, 16);
        B->d = mm_rand_scale(0.01f, 0.15f);
    }
}

static void mm_gen_q4_1(uint8_t *row, int64_t k) {
    for (int64_t b = 0; b < k / 32; b++) {
        block_q4_1 *B = (block_q4_1 *)row + b;
        mm_fill_bytes(B->qs, 16);
        B->d = mm_rand_scale(0.01f, 0.15f);
        B->m = f32_to_fp16(-fp16_to_f32(B->d) * (float)(mm_rand() % 16));
    }
}

static void mm_gen_q4_K(uint8_t *row, int64_t k) {
    for (int64_t b = 0; b < k / 256; b++) {
        block_q4_K *B = (block_q4_K *)row + b;
        mm_fill_bytes(B->qs, 128);
        mm_fill_bytes(B->scales, 12);
        B->d = mm_rand_scale(0.0005f, 0.003f);
        B->dmin = mm_rand_scale(0.0005f, 0.003f);
    }
}

static void mm_gen_q6_K(uint8_t *row, int64_t k) {
    for (int64_t b = 0; b < k / 256; b++) {
        block_q6_K *B = (block_q6_K *)row + b;
        mm_fill_bytes(B->ql, 128);
        mm_fill_bytes(B->qh, 64);
        mm_fill_bytes((uint8_t *)B->scales, 16); /* includes -128 */
        B->d = mm_rand_scale(0.0002f, 0.001f);
    }
}

/* Decoded types: every quant and scale bit random, then the float scales set moderate. */
static void mm_put_scale(uint8_t *p, float lo, float hi) {
    uint16_t h = mm_rand_scale(lo, hi);
    memcpy(p, &h, 2);
}

static void mm_gen_decoded(uint8_t *row, int64_t k, uint32_t type) {
    const quant_traits *t = quant_traits_of(type);
    for (int64_t b = 0; b < k / t->block_elems; b++) {
        uint8_t *B = row + (size_t)b * t->block_bytes;
        mm_fill_bytes(B, t->block_bytes);
        switch (type) {
        case INVAR_T_Q5_0: mm_put_scale(B, 0.005f, 0.05f); break;
        case INVAR_T_Q5_1: {
            mm_put_scale(B, 0.005f, 0.05f);
            uint16_t d, m;
            memcpy(&d, B, 2);
            m = f32_to_fp16(-fp16_to_f32(d) * (float)(mm_rand() % 32));
            memcpy(B + 2, &m, 2);
            break;
        }
        case INVAR_T_IQ4_NL: mm_put_scale(B, 0.0005f, 0.005f); break;
        case INVAR_T_MXFP4: B[0] = (uint8_t)(118 + mm_rand() % 6); break;
        case INVAR_T_Q2_K: mm_put_scale(B + 80, 0.001f, 0.01f); mm_put_scale(B + 82, 0.001f, 0.01f); break;
        case INVAR_T_Q3_K: mm_put_scale(B + 108, 0.0005f, 0.003f); break;
        case INVAR_T_Q5_K: mm_put_scale(B, 0.0005f, 0.003f); mm_put_scale(B + 2, 0.0005f, 0.003f); break;
        case INVAR_T_IQ4_XS: mm_put_scale(B, 0.00005f, 0.0003f); break;
        default: abort();
        }
    }
}
#define MM_GEN_DECODED(t, T) \
    static void mm_gen_##t(uint8_t *row, int64_t k) { mm_gen_decoded(row, k, INVAR_T_##T); }
MM_GEN_DECODED(q5_0, Q5_0)
MM_GEN_DECODED(q5_1, Q5_1)
MM_GEN_DECODED(iq4_nl, IQ4_NL)
MM_GEN_DECODED(mxfp4, MXFP4)
MM_GEN_DECODED(q2_K, Q2_K)
MM_GEN_DECODED(q3_K, Q3_K)
MM_GEN_DECODED(q5_K, Q5_K)
MM_GEN_DECODED(iq4_xs, IQ4_XS)

static const mm_gen_fn mm_gen[QUANT_TYPE_END] = {
    [INVAR_T_F32] = mm_gen_f32,   [INVAR_T_F16] = mm_gen_f16,   [INVAR_T_BF16] = mm_gen_bf16,
    [INVAR_T_Q8_0] = mm_gen_q8_0, [INVAR_T_Q4_0] = mm_gen_q4_0, [INVAR_T_Q4_1] = mm_gen_q4_1,
    [INVAR_T_Q4_K] = mm_gen_q4_K, [INVAR_T_Q6_K] = mm_gen_q6_K,
    [INVAR_T_Q5_0] = mm_gen_q5_0, [INVAR_T_Q5_1] = mm_gen_q5_1, [INVAR_T_IQ4_NL] = mm_gen_iq4_nl,
    [INVAR_T_MXFP4] = mm_gen_mxfp4, [INVAR_T_Q2_K] = mm_gen_q2_K, [INVAR_T_Q3_K] = mm_gen_q3_K,
    [INVAR_T_Q5_K] = mm_gen_q5_K, [INVAR_T_IQ4_XS] = mm_gen_iq4_xs,
};

/* n random rows of k weights. A type without a generator stops the test: every type
 * the matmul supports must be tested. */
static void *mm_make_weights(uint32_t type, int64_t n, int64_t k) {
    if (type >= QUANT_TYPE_END || !mm_gen[type]) {
        fprintf(stderr, "test_matmul_common.h: no weight generator for type %s (%u)\n", quant_type_name(type), type);
        abort();
    }
    const size_t rb = mm_row_bytes(type, k);
    uint8_t *W = malloc(rb * (size_t)n);
    if (!W) abort();
    for (int64_t j = 0; j < n; j++) mm_gen[type](W + rb * (size_t)j, k);
    return W;
}

/* Activation row with varied block magnitudes, some all-zero or tiny blocks. */
static void mm_make_row(float *x, int64_t k) {
    for (int64_t b0 = 0; b0 < k; b0 += 32) {
        uint32_t kind = mm_rand() % 16;
        float scale = kind == 0 ? 0.0f : kind == 1 ? 1e-6f : kind == 2 ? 50.0f : 1.0f;
        for (int64_t i = b0; i < b0 + 32 && i < k; i++) x[i] = scale * mm_randf();
        if (kind == 3 && b0 + 5 < k) x[b0 + 5] = 8.0f; /* one outlier */
    }
}

#endif
