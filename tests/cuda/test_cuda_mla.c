/* Device test of the MLA kernels (mla.cu) and the MoE combine (moe.cu), on DeepSeek-V2-Lite's
 * latent shape (16 heads, kv_lora 512, rope 64, qk_nope 128, v_dim 128) and a tiny one:
 *   attention  two sequences of P positions in a random page order, every token of both in one
 *              launch (prefill, tokens paired per CTA), against each token alone (decode; odd
 *              tokens split over 7 CTAs and folded), in chunks of 37 (over 3 CTAs) and with
 *              the sequences' order swapped: bitwise equal; sampled tokens against an fp64
 *              reference; NEGATIVE CONTROL: the split following the launch's token count
 *              (the engine's backend_cuda_set_mla_split_by_batch) must differ;
 *   query,     the engine's path (head-major prep, per-head work list, grouped GEMM over the
 *   output,    heads): every row of a full call against the same row alone and at the other
 *              tile height: bitwise equal; against fp64 references; NEGATIVE CONTROL: the
 *              output GEMM's K chunk following the batch must differ;
 *   latent
 *   combine    against fp64; NEGATIVE CONTROL: the same terms summed in another order must
 *              differ somewhere (the order is what the engine fixes). */
#include <math.h>
#include <string.h>
#include "cuda_test_util.h"
#include "invar_cuda.h"
#include "kernels/cuda/invar_cuda_testing.h"

static int failures;
static invar_cuda_ctx *ctx;
typedef struct {
    const char *name;
    int H, R, rope, nope, vd, P;
} shape;

static void fill_f32(float *p, size_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) p[i] = scale * rng_uniform(&s);
}

/* Rope table [P][rope/2][cos, sin]. */
static float *rope_table(int P, int rope) {
    float *cs = malloc(sizeof(float) * (size_t)P * (size_t)rope);
    for (int p = 0; p < P; p++)
        for (int i = 0; i < rope / 2; i++) {
            double th = p * pow(10000.0, -2.0 * i / rope);
            cs[(size_t)p * rope + 2 * i] = (float)cos(th);
            cs[(size_t)p * rope + 2 * i + 1] = (float)sin(th);
        }
    return cs;
}

/* Runs the attention for tokens [t0, t0 + n) of the 2P-token batch (sequence 0's P, then
 * sequence 1's P, or the other way round with swap), writing their rows to out_host. */
typedef struct {
    const shape *s;
    const float *qlat;    /* host [2P][H][Dk] */
    const int32_t *bt;    /* host [2][pages] */
    uint16_t *d_cache;
    int pages;
    uint16_t *d_out;      /* [T][H][R] head-major bf16 */
} attn_setup;

