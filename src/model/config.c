#include "model/config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)

static void arch_key(char *key, size_t cap, const char *arch, const char *suffix) {
    snprintf(key, cap, "%s.%s", arch, suffix);
}

/* An integer hyperparameter in [lo, hi]. Absent: *out = def, or an error when required.
 * Present but not an integer that fits int64 (a string, a float, a u64 above INT64_MAX):
 * an error, never the default. Every size the model allocates derives from these. */
static int read_int(const gguf_file *f, const char *arch, const char *suffix, int64_t lo, int64_t hi,
                    bool required, int64_t def, int64_t *out, char *err, size_t errlen) {
    char key[128];
    arch_key(key, sizeof key, arch, suffix);
    int64_t at = gguf_find_key(f, key);
    if (at < 0) {
        if (required) FAIL("missing %s", key);
        *out = def;
        return 0;
    }
    if (!gguf_get_i64(f, key, out)) FAIL("%s is not an integer (type %s)", key, gguf_type_name(gguf_kv_type(f, at)));
    if (*out < lo || *out > hi)
        FAIL("%s = %lld is outside the supported range [%lld, %lld]", key, (long long)*out, (long long)lo, (long long)hi);
    return 0;
}

/* A float hyperparameter, finite and in [lo, hi] (absent: def). */
static int read_float(const gguf_file *f, const char *arch, const char *suffix, float lo, float hi, float def,
                      float *out, char *err, size_t errlen) {
    char key[128];
    arch_key(key, sizeof key, arch, suffix);
    if (gguf_find_key(f, key) < 0) {
        *out = def;
        return 0;
    }
    if (!gguf_get_f32(f, key, out)) FAIL("%s is not a float", key);
    if (!isfinite(*out) || *out < lo || *out > hi)
        FAIL("%s = %g is outside [%g, %g]", key, (double)*out, (double)lo, (double)hi);
    return 0;
}

static int read_dims(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    const char *a = c->arch_name;
    if (read_int(f, a, "block_count", 1, MODEL_MAX_LAYERS, true, 0, &c->n_layer, err, errlen) ||
        read_int(f, a, "embedding_length", 1, MODEL_MAX_EMBD, true, 0, &c->n_embd, err, errlen) ||
        read_int(f, a, "feed_forward_length", 1, MODEL_MAX_FF, c->arch < ARCH_QWEN3MOE, 0, &c->n_ff, err, errlen) ||
        read_int(f, a, "attention.head_count", 1, MODEL_MAX_HEADS, true, 0, &c->n_head, err, errlen) ||
        read_int(f, a, "attention.head_count_kv", 1, c->n_head, false, c->n_head, &c->n_head_kv, err, errlen) ||
        read_int(f, a, "context_length", 1, MODEL_MAX_CONTEXT, false, 2048, &c->n_ctx_train, err, errlen))
        return -1;
    if (c->n_head % c->n_head_kv) FAIL("head_count %lld not a multiple of head_count_kv %lld",
                                      (long long)c->n_head, (long long)c->n_head_kv);
    if (c->arch == ARCH_DEEPSEEK2) return 0; /* read_mla */
    int64_t vlen;
    if (read_int(f, a, "attention.key_length", 1, MODEL_MAX_HEAD_DIM, false, c->n_embd / c->n_head, &c->head_dim,
                 err, errlen))
        return -1;
    if (c->head_dim < 2 || c->head_dim > MODEL_MAX_HEAD_DIM || c->head_dim % 2)
        FAIL("unsupported head dim %lld (even, 2 to %d)", (long long)c->head_dim, MODEL_MAX_HEAD_DIM);
    if (read_int(f, a, "attention.value_length", 2, MODEL_MAX_HEAD_DIM, false, c->head_dim, &vlen, err, errlen))
        return -1;
    if (vlen != c->head_dim) FAIL("value_length != key_length is not supported");
    if (read_int(f, a, "rope.dimension_count", 2, c->head_dim, false, c->head_dim, &c->n_rot, err, errlen)) return -1;
    if (c->n_rot % 2) FAIL("bad rope.dimension_count %lld (must be even)", (long long)c->n_rot);
    c->head_dim_v = c->head_dim;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    return 0;
}

