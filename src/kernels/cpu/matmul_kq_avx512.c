/* AVX-512 K-quant (Q4_K, Q5_K, Q6_K) kernels over activation panels: prefill and batched
 * decode (m >= 2; one row runs the one-row kernels of matmul_avx512.c).
 *
 * Each group's records are unpacked, KU units at a time, into an L1 buffer that every
 * panel of the call then reads: per 32-block the eight quant vectors (unsigned bytes,
 * Q[t] = elements 4t..4t+3 of the 16 columns) and the block's float scales, so one weight
 * load feeds the dot products of MM_PR rows and the nibble, bit and scale unpacking is
 * paid once per group and chunk instead of once per row. Chunks after the first resume
 * the accumulators the previous chunk stored in y (float stores and loads are exact).
 *
 * Same bits as mm_unit_q4_K / q5_K / q6_K (and the one-row kernels). The dots are exact
 * integers, and the float operations per lane are the reference's:
 *   Q4_K, Q5_K: f = fma(-dmin, (float)imin, d * (float)isum), isum = sc * dot,
 *               imin = mn * sum(x). The unpacked scales are ds = d * sc and
 *               dm = dmin * mn, both exact in float (an fp16 times a 6-bit integer needs
 *               at most 17 significant bits), and sc * dot and mn * sum(x) are exact
 *               integers below 2^24, so ds * (float)dot rounds the exact d * isum once,
 *               as d * (float)isum does, and fnmadd(dm, (float)sum(x), .) subtracts the
 *               exact dmin * imin before its one rounding, as fnmadd(dmin, (float)imin, .).
 *               Zeros: a column's quants are unpacked as 0 where its sc is 0, so that
 *               ds * (float)dot is then d * +0, the reference's sign of zero, for any
 *               dot. (One case is left: with mn = 0, sum(x) < 0 and ds * dot a zero,
 *               dm * (float)sum(x) is a zero of the other sign than dmin * +0, which
 *               shows in f only when ds * dot is -0, i.e. a negative d; llama.cpp's
 *               quantisers write d, dmin >= 0.)
 *   Q6_K:       f = d * (float)isum, isum = sl * plo + sh * phi with plo, phi the two
 *               16-element halves' dots less 32 * their activation sums. The panel's aux
 *               and aux2 (MM_PANEL_MAGIC - 32 * half sum) start the dpbusd chains, so a
 *               finished chain read as a float is X = M + plo exactly (M = 1.5 * 2^23,
 *               |plo| <= 16 * 127 * 32 < 2^22): no conversion instruction. Then
 *               sl * plo = fma(sl, X, -sl * M) (-sl * M is exact, and so is the result:
 *               an integer below 128 * 2^16 < 2^24), phi = Y - M (exact), and
 *               (float)isum = fma(sh, phi, sl * plo), exact because |isum| < 2^24; an
 *               exact zero comes out +0 at each step, as (float) of the integer 0. Then
 *               d * that, as the reference.
 * then acc = fma(dx, f, acc) per block in K order. Every row of a panel gets the same
 * per-lane operations whatever R is, so neither m nor the panel split changes a bit. */
#include <immintrin.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul_avx512_ops.h"
#include "kernels/cpu/matmul_internal.h"

/* Unpacked unit (256 elements): block j's quant vectors at 512j + 64t, then per block
 * j its scale vectors: Q4_K/Q5_K ds at 4096 + 64j, dm at 4608 + 64j; Q6_K sl, sh (float)
 * at 4096 + 64j, 4608 + 64j and d at 5120. */
#define KUREC 5184
#define KU_DS 4096
#define KU_DM 4608
#define KU_D 5120
#ifndef KU
#define KU 3 /* units per chunk: 15.2 KiB, leaving L1 room for the panels' activations */
#endif

AI size_t kq_rec_bytes(const uint32_t type) {
    return type == INVAR_T_Q4_K ? MM_REC_Q4_K : type == INVAR_T_Q5_K ? MM_REC_Q5_K : MM_REC_Q6_K;
}

AI void st(uint8_t *p, __m512i v) { _mm512_store_si512((void *)p, v); }
AI void stf(uint8_t *p, __m512 v) { _mm512_store_ps((void *)p, v); }

