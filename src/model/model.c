#include "model/model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/json_file.h"
#include "formats/quant.h"
#include "model/rope_table.h"
#include "model/weight_update.h"

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)

static const gguf_tensor *find(const model *m, const char *name) {
    return m->hf ? hf_weights_find(m->hf, name) : gguf_find_tensor(m->gguf, name);
}

/* "missing tensor NAME", with the name a Hugging Face directory would hold it under. */
static int missing_tensor(const model *m, const char *name, char *err, size_t errlen) {
    char hf[160];
    if (m->hf && hf_weights_hf_name(name, hf, sizeof hf)) FAIL("missing tensor %s (GGUF name %s)", hf, name);
    FAIL("missing tensor %s", name);
}

static int check_shape(const gguf_tensor *t, int64_t ne0, int64_t ne1, char *err, size_t errlen) {
    int64_t rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) rows *= t->ne[d];
    if (t->ne[0] != ne0 || rows != ne1)
        FAIL("tensor %s has shape [%lld, %lld], expected [%lld, %lld]", t->name, (long long)t->ne[0],
             (long long)rows, (long long)ne0, (long long)ne1);
    return 0;
}

/* A matrix [rows = out features][k = in features], validated for the matmul kernels; the
 * CPU's repacked copy is made only when a CPU backend needs it (model_bind_cpu). */
static int bind_matrix(model *m, cpu_weight *w, const char *name, int64_t k, int64_t n, char *err,
                       size_t errlen) {
    const gguf_tensor *t = find(m, name);
    if (!t) return missing_tensor(m, name, err, errlen);
    if (check_shape(t, k, n, err, errlen)) return -1;
    char e2[200]; /* an unsupported type is refused (and named) by cpu_weight_view */
    if (cpu_weight_view(w, t->type, n, k, t->data, e2, sizeof e2)) FAIL("tensor %s: %s", name, e2);
    return 0;
}

/* A vector (norm weight, bias) copied to float32. Absent and optional -> *out = NULL. */
static int load_vector(model *m, float **out, const char *name, int64_t n, int required, char *err,
                       size_t errlen) {
    *out = NULL;
    const gguf_tensor *t = find(m, name);
    if (!t) return required ? missing_tensor(m, name, err, errlen) : 0;
    if (check_shape(t, n, 1, err, errlen)) return -1;
    if (!quant_type_supported(t->type) || quant_row_bytes(t->type, n) == 0)
        FAIL("tensor %s: unsupported type %s (ggml type %u)", name, quant_type_name(t->type), (unsigned)t->type);
    *out = malloc(sizeof(float) * (size_t)n);
    if (!*out) FAIL("out of memory");
    dequant_row(t->type, t->data, *out, n);
    return 0;
}

/* A 3-D expert tensor [n_expert][n][k] (ggml ne = {k, n, n_expert}): one matrix view per
 * expert, each the expert's n rows of the file's data, still quantised. */
static int bind_stack(model *m, cpu_weight **out, const char *name, int64_t k, int64_t n, int64_t E, char *err,
                      size_t errlen) {
    const gguf_tensor *t = find(m, name);
    if (!t) return missing_tensor(m, name, err, errlen);
    if (t->n_dims != 3 || t->ne[0] != k || t->ne[1] != n || t->ne[2] != E)
        FAIL("tensor %s has shape [%lld, %lld, %lld] (%u dims), expected [%lld, %lld, %lld]", t->name,
             (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)(t->n_dims > 2 ? t->ne[2] : 1),
             (unsigned)t->n_dims, (long long)k, (long long)n, (long long)E);
    *out = calloc((size_t)E, sizeof **out);
    if (!*out) FAIL("out of memory");
    const size_t rb = quant_row_bytes(t->type, k);
    char e2[200];
    for (int64_t e = 0; e < E; e++)
        if (cpu_weight_view(&(*out)[e], t->type, n, k, (const char *)t->data + (size_t)e * (size_t)n * rb, e2,
                            sizeof e2))
            FAIL("tensor %s: %s", name, e2);
    return 0;
}

