/* The attention kernel, compiled once per ISA (vec16_generic.c, vec16_avx2.c,
 * vec16_avx512.c) from this one source. It uses only vec16.h lane-wise IEEE operations
 * (add, mul, fused multiply-add, compares), so every ISA gives the same bits; the
 * variants differ only in how many machine instructions a 16-lane operation takes.
 *
 * One call handles up to ATTN_GT query heads of one KV head for one query token: each
 * key vector and value row loaded is used by all heads of the tile. Per head, the
 * operation sequence is the one described in attention.h, whatever the tile holds. */
#include <math.h>
#include <string.h>

#include "attention.h"
#include "vec16.h"

#define ATTN_GT 4 /* query heads per tile */

/* Scores of key blocks b0 .. b0+NB-1 of a split for G heads. NB blocks at once give
 * NB*G independent add chains, which hides the add latency; each lane's chain is the
 * same sequential sum over d whatever NB is. */
V16_AI void block_scores(const attn_kv *kv, int64_t kvh, int64_t s0, int64_t b0, const int NB, int64_t n,
                         const float *const *q, const int G, const int64_t hd, float scale,
                         float (*w)[ATTN_SPLIT], f32x16 *mx) {
    const i32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const float *kb[4];
    f32x16 a[4][ATTN_GT];
    for (int i = 0; i < NB; i++) {
        kb[i] = attn_k_block(kv, s0 + (b0 + i) * KV_BLOCK, kvh);
        for (int g = 0; g < G; g++) a[i][g] = v16_splat(0.0f);
    }
    for (int64_t d = 0; d < hd; d++) {
        f32x16 kd[4];
        for (int i = 0; i < NB; i++) kd[i] = v16_load(kb[i] + d * KV_BLOCK);
        for (int g = 0; g < G; g++) {
            const float qd = q[g][d];
            for (int i = 0; i < NB; i++) a[i][g] = v16_fma(kd[i], v16_splat(qd), a[i][g]);
        }
    }
    for (int i = 0; i < NB; i++) {
        const int64_t b = b0 + i;
        const i32x16 valid = lane < (int32_t)(n - b * KV_BLOCK);
        for (int g = 0; g < G; g++) {
            const f32x16 sc = v16_select(valid, a[i][g] * scale, v16_splat(-INFINITY));
            v16_store(w[g] + b * KV_BLOCK, sc);
            mx[g] = v16_max(mx[g], sc);
        }
    }
}

/* Scores of one split: w[g][j] = q_g . k_j * scale (-inf beyond the valid keys), and
 * mc[g] = their maximum. */
V16_AI void split_scores(const attn_kv *kv, int64_t kvh, int64_t s0, int64_t n, const float *const *q,
                         const int G, const int64_t hd, float scale, float (*w)[ATTN_SPLIT],
                         float *mc) {
    f32x16 mx[ATTN_GT];
    for (int g = 0; g < G; g++) mx[g] = v16_splat(-INFINITY);
    const int64_t nb = (n + KV_BLOCK - 1) / KV_BLOCK;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) block_scores(kv, kvh, s0, b, 4, n, q, G, hd, scale, w, mx);
    for (; b < nb; b++) block_scores(kv, kvh, s0, b, 1, n, q, G, hd, scale, w, mx);
    for (int g = 0; g < G; g++) mc[g] = v16_max_lanes(mx[g]);
}

/* w = exp(score - mc) in place; lc = its sum (lane-wise over 16-key groups, then a tree). */
V16_AI void split_weights(int64_t n, const int G, float (*w)[ATTN_SPLIT], const float *mc, float *lc) {
    for (int g = 0; g < G; g++) {
        f32x16 sum = v16_splat(0.0f);
        for (int64_t b = 0; b * KV_BLOCK < n; b++) {
            const f32x16 e = invar_exp16(v16_load(w[g] + b * KV_BLOCK) - mc[g]);
            v16_store(w[g] + b * KV_BLOCK, e);
            sum = sum + e;
        }
        lc[g] = v16_sum_tree(sum);
    }
}