/* deepseek2's attention dims. Two layouts exist: llama.cpp's current converter writes the
 * cache's view (head_count_kv 1, key_length = kv_lora_rank + rope dims, value_length =
 * kv_lora_rank) with the per-head sizes in key_length_mla / value_length_mla and kv_b split
 * into attn_k_b / attn_v_b; older files give the per-head sizes in key_length /
 * value_length, head_count_kv = head_count, and one attn_kv_b. Either gives the same model. */
static int read_mla(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    const char *a = c->arch_name;
    int64_t klen, vlen, kmla, vmla, *nope = &c->mla.qk_nope;
    char key[128];
    if (read_int(f, a, "attention.q_lora_rank", 0, MODEL_MAX_EMBD, false, 0, &c->mla.q_lora, err, errlen) ||
        read_int(f, a, "attention.kv_lora_rank", 1, MODEL_MAX_LATENT_DIM - 2, true, 0, &c->mla.kv_lora, err, errlen) ||
        read_int(f, a, "rope.dimension_count", 2, MODEL_MAX_LATENT_DIM - c->mla.kv_lora, true, 0, &c->n_rot, err,
                 errlen) ||
        read_int(f, a, "attention.key_length", 1, MODEL_MAX_HEAD_DIM + MODEL_MAX_LATENT_DIM, true, 0, &klen, err,
                 errlen) ||
        read_int(f, a, "attention.value_length", 1, MODEL_MAX_HEAD_DIM + MODEL_MAX_LATENT_DIM, true, 0, &vlen, err,
                 errlen))
        return -1;
    if (c->n_rot % 2) FAIL("bad rope.dimension_count %lld (must be even)", (long long)c->n_rot);
    arch_key(key, sizeof key, a, "attention.key_length_mla");
    c->mla.split_kv_b = gguf_find_key(f, key) >= 0;
    if (c->mla.split_kv_b) {
        if (read_int(f, a, "attention.key_length_mla", c->n_rot + 1, MODEL_MAX_HEAD_DIM, true, 0, &kmla, err, errlen) ||
            read_int(f, a, "attention.value_length_mla", 1, MODEL_MAX_HEAD_DIM, true, 0, &vmla, err, errlen))
            return -1;
        if (c->n_head_kv != 1)
            FAIL("%s.attention.head_count_kv = %lld: an MLA file (key_length_mla) has 1", a, (long long)c->n_head_kv);
        if (klen != c->mla.kv_lora + c->n_rot || vlen != c->mla.kv_lora)
            FAIL("%s: key_length %lld / value_length %lld must be kv_lora_rank + rope dims (%lld) / kv_lora_rank "
                 "(%lld) in an MLA file",
                 a, (long long)klen, (long long)vlen, (long long)(c->mla.kv_lora + c->n_rot),
                 (long long)c->mla.kv_lora);
        *nope = kmla - c->n_rot;
        c->mla.v_dim = vmla;
    } else {
        if (klen <= c->n_rot || klen > MODEL_MAX_HEAD_DIM || vlen > MODEL_MAX_HEAD_DIM)
            FAIL("%s: key_length %lld / value_length %lld outside (rope dims %lld, %d]", a, (long long)klen,
                 (long long)vlen, (long long)c->n_rot, MODEL_MAX_HEAD_DIM);
        if (c->n_head_kv != c->n_head)
            FAIL("%s.attention.head_count_kv = %lld: a file without key_length_mla has head_count (%lld)", a,
                 (long long)c->n_head_kv, (long long)c->n_head);
        *nope = klen - c->n_rot;
        c->mla.v_dim = vlen;
    }
    /* the cache's one latent head */
    c->n_head_kv = 1;
    c->head_dim = c->mla.kv_lora + c->n_rot;
    c->head_dim_v = c->mla.kv_lora;
    c->attn_scale = 1.0f / sqrtf((float)(*nope + c->n_rot));
    return 0;
}