/* A Hugging Face directory's experts, each its own matrix (hf_weights.h): the same per-expert
 * views as bind_stack makes of a GGUF's stack, pointing into the mapping, nothing copied. */
static int bind_hf_experts(model *m, cpu_weight **out, int64_t il, int kind, int64_t k, int64_t n, char *err,
                           size_t errlen) {
    *out = calloc((size_t)m->cfg.n_expert, sizeof **out);
    if (!*out) FAIL("out of memory");
    for (int64_t e = 0; e < m->cfg.n_expert; e++) {
        char nm[96], hf[96];
        hf_weights_expert_name(il, kind, e, false, nm, sizeof nm);
        hf_weights_expert_name(il, kind, e, true, hf, sizeof hf);
        const gguf_tensor *t = find(m, nm);
        if (!t) FAIL("missing tensor %s", hf);
        char e2[200];
        if (t->n_dims != 2 || check_shape(t, k, n, e2, sizeof e2))
            FAIL("tensor %s has shape [%lld, %lld] (%u dims), expected [%lld, %lld]", hf,
                 (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)t->ne[0], (unsigned)t->n_dims, (long long)n,
                 (long long)k);
        if (cpu_weight_view(&(*out)[e], t->type, n, k, t->data, e2, sizeof e2)) FAIL("tensor %s: %s", hf, e2);
    }
    return 0;
}

/* kind: 0 gate, 1 up, 2 down (hf_weights.h) */
static int bind_experts(model *m, cpu_weight **out, int64_t il, int kind, int64_t k, int64_t n, char *err,
                        size_t errlen) {
    static const char *const stacks[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    if (m->hf) return bind_hf_experts(m, out, il, kind, k, n, err, errlen);
    char nm[96];
    snprintf(nm, sizeof nm, "blk.%lld.%s.weight", (long long)il, stacks[kind]);
    return bind_stack(m, out, nm, k, n, m->cfg.n_expert, err, errlen);
}

static int load_moe(model *m, layer_weights *L, int64_t il, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const int64_t fs = c->n_ff_exp * c->n_expert_shared;
    char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)il), nm)
    if (bind_matrix(m, &L->router, NAME("ffn_gate_inp.weight"), c->n_embd, c->n_expert, err, errlen) ||
        bind_experts(m, &L->exp_gate, il, 0, c->n_embd, c->n_ff_exp, err, errlen) ||
        bind_experts(m, &L->exp_up, il, 1, c->n_embd, c->n_ff_exp, err, errlen) ||
        bind_experts(m, &L->exp_down, il, 2, c->n_ff_exp, c->n_embd, err, errlen))
        return -1;
    if (c->arch == ARCH_DEEPSEEK2 &&
        load_vector(m, &L->exp_probs_b, NAME("exp_probs_b.bias"), c->n_expert, 0, err, errlen))
        return -1;
    if (fs && (bind_matrix(m, &L->sh_gate, NAME("ffn_gate_shexp.weight"), c->n_embd, fs, err, errlen) ||
               bind_matrix(m, &L->sh_up, NAME("ffn_up_shexp.weight"), c->n_embd, fs, err, errlen) ||
               bind_matrix(m, &L->sh_down, NAME("ffn_down_shexp.weight"), fs, c->n_embd, err, errlen)))
        return -1;
#undef NAME
    return 0;
}

/* A merged attn_kv_b [n_head (qk_nope + v_dim)][kv_lora] (older deepseek2 files): v_b is
 * each head's v_dim rows as they are; k_b is each head's qk_nope rows transposed, which the
 * file does not hold, so they are made here in float32 (what attn_k_b dequantises to). */
