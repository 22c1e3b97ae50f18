/* The attention kernel, compiled once per ISA (vec16_generic.c, vec16_avx2.c,
 * vec16_avx512.c) from this one source. It uses only vec16.h lane-wise IEEE operations
 * (add, mul, fused multiply-add, compares), so every ISA gives the same bits; the
 * variants differ only in how many machine instructions a 16-lane operation takes.
 *
 * One call handles a tile of up to ATTN_QMAX queries that read the same KV head of the
 * same sequence (the query heads of the group, for one or several tokens): each key
 * vector and value row loaded serves the whole tile. Per query, the operation sequence is
 * the one described in attention.h, whatever else the tile holds. Its exp is
 * v16_kernel_exp (vec16.h): invar_exp16, but in the tests-only flipped builds. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/vec16.h"
#include "kernels/cpu/vec16_kernels.h"

#define ATTN_QMAX 8 /* queries per tile: (tokens of one sequence) x (heads of one KV head) */
_Static_assert(ATTN_QMAX == ATTN_TILE_QUERIES, "one tile size");

/* One tile: Q queries that read the same KV head of the same sequence. Query i has its
 * vector q[i], output out[i] and position pos[i]; positions may differ. */
typedef struct {
    const float *q[ATTN_QMAX];
    float *out[ATTN_QMAX];
    int64_t pos[ATTN_QMAX];
} attn_queries;

/* The kernel's only reads of the cache: elements widened to f32 (exact for halves). f16
 * is a constant in every instance (attn_tile_any picks the instance by the cache's type),
 * so each type's loops compile on their own and f32 compiles as before. */
V16_AI f32x16 kv_vec(const void *base, int64_t i, const int f16) {
    return f16 ? v16_load_f16((const uint16_t *)base + i) : v16_load((const float *)base + i);
}
V16_AI float kv_elem(const void *base, int64_t i, const int f16) {
    return attn_kv_elem(base, i, f16 ? ATTN_KV_F16 : ATTN_KV_F32);
}

/* Scores of key blocks b0 .. b0+NB-1 of a split for the Q queries. NB blocks at once give
 * NB*Q independent chains, which hides the FMA latency; each lane's chain is the same
 * sequential sum over d whatever NB and Q are. n[i]: query i's valid keys in the split. */
V16_AI void block_scores(const attn_kv *kv, int64_t kvh, int64_t s0, int64_t b0, const int NB,
                         const int64_t *n, const attn_queries *qs, const int Q, const int64_t hd,
                         float scale, float (*w)[ATTN_SPLIT], f32x16 *mx, const int f16) {
    const i32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int64_t kb[4];
    f32x16 a[4][ATTN_QMAX];
    for (int i = 0; i < NB; i++) {
        kb[i] = attn_k_block_at(kv, s0 + (b0 + i) * KV_BLOCK, kvh);
        for (int g = 0; g < Q; g++) a[i][g] = v16_splat(0.0f);
    }
    for (int64_t d = 0; d < hd; d++) {
        f32x16 kd[4];
        for (int i = 0; i < NB; i++) kd[i] = kv_vec(kv->k, kb[i] + d * KV_BLOCK, f16);
        for (int g = 0; g < Q; g++) {
            const f32x16 qd = v16_splat(qs->q[g][d]);
            for (int i = 0; i < NB; i++) a[i][g] = v16_fma(kd[i], qd, a[i][g]);
        }
    }
    for (int i = 0; i < NB; i++) {
        const int64_t b = b0 + i;
        for (int g = 0; g < Q; g++) {
            const i32x16 valid = lane < (int32_t)(n[g] - b * KV_BLOCK);
            const f32x16 sc = v16_select(valid, a[i][g] * scale, v16_splat(-INFINITY));
            v16_store(w[g] + b * KV_BLOCK, sc);
            mx[g] = v16_max(mx[g], sc);
        }
    }
}

/* Scores of one split: w[i][j] = q_i . k_j * scale (-inf beyond query i's keys), and
 * mc[i] = their maximum, for blocks up to the longest query's. */
V16_AI void split_scores(const attn_kv *kv, int64_t kvh, int64_t s0, const int64_t *n, int64_t n_max,
                         const attn_queries *qs, const int Q, const int64_t hd, float scale,
                         float (*w)[ATTN_SPLIT], float *mc, const int f16) {
    f32x16 mx[ATTN_QMAX];
    for (int g = 0; g < Q; g++) mx[g] = v16_splat(-INFINITY);
    const int64_t nb = (n_max + KV_BLOCK - 1) / KV_BLOCK;
    int64_t b = 0;
    if (Q <= 2)
        for (; b + 4 <= nb; b += 4) block_scores(kv, kvh, s0, b, 4, n, qs, Q, hd, scale, w, mx, f16);
    else
        for (; b + 2 <= nb; b += 2) block_scores(kv, kvh, s0, b, 2, n, qs, Q, hd, scale, w, mx, f16);
    for (; b < nb; b++) block_scores(kv, kvh, s0, b, 1, n, qs, Q, hd, scale, w, mx, f16);
    for (int g = 0; g < Q; g++) mc[g] = v16_max_lanes(mx[g]);
}