/* A bool hyperparameter (absent: def); another type is an error. */
static int read_bool(const gguf_file *f, const char *arch, const char *suffix, bool def, bool *out, char *err,
                     size_t errlen) {
    char key[128];
    arch_key(key, sizeof key, arch, suffix);
    int64_t at = gguf_find_key(f, key);
    if (at < 0) {
        *out = def;
        return 0;
    }
    if (!gguf_get_bool(f, key, out)) FAIL("%s is not a bool (type %s)", key, gguf_type_name(gguf_kv_type(f, at)));
    return 0;
}

/* The expert keys. qwen3moe: every layer is routed (softmax top-k, no shared expert, no
 * leading dense layers); keys that would ask for another design are refused rather than
 * ignored. A dense arch that names experts (Mixtral is written as "llama") is refused too. */
static int read_moe_deepseek2(const gguf_file *f, model_config *c, char *err, size_t errlen);

static int read_moe(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    const char *a = c->arch_name;
    c->gating = GATING_SOFTMAX;
    c->n_group = c->n_group_used = 1;
    c->expert_weights_scale = 1.0f;
    if (c->arch == ARCH_DEEPSEEK2) return read_moe_deepseek2(f, c, err, errlen);
    if (c->arch != ARCH_QWEN3MOE) {
        int64_t n;
        if (read_int(f, a, "expert_count", 0, INT64_MAX, false, 0, &n, err, errlen)) return -1;
        if (n > 0) FAIL("%s with %lld experts is not supported (mixture-of-experts: qwen3moe)", a, (long long)n);
        return 0;
    }
    int64_t v;
    float scale;
    c->n_ff = 0; /* feed_forward_length, if given (bounded above), is a dense FFN qwen3moe does not have */
    if (read_int(f, a, "expert_count", 2, MODEL_MAX_EXPERTS, true, 0, &c->n_expert, err, errlen) ||
        read_int(f, a, "expert_used_count", 1,
                 c->n_expert < MODEL_MAX_EXPERTS_USED ? c->n_expert : MODEL_MAX_EXPERTS_USED, true, 0,
                 &c->n_expert_used, err, errlen) ||
        read_int(f, a, "expert_feed_forward_length", 1, MODEL_MAX_FF, true, 0, &c->n_ff_exp, err, errlen) ||
        read_bool(f, a, "expert_weights_norm", true, &c->expert_weights_norm, err, errlen))
        return -1;
    if (read_int(f, a, "expert_gating_func", 0, INT64_MAX, false, 1, &v, err, errlen)) return -1;
    if (v != 1) FAIL("%s.expert_gating_func = %lld is not supported (qwen3moe gates by softmax, 1)", a, (long long)v);
    if (read_int(f, a, "expert_shared_count", 0, INT64_MAX, false, 0, &v, err, errlen)) return -1;
    if (v) FAIL("%s.expert_shared_count = %lld: qwen3moe has no shared experts", a, (long long)v);
    if (read_int(f, a, "expert_shared_feed_forward_length", 0, INT64_MAX, false, 0, &v, err, errlen)) return -1;
    if (v) FAIL("%s.expert_shared_feed_forward_length = %lld: qwen3moe has no shared experts", a, (long long)v);
    if (read_int(f, a, "leading_dense_block_count", 0, INT64_MAX, false, 0, &v, err, errlen)) return -1;
    if (v) FAIL("%s.leading_dense_block_count = %lld: every qwen3moe layer is routed", a, (long long)v);
    if (read_float(f, a, "expert_weights_scale", -FLT_MAX, FLT_MAX, 1.0f, &scale, err, errlen)) return -1;
    if (scale != 1.0f)
        FAIL("%s.expert_weights_scale = %g is not supported (qwen3moe does not scale)", a, (double)scale);
    return 0;
}

