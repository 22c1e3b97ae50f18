/* Weight formats: type table, fp16/bf16 conversions (exhaustive or boundary-exhaustive,
 * and against the F16C instructions when present), reference dequantisation of each
 * supported block type against blocks packed here from an independent statement of
 * the layout.
 *
 * Also a helper mode for tests/python/test_quant_reference.py:
 *   test_quant --dump-gguf IN.gguf OUT.f32
 * dequantises every tensor of IN (tensor order, row after row) to raw float32. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/quant.h"

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { /* xorshift64*: deterministic test data */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

/* ---- type table -------------------------------------------------------------------------- */

static void test_type_info(void **state) {
    (void)state;
    static const struct { uint32_t id; size_t be, bb; const char *name; bool sup; } want[] = {
        {0, 1, 4, "F32", true}, {1, 1, 2, "F16", true}, {2, 32, 18, "Q4_0", true},
        {3, 32, 20, "Q4_1", true}, {6, 32, 22, "Q5_0", true}, {7, 32, 24, "Q5_1", true},
        {8, 32, 34, "Q8_0", true}, {9, 32, 36, "Q8_1", false}, {10, 256, 84, "Q2_K", true},
        {11, 256, 110, "Q3_K", true}, {12, 256, 144, "Q4_K", true}, {13, 256, 176, "Q5_K", true},
        {14, 256, 210, "Q6_K", true}, {15, 256, 292, "Q8_K", false}, {16, 256, 66, "IQ2_XXS", false},
        {20, 32, 18, "IQ4_NL", true}, {23, 256, 136, "IQ4_XS", true}, {28, 1, 8, "F64", false},
        {29, 256, 56, "IQ1_M", false}, {30, 1, 2, "BF16", true}, {39, 32, 17, "MXFP4", true},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t be = 0, bb = 0;
        const char *name = NULL;
        assert_true(quant_type_info(want[i].id, &be, &bb, &name));
        assert_int_equal(be, want[i].be);
        assert_int_equal(bb, want[i].bb);
        assert_string_equal(name, want[i].name);
        assert_int_equal(quant_type_supported(want[i].id), want[i].sup);
    }
    assert_true(quant_type_info(INVAR_T_Q4_K, NULL, NULL, NULL));
    static const uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_false(quant_type_info(unknown[i], NULL, NULL, NULL));
        assert_false(quant_type_supported(unknown[i]));
        assert_int_equal(quant_row_bytes(unknown[i], 256), 0);
    }
}

/* Properties every row of the table must have, so a new row is checked as it is added. */
static void test_table_rows(void **state) {
    (void)state;
    int known = 0, supported = 0;
    for (uint32_t id = 0; id < QUANT_TYPE_END + 3; id++) {
        const quant_traits *t = quant_traits_of(id);
        size_t be = 0, bb = 0;
        const char *name = NULL;
        assert_int_equal(quant_type_info(id, &be, &bb, &name), t != NULL);
        if (!t) {
            assert_int_equal(quant_type_align(id), 0);
            assert_false(quant_type_supported(id));
            assert_string_equal(quant_type_name(id), "unknown");
            continue;
        }
        known++;
        assert_true(id < QUANT_TYPE_END && t == &quant_type_table[id]);
        assert_true(be == t->block_elems && bb == t->block_bytes && name == t->name);
        assert_string_equal(quant_type_name(id), t->name);
        assert_true(t->name[0] != '\0');
        for (uint32_t other = 0; other < id; other++) /* names identify types in messages */
            if (quant_traits_of(other)) assert_string_not_equal(quant_traits_of(other)->name, t->name);
        assert_true(t->block_bytes > 0);
        /* a power of two that divides the block, so every block of a row stays aligned */
        assert_true(t->align > 0 && (t->align & (t->align - 1)) == 0 && t->block_bytes % t->align == 0);
        assert_int_equal(quant_type_align(id), t->align);
        assert_int_equal(quant_type_supported(id), t->dequant != NULL);
        assert_int_equal(quant_row_bytes(id, 3 * (int64_t)t->block_elems), 3 * (size_t)t->block_bytes);
        supported += t->dequant != NULL;
    }
    assert_int_equal(known, 32);
    assert_int_equal(supported, 16);
}

