#include "model/hf_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "formats/safetensors_set.h"

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)

struct hf_weights {
    st_set *set;
    int64_t n;
    gguf_tensor *views;   /* sorted by (GGUF) name */
    int64_t n_owned;
    void **owned;         /* row-permuted copies (Llama q/k) */
};

/* Which layers have a tensor: QK-norm is Qwen3's (dense and MoE); a routed layer has a
 * router and experts instead of the dense FFN (deepseek2: the layers after n_layer_dense,
 * with shared experts and, sigmoid-gated (V3), the score-correction bias); MLA (deepseek2)
 * replaces q/k/v, its query straight (q_lora 0) or through the q_a/q_b bottleneck. */
enum { ANY, ONLY_QWEN2, ONLY_QK_NORM, ONLY_DENSE, ONLY_MOE, ONLY_DS_MOE, ONLY_DS_BIAS, ONLY_MLA, ONLY_Q_LORA,
       ONLY_Q_PLAIN, NOT_MLA };

/* HF name (after "model.layers.<i>.") -> GGUF name (after "blk.<i>."). */
static const struct { const char *hf, *gguf; int only; } k_layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight", ANY},
    {"post_attention_layernorm.weight", "ffn_norm.weight", ANY},
    {"self_attn.q_proj.weight", "attn_q.weight", ONLY_Q_PLAIN},
    {"self_attn.k_proj.weight", "attn_k.weight", NOT_MLA},
    {"self_attn.v_proj.weight", "attn_v.weight", NOT_MLA},
    {"self_attn.o_proj.weight", "attn_output.weight", ANY},
    {"self_attn.q_proj.bias", "attn_q.bias", ONLY_QWEN2},
    {"self_attn.k_proj.bias", "attn_k.bias", ONLY_QWEN2},
    {"self_attn.v_proj.bias", "attn_v.bias", ONLY_QWEN2},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", ONLY_QK_NORM},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", ONLY_QK_NORM},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight", ONLY_Q_LORA},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight", ONLY_Q_LORA},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight", ONLY_Q_LORA},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight", ONLY_MLA},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight", ONLY_MLA},
    /* kept merged: the loader splits it per head (model.c: split_kv_b), rows as transformers
     * reads them, each head's qk_nope key rows then its v_head_dim value rows */
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight", ONLY_MLA},
    {"mlp.gate_proj.weight", "ffn_gate.weight", ONLY_DENSE},
    {"mlp.up_proj.weight", "ffn_up.weight", ONLY_DENSE},
    {"mlp.down_proj.weight", "ffn_down.weight", ONLY_DENSE},
    {"mlp.gate.weight", "ffn_gate_inp.weight", ONLY_MOE},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias", ONLY_DS_BIAS},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight", ONLY_DS_MOE},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight", ONLY_DS_MOE},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight", ONLY_DS_MOE},
};

/* "mlp.experts.<e>.<proj>" -> "ffn_<kind>_exps.<e>.weight" (hf_weights.h). */
static const char *const k_expert_proj[3] = {"gate", "up", "down"};