static int split_kv_b(model *m, layer_weights *L, const char *name, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const int64_t H = c->n_head, nope = c->mla.qk_nope, vd = c->mla.v_dim, R = c->mla.kv_lora;
    const gguf_tensor *t = find(m, name);
    if (!t) FAIL("missing tensor %s (or attn_k_b / attn_v_b with key_length_mla)", name);
    if (check_shape(t, R, H * (nope + vd), err, errlen)) return -1;
    if (!quant_type_supported(t->type) || quant_row_bytes(t->type, R) == 0)
        FAIL("tensor %s: unsupported type %s (ggml type %u)", name, quant_type_name(t->type), (unsigned)t->type);
    const size_t rb = quant_row_bytes(t->type, R);
    L->kb_owned = malloc(sizeof(float) * (size_t)(H * R * nope));
    float *row = malloc(sizeof(float) * (size_t)R);
    L->k_b = calloc((size_t)H, sizeof *L->k_b);
    L->v_b = calloc((size_t)H, sizeof *L->v_b);
    if (!L->kb_owned || !row || !L->k_b || !L->v_b) {
        free(row);
        FAIL("out of memory");
    }
    char e2[200];
    for (int64_t h = 0; h < H; h++) {
        float *kb = L->kb_owned + h * R * nope;
        const char *head = (const char *)t->data + (size_t)(h * (nope + vd)) * rb;
        for (int64_t n = 0; n < nope; n++) {
            dequant_row(t->type, head + (size_t)n * rb, row, R);
            for (int64_t r = 0; r < R; r++) kb[r * nope + n] = row[r];
        }
        if (cpu_weight_view(&L->k_b[h], INVAR_T_F32, R, nope, kb, e2, sizeof e2) ||
            cpu_weight_view(&L->v_b[h], t->type, vd, R, head + (size_t)nope * rb, e2, sizeof e2)) {
            free(row);
            FAIL("tensor %s: %s", name, e2);
        }
    }
    free(row);
    return 0;
}

/* deepseek2's attention tensors (config.h: mla). */
static int load_mla(model *m, layer_weights *L, int64_t il, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const int64_t D = c->n_embd, H = c->n_head, R = c->mla.kv_lora, rope = c->n_rot;
    const int64_t qk = c->mla.qk_nope + rope, ql = c->mla.q_lora;
    char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)il), nm)
    if (ql ? bind_matrix(m, &L->wq_a, NAME("attn_q_a.weight"), D, ql, err, errlen) ||
                 load_vector(m, &L->q_a_norm, NAME("attn_q_a_norm.weight"), ql, 1, err, errlen) ||
                 bind_matrix(m, &L->wq_b, NAME("attn_q_b.weight"), ql, H * qk, err, errlen)
           : bind_matrix(m, &L->wq, NAME("attn_q.weight"), D, H * qk, err, errlen))
        return -1;
    if (bind_matrix(m, &L->wkv_a, NAME("attn_kv_a_mqa.weight"), D, R + rope, err, errlen) ||
        load_vector(m, &L->kv_a_norm, NAME("attn_kv_a_norm.weight"), R, 1, err, errlen) ||
        bind_matrix(m, &L->wo, NAME("attn_output.weight"), H * c->mla.v_dim, D, err, errlen))
        return -1;
    if (!c->mla.split_kv_b) return split_kv_b(m, L, NAME("attn_kv_b.weight"), err, errlen);
    if (bind_stack(m, &L->k_b, NAME("attn_k_b.weight"), c->mla.qk_nope, R, H, err, errlen) ||
        bind_stack(m, &L->v_b, NAME("attn_v_b.weight"), R, c->mla.v_dim, H, err, errlen))
        return -1;
#undef NAME
    return 0;
}

/* A dense SwiGLU FFN: gate and up [n_ff x n_embd], down [n_embd x n_ff]. */
static int bind_dense_ffn(model *m, layer_weights *L, int64_t il, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)il), nm)
    int rc = bind_matrix(m, &L->gate, NAME("ffn_gate.weight"), c->n_embd, c->n_ff, err, errlen) ||
             bind_matrix(m, &L->up, NAME("ffn_up.weight"), c->n_embd, c->n_ff, err, errlen) ||
             bind_matrix(m, &L->down, NAME("ffn_down.weight"), c->n_ff, c->n_embd, err, errlen);