static void test_row_bytes(void **state) {
    (void)state;
    assert_int_equal(quant_row_bytes(INVAR_T_Q4_1, 576), 576 / 32 * 20);
    assert_int_equal(quant_row_bytes(INVAR_T_Q8_0, 576), 576 / 32 * 34);
    assert_int_equal(quant_row_bytes(INVAR_T_F32, 3), 12);
    assert_int_equal(quant_row_bytes(INVAR_T_Q6_K, 512), 420);
    assert_int_equal(quant_row_bytes(INVAR_T_Q4_K, 255), 0);
    assert_int_equal(quant_row_bytes(INVAR_T_Q4_0, 48), 0);
    assert_int_equal(quant_row_bytes(INVAR_T_F32, 0), 0);
    assert_int_equal(quant_row_bytes(INVAR_T_F32, -4), 0);
    assert_int_equal(quant_row_bytes(28 /* F64 */, INT64_MAX), 0); /* overflow */
}

/* ---- fp16 / bf16 --------------------------------------------------------------------------- */

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
/* cpuid rather than __builtin_cpu_supports("f16c"), which clang 14 does not know. F16C
 * is VEX-encoded, so the OS must also save AVX state (OSXSAVE + XCR0 bits 1-2). */
static bool have_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    if (!(c & bit_F16C) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return false;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

/* binary16 value by definition, in double */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

static void test_fp16_to_f32_exhaustive(void **state) {
    (void)state;
    bool hw = have_f16c();
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_f32((uint16_t)h);
        if (((h >> 10) & 31) == 31) {
            if (h & 1023) { /* NaN: quiet, payload kept */
                uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 1023u) << 13);
                assert_int_equal(fbits(f), want);
            } else {
                assert_true(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
            }
        } else {
            assert_true((double)f == half_value((uint16_t)h));
            assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0); /* -0 stays -0 */
        }
        if (hw) assert_int_equal(fbits(f), fbits(hw_h2f((uint16_t)h)));
    }
}

