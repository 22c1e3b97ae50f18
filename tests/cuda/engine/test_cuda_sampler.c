/* The device sampler (invar_cuda_sample_rows) against the engine's host sampler
 * (sampler_choose_lse) on the same logits rows and the same lse, bit for bit: token, logprob
 * and every alternative, over vocabularies of 1000, 32003 and 128256 ids, logits that are
 * sharp, flat, tied (quantised values) or dominated by one id, and random combinations of
 * temperature, top-k, top-p, min-p, alternatives, seeds and positions.
 *   order    the same rows sampled in a shuffled row list give the same results per row
 *   control  the device keyed at position + 1 must disagree with the host (the comparison
 *            sees a changed draw)
 * Rows whose candidate set exceeds INVAR_CUDA_SAMPLE_CAP come back with status 1 (the backend
 * samples them on the host); they are counted. Exits 77 without a usable GPU. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda_test_util.h" /* CK */
#include "invar.h"
#include "invar_cuda.h"
#include "sampling/sampler.h"

#define ROWS 384
static uint64_t g_rng = 0x2545F4914F6CDD1DULL;
static int failures;

static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}
static float unif(void) { return (float)rnd(1u << 24) / (float)(1u << 24); }
static float gauss(void) {
    float u = unif() + 1e-7f, v = unif();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}


static void fill_row(float *x, int V, int kind) {
    for (int v = 0; v < V; v++) {
        switch (kind) {
        case 0: x[v] = 3.0f * gauss(); break;                       /* sharp */
        case 1: x[v] = 0.2f * gauss(); break;                       /* flat: large candidate sets */
        case 2: x[v] = 0.5f * floorf(4.0f * gauss()); break;        /* many exact ties */
        default: x[v] = gauss() + (v == V / 3 ? 25.0f : 0.0f); break; /* one dominant id */
        }
    }
}

static void params_of(invar_sampling *s, int64_t *pos) {
    static const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.3f};
    static const int32_t ks[] = {0, 0, 1, 5, 50, 1000};
    static const float ps[] = {1.0f, 1.0f, 0.95f, 0.9f, 0.5f, 0.1f};
    static const float mps[] = {0.0f, 0.0f, 0.0f, 0.02f, 0.1f};
    static const int32_t tops[] = {0, 0, 1, 5, 20};
    invar_sampling_default(s);
    s->temperature = temps[rnd(5)];
    s->top_k = ks[rnd(6)];
    s->top_p = ps[rnd(6)];
    s->min_p = mps[rnd(5)];
    s->top_logprobs = tops[rnd(5)];
    s->seed = ((uint64_t)rnd(1u << 30) << 32) ^ rnd(1u << 30);
    *pos = rnd(100000);
}

static int same(const invar_token_info *a, const invar_cuda_sample_out *b) {
    if (a->token != b->token || memcmp(&a->logprob, &b->logprob, 4) || a->n_top != b->n_top) return 0;
    for (int r = 0; r < a->n_top; r++)
        if (a->top_ids[r] != b->top_ids[r] || memcmp(&a->top_logprobs[r], &b->top_logprobs[r], 4)) return 0;
    return 1;
}