#undef NAME
    return rc ? -1 : 0;
}

/* A deepseek2 layer: MLA, then a dense FFN (the leading layers) or a routed one. */
static int load_layer_deepseek2(model *m, int64_t il, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    layer_weights *L = &m->layers[il];
    char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)il), nm)
    if (load_vector(m, &L->attn_norm, NAME("attn_norm.weight"), c->n_embd, 1, err, errlen) ||
        load_vector(m, &L->ffn_norm, NAME("ffn_norm.weight"), c->n_embd, 1, err, errlen) ||
        load_mla(m, L, il, err, errlen))
        return -1;
#undef NAME
    return il >= c->n_layer_dense ? load_moe(m, L, il, err, errlen) : bind_dense_ffn(m, L, il, err, errlen);
}

static int load_layer(model *m, int64_t il, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    layer_weights *L = &m->layers[il];
    if (c->arch == ARCH_DEEPSEEK2) return load_layer_deepseek2(m, il, err, errlen);
    int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)il), nm)
    if (load_vector(m, &L->attn_norm, NAME("attn_norm.weight"), c->n_embd, 1, err, errlen)) return -1;
    if (load_vector(m, &L->ffn_norm, NAME("ffn_norm.weight"), c->n_embd, 1, err, errlen)) return -1;
    if (bind_matrix(m, &L->wq, NAME("attn_q.weight"), c->n_embd, qd, err, errlen)) return -1;
    if (bind_matrix(m, &L->wk, NAME("attn_k.weight"), c->n_embd, kvd, err, errlen)) return -1;
    if (bind_matrix(m, &L->wv, NAME("attn_v.weight"), c->n_embd, kvd, err, errlen)) return -1;
    if (bind_matrix(m, &L->wo, NAME("attn_output.weight"), qd, c->n_embd, err, errlen)) return -1;
    if (c->n_expert ? load_moe(m, L, il, err, errlen) : bind_dense_ffn(m, L, il, err, errlen)) return -1;
    int need_bias = c->arch == ARCH_QWEN2;
    if (load_vector(m, &L->bq, NAME("attn_q.bias"), qd, need_bias, err, errlen)) return -1;
    if (load_vector(m, &L->bk, NAME("attn_k.bias"), kvd, need_bias, err, errlen)) return -1;
    if (load_vector(m, &L->bv, NAME("attn_v.bias"), kvd, need_bias, err, errlen)) return -1;
    int need_qk_norm = c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE;
    if (load_vector(m, &L->q_norm, NAME("attn_q_norm.weight"), c->head_dim, need_qk_norm, err, errlen)) return -1;
    if (load_vector(m, &L->k_norm, NAME("attn_k_norm.weight"), c->head_dim, need_qk_norm, err, errlen)) return -1;
#undef NAME
    return 0;
}

static int open_gguf(model *m, const char *path, char *err, size_t errlen) {
    return gguf_open(path, &m->gguf, err, errlen) || model_config_read(m->gguf, &m->cfg, err, errlen) ||
           tokenizer_load(m->gguf, &m->tok, err, errlen) ? -1 : 0;
}

#define MAX_CONFIG_JSON (16u << 20)

