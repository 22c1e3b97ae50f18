/* Helpers shared by the matmul tests: random valid weight rows of every supported
 * type, random activations, and a tiny deterministic PRNG. */
#ifndef TEST_MATMUL_COMMON_H
#define TEST_MATMUL_COMMON_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"

static const uint32_t mm_test_types[] = {INVAR_T_F32,  INVAR_T_F16,  INVAR_T_BF16, INVAR_T_Q8_0,
                                         INVAR_T_Q4_0, INVAR_T_Q4_1, INVAR_T_Q4_K, INVAR_T_Q6_K};
#define MM_N_TYPES (sizeof mm_test_types / sizeof mm_test_types[0])

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

static int64_t mm_block_elems(uint32_t type) {
    return type == INVAR_T_Q4_K || type == INVAR_T_Q6_K ? 256
           : (type == INVAR_T_F32 || type == INVAR_T_F16 || type == INVAR_T_BF16) ? 1 : 32;
}

static size_t mm_row_bytes(uint32_t type, int64_t k) {
    switch (type) {
    case INVAR_T_F32: return (size_t)k * 4;
    case INVAR_T_F16: case INVAR_T_BF16: return (size_t)k * 2;
    case INVAR_T_Q8_0: return (size_t)(k / 32) * sizeof(block_q8_0);
    case INVAR_T_Q4_0: return (size_t)(k / 32) * sizeof(block_q4_0);
    case INVAR_T_Q4_1: return (size_t)(k / 32) * sizeof(block_q4_1);
    case INVAR_T_Q4_K: return (size_t)(k / 256) * sizeof(block_q4_K);
    case INVAR_T_Q6_K: return (size_t)(k / 256) * sizeof(block_q6_K);
    default: return 0;
    }
}

/* Moderate positive fp16 scale. */
static uint16_t mm_rand_scale(float lo, float hi) {
    float u = (mm_randf() + 1.0f) * 0.5f;
    return f32_to_fp16(lo + (hi - lo) * u);
}

static void mm_fill_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)mm_rand();
}

/* n random rows of k weights (all quants random, scales moderate). */
static void *mm_make_weights(uint32_t type, int64_t n, int64_t k) {
    const size_t rb = mm_row_bytes(type, k);
    uint8_t *W = malloc(rb * (size_t)n);
    for (int64_t j = 0; j < n; j++) {
        uint8_t *row = W + rb * (size_t)j;
        switch (type) {
        case INVAR_T_F32:
            for (int64_t i = 0; i < k; i++) ((float *)row)[i] = mm_randf();
            break;
        case INVAR_T_F16:
            for (int64_t i = 0; i < k; i++) { uint16_t h = f32_to_fp16(mm_randf()); memcpy(row + 2 * i, &h, 2); }
            break;
        case INVAR_T_BF16:
            for (int64_t i = 0; i < k; i++) { uint16_t h = f32_to_bf16(mm_randf()); memcpy(row + 2 * i, &h, 2); }
            break;
        case INVAR_T_Q8_0:
            for (int64_t b = 0; b < k / 32; b++) {
                block_q8_0 *B = (block_q8_0 *)row + b;
                mm_fill_bytes((uint8_t *)B->qs, 32); /* includes -128 */
                B->d = mm_rand_scale(0.002f, 0.01f);
            }
            break;
        case INVAR_T_Q4_0:
            for (int64_t b = 0; b < k / 32; b++) {
                block_q4_0 *B = (block_q4_0 *)row + b;
                mm_fill_bytes(B->qs, 16);
                B->d = mm_rand_scale(0.01f, 0.15f);
            }
            break;
        case INVAR_T_Q4_1:
            for (int64_t b = 0; b < k / 32; b++) {
                block_q4_1 *B = (block_q4_1 *)row + b;
                mm_fill_bytes(B->qs, 16);
                B->d = mm_rand_scale(0.01f, 0.15f);
                B->m = f32_to_fp16(-fp16_to_f32(B->d) * (float)(mm_rand() % 16));
            }
            break;
        case INVAR_T_Q4_K:
            for (int64_t b = 0; b < k / 256; b++) {
                block_q4_K *B = (block_q4_K *)row + b;
                mm_fill_bytes(B->qs, 128);
                mm_fill_bytes(B->scales, 12);
                B->d = mm_rand_scale(0.0005f, 0.003f);
                B->dmin = mm_rand_scale(0.0005f, 0.003f);
            }
            break;
        case INVAR_T_Q6_K:
            for (int64_t b = 0; b < k / 256; b++) {
                block_q6_K *B = (block_q6_K *)row + b;
                mm_fill_bytes(B->ql, 128);
                mm_fill_bytes(B->qh, 64);
                mm_fill_bytes((uint8_t *)B->scales, 16); /* includes -128 */
                B->d = mm_rand_scale(0.0002f, 0.001f);
            }
            break;
        default: break;
        }
    }
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
