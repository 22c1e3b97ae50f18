/* Chat templates: the model's tokenizer.chat_template, recognised by family
 * (ChatML with its default system prompt, Llama-3, ...) and rendered in C. */
#ifndef INVAR_CHAT_H
#define INVAR_CHAT_H
#include <stdbool.h>
#include <stddef.h>
#include "../formats/gguf.h"

typedef struct {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} chat_message;

/* Returns a malloc'd NUL-terminated prompt, or NULL with a message in err
 * (no template, unrecognised template, bad role). */
char *chat_render(const gguf_file *f, const chat_message *msgs, size_t n,
                  bool add_generation_prompt, char *err, size_t errlen);

/* Same, from a template string (tmpl[0..tlen), e.g. for tests or a template override).
 * The rendered text never includes BOS: the tokenizer adds it (add_bos). */
char *chat_render_template(const char *tmpl, size_t tlen, const chat_message *msgs, size_t n,
                           bool add_generation_prompt, char *err, size_t errlen);

#endif
