/* Chat templates: the model's tokenizer.chat_template, recognised by family
 * (ChatML with its default system prompt, Llama-3, ...) and rendered in C. */
#ifndef INVAR_CHAT_H
#define INVAR_CHAT_H
#include <stdbool.h>
#include <stddef.h>
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} chat_message;

enum { CHAT_ERR_REQUEST = -1, CHAT_ERR_NOMEM = -2 };

/* Renders the messages into *text (malloc'd, NUL-terminated) and, if markup is not NULL,
 * the spans of it that are the template's own markup into *markup / *n_markup (malloc'd,
 * sorted): tokenize with tokenizer_encode_marked so that special tokens are parsed in the
 * markup and never in message content. Returns 0, CHAT_ERR_REQUEST (no or unrecognised
 * template, bad role: message in err) or CHAT_ERR_NOMEM; *text is NULL on failure. */
int chat_render_marked(const gguf_file *f, const chat_message *msgs, size_t n, bool add_generation_prompt,
                       char **text, tok_span **markup, size_t *n_markup, char *err, size_t errlen);
int chat_render_marked_template(const char *tmpl, size_t tlen, const chat_message *msgs, size_t n,
                                bool add_generation_prompt, char **text, tok_span **markup, size_t *n_markup,
                                char *err, size_t errlen);

/* The text alone: a malloc'd NUL-terminated prompt, or NULL with a message in err
 * (no template, unrecognised template, bad role). */
char *chat_render(const gguf_file *f, const chat_message *msgs, size_t n,
                  bool add_generation_prompt, char *err, size_t errlen);

/* Same, from a template string (tmpl[0..tlen), e.g. for tests or a template override).
 * The rendered text never includes BOS: the tokenizer adds it (add_bos). */
char *chat_render_template(const char *tmpl, size_t tlen, const chat_message *msgs, size_t n,
                           bool add_generation_prompt, char *err, size_t errlen);

#endif