/* parts > 1: the split-parallel mode (parts CTAs per token, states through ws, then the fold). */
static void run_attn(const attn_setup *a, int t0, int n, int swap, int split_by_t, int parts, float *out_host) {
    const shape *s = a->s;
    const int Dk = s->R + s->rope, H = s->H, R = s->R, rope = s->rope;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *seq = malloc(sizeof(int32_t) * (size_t)n);
    /* the kernel's inputs: head-major bf16 rows h n + i, the c part and the rope part */
    uint16_t *qc = malloc(2 * (size_t)n * H * R), *qp = malloc(2 * (size_t)n * H * rope);
    uint16_t *o = malloc(2 * (size_t)n * H * R);
    const int32_t *bt = a->bt;
    int32_t *bts = malloc(sizeof(int32_t) * 2 * (size_t)a->pages);
    for (int i = 0; i < n; i++) {
        int t = t0 + i, sq = t / s->P;
        pos[i] = t % s->P;
        seq[i] = swap ? 1 - sq : sq;
        for (int h = 0; h < H; h++) {
            const float *src = a->qlat + ((size_t)t * H + h) * Dk;
            for (int d = 0; d < Dk; d++) {
                if (d < R) qc[((size_t)h * n + i) * R + d] = f2bf(src[d]);
                else qp[((size_t)h * n + i) * rope + d - R] = f2bf(src[d]);
            }
        }
    }
    /* swap: block-table rows swapped too, so each token still reads its own sequence */
    for (int r = 0; r < 2; r++) memcpy(bts + r * a->pages, bt + (swap ? 1 - r : r) * a->pages, sizeof(int32_t) * a->pages);
    int32_t *d_pos = upload(pos, 4 * (size_t)n), *d_seq = upload(seq, 4 * (size_t)n), *d_bt = upload(bts, 8 * (size_t)a->pages);
    uint16_t *d_qc = upload(qc, 2 * (size_t)n * H * R), *d_qp = upload(qp, 2 * (size_t)n * H * rope);
    int split = split_by_t ? 64 * (1 + n % 3) : INVAR_CUDA_MLA_KV_SPLIT; /* multiples of the 64-key block */
    const int ws_splits = s->P / INVAR_CUDA_MLA_KV_SPLIT + 1;
    float *ws = parts > 1 ? dmalloc(invar_cuda_mla_parts_bytes(n, H, R, ws_splits)) : NULL;
    const invar_cuda_mla_parts par = {parts, ws, ws_splits};
    CKI(invar_cuda_mla_attention(ctx, d_qc, d_qp, a->d_cache, d_pos, d_seq, d_bt, a->pages, a->d_out, n, H, R, rope,
                                 0.07f, split, &par));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(o, a->d_out, 2 * (size_t)n * H * R, cudaMemcpyDeviceToHost));
    /* back to token-major float rows [n][H][R] for the comparisons */
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < R; d++)
                out_host[((size_t)i * H + h) * R + d] = bf2f(o[((size_t)h * n + i) * R + d]);
    CK(cudaFree(d_pos));
    CK(cudaFree(d_seq));
    CK(cudaFree(d_bt));
    CK(cudaFree(d_qc));
    CK(cudaFree(d_qp));
    if (ws) CK(cudaFree(ws));
    free(pos), free(seq), free(qc), free(qp), free(o), free(bts);
}