V16_AI void attn_tile(const attn_shape *sh, const attn_job *job, int64_t kvh, int64_t h0, const int G,
                      const int64_t hd) {
    const attn_kv *kv = &job->kv;
    const int64_t nv = hd / 16; /* whole vectors of a row; the rest is a scalar tail */
    const float *q[ATTN_GT];
    for (int g = 0; g < G; g++) q[g] = job->q + (h0 + g) * hd;
    float m[ATTN_GT], l[ATTN_GT];
    _Alignas(64) float acc[ATTN_GT][ATTN_MAX_HEAD_DIM];
    _Alignas(64) float part[ATTN_GT][ATTN_MAX_HEAD_DIM];
    _Alignas(64) float w[ATTN_GT][ATTN_SPLIT];
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        memset(acc[g], 0, sizeof(float) * (size_t)hd);
    }
    for (int64_t s0 = 0; s0 <= job->pos; s0 += ATTN_SPLIT) {
        const int64_t n = (job->pos - s0 + 1 < ATTN_SPLIT) ? job->pos - s0 + 1 : ATTN_SPLIT;
        float mc[ATTN_GT], lc[ATTN_GT];
        split_scores(kv, kvh, s0, n, q, G, hd, sh->scale, w, mc);
        split_weights(n, G, w, mc, lc);
        /* part[g] = sum_j w[g][j] * v_j, in position order. */
        for (int g = 0; g < G; g++) memset(part[g], 0, sizeof(float) * (size_t)hd);
        for (int64_t j = 0; j < n; j++) {
            const float *vr = attn_v_row(kv, s0 + j, kvh);
            for (int64_t c = 0; c < nv; c++) {
                const f32x16 vv = v16_load(vr + 16 * c);
                for (int g = 0; g < G; g++)
                    v16_store(part[g] + 16 * c, v16_fma(vv, v16_splat(w[g][j]), v16_load(part[g] + 16 * c)));
            }
            for (int64_t d = 16 * nv; d < hd; d++)
                for (int g = 0; g < G; g++) part[g][d] = fmaf(vr[d], w[g][j], part[g][d]);
        }
        /* Merge this split into the running result, always in split order. */
        for (int g = 0; g < G; g++) {
            const float mn = m[g] > mc[g] ? m[g] : mc[g];
            const float a = invar_exp16(v16_splat(m[g] - mn))[0], b = invar_exp16(v16_splat(mc[g] - mn))[0];
            l[g] = l[g] * a + lc[g] * b;
            for (int64_t d = 0; d < hd; d++) acc[g][d] = acc[g][d] * a + part[g][d] * b;
            m[g] = mn;
        }
    }
    for (int g = 0; g < G; g++) {
        const float inv = 1.0f / l[g];
        float *out = job->out + (h0 + g) * hd;
        for (int64_t d = 0; d < hd; d++) out[d] = acc[g][d] * inv;
    }
}

/* Specialised on the common group sizes and head dims so the compiler can keep a tile's
 * accumulators in registers; every instance performs the same per-element operations. */
#define ATTN_TILE_G(hd)                                                   \
    switch (G) {                                                          \
    case 1: attn_tile(sh, job, kvh, h0, 1, hd); break;                    \
    case 2: attn_tile(sh, job, kvh, h0, 2, hd); break;                    \
    case 3: attn_tile(sh, job, kvh, h0, 3, hd); break;                    \
    default: attn_tile(sh, job, kvh, h0, 4, hd); break;                   \
    }

static void attn_tile_any(const attn_shape *sh, const attn_job *job, int64_t kvh, int64_t h0, int G) {
    switch (sh->head_dim) {
    case 64: ATTN_TILE_G(64) break;
    case 128: ATTN_TILE_G(128) break;
    default: ATTN_TILE_G(sh->head_dim) break;
    }
}