/* Record rec (one unit of one group) into the unpacked form at U. */
AI void unpack_unit(const uint32_t type, const uint8_t *rec, uint8_t *U) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    prefetch_rec(rec, (int)kq_rec_bytes(type));
    if (type == INVAR_T_Q6_K) {
        const __m512i m30 = _mm512_set1_epi8(0x30);
        UNROLL for (int n = 0; n < 2; n++) UNROLL for (int t = 0; t < 8; t++) {
            /* ql words 16n+t (blocks 4n, 4n+2), 16n+8+t (4n+1, 4n+3), qh word 8n+t. */
            const __m512i LA = ldw(rec + MM_Q6_QL(16 * n + t)), LB = ldw(rec + MM_Q6_QL(16 * n + 8 + t));
            const __m512i H = ldw(rec + MM_Q6_QH(8 * n + t));
            uint8_t *u = U + 512 * (4 * n) + 64 * t;
            st(u, _mm512_or_si512(_mm512_and_si512(LA, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30)));
            st(u + 512, _mm512_or_si512(_mm512_and_si512(LB, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30)));
            st(u + 1024, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(LA, 4), m4), _mm512_and_si512(H, m30)));
            st(u + 1536, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(LB, 4), m4),
                                         _mm512_and_si512(_mm512_srli_epi16(H, 2), m30)));
        }
        UNROLL for (int j = 0; j < 8; j++) {
            stf(U + KU_DS + 64 * j, _mm512_cvtepi32_ps(i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * j))));
            stf(U + KU_DM + 64 * j, _mm512_cvtepi32_ps(i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * j + 1))));
        }
        stf(U + KU_D, f16x16(rec + MM_Q6_D));
        return;
    }
    /* Q4_K / Q5_K: block j = 2c + h is nibble h of words 8c..8c+7 (Q5_K: | bit j of qh);
     * the quants of a column whose block scale is 0 as zeros (see the top of the file). */
    __mmask16 live[8];
    UNROLL for (int j = 0; j < 8; j++) {
        const __m512i sc = u8x16_epi32(rec + 2112 + 16 * j);
        live[j] = _mm512_test_epi32_mask(sc, sc);
    }
    UNROLL for (int c = 0; c < 4; c++) UNROLL for (int t = 0; t < 8; t++) {
        const __m512i W = ldw(rec + 64 * (8 * c + t));
        __m512i lo = _mm512_and_si512(W, m4), hi = _mm512_and_si512(_mm512_srli_epi16(W, 4), m4);
        if (type == INVAR_T_Q5_K) {
            const __m512i H = ldw(rec + 2368 + 64 * t);
            lo = _mm512_or_si512(lo, q5_hbit(H, 2 * c));
            hi = _mm512_or_si512(hi, q5_hbit(H, 2 * c + 1));
        }
        st(U + 512 * (2 * c) + 64 * t, _mm512_maskz_mov_epi32(live[2 * c], lo));
        st(U + 512 * (2 * c + 1) + 64 * t, _mm512_maskz_mov_epi32(live[2 * c + 1], hi));
    }
    const __m512 d = f16x16(rec + 2048), dmin = f16x16(rec + 2080);
    UNROLL for (int j = 0; j < 8; j++) {
        stf(U + KU_DS + 64 * j, _mm512_mul_ps(d, _mm512_cvtepi32_ps(u8x16_epi32(rec + 2112 + 16 * j))));
        stf(U + KU_DM + 64 * j, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(u8x16_epi32(rec + 2240 + 16 * j))));
    }
}

/* Block j of unpacked unit u for the R rows of panel block xb (PB bytes per row). Row r:
 * q at xb + 32r, d at xb + 32R + 4r, aux at xb + 36R + 4r, aux2 at xb + 40R + 4r. */
