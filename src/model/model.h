/* A loaded model: a GGUF file or a Hugging Face directory (config, tokenizer, validated
 * weight views, bound for the CPU kernels on demand). Both give the same structures. */
#ifndef INVAR_MODEL_H
#define INVAR_MODEL_H
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "formats/gguf.h"
#include "kernels/cpu/matmul.h"
#include "tokenizer/tokenizer.h"
#include "model/config.h"
#include "model/hf_weights.h"

typedef struct {
    cpu_weight wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm;
    float *bq, *bk, *bv;        /* Qwen2 biases, or NULL */
    float *q_norm, *k_norm;     /* Qwen3 per-head QK-norm weights, or NULL */
    /* A routed (MoE) layer, in place of gate/up/down (which are then empty): the router
     * [n_expert][n_embd] and each expert's matrices, views into the file's 3-D tensors. */
    cpu_weight router;
    cpu_weight *exp_gate, *exp_up, *exp_down; /* [n_expert] each, or NULL */
    /* deepseek2's routed layers: the score-correction bias [n_expert] (exp_probs_b, or
     * NULL) and the shared experts as one FFN (empty when expert_shared_count is 0). */
    float *exp_probs_b;
    cpu_weight sh_gate, sh_up, sh_down;
    /* MLA (deepseek2; wq/wk/wv then unused but wq when q_lora is 0): the query's
     * bottleneck wq_a [q_lora][n_embd], q_a_norm, wq_b [n_head (qk_nope + rope)][q_lora];
     * wkv_a [kv_lora + rope][n_embd] and kv_a_norm [kv_lora]; per head, k_b [kv_lora][qk_nope]
     * (W_UK transposed: it takes the query into the latent space) and v_b [v_dim][kv_lora]
     * (W_UV). A merged attn_kv_b is split at load: k_b transposed into kb_owned (float32). */
    cpu_weight wq_a, wq_b, wkv_a;
    float *q_a_norm, *kv_a_norm;
    cpu_weight *k_b, *v_b;
    float *kb_owned;
} layer_weights;

typedef struct model {
    gguf_file *gguf;            /* a GGUF model, or NULL */
    hf_weights *hf;             /* a Hugging Face directory, or NULL */
    char *hf_chat_template;     /* the directory's chat template, or NULL */
    model_config cfg;
    tokenizer *tok;
    const gguf_tensor *tok_embd;
    cpu_weight output;          /* output.weight, or token_embd when tied */
    float *output_norm;
    layer_weights *layers;
    float *rope_cs;             /* [rope_len][n_rot/2][cos, sin] */
    int64_t rope_len;
    pthread_mutex_t bind_lock;
    bool cpu_bound;             /* the CPU kernels' repacked weights exist */
    bool output_tied;           /* output is token_embd.weight */
    struct weight_override **overrides; /* replaced tensors' data (model/weight_update.h) */
    size_t n_overrides;
} model;

/* path: a GGUF file, or a Hugging Face model directory (config.json, safetensors,
 * tokenizer.json: docs/models.md). */
int model_load(const char *path, model **out, char *err, size_t errlen);
/* The chat template (Jinja source) the model ships; false if it has none. */
bool model_chat_template(const model *m, const char **tmpl, size_t *len);
void model_free(model *m);
/* Frees the data of replaced tensors (model_free calls it; model/weight_update.c). */
void model_free_overrides(model *m);
/* Makes the CPU matmul's repacked copies of every weight (once; thread-safe). A model
 * that only runs on another backend never pays for them. */
int model_bind_cpu(model *m, char *err, size_t errlen);
/* Embedding row of a token into out[n_embd]. */
void model_embed(const model *m, int32_t token, float *out);

#endif
