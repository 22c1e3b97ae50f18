/* The CUDA backend's weights: every GGUF matrix becomes bf16 [rows][k] on the device
 * (F32/F16 rounded to nearest even, BF16 copied, quantised types dequantised to float
 * first), norm weights bf16, biases and QK-norm weights fp32. Matrices that read the same
 * activations are stacked (q/k/v, gate/up): a GEMM element depends only on its row of W and
 * K, so stacking changes no bit. Conversion runs row-parallel on the host. */
#ifdef INVAR_HAVE_CUDA
#include "backend/cuda_weights.h"

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/quant.h"

typedef struct {
    const cpu_weight *w;
    uint16_t *dst;      /* host rows of this matrix in the staging buffer */
    int64_t rows_per_task;
    _Atomic int failed;
} convert_job;

static void convert_task(void *p, int64_t task) {
    convert_job *j = p;
    const cpu_weight *w = j->w;
    float *row = malloc(sizeof(float) * (size_t)w->k);
    if (!row) {
        j->failed = 1;
        return;
    }
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task < w->n ? r0 + j->rows_per_task : w->n;
    for (int64_t r = r0; r < r1; r++) {
        dequant_row(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, row, w->k);
        uint16_t *d = j->dst + (size_t)r * (size_t)w->k;
        for (int64_t k = 0; k < w->k; k++) d[k] = f32_to_bf16(row[k]);
    }
    free(row);
}

static int dev_alloc(void **p, size_t bytes, char *err, size_t errlen) {
    if (cudaMalloc(p, bytes ? bytes : 16) != cudaSuccess) {
        *p = NULL;
        snprintf(err, errlen, "cuda: cannot allocate %zu bytes of device memory", bytes);
        return -1;
    }
    return 0;
}

/* Stacks `nw` matrices of equal k into `dst` (device), rows one after another, padded with
 * zero rows to pad_rows in total when larger. */
