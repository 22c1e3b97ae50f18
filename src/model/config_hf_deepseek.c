/* Hyperparameters of a Hugging Face DeepSeek-V2 or -V3 directory (transformers'
 * DeepseekV2Config / DeepseekV3Config, model_type deepseek_v2 / deepseek_v3) as config.c
 * gives them for a deepseek2 GGUF: MLA with kv_b_proj as one merged attn_kv_b, shared
 * experts, leading dense layers, YaRN; V3 routes by sigmoid with the score-correction bias
 * and group-limited top-k over two-expert group sums, V2 by softmax, greedy or limited to
 * the groups of the best single experts. Where transformers would compute something that
 * model cannot (cos/sin scaled by YaRN, other correction ranges), the key is refused by
 * name. Sizes are required; the routing keys take transformers' defaults when absent. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/config_hf_json.h"

#define FAIL(...) do { snprintf(err, errlen, "config.json: " __VA_ARGS__); return -1; } while (0)
#define MAX_MTP_LAYERS 16

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Per head a query of qk_nope + qk_rope dims, the key's latent c_kv[kv_lora] + one shared
 * k_pe[qk_rope], a value of v_head_dim (config.h: mla). */
static int read_mla(const cJSON *cfg, model_config *c, char *err, size_t errlen) {
    if (!cJSON_GetObjectItemCaseSensitive(cfg, "q_lora_rank"))
        FAIL("missing q_lora_rank (null: queries without the low-rank bottleneck)");
    if (hf_get_int(cfg, "q_lora_rank", 1, MODEL_MAX_EMBD, false, 0, &c->mla.q_lora, err, errlen) ||
        hf_get_int(cfg, "kv_lora_rank", 1, MODEL_MAX_LATENT_DIM - 2, true, 0, &c->mla.kv_lora, err, errlen) ||
        hf_get_int(cfg, "qk_rope_head_dim", 2, min64(MODEL_MAX_LATENT_DIM - c->mla.kv_lora, MODEL_MAX_HEAD_DIM - 1),
                   true, 0, &c->n_rot, err, errlen) ||
        hf_get_int(cfg, "qk_nope_head_dim", 1, MODEL_MAX_HEAD_DIM - c->n_rot, true, 0, &c->mla.qk_nope, err, errlen) ||
        hf_get_int(cfg, "v_head_dim", 1, MODEL_MAX_HEAD_DIM, true, 0, &c->mla.v_dim, err, errlen))
        return -1;
    if (c->n_rot % 2) FAIL("qk_rope_head_dim %lld is odd", (long long)c->n_rot);
    /* transformers ropes head_dim dims (its config sets it to qk_rope_head_dim; a file may not
     * say otherwise) and repeats keys num_attention_heads / num_key_value_heads times, which
     * only runs when they are equal */
    int64_t v;
    if (hf_get_int(cfg, "head_dim", 1, MODEL_MAX_HEAD_DIM, false, c->n_rot, &v, err, errlen)) return -1;
    if (v != c->n_rot) FAIL("head_dim %lld != qk_rope_head_dim %lld", (long long)v, (long long)c->n_rot);
    if (hf_get_int(cfg, "num_key_value_heads", 1, MODEL_MAX_HEADS, false, c->n_head, &v, err, errlen)) return -1;
    if (v != c->n_head)
        FAIL("num_key_value_heads %lld != num_attention_heads %lld (MLA has one latent KV head; transformers "
             "expects them equal)", (long long)v, (long long)c->n_head);
    c->n_head_kv = 1; /* the cache's one latent head */
    c->head_dim = c->mla.kv_lora + c->n_rot;
    c->head_dim_v = c->mla.kv_lora;
    c->attn_scale = 1.0f / sqrtf((float)(c->mla.qk_nope + c->n_rot));
    c->mla.split_kv_b = false; /* kv_b_proj is the merged [n_head (qk_nope + v)][kv_lora] */
    return 0;
}