/* w = exp(score - mc) in place over query g's own blocks; lc = their sum (lane-wise over
 * 16-key blocks, then a fixed tree). */
V16_AI void split_weights(const int64_t *n, const int Q, float (*w)[ATTN_SPLIT], const float *mc, float *lc) {
    for (int g = 0; g < Q; g++) {
        f32x16 sum = v16_splat(0.0f);
        for (int64_t b = 0; b * KV_BLOCK < n[g]; b++) {
            const f32x16 e = v16_kernel_exp(v16_load(w[g] + b * KV_BLOCK) - mc[g]);
            v16_store(w[g] + b * KV_BLOCK, e);
            sum = sum + e;
        }
        lc[g] = v16_sum_tree(sum);
    }
}

/* part[g] += w[g][j] * v_j for keys j0 <= j < j1 of the split, in position order; with
 * `check`, only for the keys query g attends to (j < n[g]). */
V16_AI void pv_accumulate(const attn_kv *kv, int64_t kvh, int64_t s0, int64_t j0, int64_t j1, const int64_t *n,
                          const int check, const int Q, const int64_t hd, float (*w)[ATTN_SPLIT],
                          float (*part)[ATTN_MAX_HEAD_DIM], const int f16) {
    const int64_t nv = hd / 16; /* whole vectors of a row; the rest is a scalar tail */
    for (int64_t c = 0; c < nv; c += 4) { /* 4 vectors of the row at a time: registers */
        const int64_t cn = nv - c < 4 ? nv - c : 4;
        f32x16 p[ATTN_QMAX][4];
        for (int g = 0; g < Q; g++)
            for (int64_t u = 0; u < cn; u++) p[g][u] = v16_load(part[g] + 16 * (c + u));
        for (int64_t j = j0; j < j1; j++) {
            const int64_t vr = attn_v_row_at(kv, s0 + j, kvh) + 16 * c;
            f32x16 vv[4];
            for (int64_t u = 0; u < cn; u++) vv[u] = kv_vec(kv->v, vr + 16 * u, f16);
            for (int g = 0; g < Q; g++) {
                if (check && j >= n[g]) continue;
                const f32x16 wj = v16_splat(w[g][j]);
                for (int64_t u = 0; u < cn; u++) p[g][u] = v16_fma(vv[u], wj, p[g][u]);
            }
        }
        for (int g = 0; g < Q; g++)
            for (int64_t u = 0; u < cn; u++) v16_store(part[g] + 16 * (c + u), p[g][u]);
    }
    for (int64_t j = j0; j < j1; j++) {
        const int64_t vr = attn_v_row_at(kv, s0 + j, kvh);
        for (int64_t d = 16 * nv; d < hd; d++)
            for (int g = 0; g < Q; g++)
                if (!check || j < n[g]) part[g][d] = fmaf(kv_elem(kv->v, vr + d, f16), w[g][j], part[g][d]);
    }
}

/* pv_accumulate for ATTN_KV_LATENT: v_j is the first hd floats of key j, read out of the
 * transposed K block. Per 16 dims of the row, each key block's [16 dims][16 keys] tile is
 * loaded and transposed in registers into 16 value vectors, which then meet the weights
 * in position order exactly as pv_accumulate's rows do: each output element is the same
 * chain of fused multiply-adds over the keys, so the bits equal the separate layout's. */