/* config.json, the safetensors as GGUF-named views, tokenizer.json and the chat template. */
static int open_hf(model *m, const char *dir, char *err, size_t errlen) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path) FAIL("%s: path too long", dir);
    bool absent;
    cJSON *cfg = json_file_read(path, MAX_CONFIG_JSON, &absent, err, errlen);
    if (!cfg && absent) FAIL("%s is a directory without config.json (a Hugging Face model directory has one; "
                             "docs/models.md)", dir);
    if (!cfg) return -1;
    bool tied = false;
    int64_t vocab_size = 0;
    int rc = model_config_read_hf(cfg, &m->cfg, &tied, &vocab_size, err, errlen);
    cJSON_Delete(cfg);
    if (rc) return -1;
    if (hf_weights_open(dir, &m->cfg, tied, &m->hf, err, errlen)) return -1;
    const gguf_tensor *e = find(m, "token_embd.weight");
    if (!e || e->n_dims != 2) FAIL("model.embed_tokens.weight is missing or not a matrix");
    if (vocab_size && vocab_size != e->ne[1])
        FAIL("config.json: vocab_size %lld != %lld embedding rows", (long long)vocab_size, (long long)e->ne[1]);
    if (e->ne[1] > INT32_MAX / 2) FAIL("too many embedding rows");
    return tokenizer_load_hf(dir, (int32_t)e->ne[1], &m->tok, err, errlen) ||
           tokenizer_hf_chat_template(dir, &m->hf_chat_template, err, errlen) ? -1 : 0;
}

static bool is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int load_all(model *m, const char *path, char *err, size_t errlen) {
    if (is_directory(path) ? open_hf(m, path, err, errlen) : open_gguf(m, path, err, errlen)) return -1;
    model_config *c = &m->cfg;

    m->tok_embd = find(m, "token_embd.weight");
    if (!m->tok_embd) FAIL("missing tensor token_embd.weight");
    if (m->tok_embd->n_dims != 2 || m->tok_embd->ne[0] != c->n_embd) FAIL("token_embd.weight has the wrong shape");
    if (!quant_type_supported(m->tok_embd->type))
        FAIL("token_embd.weight: unsupported type %s (ggml type %u)", quant_type_name(m->tok_embd->type),
             (unsigned)m->tok_embd->type);
    c->n_vocab = m->tok_embd->ne[1];
    if (tokenizer_n_vocab(m->tok) != c->n_vocab)
        FAIL("vocabulary size mismatch: tokenizer %d, embeddings %lld", tokenizer_n_vocab(m->tok),
             (long long)c->n_vocab);

    if (load_vector(m, &m->output_norm, "output_norm.weight", c->n_embd, 1, err, errlen)) return -1;
    m->output_tied = !find(m, "output.weight");
    const char *out_name = m->output_tied ? "token_embd.weight" : "output.weight";
    if (bind_matrix(m, &m->output, out_name, c->n_embd, c->n_vocab, err, errlen)) return -1;

    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) FAIL("out of memory");
    for (int64_t il = 0; il < c->n_layer; il++)
        if (load_layer(m, il, err, errlen)) return -1;

    float *freq_factors = NULL;
    if (load_vector(m, &freq_factors, "rope_freqs.weight", c->n_rot / 2, 0, err, errlen)) return -1;
    if (c->rope_llama3.factor > 0) { /* a directory's config.json: the factors a GGUF would store */
        if (freq_factors) {
            free(freq_factors);
            FAIL("rope_freqs.weight and llama3 rope_scaling both given");
        }
        freq_factors = malloc(sizeof(float) * (size_t)(c->n_rot / 2));
        if (!freq_factors) FAIL("out of memory");
        rope_llama3_factors(c, freq_factors);
    }
    m->rope_len = c->n_ctx_train;
    m->rope_cs = rope_table_build(c, freq_factors, m->rope_len);
    free(freq_factors);
    if (!m->rope_cs) FAIL("out of memory");
    return 0;
}