/* rope_scaling yarn as transformers runs it for DeepSeek: inv_freq from factor,
 * original_max_position_embeddings (else max_position_embeddings), beta_fast, beta_slow;
 * cos/sin times get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) and the
 * softmax scale times get_mscale(factor, mscale_all_dim)^2. invar's deepseek2 leaves cos/sin
 * unscaled, so mscale must equal mscale_all_dim (as in DeepSeek-V2/V3's files). The softmax
 * factor is DeepSeek's own code's, V2's too; transformers 4.57.1's DeepseekV2 leaves it out
 * (fixed later upstream), the tests apply it to that reference. */
static int read_yarn(const cJSON *cfg, const cJSON *s, model_config *c, char *err, size_t errlen) {
    if (!hf_item(s, "factor")) FAIL("rope_scaling yarn needs factor");
    if (hf_get_float(s, "factor", 1.0, 1e6, 1.0f, &c->yarn.factor, err, errlen)) return -1;
    const cJSON *from = hf_item(s, "original_max_position_embeddings") ? s : cfg;
    if (hf_get_int(from, "original_max_position_embeddings", 1, MODEL_MAX_CONTEXT, false, c->n_ctx_train,
                   &c->yarn.original_ctx, err, errlen))
        return -1;
    static const struct { const char *key; double value; } fixed[] = {{"beta_fast", 32}, {"beta_slow", 1}};
    for (size_t k = 0; k < 2; k++) {
        const cJSON *b = hf_item(s, fixed[k].key);
        if (b && !(cJSON_IsNumber(b) && (b->valuedouble == fixed[k].value || b->valuedouble == 0)))
            FAIL("rope_scaling %s must be %g (the only correction range implemented)", fixed[k].key, fixed[k].value);
    }
    const cJSON *tr = hf_item(s, "truncate");
    if (tr && !cJSON_IsTrue(tr)) FAIL("rope_scaling truncate must be true (a rounded correction range)");
    if (hf_item(s, "attention_factor"))
        FAIL("rope_scaling attention_factor is not supported (cos/sin scaled by YaRN)");
    float ms, ms_all;
    if (hf_get_float(s, "mscale", 0.0, 100.0, 0.0f, &ms, err, errlen) ||
        hf_get_float(s, "mscale_all_dim", 0.0, 100.0, 0.0f, &ms_all, err, errlen))
        return -1;
    if (c->yarn.factor > 1.0f && (ms == 0.0f || ms != ms_all))
        FAIL("rope_scaling yarn: mscale %g and mscale_all_dim %g must be equal and nonzero (otherwise "
             "transformers scales cos/sin, which invar's deepseek2 does not)", (double)ms, (double)ms_all);
    c->yarn.log_mul = 0.1f * ms_all;
    const float mscale = 1.0f + c->yarn.log_mul * logf(c->yarn.factor); /* as config.c: bit-equal to a GGUF */
    c->attn_scale *= mscale * mscale;
    return 0;
}

static int read_rope(const cJSON *cfg, bool v2, model_config *c, char *err, size_t errlen) {
    bool interleave;
    if (hf_get_float(cfg, "rope_theta", FLT_MIN, FLT_MAX, 10000.0f, &c->rope_base, err, errlen) ||
        hf_get_strict_bool(cfg, "rope_interleave", true, &interleave, err, errlen))
        return -1;
    /* rope_interleave (transformers' default): the rope dims are in pairs (2i, 2i+1), GGUF's
     * deepseek2 order; false: halves (i, i + rope/2). DeepseekV2 always pairs them (it does
     * not read the key: a file saying false would not run as it says). */
    if (v2 && !interleave) FAIL("rope_interleave false: deepseek_v2 always rotates the rope dims in pairs");
    c->rope_neox = !interleave;
    c->rope_freq_scale = 1.0f;
    const cJSON *s = hf_item(cfg, "rope_scaling");
    if (!s) return 0;
    if (!cJSON_IsObject(s)) FAIL("rope_scaling is not an object");
    const char *type = cJSON_GetStringValue(hf_item(s, "rope_type"));
    if (!type) type = cJSON_GetStringValue(hf_item(s, "type"));
    if (!type || !strcmp(type, "default")) return 0;
    if (strcmp(type, "yarn"))
        FAIL("rope scaling type '%.40s' is not supported for deepseek_v%c (default, yarn)", type, v2 ? '2' : '3');
    return read_yarn(cfg, s, c, err, errlen);
}