V16_AI void pv_accumulate_latent(const attn_kv *kv, int64_t kvh, int64_t s0, int64_t j0, int64_t j1,
                                 const int64_t *n, const int check, const int Q, const int64_t hd,
                                 float (*w)[ATTN_SPLIT], float (*part)[ATTN_MAX_HEAD_DIM], const int f16) {
    if (j1 <= j0) return;
    const int64_t nv = hd / 16; /* whole vectors of a row; the rest is a scalar tail */
    for (int64_t c = 0; c < nv; c++) {
        f32x16 p[ATTN_QMAX];
        for (int g = 0; g < Q; g++) p[g] = v16_load(part[g] + 16 * c);
        for (int64_t b = j0 / KV_BLOCK; b * KV_BLOCK < j1; b++) {
            const int64_t kb = attn_k_block_at(kv, s0 + b * KV_BLOCK, kvh) + 16 * c * KV_BLOCK;
            f32x16 vv[KV_BLOCK];
            for (int u = 0; u < KV_BLOCK; u++) vv[u] = kv_vec(kv->k, kb + u * KV_BLOCK, f16);
            v16_transpose16(vv); /* vv[l]: dims 16c .. 16c+15 of key b * KV_BLOCK + l */
            const int64_t l0 = j0 > b * KV_BLOCK ? j0 - b * KV_BLOCK : 0;
            const int64_t l1 = j1 < (b + 1) * KV_BLOCK ? j1 - b * KV_BLOCK : KV_BLOCK;
            for (int64_t l = l0; l < l1; l++) {
                const int64_t j = b * KV_BLOCK + l;
                for (int g = 0; g < Q; g++) {
                    if (check && j >= n[g]) continue;
                    p[g] = v16_fma(vv[l], v16_splat(w[g][j]), p[g]);
                }
            }
        }
        for (int g = 0; g < Q; g++) v16_store(part[g] + 16 * c, p[g]);
    }
    for (int64_t j = j0; j < j1; j++) {
        const int64_t kb = attn_k_block_at(kv, s0 + j, kvh) + (s0 + j) % KV_BLOCK;
        for (int64_t d = 16 * nv; d < hd; d++)
            for (int g = 0; g < Q; g++)
                if (!check || j < n[g]) part[g][d] = fmaf(kv_elem(kv->k, kb + d * KV_BLOCK, f16), w[g][j], part[g][d]);
    }
}

/* split: keys per split, the constant ATTN_SPLIT on every real path; other values only
 * for the negative control ATTN_SPLIT_BY_BATCH (attn_tile_split). */
V16_AI void attn_tile(const attn_shape *sh, const attn_kv *kv, int64_t kvh, const attn_queries *qs, const int Q,
                      const int64_t hd, const int64_t hdv, const int64_t split, const int f16) {
    float m[ATTN_QMAX], l[ATTN_QMAX];
    _Alignas(64) float acc[ATTN_QMAX][ATTN_MAX_HEAD_DIM];
    _Alignas(64) float part[ATTN_QMAX][ATTN_MAX_HEAD_DIM];
    _Alignas(64) float w[ATTN_QMAX][ATTN_SPLIT];
    int64_t pos_max = 0;
    for (int g = 0; g < Q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        memset(acc[g], 0, sizeof(float) * (size_t)hdv);
        pos_max = qs->pos[g] > pos_max ? qs->pos[g] : pos_max;
    }
    for (int64_t s0 = 0; s0 <= pos_max; s0 += split) {
        /* n[g]: keys of this split that query g attends to (<= 0: it is already done). */
        int64_t n[ATTN_QMAX], n_max = 0;
        for (int g = 0; g < Q; g++) {
            /* (the real path's expression spelled with the constant, so it compiles as it
             * always did) */
            if (split == ATTN_SPLIT) n[g] = qs->pos[g] - s0 + 1 < ATTN_SPLIT ? qs->pos[g] - s0 + 1 : ATTN_SPLIT;
            else n[g] = qs->pos[g] - s0 + 1 < split ? qs->pos[g] - s0 + 1 : split;
            n_max = n[g] > n_max ? n[g] : n_max;
        }
        float mc[ATTN_QMAX], lc[ATTN_QMAX];
        split_scores(kv, kvh, s0, n, n_max, qs, Q, hd, sh->scale, w, mc, f16);
        split_weights(n, Q, w, mc, lc);
        /* part[g] = sum_j w[g][j] * v_j over query g's keys, in position order. Keys that
         * every query of the tile attends to first (no test in the loop), then the rest. */
        for (int g = 0; g < Q; g++) memset(part[g], 0, sizeof(float) * (size_t)hdv);
        int64_t n_min = n_max;
        for (int g = 0; g < Q; g++) n_min = n[g] < n_min ? (n[g] > 0 ? n[g] : 0) : n_min;
        if (kv->layout == ATTN_KV_LATENT) {
            pv_accumulate_latent(kv, kvh, s0, 0, n_min, n, 0, Q, hdv, w, part, f16);
            pv_accumulate_latent(kv, kvh, s0, n_min, n_max, n, 1, Q, hdv, w, part, f16);
        } else {
            pv_accumulate(kv, kvh, s0, 0, n_min, n, 0, Q, hdv, w, part, f16);
            pv_accumulate(kv, kvh, s0, n_min, n_max, n, 1, Q, hdv, w, part, f16);
        }
        /* Merge this split into the running result, always in split order. */
        for (int g = 0; g < Q; g++) {
            if (n[g] <= 0) continue;
            const float mn = m[g] > mc[g] ? m[g] : mc[g];
            const float a = invar_exp16(v16_splat(m[g] - mn))[0], b = invar_exp16(v16_splat(mc[g] - mn))[0];
            l[g] = l[g] * a + lc[g] * b;
            for (int64_t d = 0; d < hdv; d++) acc[g][d] = acc[g][d] * a + part[g][d] * b;
            m[g] = mn;
        }
    }
    for (int g = 0; g < Q; g++) {
        const float inv = 1.0f / l[g];
        for (int64_t d = 0; d < hdv; d++) qs->out[g][d] = acc[g][d] * inv;
    }
}