static int upload_into(threadpool *tp, const cpu_weight *const *ws, int nw, int64_t pad_rows, uint16_t *dst,
                       uint16_t *staging, char *err, size_t errlen) {
    int64_t rows = 0, k = ws[0]->k;
    for (int i = 0; i < nw; i++) rows += ws[i]->n;
    if (pad_rows < rows) pad_rows = rows;
    size_t bytes = sizeof(uint16_t) * (size_t)pad_rows * (size_t)k;
    memset(staging, 0, bytes);
    int64_t at = 0;
    for (int i = 0; i < nw; i++) {
        convert_job j = {ws[i], staging + (size_t)at * (size_t)k, 64, 0};
        threadpool_run(tp, convert_task, &j, (ws[i]->n + 63) / 64);
        if (j.failed) return snprintf(err, errlen, "out of host memory"), -1;
        at += ws[i]->n;
    }
    if (cudaMemcpy(dst, staging, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        snprintf(err, errlen, "cuda: weight upload failed");
        return -1;
    }
    return 0;
}

static int64_t stack_rows(const cpu_weight *const *ws, int nw, int64_t pad_rows) {
    int64_t rows = 0;
    for (int i = 0; i < nw; i++) rows += ws[i]->n;
    return pad_rows > rows ? pad_rows : rows;
}

/* upload_into a new device matrix. */
static int upload_stack(threadpool *tp, const cpu_weight *const *ws, int nw, int64_t pad_rows, uint16_t **out,
                        uint16_t *staging, char *err, size_t errlen) {
    size_t bytes = sizeof(uint16_t) * (size_t)stack_rows(ws, nw, pad_rows) * (size_t)ws[0]->k;
    if (dev_alloc((void **)out, bytes, err, errlen)) return -1;
    return upload_into(tp, ws, nw, pad_rows, *out, staging, err, errlen);
}

/* Every expert's gate and up rows stacked [E][2 F][D], or downs [E][D][F] (gu 0), one
 * expert at a time through the staging buffer. */
static int upload_experts(threadpool *tp, const layer_weights *L, int64_t E, int gu, uint16_t **out,
                          uint16_t *staging, char *err, size_t errlen) {
    const cpu_weight *w0 = gu ? &L->exp_gate[0] : &L->exp_down[0];
    const size_t per = (size_t)(gu ? 2 : 1) * (size_t)w0->n * (size_t)w0->k;
    if (dev_alloc((void **)out, sizeof(uint16_t) * per * (size_t)E, err, errlen)) return -1;
    for (int64_t e = 0; e < E; e++) {
        const cpu_weight *two[] = {&L->exp_gate[e], &L->exp_up[e]}, *one[] = {&L->exp_down[e]};
        if (upload_into(tp, gu ? two : one, gu ? 2 : 1, 0, *out + (size_t)e * per, staging, err, errlen)) return -1;
    }
    return 0;
}

/* Per head h, w[h] ([n][k]) stacked: out [H][n][k], the grouped GEMM's [E][N][K] (the MLA
 * projections W_UK and W_UV, one head at a time through the staging buffer). */
static int upload_heads(threadpool *tp, const cpu_weight *w, int64_t H, uint16_t **out, uint16_t *staging, char *err,
                        size_t errlen) {
    const size_t per = (size_t)w[0].n * (size_t)w[0].k;
    if (dev_alloc((void **)out, sizeof(uint16_t) * per * (size_t)H, err, errlen)) return -1;
    for (int64_t h = 0; h < H; h++) {
        const cpu_weight *one[] = {&w[h]};
        if (upload_into(tp, one, 1, 0, *out + (size_t)h * per, staging, err, errlen)) return -1;
    }
    return 0;
}

static int upload_f32(const float *v, size_t n, float **out, char *err, size_t errlen) {
    *out = NULL;
    if (!v) return 0;
    if (dev_alloc((void **)out, n * sizeof(float), err, errlen)) return -1;
    if (cudaMemcpy(*out, v, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        snprintf(err, errlen, "cuda: upload failed");
        return -1;
    }
    return 0;
}

static int upload_bf16_vec(const float *v, size_t n, uint16_t **out, char *err, size_t errlen) {
    uint16_t *h = malloc(sizeof(uint16_t) * n);
    if (!h) return snprintf(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(v[i]);
    int rc = dev_alloc((void **)out, n * sizeof(uint16_t), err, errlen);
    if (rc == 0 && cudaMemcpy(*out, h, n * sizeof(uint16_t), cudaMemcpyHostToDevice) != cudaSuccess) {
        snprintf(err, errlen, "cuda: upload failed");
        rc = -1;
    }
    free(h);
    return rc;
}

/* Biases of q, k, v side by side in the order of the stacked QKV output. */
static int upload_bias(const model *m, const layer_weights *L, float **out, char *err, size_t errlen) {
    *out = NULL;
    if (!L->bq) return 0;
    const model_config *c = &m->cfg;
    size_t qd = (size_t)(c->n_head * c->head_dim), kvd = (size_t)(c->n_head_kv * c->head_dim);
    float *b = malloc(sizeof(float) * (qd + 2 * kvd));
    if (!b) return snprintf(err, errlen, "out of memory"), -1;
    memcpy(b, L->bq, sizeof(float) * qd);
    memcpy(b + qd, L->bk, sizeof(float) * kvd);
    memcpy(b + qd + kvd, L->bv, sizeof(float) * kvd);
    int rc = upload_f32(b, qd + 2 * kvd, out, err, errlen);
    free(b);
    return rc;
}

static size_t elems(const cpu_weight *w) { return (size_t)w->n * (size_t)w->k; }

static int64_t router_rows(const model_config *c) { return (c->n_expert + 7) / 8 * 8; }

/* Device elements of layer il's matrices, and (*stack) the largest one staging holds. */
static size_t layer_elems(const model *m, int64_t il, size_t *stack) {
    const model_config *c = &m->cfg;
    const layer_weights *L = &m->layers[il];
    const size_t D = (size_t)c->n_embd;
    size_t parts[12] = {elems(&L->wq) + elems(&L->wk) + elems(&L->wv), elems(&L->wo),
                        elems(&L->gate) + elems(&L->up), elems(&L->down)};
    size_t total = parts[0] + parts[1] + parts[2] + parts[3], more = 0;
    if (L->exp_gate) {
        parts[4] = (size_t)router_rows(c) * D;
        parts[5] = elems(&L->exp_gate[0]) + elems(&L->exp_up[0]);
        parts[6] = elems(&L->exp_down[0]);
        parts[7] = elems(&L->sh_gate) + elems(&L->sh_up);
        parts[8] = elems(&L->sh_down);
        more += parts[4] + (size_t)c->n_expert * (parts[5] + parts[6]) + parts[7] + parts[8];
    }
    if (L->k_b) {
        parts[9] = (c->mla.q_lora ? elems(&L->wq_a) : 0) + elems(&L->wkv_a); /* wq is in parts[0] */
        parts[10] = elems(&L->wq_b);
        parts[11] = elems(&L->k_b[0]) > elems(&L->v_b[0]) ? elems(&L->k_b[0]) : elems(&L->v_b[0]);
        more += parts[9] + parts[10] + (size_t)c->n_head * (elems(&L->k_b[0]) + elems(&L->v_b[0]));
        parts[9] += c->mla.q_lora ? 0 : elems(&L->wq);
    }
    size_t mx = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) mx = parts[i] > mx ? parts[i] : mx;
    if (stack) *stack = mx;
    return total + more;
}

size_t cuda_weights_bytes(const model *m, int64_t vocab_pad) {
    const model_config *c = &m->cfg;
    size_t D = (size_t)c->n_embd, n = 0;
    for (int64_t il = 0; il < c->n_layer; il++) n += layer_elems(m, il, NULL);
    return 2 * (n + (size_t)c->n_vocab * D + (size_t)vocab_pad * D);
}

static size_t max_stack_bytes(const model *m, int64_t vocab_pad) {
    const model_config *c = &m->cfg;
    size_t D = (size_t)c->n_embd;
    size_t mx = (size_t)vocab_pad * D > (size_t)c->n_vocab * D ? (size_t)vocab_pad * D : (size_t)c->n_vocab * D;
    for (int64_t il = 0; il < c->n_layer; il++) {
        size_t s;
        layer_elems(m, il, &s);
        mx = s > mx ? s : mx;
    }
    return 2 * mx;
}

static int upload_moe(threadpool *tp, const model *m, const layer_weights *L, cuda_layer *d, uint16_t *staging,
                      char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const cpu_weight *router[] = {&L->router}, *sgu[] = {&L->sh_gate, &L->sh_up}, *sdown[] = {&L->sh_down};
    if (upload_stack(tp, router, 1, router_rows(c), &d->router, staging, err, errlen) ||
        upload_experts(tp, L, c->n_expert, 1, &d->exp_gu, staging, err, errlen) ||
        upload_experts(tp, L, c->n_expert, 0, &d->exp_down, staging, err, errlen))
        return -1;
    if (L->exp_probs_b && upload_f32(L->exp_probs_b, (size_t)c->n_expert, &d->exp_bias, err, errlen)) return -1;
    if (L->sh_gate.data && (upload_stack(tp, sgu, 2, 0, &d->sh_gu, staging, err, errlen) ||
                            upload_stack(tp, sdown, 1, 0, &d->sh_down, staging, err, errlen)))
        return -1;
    return 0;
}

static int upload_mla(threadpool *tp, const model *m, const layer_weights *L, cuda_layer *d, uint16_t *staging,
                      char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const cpu_weight *a[] = {c->mla.q_lora ? &L->wq_a : &L->wq, &L->wkv_a}, *qb[] = {&L->wq_b};
    if (upload_stack(tp, a, 2, 0, &d->mla_a, staging, err, errlen) ||
        (c->mla.q_lora && upload_stack(tp, qb, 1, 0, &d->mla_qb, staging, err, errlen)) ||
        upload_heads(tp, L->k_b, c->n_head, &d->mla_uk, staging, err, errlen) ||
        upload_heads(tp, L->v_b, c->n_head, &d->mla_uv, staging, err, errlen) ||
        (c->mla.q_lora && upload_f32(L->q_a_norm, (size_t)c->mla.q_lora, &d->q_a_norm, err, errlen)) ||
        upload_f32(L->kv_a_norm, (size_t)c->mla.kv_lora, &d->kv_a_norm, err, errlen))
        return -1;
    return 0;
}

static int upload_layer(threadpool *tp, const model *m, int64_t il, cuda_layer *d, uint16_t *staging, char *err,
                        size_t errlen) {
    const layer_weights *L = &m->layers[il];
    const model_config *c = &m->cfg;
    const cpu_weight *qkv[] = {&L->wq, &L->wk, &L->wv}, *gu[] = {&L->gate, &L->up};
    const cpu_weight *wo[] = {&L->wo}, *down[] = {&L->down};
    if (L->k_b ? upload_mla(tp, m, L, d, staging, err, errlen)
               : upload_stack(tp, qkv, 3, 0, &d->wqkv, staging, err, errlen))
        return -1;
    if (upload_stack(tp, wo, 1, 0, &d->wo, staging, err, errlen)) return -1;
    if (L->exp_gate ? upload_moe(tp, m, L, d, staging, err, errlen)
                    : (upload_stack(tp, gu, 2, 0, &d->wgu, staging, err, errlen) ||
                       upload_stack(tp, down, 1, 0, &d->wdown, staging, err, errlen)))
        return -1;
    if (upload_bf16_vec(L->attn_norm, (size_t)c->n_embd, &d->attn_norm, err, errlen) ||
        upload_bf16_vec(L->ffn_norm, (size_t)c->n_embd, &d->ffn_norm, err, errlen) ||
        upload_bias(m, L, &d->bqkv, err, errlen) ||
        upload_f32(L->q_norm, (size_t)c->head_dim, &d->q_norm, err, errlen) ||
        upload_f32(L->k_norm, (size_t)c->head_dim, &d->k_norm, err, errlen))
        return -1;
    return 0;
}

int cuda_weights_upload(const model *m, int64_t vocab_pad, int n_threads, cuda_weights *w, char *err,
                        size_t errlen) {
    memset(w, 0, sizeof *w);
    const model_config *c = &m->cfg;
    w->n_layer = c->n_layer;
    w->layers = calloc((size_t)c->n_layer, sizeof *w->layers);
    uint16_t *staging = malloc(max_stack_bytes(m, vocab_pad));
    threadpool *tp = threadpool_create(n_threads);
    int rc = (!w->layers || !staging || !tp) ? (snprintf(err, errlen, "out of host memory"), -1) : 0;
    for (int64_t il = 0; rc == 0 && il < c->n_layer; il++) rc = upload_layer(tp, m, il, &w->layers[il], staging, err, errlen);
    cpu_weight embd;
    char e2[160];
    if (rc == 0 && cpu_weight_view(&embd, m->tok_embd->type, c->n_vocab, c->n_embd, m->tok_embd->data, e2, sizeof e2))
        rc = (snprintf(err, errlen, "token_embd.weight: %s", e2), -1);
    const cpu_weight *e1[] = {&embd}, *o1[] = {&m->output};
    if (rc == 0) rc = upload_stack(tp, e1, 1, 0, &w->embd, staging, err, errlen);
    /* The output head: the embedding itself when tied and no padding is needed. */
    if (rc == 0 && m->output.data == m->tok_embd->data && vocab_pad == c->n_vocab) w->out = w->embd;
    else if (rc == 0) rc = upload_stack(tp, o1, 1, vocab_pad, &w->out, staging, err, errlen);
    if (rc == 0) rc = upload_bf16_vec(m->output_norm, (size_t)c->n_embd, &w->out_norm, err, errlen);
    if (rc == 0) rc = upload_f32(m->rope_cs, (size_t)m->rope_len * (size_t)c->n_rot, &w->rope_cs, err, errlen);
    threadpool_destroy(tp);
    free(staging);
    if (rc) cuda_weights_free(w);
    return rc;
}

void cuda_weights_free(cuda_weights *w) {
    if (w->layers)
        for (int64_t il = 0; il < w->n_layer; il++) {
            cuda_layer *d = &w->layers[il];
            void *ps[] = {d->wqkv,    d->wo,       d->wgu,    d->wdown,  d->attn_norm, d->ffn_norm, d->bqkv,
                          d->q_norm,  d->k_norm,   d->router, d->exp_gu, d->exp_down,  d->sh_gu,    d->sh_down,
                          d->mla_a,   d->mla_qb,   d->mla_uk, d->mla_uv, d->q_a_norm,  d->kv_a_norm, d->exp_bias};
            for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) cudaFree(ps[i]);
        }
    free(w->layers);
    if (w->out != w->embd) cudaFree(w->out);
    cudaFree(w->embd);
    cudaFree(w->out_norm);
    cudaFree(w->rope_cs);
    memset(w, 0, sizeof *w);
}
#endif
