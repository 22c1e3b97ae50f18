/* Hyperparameters of a Hugging Face model directory, from config.json: the same
 * model_config and bounds as GGUF metadata gives (config.h). What the forward pass does not
 * implement (other architectures, rope scaling other than linear and llama3, sliding windows, biases
 * Llama/Qwen3 do not have, qwen3_moe layers made dense) is refused by name rather than run
 * differently. Keys that only matter for training are not read (docs/models.md lists them).
 * deepseek_v2's and deepseek_v3's own keys are read in config_hf_deepseek.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/config.h"
#include "model/config_hf_json.h"
#include "formats/json_file.h"

#define FAIL(...) do { snprintf(err, errlen, "config.json: " __VA_ARGS__); return -1; } while (0)

const cJSON *hf_item(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(v) ? NULL : v; /* null means "the default" in these files */
}

int hf_get_int(const cJSON *cfg, const char *key, int64_t lo, int64_t hi, bool required, int64_t def,
                   int64_t *out, char *err, size_t errlen) {
    const cJSON *v = hf_item(cfg, key);
    if (!v) {
        if (required) FAIL("missing %s", key);
        *out = def;
        return 0;
    }
    if (!json_exact_int(v, lo, hi, out))
        FAIL("%s must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    return 0;
}

int hf_get_float(const cJSON *o, const char *key, double lo, double hi, float def, float *out, char *err,
                     size_t errlen) {
    const cJSON *v = hf_item(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        FAIL("%s must be a number in [%g, %g]", key, lo, hi);
    *out = (float)v->valuedouble;
    return 0;
}

bool hf_get_bool(const cJSON *o, const char *key, bool def) {
    const cJSON *v = hf_item(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* A boolean that must be one when present (a MoE key read as true when it says "false"
 * would change every routed token). */
int hf_get_strict_bool(const cJSON *o, const char *key, bool def, bool *out, char *err, size_t errlen) {
    const cJSON *v = hf_item(o, key);
    if (v && !cJSON_IsBool(v)) FAIL("%s must be true or false", key);
    *out = v ? cJSON_IsTrue(v) : def;
    return 0;
}

static int read_arch(const cJSON *cfg, model_config *c, char *err, size_t errlen) {
    /* name: invar's architecture name, the one its GGUF conversion has */
    static const struct { const char *type, *cls, *name; model_arch arch; } archs[] = {
        {"llama", "LlamaForCausalLM", "llama", ARCH_LLAMA},
        {"qwen2", "Qwen2ForCausalLM", "qwen2", ARCH_QWEN2},
        {"qwen3", "Qwen3ForCausalLM", "qwen3", ARCH_QWEN3},
        {"qwen3_moe", "Qwen3MoeForCausalLM", "qwen3moe", ARCH_QWEN3MOE},
        {"deepseek_v2", "DeepseekV2ForCausalLM", "deepseek2", ARCH_DEEPSEEK2},
        {"deepseek_v3", "DeepseekV3ForCausalLM", "deepseek2", ARCH_DEEPSEEK2},
    };
    const char *type = cJSON_GetStringValue(hf_item(cfg, "model_type"));
    if (!type) FAIL("missing model_type");
    for (size_t k = 0; k < sizeof archs / sizeof *archs; k++) {
        if (strcmp(type, archs[k].type)) continue;
        const cJSON *list = hf_item(cfg, "architectures");
        const char *cls = cJSON_IsArray(list) ? cJSON_GetStringValue(list->child) : archs[k].cls;
        if (!cls || strcmp(cls, archs[k].cls))
            FAIL("architectures[0] '%.60s' is not %s (only causal LM checkpoints are supported)", cls ? cls : "?",
                 archs[k].cls);
        c->arch = archs[k].arch;
        snprintf(c->arch_name, sizeof c->arch_name, "%s", archs[k].name);
        return 0;
    }
    FAIL("unsupported model_type '%.60s' (supported: llama, qwen2, qwen3, qwen3_moe, deepseek_v2, deepseek_v3)", type);
}

/* Llama-3.1's rope_scaling: all four numbers are required (as transformers requires them). */
static int read_llama3(const cJSON *cfg, const cJSON *s, model_config *c, char *err, size_t errlen) {
    static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor"};
    for (size_t k = 0; k < 3; k++)
        if (!hf_item(s, keys[k])) FAIL("rope_scaling llama3 needs %s", keys[k]);
    if (hf_get_float(s, "factor", 1.0, 1e6, 0.0f, &c->rope_llama3.factor, err, errlen) ||
        hf_get_float(s, "low_freq_factor", 1e-6, 1e6, 0.0f, &c->rope_llama3.low_freq_factor, err, errlen) ||
        hf_get_float(s, "high_freq_factor", 1e-6, 1e6, 0.0f, &c->rope_llama3.high_freq_factor, err, errlen))
        return -1;
    if (!(c->rope_llama3.high_freq_factor > c->rope_llama3.low_freq_factor))
        FAIL("rope_scaling llama3: high_freq_factor %g must be above low_freq_factor %g",
             (double)c->rope_llama3.high_freq_factor, (double)c->rope_llama3.low_freq_factor);
    /* Llama-3.1 puts the pre-scaling context inside rope_scaling; accept it beside it too. */
    const cJSON *from = hf_item(s, "original_max_position_embeddings") ? s : cfg;
    return hf_get_int(from, "original_max_position_embeddings", 1, MODEL_MAX_CONTEXT, true, 0,
                   &c->rope_llama3.original_ctx, err, errlen);
}

/* rope_scaling (or transformers 5's rope_parameters): none, default, linear or llama3. */
static int read_rope(const cJSON *cfg, model_config *c, char *err, size_t errlen) {
    const cJSON *params = hf_item(cfg, "rope_parameters");
    const cJSON *theta_from = params && hf_item(params, "rope_theta") ? params : cfg;
    if (hf_get_float(theta_from, "rope_theta", FLT_MIN, FLT_MAX, 10000.0f, &c->rope_base, err, errlen)) return -1;
    c->rope_freq_scale = 1.0f;
    const cJSON *s = hf_item(cfg, "rope_scaling");
    if (!s) s = params;
    if (!s) return 0;
    if (!cJSON_IsObject(s)) FAIL("rope_scaling is not an object");
    const char *type = cJSON_GetStringValue(hf_item(s, "rope_type"));
    if (!type) type = cJSON_GetStringValue(hf_item(s, "type"));
    if (!type || !strcmp(type, "default")) return 0;
    if (!strcmp(type, "llama3")) {
        if (c->arch != ARCH_LLAMA) FAIL("rope scaling type llama3 is for llama models, not %s", c->arch_name);
        return read_llama3(cfg, s, c, err, errlen);
    }
    if (strcmp(type, "linear"))
        FAIL("rope scaling type '%.40s' is not supported (supported: default, linear, llama3)", type);
    float factor;
    if (hf_get_float(s, "factor", 1e-6, 1e6, 1.0f, &factor, err, errlen)) return -1;
    c->rope_freq_scale = 1.0f / factor;
    return 0;
}

static int read_dims(const cJSON *cfg, model_config *c, char *err, size_t errlen) {
    if (hf_get_int(cfg, "num_hidden_layers", 1, MODEL_MAX_LAYERS, true, 0, &c->n_layer, err, errlen) ||
        hf_get_int(cfg, "hidden_size", 1, MODEL_MAX_EMBD, true, 0, &c->n_embd, err, errlen) ||
        /* qwen3_moe: only dense layers would use it, and there are none (read_moe) */
        hf_get_int(cfg, "intermediate_size", 1, MODEL_MAX_FF, c->arch != ARCH_QWEN3MOE, 0, &c->n_ff, err, errlen) ||
        hf_get_int(cfg, "num_attention_heads", 1, MODEL_MAX_HEADS, true, 0, &c->n_head, err, errlen) ||
        hf_get_int(cfg, "num_key_value_heads", 1, c->n_head, false, c->n_head, &c->n_head_kv, err, errlen) ||
        hf_get_int(cfg, "max_position_embeddings", 1, MODEL_MAX_CONTEXT, false, 2048, &c->n_ctx_train, err, errlen))
        return -1;
    if (c->n_head % c->n_head_kv)
        FAIL("num_attention_heads %lld is not a multiple of num_key_value_heads %lld", (long long)c->n_head,
             (long long)c->n_head_kv);
    if (hf_get_int(cfg, "head_dim", 2, MODEL_MAX_HEAD_DIM, false, c->n_embd / c->n_head, &c->head_dim, err, errlen))
        return -1;
    if (c->head_dim < 2 || c->head_dim % 2)
        FAIL("unsupported head dim %lld (even, 2 to %d)", (long long)c->head_dim, MODEL_MAX_HEAD_DIM);
    c->n_rot = c->head_dim;
    c->head_dim_v = c->head_dim;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    return 0;
}

/* The routing of qwen3_moe (transformers' Qwen3MoeSparseMoeBlock): every layer routed, softmax
 * over num_experts router logits, the top num_experts_per_tok, renormalised to sum 1 when
 * norm_topk_prob (transformers' default: false), no shared expert; config.h's fields as
 * config.c fills them from a qwen3moe GGUF. transformers makes layer l dense when l is in
 * mlp_only_layers or (l + 1) % decoder_sparse_step != 0: no such layer is implemented, so
 * either is refused. Dense arches must not name experts (Mixtral is model_type "mixtral"). */
static int read_moe(const cJSON *cfg, model_config *c, char *err, size_t errlen) {
    c->gating = GATING_SOFTMAX;
    c->n_group = c->n_group_used = 1;
    c->expert_weights_scale = 1.0f;
    if (c->arch != ARCH_QWEN3MOE) {
        const cJSON *n = hf_item(cfg, "num_experts");
        if (n && !(cJSON_IsNumber(n) && n->valuedouble == 0))
            FAIL("num_experts is not supported for %s (mixture of experts: qwen3_moe)", c->arch_name);
        return 0;
    }
    c->n_ff = 0; /* intermediate_size, if given (bounded above), is a dense FFN qwen3_moe does not have */
    if (hf_get_int(cfg, "num_experts", 2, MODEL_MAX_EXPERTS, true, 0, &c->n_expert, err, errlen) ||
        hf_get_int(cfg, "num_experts_per_tok", 1,
                c->n_expert < MODEL_MAX_EXPERTS_USED ? c->n_expert : MODEL_MAX_EXPERTS_USED, true, 0,
                &c->n_expert_used, err, errlen) ||
        hf_get_int(cfg, "moe_intermediate_size", 1, MODEL_MAX_FF, true, 0, &c->n_ff_exp, err, errlen) ||
        hf_get_strict_bool(cfg, "norm_topk_prob", false, &c->expert_weights_norm, err, errlen))
        return -1;
    int64_t step;
    if (hf_get_int(cfg, "decoder_sparse_step", 1, MODEL_MAX_LAYERS, false, 1, &step, err, errlen)) return -1;
    if (step != 1)
        FAIL("decoder_sparse_step %lld makes some layers dense (only 1, every layer routed, is supported)",
             (long long)step);
    const cJSON *dense = hf_item(cfg, "mlp_only_layers");
    if (dense && !cJSON_IsArray(dense)) FAIL("mlp_only_layers must be a list of layer numbers");
    if (cJSON_GetArraySize(dense) > 0)
        FAIL("mlp_only_layers is not empty: dense layers in a qwen3_moe model are not supported");
    const cJSON *shared = hf_item(cfg, "shared_expert_intermediate_size");
    if (shared && !(cJSON_IsNumber(shared) && shared->valuedouble == 0))
        FAIL("shared_expert_intermediate_size: qwen3_moe has no shared experts (qwen2_moe is not supported)");
    return 0;
}

/* What the Llama/Qwen forward pass here does not implement. */
static int refuse_variants(const cJSON *cfg, const model_config *c, char *err, size_t errlen) {
    const char *act = cJSON_GetStringValue(hf_item(cfg, "hidden_act"));
    if (act && strcmp(act, "silu")) FAIL("hidden_act '%.40s' is not supported (silu only)", act);
    if (c->arch != ARCH_QWEN2 && hf_get_bool(cfg, "attention_bias", false))
        FAIL("attention_bias true is not supported for %s", c->arch_name);
    if (hf_get_bool(cfg, "mlp_bias", false)) FAIL("mlp_bias true is not supported");
    if (hf_get_bool(cfg, "use_sliding_window", false)) FAIL("use_sliding_window true is not supported");
    if (hf_item(cfg, "quantization_config"))
        FAIL("quantization_config: quantized checkpoints (FP8, GPTQ, ...) are not supported");
    const cJSON *prf = hf_item(cfg, "partial_rotary_factor");
    if (prf && (!cJSON_IsNumber(prf) || prf->valuedouble != 1.0)) FAIL("partial_rotary_factor != 1 is not supported");
    return 0;
}

int model_config_read_hf(const cJSON *cfg, model_config *c, bool *tied, int64_t *vocab_size, char *err,
                         size_t errlen) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(cfg)) FAIL("not a JSON object");
    if (read_arch(cfg, c, err, errlen)) return -1;
    const bool ds = c->arch == ARCH_DEEPSEEK2; /* its own dims, rope and routing, rope_neox included */
    const bool v2 = ds && !strcmp(cJSON_GetStringValue(hf_item(cfg, "model_type")), "deepseek_v2");
    if (ds ? hf_read_deepseek(cfg, v2, c, err, errlen)
           : read_dims(cfg, c, err, errlen) || read_rope(cfg, c, err, errlen) || read_moe(cfg, c, err, errlen))
        return -1;
    if (refuse_variants(cfg, c, err, errlen) ||
        hf_get_float(cfg, "rms_norm_eps", 0.0, 1.0, 1e-6f, &c->rms_eps, err, errlen) ||
        hf_get_int(cfg, "vocab_size", 1, INT32_MAX / 2, false, 0, vocab_size, err, errlen))
        return -1;
    /* Llama's q/k rows are put into GGUF's interleaved-pair order at load (hf_weights.c), so
     * every architecture keeps the rope layout its GGUF conversion has. */
    if (!ds) c->rope_neox = c->arch != ARCH_LLAMA;
    *tied = hf_get_bool(cfg, "tie_word_embeddings", false);
    c->n_vocab = 0; /* set from the embedding tensor */
    return 0;
}