/* A string key that may only have one value (the one transformers implements). */
static int only(const cJSON *cfg, const char *key, const char *value, char *err, size_t errlen) {
    const cJSON *v = hf_item(cfg, key);
    const char *s = cJSON_GetStringValue(v);
    if (v && (!s || strcmp(s, value))) FAIL("%s must be \"%s\" (the only one implemented)", key, value);
    return 0;
}

/* Routed experts, top-k, their size, shared experts and leading dense layers: the same keys
 * in V2 and V3, defaults of each (V2: 2 shared experts, no dense layer). A null
 * n_shared_experts would leave transformers without the shared FFN its forward adds. */
static int read_experts(const cJSON *cfg, bool v2, model_config *c, char *err, size_t errlen) {
    const cJSON *shared = cJSON_GetObjectItemCaseSensitive(cfg, "n_shared_experts");
    if (cJSON_IsNull(shared)) FAIL("n_shared_experts null (no shared experts) is not supported");
    int64_t freq;
    if (hf_get_int(cfg, "moe_layer_freq", 1, MODEL_MAX_LAYERS, false, 1, &freq, err, errlen)) return -1;
    if (freq != 1)
        FAIL("moe_layer_freq %lld is not supported (1: every layer after the dense ones routed)", (long long)freq);
    if (hf_get_int(cfg, "n_routed_experts", 2, MODEL_MAX_EXPERTS, true, 0, &c->n_expert, err, errlen) ||
        hf_get_int(cfg, "num_experts_per_tok", 1, min64(c->n_expert, MODEL_MAX_EXPERTS_USED), true, 0,
                   &c->n_expert_used, err, errlen) ||
        hf_get_int(cfg, "moe_intermediate_size", 1, MODEL_MAX_FF, true, 0, &c->n_ff_exp, err, errlen) ||
        hf_get_int(cfg, "n_shared_experts", 1, MODEL_MAX_SHARED_EXPERTS, false, v2 ? 2 : 1, &c->n_expert_shared, err,
                   errlen) ||
        hf_get_int(cfg, "first_k_dense_replace", 0, c->n_layer, false, v2 ? 0 : 3, &c->n_layer_dense, err, errlen) ||
        hf_get_int(cfg, "intermediate_size", 1, MODEL_MAX_FF, c->n_layer_dense > 0, 0, &c->n_ff, err, errlen))
        return -1;
    if (!c->n_layer_dense) c->n_ff = 0; /* no dense layer uses it */
    if (c->n_ff_exp * c->n_expert_shared > MODEL_MAX_FF)
        FAIL("shared experts of %lld x %lld exceed %d", (long long)c->n_expert_shared, (long long)c->n_ff_exp,
             MODEL_MAX_FF);
    return 0;
}

/* n_group groups of which topk_group may be used (absent: defaults) and enough experts in
 * them for the top-k. */
static int read_groups(const cJSON *cfg, int64_t def_group, int64_t def_used, model_config *c, char *err,
                       size_t errlen) {
    if (hf_get_int(cfg, "n_group", 1, c->n_expert, false, def_group, &c->n_group, err, errlen) ||
        hf_get_int(cfg, "topk_group", 1, c->n_group, false, def_used, &c->n_group_used, err, errlen))
        return -1;
    if (c->n_expert % c->n_group)
        FAIL("n_routed_experts %lld is not a multiple of n_group %lld", (long long)c->n_expert, (long long)c->n_group);
    const int64_t used_max = c->n_group_used * (c->n_expert / c->n_group);
    if (c->n_expert_used > used_max)
        FAIL("num_experts_per_tok %lld exceeds the %lld experts of topk_group %lld groups",
             (long long)c->n_expert_used, (long long)used_max, (long long)c->n_group_used);
    return 0;
}

/* transformers' DeepseekV2MoEGate (4.57.1): softmax scores over all experts; greedy: the
 * top num_experts_per_tok; group_limited_greedy: those within the topk_group groups of the
 * best single scores (DeepSeek-V2's own code does the same). The weights are the chosen
 * scores times routed_scaling_factor, never renormalised: transformers ignores
 * norm_topk_prob, DeepSeek's code would renormalise and drop the scaling instead, so true is
 * refused rather than guessed. No score-correction bias (hf_weights.c refuses the tensor). */
