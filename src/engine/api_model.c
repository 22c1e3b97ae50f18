/* Public model API: thin wrappers over the model and tokenizer layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tokenizer/chat.h"
#include "engine/engine_internal.h"
#include "invar.h"

int invar_model_load(const char *path, invar_model **out, char *err, size_t errlen) {
    *out = NULL;
    invar_model *im = calloc(1, sizeof *im);
    if (!im) return -1;
    if (model_load(path, &im->m, err, errlen)) {
        free(im);
        return -1;
    }
    *out = im;
    return 0;
}

void invar_model_free(invar_model *im) {
    if (!im) return;
    model_free(im->m);
    free(im);
}

const char *invar_model_arch(const invar_model *im) { return im->m->cfg.arch_name; }
int32_t invar_model_n_vocab(const invar_model *im) { return (int32_t)im->m->cfg.n_vocab; }
int32_t invar_model_n_ctx(const invar_model *im) { return (int32_t)im->m->rope_len; }

int64_t invar_tokenize(const invar_model *im, const char *text, size_t len, bool add_bos,
                       bool parse_special, int32_t *out, int64_t cap) {
    return tokenizer_encode(im->m->tok, text, len, add_bos && tokenizer_add_bos(im->m->tok), parse_special, out, cap);
}

int invar_token_bytes(const invar_model *im, int32_t id, char *buf, size_t cap) {
    return tokenizer_token_bytes(im->m->tok, id, buf, cap);
}

bool invar_token_is_eog(const invar_model *im, int32_t id) { return tokenizer_is_eog(im->m->tok, id); }

/* The model's own template, whichever file it came from. */
static int render(const invar_model *im, const invar_chat_message *msgs, size_t n, bool add_generation_prompt,
                  char **text, tok_span **markup, size_t *n_markup, char *err, size_t errlen) {
    const char *tmpl;
    size_t tlen;
    if (!model_chat_template(im->m, &tmpl, &tlen)) {
        *text = NULL;
        if (err && errlen) snprintf(err, errlen, "chat: the model has no chat template");
        return CHAT_ERR_REQUEST;
    }
    return chat_render_marked_template(tmpl, tlen, (const chat_message *)msgs, n, add_generation_prompt, text, markup,
                                       n_markup, err, errlen);
}

char *invar_chat_render(const invar_model *im, const invar_chat_message *msgs, size_t n,
                        bool add_generation_prompt, char *err, size_t errlen) {
    /* invar_chat_message and chat_message have the same layout by design. */
    _Static_assert(sizeof(invar_chat_message) == sizeof(chat_message), "chat message layout");
    char *text;
    if (render(im, msgs, n, add_generation_prompt, &text, NULL, NULL, err, errlen) == 0) return text;
    return NULL;
}

/* Byte-level BPE gives at most one token per byte, plus BOS: one pass nearly always fits. */
static int32_t *encode_marked_alloc(const tokenizer *t, const char *text, const tok_span *markup, size_t n_markup,
                                    int64_t *n_out) {
    size_t len = strlen(text);
    int64_t cap = (int64_t)len + 8;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return NULL;
    bool bos = tokenizer_add_bos(t);
    int64_t n = tokenizer_encode_marked(t, text, len, bos, markup, n_markup, ids, cap);
    if (n > cap) {
        int32_t *bigger = realloc(ids, sizeof(int32_t) * (size_t)n);
        if (!bigger) { free(ids); return NULL; }
        ids = bigger;
        n = tokenizer_encode_marked(t, text, len, bos, markup, n_markup, ids, n);
    }
    if (n < 0) { free(ids); return NULL; }
    *n_out = n;
    return ids;
}

int invar_chat_tokenize(const invar_model *im, const invar_chat_message *msgs, size_t n,
                        bool add_generation_prompt, int32_t **ids, int64_t *n_ids, char **text_out, char *err,
                        size_t errlen) {
    *ids = NULL;
    *n_ids = 0;
    if (text_out) *text_out = NULL;
    char *text;
    tok_span *markup;
    size_t n_markup;
    int rc = render(im, msgs, n, add_generation_prompt, &text, &markup, &n_markup, err, errlen);
    if (rc) return rc == CHAT_ERR_NOMEM ? -2 : -1;
    *ids = encode_marked_alloc(im->m->tok, text, markup, n_markup, n_ids);
    free(markup);
    if (!*ids) {
        free(text);
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return -2;
    }
    if (text_out) *text_out = text;
    else free(text);
    return 0;
}

void invar_sampling_default(invar_sampling *s) {
    *s = (invar_sampling){.max_tokens = 64,
                          .temperature = 0.0f,
                          .top_k = 0,
                          .top_p = 1.0f,
                          .min_p = 0.0f,
                          .seed = 0,
                          .top_logprobs = 0,
                          .ignore_eos = false,
                          .prompt_logprobs = false,
                          .speculate = INVAR_SPEC_OFF,
                          .spec_tokens = 0,
                          .repetition_penalty = 1.0f};
}

void invar_free(void *p) { free(p); }
