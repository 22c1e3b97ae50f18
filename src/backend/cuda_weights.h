/* A model's weights on the GPU (bf16), for the CUDA backend. */
#ifndef INVAR_CUDA_WEIGHTS_H
#define INVAR_CUDA_WEIGHTS_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/cpu/threadpool.h"
#include "model/model.h"

typedef struct {
    uint16_t *wqkv;             /* [(n_head + 2 n_head_kv) head_dim][n_embd]: q, k, v rows stacked */
    uint16_t *wo;               /* [n_embd][n_head head_dim] */
    uint16_t *wgu;              /* [2 n_ff][n_embd]: gate rows, then up rows */
    uint16_t *wdown;            /* [n_embd][n_ff] */
    uint16_t *attn_norm, *ffn_norm;
    float *bqkv;                /* Qwen2 biases in the stacked order, or NULL */
    float *q_norm, *k_norm;     /* Qwen3 QK-norm, or NULL */
    /* A routed layer (NULL for a dense one; wgu / wdown are then NULL): */
    uint16_t *router;           /* [n_expert rounded up to 8][n_embd], the extra rows zero */
    uint16_t *exp_gu;           /* [n_expert][2 n_ff_exp][n_embd]: each expert's gate rows, then its up rows */
    uint16_t *exp_down;         /* [n_expert][n_embd][n_ff_exp] */
    uint16_t *sh_gu, *sh_down;  /* deepseek2's shared experts as one FFN ([2 F_sh][n_embd], [n_embd][F_sh]) or NULL */
    float *exp_bias;            /* deepseek2's score-correction bias [n_expert], or NULL */
    /* MLA (deepseek2; wqkv is then NULL): */
    uint16_t *mla_a;            /* [Nq + kv_lora + rope][n_embd]: wq (q_lora 0) or wq_a, then wkv_a */
    uint16_t *mla_qb;           /* [n_head (qk_nope + rope)][q_lora], or NULL */
    uint16_t *mla_uk;           /* [n_head][kv_lora][qk_nope]: W_UK per head, [N][K] */
    uint16_t *mla_uv;           /* [n_head][v_dim][kv_lora]: W_UV per head, [N][K] */
    float *q_a_norm, *kv_a_norm;
} cuda_layer;

typedef struct {
    int64_t n_layer;
    cuda_layer *layers;
    uint16_t *embd;             /* [n_vocab][n_embd] */
    uint16_t *out;              /* [vocab_pad][n_embd] (zero rows past n_vocab); may be embd */
    uint16_t *out_norm;
    float *rope_cs;             /* the model's RoPE table, [rope_len][n_rot/2][cos, sin] */
} cuda_weights;

/* Device bytes the weights take. */
size_t cuda_weights_bytes(const model *m, int64_t vocab_pad);
int cuda_weights_upload(const model *m, int64_t vocab_pad, int n_threads, cuda_weights *w, char *err,
                        size_t errlen);
void cuda_weights_free(cuda_weights *w);

#endif