AI void kmin_rows(const uint8_t *u, int j, const uint8_t *xb, const int R, __m512 *acc) {
    __m512i Q[8];
    UNROLL for (int t = 0; t < 8; t++) Q[t] = _mm512_load_si512((const void *)(u + 512 * j + 64 * t));
    const __m512 ds = _mm512_load_ps((const void *)(u + KU_DS + 64 * j));
    const __m512 dm = _mm512_load_ps((const void *)(u + KU_DM + 64 * j));
    __m512i P[MM_PR];
    UNROLL for (int r = 0; r < R; r++) P[r] = _mm512_setzero_si512();
    /* Step-major: R independent chains side by side. */
    UNROLL for (int t = 0; t < 8; t++) UNROLL for (int r = 0; r < R; r++) P[r] = dpm(P[r], Q[t], xb + 32 * r + 4 * t);
    UNROLL for (int r = 0; r < R; r++) {
        const __m512 f = _mm512_fnmadd_ps(dm, bcastf(xb + 36 * R + 4 * r), _mm512_mul_ps(ds, _mm512_cvtepi32_ps(P[r])));
        acc[r] = _mm512_fmadd_ps(bcastf(xb + 32 * R + 4 * r), f, acc[r]);
    }
}

/* Q6_K rows [r0, r1) of block j (see kmin_rows); the two halves' chains start at the
 * panel's aux and aux2 (see the top of the file for the float steps). */
AI void q6_rows(const __m512i *Q, __m512 sl, __m512 nslm, __m512 sh, __m512 d, const uint8_t *xb, const int R,
                const int r0, const int r1, __m512 *acc) {
    const __m512 magic = _mm512_castsi512_ps(_mm512_set1_epi32(MM_PANEL_MAGIC));
    __m512i PL[MM_PR], PH[MM_PR];
    panel_half_chains(Q, xb, R, r0, r1, PL, PH);
    UNROLL for (int r = r0; r < r1; r++) {
        const __m512 slpl = _mm512_fmadd_ps(sl, _mm512_castsi512_ps(PL[r]), nslm);
        const __m512 isum = _mm512_fmadd_ps(sh, _mm512_sub_ps(_mm512_castsi512_ps(PH[r]), magic), slpl);
        acc[r] = _mm512_fmadd_ps(bcastf(xb + 32 * R + 4 * r), _mm512_mul_ps(d, isum), acc[r]);
    }
}

AI void q6_block(const uint8_t *u, int j, const uint8_t *xb, const int R, __m512 *acc) {
    __m512i Q[8];
    UNROLL for (int t = 0; t < 8; t++) Q[t] = _mm512_load_si512((const void *)(u + 512 * j + 64 * t));
    const __m512 sl = _mm512_load_ps((const void *)(u + KU_DS + 64 * j));
    const __m512 sh = _mm512_load_ps((const void *)(u + KU_DM + 64 * j));
    const __m512 d = _mm512_load_ps((const void *)(u + KU_D));
    const __m512 nslm = _mm512_mul_ps(sl, _mm512_set1_ps(-12582912.0f)); /* -sl * M, exact */
    /* Four rows at a time: 16 chains of eight rows would not fit the 32 registers. */
    q6_rows(Q, sl, nslm, sh, d, xb, R, 0, R < 4 ? R : 4, acc);
    if (R > 4) q6_rows(Q, sl, nslm, sh, d, xb, R, 4, R, acc);
}

/* One tile: rows [i0, i0 + R) x group g over the nuc unpacked units of U, which start at
 * unit u0. */
