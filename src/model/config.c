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
        read_int(f, a, "feed_forward_length", 1, MODEL_MAX_FF, c->arch != ARCH_QWEN3MOE, 0, &c->n_ff, err, errlen) ||
        read_int(f, a, "attention.head_count", 1, MODEL_MAX_HEADS, true, 0, &c->n_head, err, errlen) ||
        read_int(f, a, "attention.head_count_kv", 1, c->n_head, false, c->n_head, &c->n_head_kv, err, errlen) ||
        read_int(f, a, "context_length", 1, MODEL_MAX_CONTEXT, false, 2048, &c->n_ctx_train, err, errlen))
        return -1;
    if (c->n_head % c->n_head_kv) FAIL("head_count %lld not a multiple of head_count_kv %lld",
                                      (long long)c->n_head, (long long)c->n_head_kv);
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
static int read_moe(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    const char *a = c->arch_name;
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
    else FAIL("unsupported architecture '%s' (supported: llama, qwen2, qwen3, qwen3moe)", a);
    c->rope_neox = c->arch != ARCH_LLAMA;
    if (read_dims(f, c, err, errlen) || read_moe(f, c, err, errlen) ||
        read_float(f, a, "attention.layer_norm_rms_epsilon", 0.0f, 1.0f, 1e-5f, &c->rms_eps, err, errlen) ||
        read_float(f, a, "rope.freq_base", FLT_MIN, FLT_MAX, 10000.0f, &c->rope_base, err, errlen))
        return -1;

    c->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if (gguf_get_str(f, key, &s, &len)) {
        if (len == 6 && !memcmp(s, "linear", 6)) {
            float factor;
            if (read_float(f, a, "rope.scaling.factor", 1e-6f, 1e6f, 1.0f, &factor, err, errlen)) return -1;
            c->rope_freq_scale = 1.0f / factor;
        } else if (!(len == 4 && !memcmp(s, "none", 4))) {
            FAIL("unsupported rope scaling type '%.*s' (supported: none, linear)", (int)len, s);
        }
    }
    c->n_vocab = 0; /* set from the embedding tensor */
    return 0;
}