static const struct { const char *hf, *gguf; } k_global_names[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

static bool routed(const model_config *c, int64_t il) { return c->n_expert > 0 && il >= c->n_layer_dense; }

static bool layer_has(const model_config *c, int64_t il, int only) {
    const bool mla = c->arch == ARCH_DEEPSEEK2;
    switch (only) {
    case ONLY_QWEN2: return c->arch == ARCH_QWEN2;
    case ONLY_QK_NORM: return c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE;
    case ONLY_DENSE: return !routed(c, il);
    case ONLY_MOE: return routed(c, il);
    case ONLY_DS_MOE: return mla && routed(c, il);
    case ONLY_DS_BIAS: return mla && routed(c, il) && c->gating == GATING_SIGMOID;
    case ONLY_MLA: return mla;
    case ONLY_Q_LORA: return mla && c->mla.q_lora > 0;
    case ONLY_Q_PLAIN: return !mla || c->mla.q_lora == 0;
    case NOT_MLA: return !mla;
    default: return true;
    }
}

/* "<prefix><i>.<rest>" with a plain decimal i (no sign, no leading 0: one name per index, so
 * no weight can be given twice under two spellings) below n. */
static bool split_index(const char *s, const char *prefix, int64_t n, int64_t *i, const char **rest) {
    size_t k = strlen(prefix);
    if (strncmp(s, prefix, k)) return false;
    const char *p = s + k;
    int64_t v = 0;
    const char *d = p;
    while (*d >= '0' && *d <= '9' && d - p < 6) v = v * 10 + (*d++ - '0');
    if (d == p || *d != '.' || (d - p > 1 && *p == '0') || v >= n) return false;
    *i = v;
    *rest = d + 1;
    return true;
}

/* A routed layer's "mlp.experts.<e>.<kind>_proj.weight" with e below n_expert. */
static bool expert_name(const model_config *c, int64_t il, const char *rest, int64_t *e, int *kind) {
    const char *proj;
    if (!routed(c, il) || !split_index(rest, "mlp.experts.", c->n_expert, e, &proj)) return false;
    for (int k = 0; k < 3; k++) {
        char want[32];
        snprintf(want, sizeof want, "%s_proj.weight", k_expert_proj[k]);
        if (!strcmp(proj, want)) {
            *kind = k;
            return true;
        }
    }
    return false;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The GGUF name of an HF tensor into out; 1: not used (skip), 0: mapped, -1: no place in c. */
static int gguf_name(const model_config *c, bool tied, const char *hf, char *out, size_t cap) {
    if (ends_with(hf, ".rotary_emb.inv_freq")) return 1; /* recomputed from rope_theta */
    if (tied && !strcmp(hf, "lm_head.weight")) return 1;
    for (size_t k = 0; k < sizeof k_global_names / sizeof *k_global_names; k++)
        if (!strcmp(hf, k_global_names[k].hf)) {
            snprintf(out, cap, "%s", k_global_names[k].gguf);
            return 0;
        }
    int64_t il, e;
    int kind;
    const char *rest;
    if (!split_index(hf, "model.layers.", c->n_layer + c->hf_mtp_layers, &il, &rest)) return -1;
    if (il >= c->n_layer) return 1; /* DeepSeek-V3's multi-token prediction (config.h: hf_mtp_layers) */
    for (size_t k = 0; k < sizeof k_layer_names / sizeof *k_layer_names; k++)
        if (!strcmp(rest, k_layer_names[k].hf) && layer_has(c, il, k_layer_names[k].only)) {
            snprintf(out, cap, "blk.%lld.%s", (long long)il, k_layer_names[k].gguf);
            return 0;
        }
    if (expert_name(c, il, rest, &e, &kind)) {
        hf_weights_expert_name(il, kind, e, false, out, cap);
        return 0;
    }
    return -1;
}

/* GGUF's Llama q/k rows: head h's rotary pair i is rows (2i, 2i+1), where HF has (i, i + hd/2). */
static int permute_rows(hf_weights *w, gguf_tensor *v, int64_t n_heads, int64_t hd, char *err, size_t errlen) {
    int64_t rows = v->n_dims >= 2 ? v->ne[1] : 1;
    if (v->n_dims != 2 || rows != n_heads * hd) FAIL("tensor %s: expected %lld rows", v->name, (long long)(n_heads * hd));
    size_t rb = (size_t)(v->nbytes / (uint64_t)rows);
    char *dst = malloc(v->nbytes ? v->nbytes : 1);
    if (!dst) FAIL("out of memory");
    w->owned[w->n_owned++] = dst;
    const char *src = v->data;
    for (int64_t h = 0; h < n_heads; h++)
        for (int64_t i = 0; i < hd / 2; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(dst + (size_t)(h * hd + 2 * i + j) * rb, src + (size_t)(h * hd + j * (hd / 2) + i) * rb, rb);
    v->data = dst;
    return 0;
}

static int cmp_view(const void *a, const void *b) {
    return strcmp(((const gguf_tensor *)a)->name, ((const gguf_tensor *)b)->name);
}

static int add_view(hf_weights *w, const model_config *c, const st_tensor *t, const char *name, char *err,
                    size_t errlen) {
    if (t->n_dims < 1 || t->n_dims > 4) FAIL("tensor %s has %u dimensions (1 to 4)", t->name, t->n_dims);
    gguf_tensor *v = &w->views[w->n];
    v->name = strdup(name);
    if (!v->name) FAIL("out of memory");
    w->n++;
    v->n_dims = t->n_dims;
    for (uint32_t d = 0; d < 4; d++) v->ne[d] = d < t->n_dims ? t->shape[t->n_dims - 1 - d] : 1;
    v->type = t->type;
    v->data = t->data;
    v->nbytes = t->nbytes;
    if (c->arch == ARCH_LLAMA && (ends_with(name, ".attn_q.weight") || ends_with(name, ".attn_k.weight")))
        return permute_rows(w, v, ends_with(name, ".attn_q.weight") ? c->n_head : c->n_head_kv, c->head_dim, err,
                            errlen);
    return 0;
}

/* Every expert of every layer is there (each at most once: names map one to one). */
static int check_experts(const hf_weights *w, const model_config *c, char *err, size_t errlen) {
    for (int64_t il = c->n_layer_dense; il < c->n_layer; il++)
        for (int64_t e = 0; e < c->n_expert; e++)
            for (int k = 0; k < 3; k++) {
                char name[96];
                hf_weights_expert_name(il, k, e, false, name, sizeof name);
                if (hf_weights_find(w, name)) continue;
                hf_weights_expert_name(il, k, e, true, name, sizeof name);
                FAIL("tensor %s is missing (%lld experts: experts 0 to %lld of every routed layer are needed)", name,
                     (long long)c->n_expert, (long long)(c->n_expert - 1));
            }
    /* transformers' DeepseekV3 always saves the selection bias (a GGUF may lack it: then 0);
     * DeepseekV2 has none (softmax gating) */
    for (int64_t il = c->n_layer_dense; c->arch == ARCH_DEEPSEEK2 && c->gating == GATING_SIGMOID && il < c->n_layer;
         il++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%lld.exp_probs_b.bias", (long long)il);
        if (!hf_weights_find(w, name))
            FAIL("tensor model.layers.%lld.mlp.gate.e_score_correction_bias is missing", (long long)il);
    }
    return 0;
}

static int map_all(hf_weights *w, const model_config *c, bool tied, char *err, size_t errlen) {
    int64_t n = st_set_n_tensors(w->set);
    w->views = calloc((size_t)(n ? n : 1), sizeof *w->views);
    w->owned = calloc((size_t)(n ? n : 1), sizeof *w->owned);
    if (!w->views || !w->owned) FAIL("out of memory");
    for (int64_t i = 0; i < n; i++) {
        const st_tensor *t = st_set_tensor(w->set, i);
        char name[96];
        int rc = gguf_name(c, tied, t->name, name, sizeof name);
        if (rc < 0) FAIL("tensor '%.80s' has no place in invar's %s model (an unsupported variant?)", t->name, c->arch_name);
        if (rc == 0 && add_view(w, c, t, name, err, errlen)) return -1;
    }
    qsort(w->views, (size_t)w->n, sizeof *w->views, cmp_view);
    if (!tied && !hf_weights_find(w, "output.weight"))
        FAIL("lm_head.weight is missing and tie_word_embeddings is false");
    return check_experts(w, c, err, errlen);
}

int hf_weights_open(const char *dir, const model_config *c, bool tied, hf_weights **out, char *err, size_t errlen) {
    *out = NULL;
    hf_weights *w = calloc(1, sizeof *w);
    if (!w) FAIL("out of memory");
    if (st_set_open(dir, &w->set, err, errlen) || map_all(w, c, tied, err, errlen)) {
        hf_weights_close(w);
        return -1;
    }
    *out = w;
    return 0;
}

void hf_weights_close(hf_weights *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n; i++) free((char *)w->views[i].name);
    for (int64_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->views);
    free(w->owned);
    st_set_close(w->set);
    free(w);
}

void hf_weights_expert_name(int64_t il, int kind, int64_t e, bool hf, char *out, size_t cap) {
    if (hf)
        snprintf(out, cap, "model.layers.%lld.mlp.experts.%lld.%s_proj.weight", (long long)il, (long long)e,
                 k_expert_proj[kind]);
    else
        snprintf(out, cap, "blk.%lld.ffn_%s_exps.%lld.weight", (long long)il, k_expert_proj[kind], (long long)e);
}

bool hf_weights_hf_name(const char *gguf_name, char *out, size_t cap) {
    for (size_t k = 0; k < sizeof k_global_names / sizeof *k_global_names; k++)
        if (!strcmp(gguf_name, k_global_names[k].gguf)) {
            snprintf(out, cap, "%s", k_global_names[k].hf);
            return true;
        }
    int64_t il;
    const char *rest;
    if (!split_index(gguf_name, "blk.", INT32_MAX, &il, &rest)) return false;
    for (size_t k = 0; k < sizeof k_layer_names / sizeof *k_layer_names; k++)
        if (!strcmp(rest, k_layer_names[k].gguf)) {
            snprintf(out, cap, "model.layers.%lld.%s", (long long)il, k_layer_names[k].hf);
            return true;
        }
    return false;
}

const gguf_tensor *hf_weights_find(const hf_weights *w, const char *gguf_name) {
    gguf_tensor key = {.name = gguf_name};
    return bsearch(&key, w->views, (size_t)w->n, sizeof key, cmp_view);
}