static void test_attention(const shape *s) {
    const int Dk = s->R + s->rope, P = s->P, pages = (P + INVAR_CUDA_PAGE - 1) / INVAR_CUDA_PAGE;
    const size_t T = 2 * (size_t)P, row = (size_t)s->H * s->R;
    /* the two sequences' pages interleaved in a shuffled pool */
    int32_t *bt = malloc(sizeof(int32_t) * 2 * (size_t)pages);
    for (int i = 0; i < 2 * pages; i++) bt[i] = i;
    uint64_t rs = 77;
    for (int i = 2 * pages - 1; i > 0; i--) {
        int j = (int)(rng_next(&rs) % (uint64_t)(i + 1)), x = bt[i];
        bt[i] = bt[j];
        bt[j] = x;
    }
    size_t cache_n = (size_t)2 * pages * INVAR_CUDA_PAGE * Dk;
    uint16_t *cache = malloc(sizeof(uint16_t) * cache_n);
    fill_bf16(cache, cache_n, 5, 1.0f);
    float *qlat = malloc(sizeof(float) * T * s->H * Dk);
    fill_f32(qlat, T * s->H * Dk, 9, 1.0f);
    attn_setup a = {s, qlat, bt, upload(cache, sizeof(uint16_t) * cache_n), pages, dmalloc(2 * T * row)};
    float *full = malloc(sizeof(float) * T * row), *part = malloc(sizeof(float) * T * row);
    run_attn(&a, 0, (int)T, 0, 0, 1, full);
    /* every token alone (odd ones over 7 CTAs, the split-parallel mode), in chunks of 37 (over
     * 3 CTAs each), and with the sequences swapped */
    long bad_alone = 0, bad_chunk = 0, bad_swap = 0;
    for (size_t t = 0; t < T; t += (t < 40 ? 1 : 7)) {
        run_attn(&a, (int)t, 1, 0, 0, t % 2 ? 7 : 1, part);
        bad_alone += memcmp(part, full + t * row, sizeof(float) * row) != 0;
    }
    for (size_t t = 0; t < T; t += 37) {
        int n = T - t < 37 ? (int)(T - t) : 37;
        run_attn(&a, (int)t, n, 0, 0, 3, part);
        bad_chunk += memcmp(part, full + t * row, sizeof(float) * row * (size_t)n) != 0;
    }
    run_attn(&a, 0, (int)T, 1, 0, 1, part);
    bad_swap = memcmp(part, full, sizeof(float) * T * row) != 0;
    printf("%-10s mla attention: alone %ld, chunks %ld, swapped %ld differing (want 0)\n", s->name, bad_alone,
           bad_chunk, bad_swap);
    EXPECT(bad_alone == 0 && bad_chunk == 0 && bad_swap == 0, "%s: MLA attention depends on the batch", s->name);
    /* fp64 reference on sampled tokens (the scores of bf16 keys and fp32 queries) */
    double worst = 0;
    for (int k = 0; k < 12; k++) {
        const size_t t = (size_t)(k * 2654435761u % (unsigned)T);
        const int p = (int)(t % P), sq = (int)(t / P);
        for (int h = 0; h < s->H; h++) {
            const float *q = qlat + (t * s->H + h) * Dk;
            double *sc = malloc(sizeof(double) * (size_t)(p + 1)), mx = -1e300, sum = 0;
            for (int j = 0; j <= p; j++) {
                const uint16_t *kr = cache + ((size_t)bt[sq * pages + j / 16] * 16 + j % 16) * Dk;
                double d = 0;
                for (int e = 0; e < Dk; e++) d += (double)q[e] * bf2f(kr[e]);
                sc[j] = 0.07 * d;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j <= p; j++) sum += sc[j] = exp(sc[j] - mx);
            double num = 0, den = 0;
            for (int r = 0; r < s->R; r++) {
                double o = 0;
                for (int j = 0; j <= p; j++)
                    o += sc[j] * bf2f(cache[((size_t)bt[sq * pages + j / 16] * 16 + j % 16) * Dk + r]);
                o /= sum;
                double g = full[t * row + (size_t)h * s->R + r] - o;
                num += g * g, den += o * o;
            }
            double e = sqrt(num / (den + 1e-300));
            worst = e > worst ? e : worst;
            free(sc);
        }
    }
    /* q, the softmax weights and the output are bf16 (2^-9 relative each) */
    printf("%-10s mla attention vs fp64: worst relative error %.2e (want < 1e-2)\n", s->name, worst);
    EXPECT(worst < 1e-2, "%s: MLA attention inaccurate", s->name);
    /* negative control: the split follows the launch's token count */
    run_attn(&a, 0, (int)T, 0, 1, 1, full);
    long bad_ctl = 0;
    for (size_t t = 16; t < T; t += 5) {
        run_attn(&a, (int)t, 1, 0, 1, 1, part);
        bad_ctl += memcmp(part, full + t * row, sizeof(float) * row) != 0;
    }
    printf("%-10s control (split follows T): %ld tokens differ alone vs batched (want > 0)\n", s->name, bad_ctl);
    EXPECT(bad_ctl > 0, "%s: the MLA split control found nothing", s->name);
    CK(cudaFree(a.d_cache));
    CK(cudaFree(a.d_out));
    free(bt), free(cache), free(qlat), free(full), free(part);
}

/* The engine's absorbed-query path for tokens t0..t0+n of q: head-major prep, the per-head
 * work list, the grouped GEMM over the heads with W_UK (k_chunk 0: the invariant one); qc
 * [H][n][R], qpe [H][n][rope]. */
typedef struct {
    int H, R, rope, nope, vd, ldq;
    const float *d_q, *d_cs;
    const int32_t *d_pos;
    const uint16_t *d_uk, *d_uv;
    int32_t *d_ent, *d_nent;
    uint16_t *d_qn;
} proj_setup;