int model_load(const char *path, model **out, char *err, size_t errlen) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) FAIL("out of memory");
    pthread_mutex_init(&m->bind_lock, NULL);
    if (load_all(m, path, err, errlen)) {
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* The stacked matrices of a layer: a routed layer's experts (n_expert each) and MLA's
 * per-head k_b / v_b (n_head each); NULL entries where the layer has none. */
#define N_SETS 5
static cpu_weight **expert_sets(layer_weights *L, cpu_weight **sets) {
    sets[0] = L->exp_gate, sets[1] = L->exp_up, sets[2] = L->exp_down, sets[3] = L->k_b, sets[4] = L->v_b;
    return sets;
}
static int64_t set_size(const model_config *c, int j) { return j < 3 ? c->n_expert : c->n_head; }

/* A layer's single matrices (empty ones are skipped). */
#define N_SINGLE 14
static void single_weights(layer_weights *L, cpu_weight **ws) {
    cpu_weight *all[N_SINGLE] = {&L->wq,     &L->wk,      &L->wv,    &L->wo,      &L->gate, &L->up,   &L->down,
                                 &L->router, &L->sh_gate, &L->sh_up, &L->sh_down, &L->wq_a, &L->wq_b, &L->wkv_a};
    memcpy(ws, all, sizeof all);
}

static int pack_all(model *m, char *err, size_t errlen) {
    for (int64_t il = 0; il < m->cfg.n_layer; il++) {
        layer_weights *L = &m->layers[il];
        cpu_weight *ws[N_SINGLE];
        single_weights(L, ws);
        for (size_t i = 0; i < N_SINGLE; i++)
            if (ws[i]->data && cpu_weight_pack(ws[i], err, errlen)) return -1;
        cpu_weight *sets[N_SETS];
        expert_sets(L, sets);
        for (int j = 0; j < N_SETS; j++)
            for (int64_t e = 0; sets[j] && e < set_size(&m->cfg, j); e++)
                if (cpu_weight_pack(&sets[j][e], err, errlen)) return -1;
    }
    return cpu_weight_pack(&m->output, err, errlen);
}

int model_bind_cpu(model *m, char *err, size_t errlen) {
    pthread_mutex_lock(&m->bind_lock);
    int rc = m->cpu_bound ? 0 : pack_all(m, err, errlen);
    if (rc == 0) m->cpu_bound = true;
    pthread_mutex_unlock(&m->bind_lock);
    return rc;
}

static void free_layer(layer_weights *L, const model_config *c) {
    cpu_weight *ws[N_SINGLE];
    single_weights(L, ws);
    for (size_t i = 0; i < N_SINGLE; i++) cpu_weight_free(ws[i]);
    cpu_weight *sets[N_SETS];
    expert_sets(L, sets);
    for (int j = 0; j < N_SETS; j++) {
        for (int64_t e = 0; sets[j] && e < set_size(c, j); e++) cpu_weight_free(&sets[j][e]);
        free(sets[j]);
    }
    float *vs[] = {L->attn_norm, L->ffn_norm,    L->bq,       L->bk,        L->bv,      L->q_norm,
                   L->k_norm,    L->exp_probs_b, L->q_a_norm, L->kv_a_norm, L->kb_owned};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]);
}

void model_free(model *m) {
    if (!m) return;
    if (m->layers)
        for (int64_t il = 0; il < m->cfg.n_layer; il++) free_layer(&m->layers[il], &m->cfg);
    free(m->layers);
    cpu_weight_free(&m->output);
    free(m->output_norm);
    free(m->rope_cs);
    tokenizer_free(m->tok);
    gguf_close(m->gguf);
    hf_weights_close(m->hf);
    free(m->hf_chat_template);
    model_free_overrides(m);
    pthread_mutex_destroy(&m->bind_lock);
    free(m);
}

bool model_chat_template(const model *m, const char **tmpl, size_t *len) {
    if (m->hf) {
        *tmpl = m->hf_chat_template;
        *len = *tmpl ? strlen(*tmpl) : 0;
        return *tmpl != NULL;
    }
    return gguf_get_str(m->gguf, "tokenizer.chat_template", tmpl, len);
}

void model_embed(const model *m, int32_t token, float *out) {
    const gguf_tensor *t = m->tok_embd;
    size_t rb = quant_row_bytes(t->type, t->ne[0]);
    dequant_row(t->type, (const char *)t->data + (size_t)token * rb, out, t->ne[0]);
}