static void test_f32_to_fp16_rounding(void **state) {
    (void)state;
    for (uint32_t s = 0; s < 2; s++) {
        for (uint32_t h = 0; h < 0x7c00; h++) {
            uint16_t hs = (uint16_t)(h | s << 15);
            float f = fp16_to_f32(hs);
            assert_int_equal(f32_to_fp16(f), hs); /* round trip */
            /* the midpoint to the next half up (0x7c00 = 65536 would be the next binade) */
            double next = h + 1 == 0x7c00 ? 65536.0 : fabs(half_value((uint16_t)(h + 1)));
            double mid = (fabs((double)f) + next) / 2;
            float fm = (float)mid; /* exact: 12 significant bits */
            assert_true((double)fm == mid);
            if (s) fm = -fm;
            uint16_t up = (uint16_t)((h + 1) | s << 15);
            assert_int_equal(f32_to_fp16(fm), (h & 1) ? up : hs); /* ties to even */
            assert_int_equal(f32_to_fp16(nextafterf(fm, 0.0f)), hs);
            assert_int_equal(f32_to_fp16(nextafterf(fm, s ? -INFINITY : INFINITY)), up);
        }
    }
    assert_int_equal(f32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(f32_to_fp16(65519.99f), 0x7bff);
    assert_int_equal(f32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(f32_to_fp16(1e30f), 0x7c00);
    assert_int_equal(f32_to_fp16(-INFINITY), 0xfc00);
    assert_int_equal(f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(f32_to_fp16(ldexpf(1, -25)), 0);     /* tie to even: 0 */
    assert_int_equal(f32_to_fp16(nextafterf(ldexpf(1, -25), 1)), 1);
    assert_int_equal(f32_to_fp16(ldexpf(1, -40)), 0);
    assert_int_equal(f32_to_fp16(bitsf(0x7f800001u)), 0x7e00); /* sNaN -> qNaN */
    assert_int_equal(f32_to_fp16(bitsf(0xffc02000u)), 0xfe01);
}

static void test_f32_to_fp16_matches_f16c(void **state) {
    (void)state;
    if (!have_f16c()) skip();
    for (uint32_t i = 0; i < (1u << 24); i++) {
        uint32_t u = rnd();
        if (i & 1) u = (u & 0x87ffffffu) | 0x38000000u; /* bias towards the half range */
        float f = bitsf(u);
        if (f32_to_fp16(f) != hw_f2h(f)) fail_msg("f32 %08x: soft %04x hw %04x", u, f32_to_fp16(f), hw_f2h(f));
    }
}

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        assert_int_equal(fbits(f), h << 16);
        if (!isnan(f)) assert_int_equal(f32_to_bf16(f), h);
        else assert_int_equal(f32_to_bf16(f), h | 0x40); /* quiet */
    }
    for (uint32_t i = 0; i < (1u << 22); i++) {
        uint32_t u = rnd();
        float f = bitsf(u);
        if (isnan(f)) continue;
        uint32_t lo = u >> 16, rem = u & 0xffff;
        uint32_t want = rem > 0x8000 || (rem == 0x8000 && (lo & 1)) ? lo + 1 : lo;
        assert_int_equal(f32_to_bf16(f), want);
    }
    assert_int_equal(f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);                   /* tie, even: down */
    assert_int_equal(f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);               /* tie, odd: up */
    assert_int_equal(f32_to_bf16(3.4028235e38f), 0x7f80);                          /* rounds to Inf */
    assert_int_equal(f32_to_bf16(bitsf(0x00018000u)), 0x0002);                     /* subnormal kept */
    assert_int_equal(f32_to_bf16(bitsf(0xff800001u)), 0xffc0);                     /* sNaN -> qNaN */
}

/* ---- dequantisation --------------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }

/* Dequantises from an odd address too: reference code must not assume alignment. */
static void dequant_both(uint32_t type, const uint8_t *blk, size_t bytes, float *y, int64_t n) {
    uint8_t *odd = malloc(bytes + 1);
    float *y2 = malloc((size_t)n * sizeof(float));
    assert_true(odd && y2);
    memcpy(odd + 1, blk, bytes);
    dequant_row(type, blk, y, n);
    dequant_row(type, odd + 1, y2, n);
    assert_memory_equal(y, y2, (size_t)n * sizeof(float));
    free(odd);
    free(y2);
}

static void test_dequant_f32_f16_bf16(void **state) {
    (void)state;
    float src[5] = {1.0f, -2.5f, 0.0f, 1e-8f, 65504.0f}, y[5];
    dequant_both(INVAR_T_F32, (const uint8_t *)src, sizeof src, y, 5);
    assert_memory_equal(y, src, sizeof src);
    uint8_t h[10];
    for (int i = 0; i < 5; i++) put16(h + 2 * i, f32_to_fp16(src[i]));
    dequant_both(INVAR_T_F16, h, sizeof h, y, 5);
    assert_true(y[0] == 1.0f && y[1] == -2.5f && y[2] == 0.0f && y[4] == 65504.0f);
    assert_true(y[3] == fp16_to_f32(f32_to_fp16(1e-8f)));
    for (int i = 0; i < 5; i++) put16(h + 2 * i, f32_to_bf16(src[i]));
    dequant_both(INVAR_T_BF16, h, sizeof h, y, 5);
    assert_true(y[0] == 1.0f && y[1] == -2.5f && y[2] == 0.0f);
}

static void test_dequant_q8_0(void **state) {
    (void)state;
    uint8_t blk[2 * 34];
    float y[64];
    for (int b = 0; b < 2; b++) {
        put16(blk + 34 * b, f32_to_fp16(b ? -0.25f : 0.5f));
        for (int j = 0; j < 32; j++) blk[34 * b + 2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    }
    dequant_both(INVAR_T_Q8_0, blk, sizeof blk, y, 64);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 32; j++) assert_true(y[32 * b + j] == (float)(j * 8 - 128) * (b ? -0.25f : 0.5f));
}

static void test_dequant_q4_0_q4_1(void **state) {
    (void)state;
    uint8_t b0[18], b1[20];
    float y[32];
    float d = 0.5f, m = -3.0f;
    put16(b0, f32_to_fp16(d));
    put16(b1, f32_to_fp16(d));
    put16(b1 + 2, f32_to_fp16(m));
    for (int j = 0; j < 16; j++) { /* element j = low nibble, element j+16 = high nibble */
        b0[2 + j] = (uint8_t)(j | (15 - j) << 4);
        b1[4 + j] = (uint8_t)(j | (15 - j) << 4);
    }
    dequant_both(INVAR_T_Q4_0, b0, sizeof b0, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)(j - 8) * d);
        assert_true(y[j + 16] == (float)(15 - j - 8) * d);
    }
    dequant_both(INVAR_T_Q4_1, b1, sizeof b1, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)j * d + m);
        assert_true(y[j + 16] == (float)(15 - j) * d + m);
    }
}