/* AVX-512 build: specialised on the tile size and the common head dims so the compiler can
 * keep a tile's accumulators in registers; every instance performs the same per-query
 * operations as the general one. */
#define ATTN_TILE_Q(hd, f16)                                                \
    switch (Q) {                                                            \
    case 1: attn_tile(sh, kv, kvh, qs, 1, hd, hd, ATTN_SPLIT, f16); break;  \
    case 2: attn_tile(sh, kv, kvh, qs, 2, hd, hd, ATTN_SPLIT, f16); break;  \
    case 3: attn_tile(sh, kv, kvh, qs, 3, hd, hd, ATTN_SPLIT, f16); break;  \
    case 4: attn_tile(sh, kv, kvh, qs, 4, hd, hd, ATTN_SPLIT, f16); break;  \
    case 5: attn_tile(sh, kv, kvh, qs, 5, hd, hd, ATTN_SPLIT, f16); break;  \
    case 6: attn_tile(sh, kv, kvh, qs, 6, hd, hd, ATTN_SPLIT, f16); break;  \
    case 7: attn_tile(sh, kv, kvh, qs, 7, hd, hd, ATTN_SPLIT, f16); break;  \
    default: attn_tile(sh, kv, kvh, qs, 8, hd, hd, ATTN_SPLIT, f16); break; \
    }

/* The tile's queries: heads h0 .. h0+G-1 of each of n_jobs jobs. Returns their number. */
V16_AI int tile_queries(const attn_job *jobs, int n_jobs, int64_t h0, int G, int64_t hd, int64_t hdv,
                        attn_queries *qs) {
    int Q = 0;
    for (int t = 0; t < n_jobs; t++)
        for (int g = 0; g < G; g++, Q++) {
            qs->q[Q] = jobs[t].q + (h0 + g) * hd;
            qs->out[Q] = jobs[t].out + (h0 + g) * hdv;
            qs->pos[Q] = jobs[t].pos;
        }
    return Q;
}

/* The instances of one element type (f16 constant): see attn_tile_any. */
V16_AI void attn_tile_typed(const attn_shape *sh, const attn_kv *kv, int64_t kvh, const attn_queries *qs, const int Q,
                            const int f16) {
    const int64_t hd = sh->head_dim, hdv = sh->head_dim_v;
#if defined(__AVX512F__) && !defined(VEC16_TESTING_FLIP) /* (the flipped build: tests only) */
    if (hdv != hd) attn_tile(sh, kv, kvh, qs, Q, hd, hdv, ATTN_SPLIT, f16); /* MLA's latent head */
    else switch (hd) {
        case 64: ATTN_TILE_Q(64, f16) break;
        case 128: ATTN_TILE_Q(128, f16) break;
        default: attn_tile(sh, kv, kvh, qs, Q, hd, hd, ATTN_SPLIT, f16); break;
        }
#else
    /* Other builds: one general instance per type (they are fallbacks; 24 instances of
     * 16-lane code lowered to narrower vectors would cost minutes of compile time). */
    attn_tile(sh, kv, kvh, qs, Q, hd, hdv, ATTN_SPLIT, f16);
#endif
}

/* Query heads h0 .. h0+G-1 of KV head kvh for n_jobs jobs of one sequence (G * n_jobs
 * <= ATTN_QMAX). */
static void attn_tile_any(const attn_shape *sh, const attn_job *jobs, int n_jobs, int64_t kvh, int64_t h0, int G) {
    const attn_kv *kv = &jobs[0].kv;
    attn_queries qs = {0}; /* (zeroed: GCC cannot see that the loop fills the Q entries used) */
    const int Q = tile_queries(jobs, n_jobs, h0, G, sh->head_dim, sh->head_dim_v, &qs);
    if (kv->type == ATTN_KV_F16) attn_tile_typed(sh, kv, kvh, &qs, Q, 1);
    else attn_tile_typed(sh, kv, kvh, &qs, Q, 0);
}

/* Tests only, the negative control ATTN_SPLIT_BY_BATCH: any split, in one general instance. */
static void attn_tile_split(const attn_shape *sh, const attn_job *jobs, int n_jobs, int64_t kvh, int64_t h0, int G,
                            int64_t split) {
    attn_queries qs;
    const int Q = tile_queries(jobs, n_jobs, h0, G, sh->head_dim, sh->head_dim_v, &qs);
    const attn_kv *kv = &jobs[0].kv;
    attn_tile(sh, kv, kvh, &qs, Q, sh->head_dim, sh->head_dim_v, split, kv->type == ATTN_KV_F16);
}
