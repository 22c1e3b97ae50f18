/* Chat templates rendered in C. The Jinja template in the GGUF is not executed: its
 * family is recognised from its markers and the family's format is produced here,
 * taking any template-specific text (the default system prompt) from the template. */
#include "common/err_msg.h"
#include "tokenizer/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rendered text, and the spans of it that are the template's own markup (special
 * tokens are parsed there only; message content is ordinary text). */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
    tok_span *spans;
    size_t n_spans, cap_spans;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Appends template markup: its span joins the previous one when they touch. */
static void sb_mark(strbuf *b, const char *s) {
    size_t start = b->len;
    sb_str(b, s);
    if (b->oom || b->len == start) return;
    if (b->n_spans && b->spans[b->n_spans - 1].end == start) {
        b->spans[b->n_spans - 1].end = b->len;
        return;
    }
    if (b->n_spans == b->cap_spans) {
        size_t cap = b->cap_spans ? 2 * b->cap_spans : 16;
        tok_span *ns = realloc(b->spans, cap * sizeof *ns);
        if (!ns) { b->oom = true; return; }
        b->spans = ns;
        b->cap_spans = cap;
    }
    b->spans[b->n_spans++] = (tok_span){start, b->len};
}

static void sb_free(strbuf *b) {
    free(b->p);
    free(b->spans);
}

static const char *find(const char *h, size_t hl, const char *needle) {
    size_t nl = strlen(needle);
    if (nl > hl) return NULL;
    for (size_t i = 0; i + nl <= hl; i++)
        if (h[i] == needle[0] && memcmp(h + i, needle, nl) == 0) return h + i;
    return NULL;
}

/* The text of a Jinja string literal span, escapes resolved (\n \t \\ \' \"). */
static void sb_unescape(strbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char e = s[++i];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
        sb_add(b, &c, 1);
    }
}

/* Finds a literal "<|im_start|>system<newline>TEXT<|im_end|>" in a ChatML template,
 * i.e. the system message it inserts when the conversation has none (SmolLM2, Qwen2).
 * TEXT must lie inside one string literal: no quote or Jinja delimiter in it.
 * Returns true and the unescaped TEXT in out (malloc'd). */
static bool chatml_default_system(const char *tmpl, size_t len, char **out) {
    static const char head[] = "<|im_start|>system";
    const char *p = tmpl, *end = tmpl + len;
    while ((p = find(p, (size_t)(end - p), head)) != NULL) {
        const char *q = p + sizeof head - 1;
        size_t nl = 0;
        if (q < end && *q == '\n') nl = 1;
        else if (q + 1 < end && q[0] == '\\' && q[1] == 'n') nl = 2;
        p = q;
        if (!nl) continue;
        q += nl;
        const char *stop = find(q, (size_t)(end - q), "<|im_end|>");
        if (!stop) continue;
        bool literal = stop > q;
        for (const char *c = q; c < stop && literal; c++) {
            if (*c == '\'' || *c == '"') literal = c > q && c[-1] == '\\';
            if (*c == '{' && c + 1 < stop && (c[1] == '{' || c[1] == '%')) literal = false;
        }
        if (!literal) continue;
        strbuf b = {0};
        sb_unescape(&b, q, (size_t)(stop - q));
        if (b.oom) { free(b.p); return false; }
        *out = b.p;
        return true;
    }
    return false;
}

static void render_chatml(strbuf *b, const char *tmpl, size_t tlen, const chat_message *msgs, size_t n,
                          bool add_gen) {
    char *def = NULL;
    if (n > 0 && strcmp(msgs[0].role, "system") != 0 && chatml_default_system(tmpl, tlen, &def)) {
        /* The template's own default system prompt is template text: markup. */
        sb_mark(b, "<|im_start|>system\n");
        sb_mark(b, def);
        sb_mark(b, "<|im_end|>\n");
        free(def);
    }
    for (size_t i = 0; i < n; i++) {
        sb_mark(b, "<|im_start|>");
        sb_mark(b, msgs[i].role); /* one of the fixed role names */
        sb_mark(b, "\n");
        sb_str(b, msgs[i].content);
        sb_mark(b, "<|im_end|>\n");
    }
    if (add_gen) sb_mark(b, "<|im_start|>assistant\n");
}

static bool is_jinja_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Jinja's |trim: strips leading and trailing whitespace. */
static void sb_trimmed(strbuf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && is_jinja_space(s[i])) i++;
    while (n > i && is_jinja_space(s[n - 1])) n--;
    sb_add(b, s + i, n - i);
}