/* Q4_K scale packing, stated independently: sub-blocks 0..3 keep scale/min in the low 6
 * bits of bytes 0..3 / 4..7; sub-blocks 4..7 put their low 4 bits in bytes 8..11
 * (scale low nibble, min high nibble) and their top 2 bits in bits 6..7 of bytes
 * 0..3 (scale) / 4..7 (min). */
static void pack_q4_K_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
    memset(out, 0, 12);
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

static void test_q4_K_scales_roundtrip(void **state) {
    (void)state;
    for (int trial = 0; trial < 2000; trial++) {
        uint8_t sc[8], mn[8], packed[12];
        for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(rnd() & 63), mn[j] = (uint8_t)(rnd() & 63);
        pack_q4_K_scales(sc, mn, packed);
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            quant_q4_K_scale_min(packed, j, &s, &m);
            assert_int_equal(s, sc[j]);
            assert_int_equal(m, mn[j]);
        }
    }
}

static void test_dequant_q4_K(void **state) {
    (void)state;
    uint8_t blk[144], sc[8], mn[8], q[256];
    float y[256];
    float d = 0.0625f, dmin = 0.125f;
    for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(rnd() & 63), mn[j] = (uint8_t)(rnd() & 63);
    for (int e = 0; e < 256; e++) q[e] = (uint8_t)(rnd() & 15);
    put16(blk, f32_to_fp16(d));
    put16(blk + 2, f32_to_fp16(dmin));
    pack_q4_K_scales(sc, mn, blk + 4);
    memset(blk + 16, 0, 128);
    /* element e: chunk e/64; first 32 of a chunk in low nibbles, next 32 in high */
    for (int e = 0; e < 256; e++) {
        int c = e / 64, r = e % 64;
        blk[16 + 32 * c + r % 32] |= (uint8_t)(r < 32 ? q[e] : q[e] << 4);
    }
    dequant_both(INVAR_T_Q4_K, blk, sizeof blk, y, 256);
    for (int e = 0; e < 256; e++) {
        int sb = e / 32;
        float want = d * (float)sc[sb] * (float)q[e] - dmin * (float)mn[sb];
        if (y[e] != want) fail_msg("element %d: %g != %g", e, y[e], want);
    }
}

