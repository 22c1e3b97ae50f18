/* Hyperparameters of a Llama-family model, read from GGUF metadata or a Hugging Face
 * config.json. */
#ifndef INVAR_MODEL_CONFIG_H
#define INVAR_MODEL_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "formats/gguf.h"

/* Bounds on the hyperparameters a GGUF may claim (docs/architecture.md). Sizes the loader
 * allocates before any tensor can vouch for them derive from these: the RoPE table is
 * context_length x rope.dimension_count floats, built at load, so a file claiming 2^25
 * positions would cost gigabytes before the first token. */
#define MODEL_MAX_CONTEXT (1 << 20)
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_EMBD 65536
#define MODEL_MAX_FF 262144
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_HEAD_DIM 512
/* Mixture of experts: per layer, n_expert expert FFNs of n_ff_exp, n_expert_used of them
 * per token (the router's top-k). */
#define MODEL_MAX_EXPERTS 1024
#define MODEL_MAX_EXPERTS_USED 64
/* MLA (deepseek2): the latent key of the cache is kv_lora_rank + rope dims floats, which the
 * CPU attention kernel takes up to ATTN_MAX_HEAD_DIM (576 = DeepSeek-V2/V3's 512 + 64). */
#define MODEL_MAX_LATENT_DIM 576
#define MODEL_MAX_SHARED_EXPERTS 64

typedef enum { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN3MOE, ARCH_DEEPSEEK2 } model_arch;
/* expert_gating_func as llama.cpp numbers it */
typedef enum { GATING_SOFTMAX = 1, GATING_SIGMOID = 2 } expert_gating;

typedef struct {
    model_arch arch;
    char arch_name[32];
    int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_rot;
    int64_t n_vocab, n_ctx_train;
    float rms_eps, rope_base, rope_freq_scale; /* freq_scale = 1 / linear scaling factor */
    bool rope_neox;                            /* pairs (i, i+n_rot/2) instead of (2i, 2i+1) */
    /* Mixture of experts (qwen3moe; n_expert 0 for a dense model, whose n_ff is its FFN):
     * every layer routes each token to its top n_expert_used experts by softmax of the
     * router's logits; with expert_weights_norm the chosen probabilities are rescaled to
     * sum to 1. A MoE model has n_ff 0 (no dense FFN). */
    int64_t n_expert, n_expert_used, n_ff_exp;
    bool expert_weights_norm;
    /* deepseek2's routing (qwen3moe: softmax, 1 group, no shared expert, scale 1): the
     * gating function, the experts in n_group groups of which each token may use the
     * n_group_used best (a group scores the sum of its two best biased scores), the scale on
     * the chosen weights (routed_scaling_factor), n_expert_shared shared experts (one FFN of
     * n_ff_exp * n_expert_shared) and the first n_layer_dense layers dense (n_ff).
     * expert_group_max: a group scores its best expert instead (DeepSeek-V2's
     * group_limited_greedy; no GGUF says so). */
    expert_gating gating;
    int64_t n_group, n_group_used, n_expert_shared, n_layer_dense;
    bool expert_group_max;
    float expert_weights_scale;
    /* Multi-head latent attention (deepseek2; kv_lora 0 for other arches). Per head a query
     * of qk_nope + n_rot dims (q_lora 0: straight from x; else through a rank-q_lora
     * bottleneck with its norm), a key compressed to c_kv[kv_lora] (normed) plus one shared
     * rope'd k_pe[n_rot], a value of v_dim. The cache holds, per position, one latent head:
     * K = [c_kv, k_pe] (head_dim = kv_lora + n_rot) and V = c_kv (head_dim_v = kv_lora).
     * split_kv_b: the file has attn_k_b / attn_v_b (llama.cpp's current converter) rather
     * than the merged attn_kv_b. attn_scale: the softmax scale, YaRN's mscale^2 included. */
    struct {
        int64_t q_lora, kv_lora, qk_nope, v_dim;
        bool split_kv_b;
    } mla;
    /* Hugging Face DeepSeek-V3's num_nextn_predict_layers: multi-token-prediction layers after
     * the last, which generation does not run (their tensors are skipped; 0 elsewhere). */
    int64_t hf_mtp_layers;
    int64_t head_dim_v; /* value floats per KV head in the cache (head_dim but for MLA) */
    float attn_scale;   /* 1/sqrt(head_dim) but for MLA */
    /* YaRN rope scaling (deepseek2; factor 0: none): as llama.cpp runs it, frequencies
     * interpolated by 1/factor below the correction range of original_ctx (beta_fast 32,
     * beta_slow 1), cos/sin unscaled, the attention scale times mscale^2 with mscale =
     * 1 + log_mul * ln(factor) (log_mul = 0.1 * DeepSeek's mscale_all_dim). */
    struct {
        float factor, log_mul;
        int64_t original_ctx;
    } yarn;
    /* Llama-3.1 rope scaling (config.json rope_type "llama3"; factor 0: none). A GGUF carries
     * the per-frequency factors it implies as the rope_freqs.weight tensor instead. */
    struct {
        float factor, low_freq_factor, high_freq_factor;
        int64_t original_ctx;
    } rope_llama3;
} model_config;

int model_config_read(const gguf_file *f, model_config *c, char *err, size_t errlen);
/* From a parsed config.json; *tied: tie_word_embeddings; *vocab_size: vocab_size (0 if
 * absent), which the embedding rows must equal. */
int model_config_read_hf(const cJSON *cfg, model_config *c, bool *tied, int64_t *vocab_size, char *err,
                         size_t errlen);

#endif