/* Llama-3: <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT|trim<|eot_id|> per message.
 * The template's leading bos_token is left out: the tokenizer adds BOS itself
 * (tokenizer.ggml.add_bos_token), and the text form would give it twice. */
static void render_llama3(strbuf *b, const chat_message *msgs, size_t n, bool add_gen) {
    for (size_t i = 0; i < n; i++) {
        sb_mark(b, "<|start_header_id|>");
        sb_mark(b, msgs[i].role);
        sb_mark(b, "<|end_header_id|>\n\n");
        sb_trimmed(b, msgs[i].content);
        sb_mark(b, "<|eot_id|>");
    }
    if (add_gen) sb_mark(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Checks the messages and picks the template family: 'c' ChatML, 'l' Llama-3, 0 (err set). */
static char template_family(const char *tmpl, size_t tlen, const chat_message *msgs, size_t n, char *err,
                            size_t errlen) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    if (!tmpl || (n > 0 && !msgs)) return (char)err_fail_code(0, err, errlen, "chat: no template or messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return (char)err_fail_code(0, err, errlen, "chat: message %zu has no role or content", i);
        bool ok = false;
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++)
            ok = ok || strcmp(msgs[i].role, roles[r]) == 0;
        if (!ok)
            return (char)err_fail_code(0, err, errlen,
                                       "chat: message %zu has unsupported role '%.32s' "
                                       "(system, user, assistant, tool)",
                                       i, msgs[i].role);
    }
    if (find(tmpl, tlen, "<|im_start|>")) return 'c';
    if (find(tmpl, tlen, "<|start_header_id|>")) {
        /* Llama 3.1+ always emits a system block with knowledge/date lines and tool
         * options; rendering it without executing the template is not supported. */
        if (find(tmpl, tlen, "Cutting Knowledge Date"))
            return (char)err_fail_code(0, err, errlen,
                                       "chat: Llama-3.1-style chat template (date/tools "
                                       "system block) is not supported");
        return 'l';
    }
    return (char)err_fail_code(0, err, errlen,
                               "chat: unrecognised chat template (supported families: "
                               "ChatML <|im_start|>, Llama-3 <|start_header_id|>)");
}

int chat_render_marked_template(const char *tmpl, size_t tlen, const chat_message *msgs, size_t n,
                                bool add_generation_prompt, char **text, tok_span **markup, size_t *n_markup,
                                char *err, size_t errlen) {
    *text = NULL;
    if (markup) *markup = NULL;
    if (n_markup) *n_markup = 0;
    char family = template_family(tmpl, tlen, msgs, n, err, errlen);
    if (!family) return CHAT_ERR_REQUEST;
    strbuf b = {0};
    if (family == 'c') render_chatml(&b, tmpl, tlen, msgs, n, add_generation_prompt);
    else render_llama3(&b, msgs, n, add_generation_prompt);
    if (!b.oom && !b.p) b.p = calloc(1, 1); /* nothing rendered: the empty prompt */
    if (b.oom || !b.p) {
        sb_free(&b);
        return err_fail_code(CHAT_ERR_NOMEM, err, errlen, "chat: out of memory");
    }
    *text = b.p;
    if (markup) {
        *markup = b.spans;
        *n_markup = b.n_spans;
    } else {
        free(b.spans);
    }
    return 0;
}

int chat_render_marked(const gguf_file *f, const chat_message *msgs, size_t n, bool add_generation_prompt,
                       char **text, tok_span **markup, size_t *n_markup, char *err, size_t errlen) {
    const char *tmpl;
    size_t tlen;
    if (!f || !gguf_get_str(f, "tokenizer.chat_template", &tmpl, &tlen)) {
        *text = NULL;
        return err_fail_code(CHAT_ERR_REQUEST, err, errlen, "chat: the model has no tokenizer.chat_template");
    }
    return chat_render_marked_template(tmpl, tlen, msgs, n, add_generation_prompt, text, markup, n_markup, err,
                                       errlen);
}

char *chat_render_template(const char *tmpl, size_t tlen, const chat_message *msgs, size_t n,
                           bool add_generation_prompt, char *err, size_t errlen) {
    char *text;
    chat_render_marked_template(tmpl, tlen, msgs, n, add_generation_prompt, &text, NULL, NULL, err, errlen);
    return text;
}

char *chat_render(const gguf_file *f, const chat_message *msgs, size_t n,
                  bool add_generation_prompt, char *err, size_t errlen) {
    char *text;
    chat_render_marked(f, msgs, n, add_generation_prompt, &text, NULL, NULL, err, errlen);
    return text;
}