static void test_dequant_q6_K(void **state) {
    (void)state;
    uint8_t blk[2 * 210], q[2][256];
    int8_t sc[2][16];
    float y[512];
    float d[2] = {0.01f, -0.5f};
    memset(blk, 0, sizeof blk);
    for (int b = 0; b < 2; b++) {
        uint8_t *x = blk + 210 * b;
        for (int s = 0; s < 16; s++) sc[b][s] = (int8_t)(rnd() & 0xff), x[192 + s] = (uint8_t)sc[b][s];
        put16(x + 208, f32_to_fp16(d[b]));
        /* element e: half e/128; in it, r = 32k + l: 4 low bits from ql[64*half + l + 32*(k&1)]
         * (low nibble for k<2, high for k>=2), 2 high bits from qh[32*half + l] bits 2k..2k+1;
         * scale index 8*half + l/16 + 2k */
        for (int e = 0; e < 256; e++) {
            q[b][e] = (uint8_t)(rnd() & 63);
            int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
            x[64 * half + l + 32 * (k & 1)] |= (uint8_t)(k < 2 ? q[b][e] & 15 : (q[b][e] & 15) << 4);
            x[128 + 32 * half + l] |= (uint8_t)((q[b][e] >> 4) << (2 * k));
        }
    }
    dequant_both(INVAR_T_Q6_K, blk, sizeof blk, y, 512);
    for (int b = 0; b < 2; b++) {
        for (int e = 0; e < 256; e++) {
            int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
            float dd = fp16_to_f32(f32_to_fp16(d[b]));
            float want = dd * (float)sc[b][8 * half + l / 16 + 2 * k] * (float)(q[b][e] - 32);
            if (y[256 * b + e] != want) fail_msg("block %d element %d: %g != %g", b, e, y[256 * b + e], want);
        }
    }
}

/* ---- Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS, MXFP4: element by element ----------------
 * Each value stated from the published block layout, one element at a time, with gguf's
 * float expression (the Python test compares with the gguf package itself). Blocks are
 * random bytes with finite scales of either sign. */
