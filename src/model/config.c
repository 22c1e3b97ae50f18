#include "config.h"

#include <stdio.h>
#include <string.h>

static bool get_int(const gguf_file *f, const char *arch, const char *suffix, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_i64(f, key, out);
}

static bool get_float(const gguf_file *f, const char *arch, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(f, key, out);
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)

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
    else FAIL("unsupported architecture '%s' (supported: llama, qwen2, qwen3)", a);
    c->rope_neox = c->arch != ARCH_LLAMA;

    if (!get_int(f, a, "block_count", &c->n_layer)) FAIL("missing %s.block_count", a);
    if (!get_int(f, a, "embedding_length", &c->n_embd)) FAIL("missing %s.embedding_length", a);
    if (!get_int(f, a, "feed_forward_length", &c->n_ff)) FAIL("missing %s.feed_forward_length", a);
    if (!get_int(f, a, "attention.head_count", &c->n_head)) FAIL("missing %s.attention.head_count", a);
    if (!get_int(f, a, "attention.head_count_kv", &c->n_head_kv)) c->n_head_kv = c->n_head;
    if (!get_int(f, a, "context_length", &c->n_ctx_train)) c->n_ctx_train = 2048;
    if (!get_float(f, a, "attention.layer_norm_rms_epsilon", &c->rms_eps)) c->rms_eps = 1e-5f;
    if (!get_float(f, a, "rope.freq_base", &c->rope_base)) c->rope_base = 10000.0f;
    if (c->n_head <= 0 || c->n_layer <= 0 || c->n_embd <= 0 || c->n_ff <= 0 || c->n_head_kv <= 0)
        FAIL("non-positive model dimensions");
    if (c->n_layer > 1024 || c->n_embd > 65536 || c->n_ff > 262144 || c->n_head > 1024)
        FAIL("implausible model dimensions");
    if (c->n_head % c->n_head_kv) FAIL("head_count %lld not a multiple of head_count_kv %lld",
                                      (long long)c->n_head, (long long)c->n_head_kv);
    if (!get_int(f, a, "attention.key_length", &c->head_dim)) c->head_dim = c->n_embd / c->n_head;
    int64_t vlen;
    if (get_int(f, a, "attention.value_length", &vlen) && vlen != c->head_dim)
        FAIL("value_length != key_length is not supported");
    if (c->head_dim <= 0 || c->head_dim > 512 || c->head_dim % 2) FAIL("unsupported head dim %lld", (long long)c->head_dim);
    if (!get_int(f, a, "rope.dimension_count", &c->n_rot)) c->n_rot = c->head_dim;
    if (c->n_rot <= 0 || c->n_rot > c->head_dim || c->n_rot % 2) FAIL("bad rope.dimension_count");

    c->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if (gguf_get_str(f, key, &s, &len)) {
        if (len == 6 && !memcmp(s, "linear", 6)) {
            float factor;
            if (get_float(f, a, "rope.scaling.factor", &factor) && factor > 0) c->rope_freq_scale = 1.0f / factor;
        } else if (!(len == 4 && !memcmp(s, "none", 4))) {
            FAIL("unsupported rope scaling type '%.*s' (supported: none, linear)", (int)len, s);
        }
    }
    c->n_vocab = 0; /* set from the embedding tensor */
    return 0;
}