static void run_query(const proj_setup *p, int t0, int n, int bm, uint16_t *qc, uint16_t *qpe) {
    CKI(invar_cuda_mla_query_prep(ctx, p->d_q + (size_t)t0 * p->ldq, p->ldq, p->H, p->nope, p->rope, p->d_cs,
                                  p->d_pos + t0, 0, p->d_qn, qpe, n));
    CKI(invar_cuda_mla_heads_plan(ctx, p->H, n, bm, p->d_ent, p->d_nent));
    CKI(invar_cuda_gemm_grouped(ctx, p->d_qn, p->d_uk, qc, INVAR_CUDA_BF16, p->H * n, p->R, p->nope, p->H, p->d_ent,
                                p->d_nent, invar_cuda_mla_heads_max_entries(p->H, n, bm), bm));
}

/* The output path: olat [H][n][R] through W_UV per head into out [n][H vd]; k_chunk > 0: the
 * grouped GEMM at that K chunk (the engine's SPLIT_BY_M control). */
static void run_output(const proj_setup *p, const uint16_t *olat, int n, int bm, int k_chunk, uint16_t *ov,
                       uint16_t *out) {
    const int me = invar_cuda_mla_heads_max_entries(p->H, n, bm);
    CKI(invar_cuda_mla_heads_plan(ctx, p->H, n, bm, p->d_ent, p->d_nent));
    if (k_chunk)
        CKI(invar_cuda_gemm_grouped_experiment_kc(ctx, olat, p->d_uv, ov, INVAR_CUDA_BF16, p->H * n, p->vd, p->R, p->H,
                                                  p->d_ent, p->d_nent, me, bm, k_chunk));
    else
        CKI(invar_cuda_gemm_grouped(ctx, olat, p->d_uv, ov, INVAR_CUDA_BF16, p->H * n, p->vd, p->R, p->H, p->d_ent,
                                    p->d_nent, me, bm));
    CKI(invar_cuda_mla_heads_to_tokens(ctx, ov, p->H, n, p->vd, out));
}

/* Head h of a head-major [H][n][w] device array equal to row t of [H][T][w]? Counts heads that differ. */
static long heads_differ(const uint16_t *one, const uint16_t *all, int H, int T, int t, int w) {
    long bad = 0;
    for (int h = 0; h < H; h++)
        bad += invar_cuda_rows_differ(ctx, one + (size_t)h * w, all + ((size_t)h * T + t) * w, 1, 2 * (size_t)w) != 0;
    return bad;
}