static void run_vocab(invar_cuda_ctx *ctx, int V) {
    const int ld = (V + 7) / 8 * 8;
    float *x = malloc(sizeof(float) * (size_t)ld * ROWS), *lse = malloc(sizeof(float) * ROWS);
    invar_cuda_sample_params *prm = malloc(sizeof *prm * ROWS);
    invar_cuda_sample_out *out = malloc(sizeof *out * ROWS), *out2 = malloc(sizeof *out2 * ROWS);
    invar_sampling *ss = malloc(sizeof *ss * ROWS);
    int64_t *pos = malloc(sizeof(int64_t) * ROWS);
    int32_t *perm = malloc(sizeof(int32_t) * ROWS), *work_idx = malloc(sizeof(int32_t) * (size_t)V);
    float *work_p = malloc(sizeof(float) * 2 * (size_t)V);
    for (int r = 0; r < ROWS; r++) {
        fill_row(x + (size_t)r * ld, V, r % 4);
        for (int v = V; v < ld; v++) x[(size_t)r * ld + v] = 0.0f;
        params_of(&ss[r], &pos[r]);
        prm[r] = (invar_cuda_sample_params){.temperature = ss[r].temperature, .top_p = ss[r].top_p,
                                            .min_p = ss[r].min_p, .top_k = ss[r].top_k,
                                            .top_logprobs = ss[r].top_logprobs, .seed = ss[r].seed,
                                            .position = pos[r]};
        perm[r] = r;
    }
    for (int r = ROWS - 1; r > 0; r--) {
        int j = (int)rnd((uint32_t)r + 1), t = perm[r];
        perm[r] = perm[j];
        perm[j] = t;
    }
    float *dx, *dlse, *dwork;
    invar_cuda_sample_params *dprm;
    invar_cuda_sample_out *dout;
    int32_t *drows, *dargmax;
    CK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)ld * ROWS));
    CK(cudaMalloc((void **)&dlse, sizeof(float) * ROWS));
    CK(cudaMalloc((void **)&dargmax, sizeof(int32_t) * ROWS));
    CK(cudaMalloc((void **)&dwork, sizeof(float) * (size_t)ld * ROWS));
    CK(cudaMalloc((void **)&dprm, sizeof *dprm * ROWS));
    CK(cudaMalloc((void **)&dout, sizeof *dout * ROWS));
    CK(cudaMalloc((void **)&drows, sizeof(int32_t) * ROWS));
    CK(cudaMemcpy(dx, x, sizeof(float) * (size_t)ld * ROWS, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dprm, prm, sizeof *prm * ROWS, cudaMemcpyHostToDevice));
    if (invar_cuda_row_stats(ctx, dx, ld, V, ROWS, NULL, dargmax, dlse, NULL) ||
        invar_cuda_sample_rows(ctx, dx, ld, V, ROWS, NULL, dlse, dprm, dout, dwork)) {
        fprintf(stderr, "launch: %s\n", invar_cuda_last_error(ctx));
        exit(2);
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out, dout, sizeof *out * ROWS, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse, dlse, sizeof(float) * ROWS, cudaMemcpyDeviceToHost));
    /* host sampler on the same rows with the device lse */
    int diff = 0, host_rows = 0, compared = 0, sampled = 0;
    invar_token_info *ref = malloc(sizeof *ref * ROWS);
    for (int r = 0; r < ROWS; r++) {
        sampler_choose_lse(x + (size_t)r * ld, V, &ss[r], pos[r], NULL, lse[r], &ref[r], work_idx, work_p);
        if (out[r].status) {
            host_rows++;
            continue;
        }
        compared++;
        sampled += ss[r].temperature > 0.0f;
        if (!same(&ref[r], &out[r])) {
            if (diff < 5)
                printf("  V=%d row %d (T=%.2f k=%d p=%.2f minp=%.2f top=%d): host %d %a, device %d %a\n", V, r,
                       ss[r].temperature, ss[r].top_k, ss[r].top_p, ss[r].min_p, ss[r].top_logprobs, ref[r].token,
                       ref[r].logprob, out[r].token, out[r].logprob);
            diff++;
        }
    }
    /* The flat and tied rows (half of them) are made to outgrow the device's candidate set
     * under loose top-p / min-p: those rows are the host's. */
    int ok = diff == 0 && compared >= ROWS / 2;
    printf("V=%-6d device == host sampler: %d of %d rows differ (%d sampled with T > 0, %d left to the host) %s\n", V,
           diff, compared, sampled, host_rows, ok ? "ok" : "FAILED");
    failures += !ok;
    /* order: a shuffled row list, results written in list order */
    invar_cuda_sample_params *pp = malloc(sizeof *pp * ROWS);
    for (int k = 0; k < ROWS; k++) pp[k] = prm[perm[k]];
    CK(cudaMemcpy(dprm, pp, sizeof *pp * ROWS, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(drows, perm, sizeof(int32_t) * ROWS, cudaMemcpyHostToDevice));
    if (invar_cuda_sample_rows(ctx, dx, ld, V, ROWS, drows, dlse, dprm, dout, dwork)) exit(2);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out2, dout, sizeof *out2 * ROWS, cudaMemcpyDeviceToHost));
    int odiff = 0;
    for (int k = 0; k < ROWS; k++) {
        const invar_cuda_sample_out *a = &out2[k], *b = &out[perm[k]];
        int d = a->status != b->status || a->token != b->token || memcmp(&a->logprob, &b->logprob, 4) ||
                a->n_top != b->n_top;
        for (int r = 0; !d && r < a->n_top; r++)
            d = a->top_ids[r] != b->top_ids[r] || memcmp(&a->top_logprobs[r], &b->top_logprobs[r], 4);
        odiff += d;
    }
    printf("V=%-6d shuffled row list == in-order results: %d of %d rows differ %s\n", V, odiff, ROWS,
           odiff ? "FAILED" : "ok");
    failures += odiff != 0;
    /* control: the device keyed at position + 1 */
    for (int k = 0; k < ROWS; k++) pp[k] = prm[k], pp[k].position++;
    CK(cudaMemcpy(dprm, pp, sizeof *pp * ROWS, cudaMemcpyHostToDevice));
    if (invar_cuda_sample_rows(ctx, dx, ld, V, ROWS, NULL, dlse, dprm, dout, dwork)) exit(2);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out2, dout, sizeof *out2 * ROWS, cudaMemcpyDeviceToHost));
    int cdiff = 0;
    for (int r = 0; r < ROWS; r++) cdiff += !out2[r].status && !same(&ref[r], &out2[r]);
    printf("V=%-6d control (device at position + 1): %d rows differ %s\n", V, cdiff, cdiff ? "ok" : "FAILED");
    failures += cdiff == 0;
    cudaFree(dx);
    cudaFree(dlse);
    cudaFree(dargmax);
    cudaFree(dwork);
    cudaFree(dprm);
    cudaFree(dout);
    cudaFree(drows);
    free(x), free(lse), free(prm), free(out), free(out2), free(ss), free(pos), free(perm), free(work_idx);
    free(work_p), free(ref), free(pp);
}

int main(void) {
    invar_cuda_ctx *ctx;
    if (invar_cuda_init(&ctx, 0)) {
        printf("no usable sm_90 GPU: skipped\n");
        return 77;
    }
    static const int Vs[] = {1000, 32003, 128256};
    /* INVAR_CUDA_TEST_SMALL=1 (compute-sanitizer runs): the smaller two vocabularies. */
    for (int i = 0; i < (getenv("INVAR_CUDA_TEST_SMALL") ? 2 : 3); i++) run_vocab(ctx, Vs[i]);
    invar_cuda_free(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