/* deepseek2: leading dense layers, then routed layers with shared experts; softmax
 * (V2, V2-Lite) or sigmoid with a score-correction bias (V3) gating, group-limited top-k,
 * optional normalisation of the chosen weights and a scale on them. */
static int read_moe_deepseek2(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    const char *a = c->arch_name;
    int64_t v, used_max;
    if (read_int(f, a, "leading_dense_block_count", 0, c->n_layer, false, 0, &c->n_layer_dense, err, errlen) ||
        read_int(f, a, "expert_count", 2, MODEL_MAX_EXPERTS, true, 0, &c->n_expert, err, errlen) ||
        read_int(f, a, "expert_used_count", 1,
                 c->n_expert < MODEL_MAX_EXPERTS_USED ? c->n_expert : MODEL_MAX_EXPERTS_USED, true, 0,
                 &c->n_expert_used, err, errlen) ||
        read_int(f, a, "expert_feed_forward_length", 1, MODEL_MAX_FF, true, 0, &c->n_ff_exp, err, errlen) ||
        read_int(f, a, "expert_shared_count", 0, MODEL_MAX_SHARED_EXPERTS, false, 0, &c->n_expert_shared, err,
                 errlen) ||
        read_bool(f, a, "expert_weights_norm", false, &c->expert_weights_norm, err, errlen) ||
        read_float(f, a, "expert_weights_scale", 1e-6f, 1e6f, 1.0f, &c->expert_weights_scale, err, errlen) ||
        read_int(f, a, "expert_gating_func", 0, INT64_MAX, false, GATING_SOFTMAX, &v, err, errlen))
        return -1;
    if (v == 0) v = GATING_SOFTMAX; /* "none": older V2 files; llama.cpp reads it as softmax too */
    if (v != GATING_SOFTMAX && v != GATING_SIGMOID)
        FAIL("%s.expert_gating_func = %lld is not supported (1 softmax, 2 sigmoid)", a, (long long)v);
    c->gating = (expert_gating)v;
    if (c->n_layer_dense && !c->n_ff)
        FAIL("%s: %lld leading dense layers need feed_forward_length", a, (long long)c->n_layer_dense);
    if (c->n_ff_exp * c->n_expert_shared > MODEL_MAX_FF)
        FAIL("%s: shared experts of %lld x %lld exceed %d", a, (long long)c->n_expert_shared, (long long)c->n_ff_exp,
             MODEL_MAX_FF);
    /* multi-token-prediction layers (V3's MTP), where a converter keeps them: they are not part
     * of the forward, so a file counting them among its blocks would run them as layers */
    if (read_int(f, a, "nextn_predict_layers", 0, INT64_MAX, false, 0, &v, err, errlen)) return -1;
    if (v) FAIL("%s.nextn_predict_layers = %lld: multi-token-prediction layers are not supported", a, (long long)v);
    if (read_int(f, a, "expert_shared_feed_forward_length", 0, INT64_MAX, false, 0, &v, err, errlen)) return -1;
    if (v && v != c->n_ff_exp * c->n_expert_shared)
        FAIL("%s.expert_shared_feed_forward_length = %lld: deepseek2's shared FFN is expert_feed_forward_length x "
             "expert_shared_count = %lld",
             a, (long long)v, (long long)(c->n_ff_exp * c->n_expert_shared));
    if (read_int(f, a, "expert_group_count", 1, c->n_expert, false, 1, &c->n_group, err, errlen) ||
        read_int(f, a, "expert_group_used_count", 1, c->n_group, false, c->n_group, &c->n_group_used, err, errlen))
        return -1;
    if (c->n_expert % c->n_group)
        FAIL("%s: expert_count %lld is not a multiple of expert_group_count %lld", a, (long long)c->n_expert,
             (long long)c->n_group);
    if (c->n_group > 1 && c->n_expert / c->n_group < 2)
        FAIL("%s: groups of one expert (a group scores its two best experts)", a);
    used_max = c->n_group_used * (c->n_expert / c->n_group);
    if (c->n_expert_used > used_max)
        FAIL("%s: expert_used_count %lld exceeds the %lld experts of %lld groups", a, (long long)c->n_expert_used,
             (long long)used_max, (long long)c->n_group_used);
    return 0;
}