static float f16_at(const uint8_t *p) { return fp16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static int bit_at(const uint8_t *bits, int i) { return (bits[i / 8] >> (i % 8)) & 1; }
static int nib_at(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }
static const int k_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float ref_element(uint32_t type, const uint8_t *b, int e) {
    switch (type) {
    case INVAR_T_Q5_0: return f16_at(b) * (float)((nib_at(b + 6, e) | bit_at(b + 2, e) << 4) - 16);
    case INVAR_T_Q5_1: return f16_at(b) * (float)(nib_at(b + 8, e) | bit_at(b + 4, e) << 4) + f16_at(b + 2);
    case INVAR_T_IQ4_NL: return f16_at(b) * (float)k_iq4[nib_at(b + 2, e)];
    case INVAR_T_MXFP4: {
        static const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
        /* 2^(e-127) as ggml computes it, halved: no NaN code, e = 255 is 2^127 * 2 */
        const float v = fp4[nib_at(b + 1, e)];
        return (2.0f * (v == 0 ? 0.0f : v)) * ldexpf(1.0f, b[0] - 128); /* ggml's table has +0 twice */
    }
    case INVAR_T_Q2_K: {
        const int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3, sc = b[e / 16];
        return (f16_at(b + 80) * (float)(sc & 15)) * (float)q - f16_at(b + 82) * (float)(sc >> 4);
    }
    case INVAR_T_Q3_K: {
        const int low = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        const int q = low - ((b[e % 32] >> (e / 32)) & 1 ? 0 : 4), i = e / 16;
        const int sc = (((b[96 + i % 8] >> (4 * (i / 8))) & 15) | ((b[104 + i % 4] >> (2 * (i / 4))) & 3) << 4) - 32;
        return (f16_at(b + 108) * (float)sc) * (float)q;
    }
    case INVAR_T_Q5_K: {
        const int q = ((b[48 + 32 * (e / 64) + e % 32] >> (4 * ((e / 32) & 1))) & 15) | ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
        uint8_t sc, mn;
        quant_q4_K_scale_min(b + 4, e / 32, &sc, &mn);
        return (f16_at(b) * (float)sc) * (float)q - f16_at(b + 2) * (float)mn;
    }
    case INVAR_T_IQ4_XS: {
        const int j = e / 32, sh = b[2] | b[3] << 8;
        const int ls = (((b[4 + j / 2] >> (4 * (j & 1))) & 15) | ((sh >> (2 * j)) & 3) << 4) - 32;
        return (f16_at(b) * (float)ls) * (float)k_iq4[nib_at(b + 8 + 16 * j, e % 32)];
    }
    default: fail_msg("no element reference for type %u", type); return 0;
    }
}

static void test_dequant_decoded_types(void **state) {
    (void)state;
    static const uint32_t types[] = {INVAR_T_Q5_0, INVAR_T_Q5_1, INVAR_T_IQ4_NL, INVAR_T_MXFP4,
                                     INVAR_T_Q2_K, INVAR_T_Q3_K, INVAR_T_Q5_K, INVAR_T_IQ4_XS};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const quant_traits *t = quant_traits_of(types[ti]);
        enum { NB = 64 };
        const size_t bytes = NB * (size_t)t->block_bytes, n = NB * (size_t)t->block_elems;
        uint8_t *blk = malloc(bytes);
        float *y = malloc(n * sizeof(float));
        assert_true(blk && y);
        for (size_t i = 0; i < bytes; i++) blk[i] = (uint8_t)rnd();
        for (int b = 0; b < NB; b++) { /* finite f16 scales (the MXFP4 exponent takes any byte) */
            uint8_t *B = blk + (size_t)b * t->block_bytes;
            static const int f16_off[][3] = {{INVAR_T_Q5_0, 0, -1}, {INVAR_T_Q5_1, 0, 2}, {INVAR_T_IQ4_NL, 0, -1},
                                             {INVAR_T_Q2_K, 80, 82}, {INVAR_T_Q3_K, 108, -1},
                                             {INVAR_T_Q5_K, 0, 2}, {INVAR_T_IQ4_XS, 0, -1}};
            for (size_t k = 0; k < sizeof f16_off / sizeof f16_off[0]; k++)
                if ((uint32_t)f16_off[k][0] == types[ti])
                    for (int f = 1; f <= 2; f++)
                        if (f16_off[k][f] >= 0)
                            put16(B + f16_off[k][f], f32_to_fp16(((float)(rnd() % 2001) - 1000.0f) * 1e-3f));
        }
        if (types[ti] == INVAR_T_MXFP4) blk[0] = 255, blk[17] = 0, blk[34] = 1, blk[51] = 254;
        dequant_both(types[ti], blk, bytes, y, (int64_t)n);
        for (int b = 0; b < NB; b++)
            for (int e = 0; e < t->block_elems; e++) {
                const float want = ref_element(types[ti], blk + (size_t)b * t->block_bytes, e);
                const float got = y[(size_t)b * t->block_elems + e];
                if (memcmp(&want, &got, 4) != 0)
                    fail_msg("%s block %d element %d: %a != %a", t->name, b, e, got, want);
            }
        free(blk);
        free(y);
    }
}

/* Types with a reference test above (an independent statement of the layout): every type
 * with a dequantiser must be here. */
static const uint32_t k_reference_tested[] = {
    INVAR_T_F32,  INVAR_T_F16,  INVAR_T_BF16, INVAR_T_Q8_0, INVAR_T_Q4_0,   INVAR_T_Q4_1,   INVAR_T_Q4_K, INVAR_T_Q6_K,
    INVAR_T_Q5_0, INVAR_T_Q5_1, INVAR_T_Q2_K, INVAR_T_Q3_K, INVAR_T_Q5_K, INVAR_T_IQ4_NL, INVAR_T_IQ4_XS, INVAR_T_MXFP4};

