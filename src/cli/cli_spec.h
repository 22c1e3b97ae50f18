/* Speculative decoding options shared by generate, batch and serve (docs/speculation.md). */
#ifndef INVAR_CLI_SPEC_H
#define INVAR_CLI_SPEC_H
#include <stdbool.h>

#include "invar.h"

typedef struct {
    invar_spec_mode mode;       /* every request's default */
    bool mode_set;              /* --speculate given */
    int32_t tokens;             /* K, 0 = the engine's default */
    const char *draft_path;     /* --draft-model */
    invar_model *draft;         /* loaded by cli_spec_load */
} cli_spec;

/* Handles --speculate off|ngram|draft, --spec-tokens K, --draft-model PATH and
 * --spec-step-tokens N: 1 if it consumed the option, 0 if not one of these, -1 on a bad value. */
int cli_spec_opt(cli_spec *sp, invar_engine_config *cfg, const char *name, const char *val);
/* Loads the draft model into cfg (if named); --speculate draft without one is an error,
 * and a draft model alone turns speculation on with it. 0, or after printing why the exit
 * status: EXIT_USAGE, or EXIT_MODEL when the draft model does not load. */
int cli_spec_load(cli_spec *sp, invar_engine_config *cfg);
/* The command line's speculation as a request's default. */
void cli_spec_apply(const cli_spec *sp, invar_sampling *s);
void cli_spec_free(cli_spec *sp);

#define CLI_SPEC_HELP \
    "  --speculate off|ngram|draft  speculative decoding (default off; the output is bitwise the\n" \
    "                         same, only faster): ngram drafts from the sequence's own earlier\n" \
    "                         text (prompt lookup), draft from --draft-model\n" \
    "  --spec-tokens K        drafted tokens verified per step, 1..16 (default 4)\n" \
    "  --draft-model PATH     a smaller GGUF sharing the model's vocabulary that drafts tokens\n" \
    "                         (implies --speculate draft unless --speculate is given)\n" \
    "  --spec-step-tokens N   most tokens a step's decodes carry with their drafts (default: CPU 4)\n"

#endif
