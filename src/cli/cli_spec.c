#include "cli/cli_spec.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int cli_spec_opt(cli_spec *sp, invar_engine_config *cfg, const char *name, const char *val) {
    int64_t v;
    if (!strcmp(name, "speculate")) {
        if (val && !strcmp(val, "off")) sp->mode = INVAR_SPEC_OFF;
        else if (val && !strcmp(val, "ngram")) sp->mode = INVAR_SPEC_NGRAM;
        else if (val && !strcmp(val, "draft")) sp->mode = INVAR_SPEC_DRAFT;
        else return fprintf(stderr, "invar: --speculate needs off, ngram or draft\n"), -1;
        sp->mode_set = true;
        return 1;
    }
    if (!strcmp(name, "spec-tokens")) {
        if (!parse_i64(val, 1, INVAR_MAX_SPEC_TOKENS, &v))
            return fprintf(stderr, "invar: --spec-tokens needs an integer in [1, %d]\n", INVAR_MAX_SPEC_TOKENS), -1;
        sp->tokens = (int32_t)v;
        return 1;
    }
    if (!strcmp(name, "spec-step-tokens")) {
        if (!parse_i64(val, 1, 1 << 20, &v))
            return fprintf(stderr, "invar: --spec-step-tokens needs an integer in [1, %d]\n", 1 << 20), -1;
        cfg->spec_step_tokens = (int32_t)v;
        return 1;
    }
    if (!strcmp(name, "draft-model")) {
        if (!val || !*val) return fprintf(stderr, "invar: --draft-model needs a path\n"), -1;
        sp->draft_path = val;
        return 1;
    }
    return 0;
}

int cli_spec_load(cli_spec *sp, invar_engine_config *cfg) {
    if (sp->draft_path) {
        char err[512];
        if (invar_model_load(sp->draft_path, &sp->draft, err, sizeof err)) {
            fprintf(stderr, "invar: cannot load draft model '%s': %s\n", sp->draft_path, err);
            return EXIT_MODEL;
        }
        cfg->draft_model = sp->draft;
        if (!sp->mode_set) sp->mode = INVAR_SPEC_DRAFT;
    } else if (sp->mode == INVAR_SPEC_DRAFT) {
        fprintf(stderr, "invar: --speculate draft needs --draft-model PATH\n");
        return EXIT_USAGE;
    }
    return 0;
}

void cli_spec_apply(const cli_spec *sp, invar_sampling *s) {
    s->speculate = sp->mode;
    s->spec_tokens = sp->tokens;
}

void cli_spec_free(cli_spec *sp) {
    invar_model_free(sp->draft);
    sp->draft = NULL;
}