static void test_dequant_every_type(void **state) {
    (void)state;
    for (uint32_t id = 0; id < QUANT_TYPE_END; id++) {
        const quant_traits *t = quant_traits_of(id);
        if (!t || !t->dequant) continue;
        int tested = 0;
        for (size_t i = 0; i < sizeof k_reference_tested / sizeof k_reference_tested[0]; i++)
            tested |= k_reference_tested[i] == id;
        if (!tested) fail_msg("type %s has a dequantiser but no reference test", t->name);
        /* Any bytes: a row of three blocks, aligned or not, is its blocks one by one. */
        enum { NB = 3 };
        const size_t bytes = NB * (size_t)t->block_bytes, n = NB * (size_t)t->block_elems;
        uint8_t *blk = malloc(bytes);
        float *y = malloc(n * sizeof(float)), *y1 = malloc(n * sizeof(float));
        assert_true(blk && y && y1);
        for (size_t i = 0; i < bytes; i++) blk[i] = (uint8_t)rnd();
        dequant_both(id, blk, bytes, y, (int64_t)n);
        for (int b = 0; b < NB; b++)
            dequant_row(id, blk + (size_t)b * t->block_bytes, y1 + (size_t)b * t->block_elems, t->block_elems);
        assert_memory_equal(y, y1, n * sizeof(float));
        free(blk);
        free(y);
        free(y1);
    }
}

static void test_dequant_unsupported_is_nan(void **state) {
    (void)state;
    uint8_t blk[22] = {0};
    float y[32];
    dequant_row(INVAR_T_Q8_1, blk, y, 32);
    for (int i = 0; i < 32; i++) assert_true(isnan(y[i]));
}

/* ---- --dump-gguf helper mode ---------------------------------------------------------------- */

static int dump_gguf(const char *in, const char *out) {
    gguf_file *f;
    char err[512];
    if (gguf_open(in, &f, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    FILE *o = fopen(out, "wb");
    if (!o) {
        perror(out);
        gguf_close(f);
        return 1;
    }
    int rc = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f) && rc == 0; i++) {
        const gguf_tensor *t = gguf_get_tensor(f, i);
        if (!quant_type_supported(t->type)) {
            fprintf(stderr, "tensor %s: unsupported type %u\n", t->name, t->type);
            rc = 2;
            break;
        }
        size_t rb = quant_row_bytes(t->type, t->ne[0]);
        uint64_t rows = t->nbytes / rb;
        float *row = malloc((size_t)t->ne[0] * sizeof(float));
        if (!row) return 1;
        for (uint64_t r = 0; r < rows; r++) {
            dequant_row(t->type, (const uint8_t *)t->data + r * rb, row, t->ne[0]);
            if (fwrite(row, sizeof(float), (size_t)t->ne[0], o) != (size_t)t->ne[0]) rc = 1;
        }
        free(row);
    }
    if (fclose(o) != 0) rc = 1;
    gguf_close(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--dump-gguf") == 0) return dump_gguf(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_info),
        cmocka_unit_test(test_table_rows),
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_fp16_to_f32_exhaustive),
        cmocka_unit_test(test_f32_to_fp16_rounding),
        cmocka_unit_test(test_f32_to_fp16_matches_f16c),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dequant_f32_f16_bf16),
        cmocka_unit_test(test_dequant_q8_0),
        cmocka_unit_test(test_dequant_q4_0_q4_1),
        cmocka_unit_test(test_q4_K_scales_roundtrip),
        cmocka_unit_test(test_dequant_q4_K),
        cmocka_unit_test(test_dequant_q6_K),
        cmocka_unit_test(test_dequant_decoded_types),
        cmocka_unit_test(test_dequant_every_type),
        cmocka_unit_test(test_dequant_unsupported_is_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