/* query and output projections, and the latent rows: full call vs alone, and fp64 */
static void test_projections(const shape *s) {
    const int H = s->H, R = s->R, rope = s->rope, nope = s->nope, vd = s->vd, Dk = R + rope, T = 300;
    const int ldq = H * (nope + rope);
    float *q = malloc(sizeof(float) * (size_t)T * ldq), *cs = rope_table(T, rope);
    uint16_t *uk = malloc(sizeof(uint16_t) * (size_t)H * nope * R), *uv = malloc(sizeof(uint16_t) * (size_t)H * R * vd);
    fill_f32(q, (size_t)T * ldq, 3, 1.0f);
    fill_bf16(uk, (size_t)H * nope * R, 4, 0.1f); /* [H][R][nope] */
    fill_bf16(uv, (size_t)H * R * vd, 6, 0.1f);   /* [H][vd][R] */
    int32_t *pos = malloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) pos[t] = (t * 7) % T;
    proj_setup p = {H, R, rope, nope, vd, ldq, upload(q, sizeof(float) * (size_t)T * ldq),
                    upload(cs, sizeof(float) * (size_t)T * rope), upload(pos, 4 * (size_t)T),
                    upload(uk, sizeof(uint16_t) * (size_t)H * nope * R), upload(uv, sizeof(uint16_t) * (size_t)H * R * vd),
                    dmalloc(16 * (size_t)invar_cuda_mla_heads_max_entries(H, T, 64)), dmalloc(4),
                    dmalloc(2 * (size_t)T * H * nope)};
    const size_t nqc = (size_t)T * H * R, nqp = (size_t)T * H * rope;
    uint16_t *d_qc = dmalloc(2 * nqc), *d_qp = dmalloc(2 * nqp), *d_qc1 = dmalloc(2 * (size_t)H * R),
             *d_qp1 = dmalloc(2 * (size_t)H * rope), *d_qc128 = dmalloc(2 * nqc), *d_qp128 = dmalloc(2 * nqp);
    run_query(&p, 0, T, 64, d_qc, d_qp);
    run_query(&p, 0, T, 128, d_qc128, d_qp128);
    long bad = invar_cuda_rows_differ(ctx, d_qc, d_qc128, (size_t)T * H, 2 * (size_t)R);
    for (int t = 0; t < T; t += 13) {
        run_query(&p, t, 1, 64, d_qc1, d_qp1);
        bad += heads_differ(d_qc1, d_qc, H, T, t, R) + heads_differ(d_qp1, d_qp, H, T, t, rope);
    }
    uint16_t *qc = download(d_qc, 2 * nqc), *qp = download(d_qp, 2 * nqp);
    double num = 0, den = 0;
    for (int t = 0; t < T; t += 29)
        for (int h = 0; h < H; h++) {
            const float *qh = q + (size_t)t * ldq + (size_t)h * (nope + rope);
            for (int r = 0; r < Dk; r++) {
                double ref, got;
                if (r < R) {
                    ref = 0;
                    for (int n = 0; n < nope; n++) ref += (double)qh[n] * bf2f(uk[((size_t)h * R + r) * nope + n]);
                    got = bf2f(qc[((size_t)h * T + t) * R + r]);
                } else { /* normal pairs (2i, 2i+1) */
                    int e = r - R, i = e / 2;
                    double c = cs[(size_t)pos[t] * rope + 2 * i], sn = cs[(size_t)pos[t] * rope + 2 * i + 1];
                    double x0 = qh[nope + 2 * i], x1 = qh[nope + 2 * i + 1];
                    ref = e % 2 ? x0 * sn + x1 * c : x0 * c - x1 * sn;
                    got = bf2f(qp[((size_t)h * T + t) * rope + e]);
                }
                num += (got - ref) * (got - ref), den += ref * ref;
            }
        }
    /* q_nope enters the GEMM in bf16 and q_c, q_pe leave in bf16 (2^-9 relative each) */
    printf("%-10s mla query: %ld heads differ alone or at 128-row tiles (want 0), vs fp64 %.2e (want < 1e-2)\n",
           s->name, bad, sqrt(num / den));
    EXPECT(bad == 0 && sqrt(num / den) < 1e-2, "%s: mla query", s->name);
    /* output: olat = the absorbed queries' q_c (head-major bf16) */
    const size_t no = (size_t)T * H * vd;
    uint16_t *d_ov = dmalloc(2 * no), *d_o = dmalloc(2 * no), *d_o1 = dmalloc(2 * (size_t)H * vd),
             *d_ol1 = dmalloc(2 * (size_t)H * R), *d_octl = dmalloc(2 * no);
    run_output(&p, d_qc, T, 64, 0, d_ov, d_o);
    long ctl = 0;
    bad = 0;
    run_output(&p, d_qc, T, 64, 256, d_ov, d_octl); /* the control's K chunk for the full batch */
    for (int t = 0; t < T; t += 13) {
        for (int h = 0; h < H; h++)
            CK(cudaMemcpy(d_ol1 + (size_t)h * R, d_qc + ((size_t)h * T + t) * R, 2 * (size_t)R, cudaMemcpyDeviceToDevice));
        run_output(&p, d_ol1, 1, 64, 0, d_ov, d_o1);
        bad += invar_cuda_rows_differ(ctx, d_o1, d_o + (size_t)t * H * vd, 1, 2 * (size_t)H * vd);
        ctl += invar_cuda_rows_differ(ctx, d_o1, d_octl + (size_t)t * H * vd, 1, 2 * (size_t)H * vd);
    }
    uint16_t *o = download(d_o, 2 * no);
    num = den = 0;
    for (int t = 0; t < T; t += 29)
        for (int h = 0; h < H; h++)
            for (int n = 0; n < vd; n++) {
                double ref = 0;
                for (int r = 0; r < R; r++)
                    ref += (double)bf2f(qc[((size_t)h * T + t) * R + r]) * bf2f(uv[((size_t)h * vd + n) * R + r]);
                double g = bf2f(o[(size_t)t * H * vd + (size_t)h * vd + n]) - ref;
                num += g * g, den += ref * ref;
            }
    printf("%-10s mla output: %ld rows differ alone (want 0), vs fp64 %.2e (bf16 out); control (K chunk 256 for the "
           "batch): %ld rows differ (want > 0 where R > 256)\n", s->name, bad, sqrt(num / den), ctl);
    EXPECT(bad == 0 && sqrt(num / den) < 1e-2, "%s: mla output", s->name);
    EXPECT(R <= 256 || ctl > 0, "%s: the output's K-chunk control found nothing", s->name);
    /* latent rows: c_kv normed, k_pe rotated, into slots; the q bottleneck's norm */
    const int ql_rank = 64, lda = ql_rank + Dk;
    float *a = malloc(sizeof(float) * (size_t)T * lda), *nw = malloc(sizeof(float) * (size_t)(R + ql_rank));
    fill_f32(a, (size_t)T * lda, 8, 2.0f);
    for (int i = 0; i < R + ql_rank; i++) nw[i] = 1.0f + 0.01f * (float)(i % 7);
    int32_t *slot = malloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) slot[t] = (t * 37) % T;
    float *d_a = upload(a, sizeof(float) * (size_t)T * lda), *d_nw = upload(nw, sizeof(float) * (size_t)(R + ql_rank));
    int32_t *d_slot = upload(slot, 4 * (size_t)T);
    uint16_t *d_cache = dmalloc(2 * (size_t)T * Dk), *d_qa = dmalloc(2 * (size_t)T * ql_rank);
    CKI(invar_cuda_mla_latent(ctx, d_a, lda, ql_rank, d_nw + R, d_qa, ql_rank, R, rope, d_nw, 1e-6f, p.d_cs, p.d_pos, 0,
                              d_cache, d_slot, T));
    uint16_t *cache = download(d_cache, 2 * (size_t)T * Dk), *qa = download(d_qa, 2 * (size_t)T * ql_rank);
    double worst = 0;
    for (int t = 0; t < T; t += 17) {
        const float *kv = a + (size_t)t * lda + ql_rank;
        double ss = 0, sq = 0;
        for (int d = 0; d < R; d++) ss += (double)kv[d] * kv[d];
        for (int d = 0; d < ql_rank; d++) sq += (double)a[(size_t)t * lda + d] * a[(size_t)t * lda + d];
        const double sc = 1 / sqrt(ss / R + 1e-6), scq = 1 / sqrt(sq / ql_rank + 1e-6);
        for (int d = 0; d < Dk; d++) {
            double ref;
            if (d < R) ref = kv[d] * sc * nw[d];
            else {
                int e = d - R, i = e / 2;
                double c = cs[(size_t)pos[t] * rope + 2 * i], sn = cs[(size_t)pos[t] * rope + 2 * i + 1];
                double x0 = kv[R + 2 * i], x1 = kv[R + 2 * i + 1];
                ref = e % 2 ? x0 * sn + x1 * c : x0 * c - x1 * sn;
            }
            double g = fabs(bf2f(cache[(size_t)slot[t] * Dk + d]) - ref) / (fabs(ref) + 1e-3);
            worst = g > worst ? g : worst;
        }
        for (int d = 0; d < ql_rank; d++) {
            double ref = a[(size_t)t * lda + d] * scq * nw[R + d];
            double g = fabs(bf2f(qa[(size_t)t * ql_rank + d]) - ref) / (fabs(ref) + 1e-3);
            worst = g > worst ? g : worst;
        }
    }
    printf("%-10s mla latent vs fp64: worst relative error %.2e (bf16 out, want < 1e-2)\n", s->name, worst);
    EXPECT(worst < 1e-2, "%s: mla_latent", s->name);
    void *ds[] = {(void *)p.d_q, (void *)p.d_cs, (void *)p.d_pos, (void *)p.d_uk, (void *)p.d_uv, p.d_ent, p.d_nent,
                  p.d_qn, d_qc, d_qp, d_qc1, d_qp1, d_qc128, d_qp128, d_ov, d_o, d_o1, d_ol1, d_octl, d_a, d_nw,
                  d_slot, d_cache, d_qa};
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) CK(cudaFree(ds[i]));
    free(q), free(cs), free(uk), free(uv), free(pos), free(qc), free(qp), free(o), free(a), free(nw), free(slot);
    free(cache), free(qa);
}