/* rope.scaling.*: none or linear for every arch, YaRN for deepseek2. */
static int read_rope_scaling(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    const char *a = c->arch_name, *s;
    size_t len;
    char key[128];
    c->rope_freq_scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if (!gguf_get_str(f, key, &s, &len) || (len == 4 && !memcmp(s, "none", 4))) return 0;
    float factor, attn_factor;
    if (len == 6 && !memcmp(s, "linear", 6)) {
        if (read_float(f, a, "rope.scaling.factor", 1e-6f, 1e6f, 1.0f, &factor, err, errlen)) return -1;
        c->rope_freq_scale = 1.0f / factor;
        return 0;
    }
    if (!(len == 4 && !memcmp(s, "yarn", 4)) || c->arch != ARCH_DEEPSEEK2)
        FAIL("unsupported rope scaling type '%.*s' (supported: none, linear; yarn for deepseek2)", (int)len, s);
    if (read_float(f, a, "rope.scaling.factor", 1.0f, 1e6f, 1.0f, &c->yarn.factor, err, errlen) ||
        read_int(f, a, "rope.scaling.original_context_length", 1, MODEL_MAX_CONTEXT, true, 0, &c->yarn.original_ctx,
                 err, errlen) ||
        read_float(f, a, "rope.scaling.yarn_log_multiplier", 0.0f, 10.0f, 0.0f, &c->yarn.log_mul, err, errlen) ||
        read_float(f, a, "rope.scaling.attn_factor", -FLT_MAX, FLT_MAX, 1.0f, &attn_factor, err, errlen))
        return -1;
    if (attn_factor != 1.0f) FAIL("%s.rope.scaling.attn_factor = %g is not supported (1)", a, (double)attn_factor);
    const float mscale = 1.0f + c->yarn.log_mul * logf(c->yarn.factor);
    c->attn_scale *= mscale * mscale;
    return 0;
}

int model_config_read(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    const char *s;
    size_t len;
    if (!gguf_get_str(f, "general.architecture", &s, &len)) FAIL("missing general.architecture");
    if (len >= sizeof c->arch_name) FAIL("architecture name too long");
    memcpy(c->arch_name, s, len);
    c->arch_name[len] = 0;
    const char *a = c->arch_name;
    if (!strcmp(a, "llama")) c->arch = ARCH_LLAMA;
    else if (!strcmp(a, "qwen2")) c->arch = ARCH_QWEN2;
    else if (!strcmp(a, "qwen3")) c->arch = ARCH_QWEN3;
    else if (!strcmp(a, "qwen3moe")) c->arch = ARCH_QWEN3MOE;
    else if (!strcmp(a, "deepseek2")) c->arch = ARCH_DEEPSEEK2;
    else FAIL("unsupported architecture '%s' (supported: llama, qwen2, qwen3, qwen3moe, deepseek2)", a);
    c->rope_neox = c->arch != ARCH_LLAMA && c->arch != ARCH_DEEPSEEK2; /* deepseek2: pairs (2i, 2i+1) */
    if (read_dims(f, c, err, errlen) || (c->arch == ARCH_DEEPSEEK2 && read_mla(f, c, err, errlen)) ||
        read_moe(f, c, err, errlen) || read_rope_scaling(f, c, err, errlen) ||
        read_float(f, a, "attention.layer_norm_rms_epsilon", 0.0f, 1.0f, 1e-5f, &c->rms_eps, err, errlen) ||
        read_float(f, a, "rope.freq_base", FLT_MIN, FLT_MAX, 10000.0f, &c->rope_base, err, errlen))
        return -1;

    c->n_vocab = 0; /* set from the embedding tensor */
    return 0;
}