AI void kq_tile(const mm_args *a, const uint32_t type, const uint8_t *U, int64_t i0, int64_t g, int64_t u0,
                int64_t nuc, const int R) {
    const int64_t nb = a->xq.nb;
    const size_t pb = (size_t)mm_panel_bytes(a->kt);
    const uint8_t *xp = a->xp + (size_t)i0 * (size_t)nb * pb + (size_t)(8 * u0) * (size_t)R * pb;
    const int64_t left = a->w->n - g * MM_NC;
    const __mmask16 cm = left >= MM_NC ? 0xFFFF : (__mmask16)((1u << left) - 1);
    float *y = a->y + i0 * a->ldy + g * MM_NC;
    __m512 acc[MM_PR];
    UNROLL for (int r = 0; r < R; r++)
        acc[r] = u0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(cm, y + r * a->ldy);
    for (int64_t u = 0; u < nuc; u++) {
        const uint8_t *uu = U + u * KUREC;
        for (int j = 0; j < 8; j++) {
            const uint8_t *xb = xp + (size_t)(8 * u + j) * (size_t)R * pb;
            if (type == INVAR_T_Q6_K) q6_block(uu, j, xb, R, acc);
            else kmin_rows(uu, j, xb, R, acc);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * a->ldy, cm, acc[r]);
}

#define KQ_TILE_R(R_) kq_tile(a, type, U, i0, g, u0, nuc, R_)

/* Chunk [u0, u0 + nuc) of group g: unpacked into U, then every panel over it; next: the
 * records to bring towards L2 meanwhile (the next chunk in the caller's order), or NULL. */
AI void kq_chunk(const mm_args *a, const uint32_t type, uint8_t *U, int64_t g, int64_t u0, int64_t nuc,
                 const uint8_t *next) {
    const size_t rb = kq_rec_bytes(type);
    const uint8_t *recs = (const uint8_t *)a->w->packed + (size_t)(g * (a->w->k / 256) + u0) * rb;
    for (int64_t u = 0; u < nuc; u++) unpack_unit(type, recs + u * rb, U + u * KUREC);
    if (next)
        for (size_t o = 0; o < (size_t)KU * rb; o += 64) _mm_prefetch((const char *)next + o, _MM_HINT_T1);
    for (int64_t i0 = 0; i0 < a->m; i0 += MM_PR) {
        switch (a->m - i0 < MM_PR ? a->m - i0 : MM_PR) {
        case 1: KQ_TILE_R(1); break;
        case 2: KQ_TILE_R(2); break;
        case 3: KQ_TILE_R(3); break;
        case 4: KQ_TILE_R(4); break;
        case 5: KQ_TILE_R(5); break;
        case 6: KQ_TILE_R(6); break;
        case 7: KQ_TILE_R(7); break;
        default: KQ_TILE_R(8); break;
        }
    }
}

/* Groups [g0, g1). Few rows (batched decode: the weights stream from DRAM) go group by
 * group, reading each group's records in address order. Many rows (prefill) go chunk
 * by chunk of K across the groups, so the chunk's activation panels stay in L2 for all
 * the task's groups instead of being streamed again per group (ffn_down at K = 8192 and
 * 512 rows holds 5 MiB of them). Either order performs each output's blocks in K order. */
AI void kq_run(const mm_args *a, const uint32_t type, int64_t g0, int64_t g1) {
    const int64_t nu = a->w->k / 256;
    const size_t rb = kq_rec_bytes(type);
    const uint8_t *packed = (const uint8_t *)a->w->packed;
    _Alignas(64) uint8_t U[KU * KUREC];
    if (a->m <= 2 * MM_PR) {
        for (int64_t g = g0; g < g1; g++)
            for (int64_t u0 = 0; u0 < nu; u0 += KU) {
                const int64_t nuc = nu - u0 < KU ? nu - u0 : KU;
                const int last = g + 1 == g1 && u0 + nuc == nu;
                kq_chunk(a, type, U, g, u0, nuc, last ? NULL : packed + (size_t)(g * nu + u0 + nuc) * rb);
            }
        return;
    }
    for (int64_t u0 = 0; u0 < nu; u0 += KU) {
        const int64_t nuc = nu - u0 < KU ? nu - u0 : KU;
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *next = g + 1 < g1 ? packed + (size_t)((g + 1) * nu + u0) * rb
                                  : u0 + nuc < nu ? packed + (size_t)(g0 * nu + u0 + nuc) * rb : NULL;
            kq_chunk(a, type, U, g, u0, nuc, next);
        }
    }
}

void mm_avx512_q4_K_panels(const mm_args *a, int64_t g0, int64_t g1) { kq_run(a, INVAR_T_Q4_K, g0, g1); }
void mm_avx512_q5_K_panels(const mm_args *a, int64_t g0, int64_t g1) { kq_run(a, INVAR_T_Q5_K, g0, g1); }
void mm_avx512_q6_K_panels(const mm_args *a, int64_t g0, int64_t g1) { kq_run(a, INVAR_T_Q6_K, g0, g1); }