/* The combine against fp64, and the control: the same terms in the reverse rank order. */
static void test_combine(void) {
    const int T = 512, k = 6, D = 2048, rows = T * k;
    float *y = malloc(sizeof(float) * (size_t)rows * D), *w = malloc(sizeof(float) * (size_t)rows), *sh = malloc(sizeof(float) * (size_t)T * D);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)rows), *slot_r = malloc(sizeof(int32_t) * (size_t)rows);
    float *w_r = malloc(sizeof(float) * (size_t)rows);
    fill_f32(y, (size_t)rows * D, 11, 1.0f);
    fill_f32(sh, (size_t)T * D, 12, 1.0f);
    fill_f32(w, (size_t)rows, 13, 0.5f);
    for (int i = 0; i < rows; i++) slot[i] = (int32_t)(((uint64_t)i * 7919) % (uint64_t)rows);
    for (int t = 0; t < T; t++)
        for (int r = 0; r < k; r++) slot_r[t * k + r] = slot[t * k + k - 1 - r], w_r[t * k + r] = w[t * k + k - 1 - r];
    float *d_y = upload(y, sizeof(float) * (size_t)rows * D), *d_w = upload(w, 4 * (size_t)rows), *d_sh = upload(sh, sizeof(float) * (size_t)T * D);
    float *d_wr = upload(w_r, 4 * (size_t)rows);
    int32_t *d_s = upload(slot, 4 * (size_t)rows), *d_sr = upload(slot_r, 4 * (size_t)rows);
    uint16_t *d_o = dmalloc(2 * (size_t)T * D), *d_or = dmalloc(2 * (size_t)T * D);
    CKI(invar_cuda_moe_combine(ctx, d_y, d_s, d_w, k, d_sh, d_o, T, D));
    CKI(invar_cuda_moe_combine(ctx, d_y, d_sr, d_wr, k, d_sh, d_or, T, D));
    uint16_t *o = download(d_o, 2 * (size_t)T * D);
    double num = 0, den = 0;
    for (int t = 0; t < T; t += 7)
        for (int d = 0; d < D; d++) {
            double ref = sh[(size_t)t * D + d];
            for (int r = 0; r < k; r++) ref += (double)w[t * k + r] * y[(size_t)slot[t * k + r] * D + d];
            double g = bf2f(o[(size_t)t * D + d]) - ref;
            num += g * g, den += ref * ref;
        }
    long ctl = invar_cuda_rows_differ(ctx, d_o, d_or, (size_t)T, 2 * (size_t)D);
    printf("moe combine vs fp64 %.2e (bf16 out); control (reverse rank order): %ld of %d rows differ (want > 0)\n",
           sqrt(num / den), ctl, T);
    EXPECT(sqrt(num / den) < 1e-2, "moe_combine inaccurate");
    EXPECT(ctl > 0, "moe_combine: the order control found nothing");
    void *ds[] = {d_y, d_w, d_sh, d_wr, d_s, d_sr, d_o, d_or};
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) CK(cudaFree(ds[i]));
    free(y), free(w), free(sh), free(slot), free(slot_r), free(w_r), free(o);
}

int main(void) {
    int rc = invar_cuda_init(&ctx, 0);
    if (rc == INVAR_CUDA_ENODEV) {
        printf("no sm_90 device: skipped\n");
        return SKIP_CODE;
    }
    if (rc) return 2;
    const int small = getenv("INVAR_CUDA_TEST_SMALL") != NULL;
    const shape shapes[] = {{"v2-lite", 16, 512, 64, 128, 128, small ? 300 : 700}, {"tiny", 4, 64, 16, 32, 32, 300}};
    for (int i = 0; i < 2; i++) {
        test_attention(&shapes[i]);
        test_projections(&shapes[i]);
    }
    test_combine();
    invar_cuda_free(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