static int read_moe_v2(const cJSON *cfg, model_config *c, char *err, size_t errlen) {
    c->gating = GATING_SOFTMAX;
    bool norm;
    if (only(cfg, "scoring_func", "softmax", err, errlen) || read_experts(cfg, true, c, err, errlen) ||
        hf_get_float(cfg, "routed_scaling_factor", 1e-6, 1e6, 1.0f, &c->expert_weights_scale, err, errlen) ||
        hf_get_strict_bool(cfg, "norm_topk_prob", false, &norm, err, errlen))
        return -1;
    if (norm)
        FAIL("norm_topk_prob true is not supported for deepseek_v2 (transformers ignores it; DeepSeek's code "
             "renormalises without routed_scaling_factor)");
    c->expert_weights_norm = false;
    const cJSON *m = hf_item(cfg, "topk_method");
    const char *method = m ? cJSON_GetStringValue(m) : "greedy";
    if (method && !strcmp(method, "greedy")) {
        c->n_group = c->n_group_used = 1; /* n_group and topk_group unused */
        return 0;
    }
    if (!method || strcmp(method, "group_limited_greedy"))
        FAIL("topk_method must be \"greedy\" or \"group_limited_greedy\" for deepseek_v2");
    if (!hf_item(cfg, "n_group") || !hf_item(cfg, "topk_group"))
        FAIL("topk_method group_limited_greedy needs n_group and topk_group");
    c->expert_group_max = true;
    return read_groups(cfg, 1, 1, c, err, errlen);
}

/* transformers' DeepseekV3MoE: sigmoid scores, selection by score + e_score_correction_bias
 * within the topk_group groups of best two-expert sums, weights the unbiased scores
 * (normalised if norm_topk_prob) times routed_scaling_factor, plus n_shared_experts shared
 * experts as one FFN; layers below first_k_dense_replace dense. */
static int read_moe_v3(const cJSON *cfg, model_config *c, char *err, size_t errlen) {
    c->gating = GATING_SIGMOID;
    if (only(cfg, "scoring_func", "sigmoid", err, errlen) || only(cfg, "topk_method", "noaux_tc", err, errlen) ||
        read_experts(cfg, false, c, err, errlen) || read_groups(cfg, 8, 4, c, err, errlen) ||
        hf_get_float(cfg, "routed_scaling_factor", 1e-6, 1e6, 2.5f, &c->expert_weights_scale, err, errlen) ||
        hf_get_strict_bool(cfg, "norm_topk_prob", true, &c->expert_weights_norm, err, errlen))
        return -1;
    if (c->n_expert / c->n_group < 2) FAIL("groups of one expert (a group scores its two best experts)");
    return 0;
}

int hf_read_deepseek(const cJSON *cfg, bool v2, model_config *c, char *err, size_t errlen) {
    if (hf_get_int(cfg, "num_hidden_layers", 1, MODEL_MAX_LAYERS, true, 0, &c->n_layer, err, errlen) ||
        hf_get_int(cfg, "hidden_size", 1, MODEL_MAX_EMBD, true, 0, &c->n_embd, err, errlen) ||
        hf_get_int(cfg, "num_attention_heads", 1, MODEL_MAX_HEADS, true, 0, &c->n_head, err, errlen) ||
        /* transformers' default; YaRN's original context falls back to it */
        hf_get_int(cfg, "max_position_embeddings", 1, MODEL_MAX_CONTEXT, false, v2 ? 2048 : 4096, &c->n_ctx_train, err,
                   errlen) ||
        /* DeepSeek-V3's multi-token-prediction module: layers after the last, not run */
        hf_get_int(cfg, "num_nextn_predict_layers", 0, MAX_MTP_LAYERS, false, 0, &c->hf_mtp_layers, err, errlen))
        return -1;
    return read_mla(cfg, c, err, errlen) || read_rope(cfg, v2, c, err, errlen) ||
                   (v2 ? read_moe_v2(cfg, c, err, errlen) : read_moe_v3(cfg, c, err, errlen))
               ? -1
               : 0;
}
