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

typedef enum { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN3MOE } model_arch;

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
