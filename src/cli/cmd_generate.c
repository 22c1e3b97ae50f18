/* invar generate: one prompt, text streamed to stdout as it is produced. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_spec.h"
#include "cli/jobs.h"
#include "common/clock.h"
#include "request/token_text.h"

static const char *HELP =
    "usage: invar generate [options] PROMPT\n"
    "\n"
    "Generates a continuation of PROMPT and streams it to stdout.\n"
    "\n"
    "options:\n"
    "  --model PATH           GGUF file or Hugging Face directory (default: the bundled\n"
    "                         SmolLM2-135M-Instruct)\n"
    "  --chat                 treat PROMPT as a user message and apply the chat template\n"
    "                         (special-token text in PROMPT and --system is then plain text)\n"
    "  --system TEXT          system message (with --chat)\n"
    "  --no-special           without --chat: text like <|im_start|> in PROMPT is plain text,\n"
    "                         not the special token (the default parses it)\n"
    "  --max-tokens N         tokens to generate (default 128)\n"
    "  --temperature T        0 = greedy (default 0)\n"
    "  --top-k N, --top-p P, --min-p P, --seed S   sampling controls\n"
    "  --verbose              print token counts and speed to stderr\n"
    CLI_SPEC_HELP
    CLI_ENGINE_HELP;

typedef struct {
    const invar_model *m;
    invar_engine *e;
    bool write_failed;
} stream_ctx;

static void stream_token(void *user, int64_t id, const invar_token_info *tok) {
    stream_ctx *c = user;
    if (c->write_failed || invar_token_is_eog(c->m, tok->token)) return;
    char buf[256];
    int n = invar_token_bytes(c->m, tok->token, buf, sizeof buf);
    if (n > 0 && n <= (int)sizeof buf) fwrite(buf, 1, (size_t)n, stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "\ninvar generate: cannot write standard output: %s\n", strerror(errno));
        c->write_failed = true; /* nobody can read the rest: stop generating it */
        invar_engine_cancel(c->e, id);
    }
}

int cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *system = NULL;
    bool chat = false, verbose = false, special = true;
    invar_sampling s;
    invar_sampling_default(&s);
    s.max_tokens = 128;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    cfg.max_batch = 1;
    cli_spec sp = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(HELP, stdout); return EXIT_OK; }
        if (!strcmp(a, "--chat")) { chat = true; continue; }
        if (!strcmp(a, "--verbose")) { verbose = true; continue; }
        if (!strcmp(a, "--no-special")) { special = false; continue; }
        if (strncmp(a, "--", 2)) {
            if (prompt) { fprintf(stderr, "invar generate: more than one prompt given\n"); return EXIT_USAGE; }
            prompt = a;
            continue;
        }
        if (i + 1 >= argc) { fprintf(stderr, "invar generate: %s needs a value\n", a); return EXIT_USAGE; }
        const char *name = a + 2, *val = argv[++i];
        int r = cli_engine_opt(&cfg, name, val);
        if (r == 0) r = cli_spec_opt(&sp, &cfg, name, val);
        int64_t v;
        bool ok = true;
        if (r < 0) return EXIT_USAGE;
        if (r) continue;
        if (!strcmp(name, "model")) model_path = val;
        else if (!strcmp(name, "system")) system = val;
        else if (!strcmp(name, "max-tokens")) { ok = parse_i64(val, 1, 1 << 24, &v); s.max_tokens = (int32_t)v; }
        else if (!strcmp(name, "temperature")) ok = parse_f32(val, &s.temperature);
        else if (!strcmp(name, "top-k")) { ok = parse_i64(val, 0, 1 << 30, &v); s.top_k = (int32_t)v; }
        else if (!strcmp(name, "top-p")) ok = parse_f32(val, &s.top_p);
        else if (!strcmp(name, "min-p")) ok = parse_f32(val, &s.min_p);
        else if (!strcmp(name, "seed")) ok = parse_u64(val, &s.seed);
        else { fprintf(stderr, "invar generate: unknown option '%s' (see --help)\n", a); return EXIT_USAGE; }
        if (!ok) { fprintf(stderr, "invar generate: bad value '%s' for %s\n", val, a); return EXIT_USAGE; }
    }
    if (!prompt) { fprintf(stderr, "invar generate: no prompt given (see --help)\n"); return EXIT_USAGE; }
    invar_model *m = cli_load_model(model_path);
    if (!m) return EXIT_MODEL;
    int spec_rc = cli_spec_load(&sp, &cfg);
    if (spec_rc) {
        invar_model_free(m);
        return spec_rc;
    }
    cli_spec_apply(&sp, &s);
    char err[256] = "tokenization failed";
    job j = {0};
    j.samp = s;
    if (chat) {
        invar_chat_message msgs[2] = {{"system", system}, {"user", prompt}};
        int r = invar_chat_tokenize(m, system ? msgs : msgs + 1, system ? 2 : 1, true, &j.prompt, &j.n_prompt, NULL,
                                    err, sizeof err);
        if (r == -1) { fprintf(stderr, "invar generate: %s\n", err); invar_model_free(m); return EXIT_USAGE; }
    } else {
        j.prompt = req_tokenize(m, prompt, special, &j.n_prompt);
    }
    int rc = EXIT_OK;
    invar_engine *e = NULL;
    if (!j.prompt || invar_engine_create(m, &cfg, &e, err, sizeof err)) {
        fprintf(stderr, "invar generate: %s\n", err);
        rc = EXIT_USAGE;
    } else {
        stream_ctx sc = {m, e, false};
        invar_engine_set_callback(e, stream_token, &sc);
        double t0 = now_seconds();
        int64_t id = invar_engine_submit(e, j.prompt, j.n_prompt, &s);
        int left = 1;
        while (id >= 0 && left > 0) left = invar_engine_step(e);
        invar_result r;
        if (id < 0 || left < 0 || invar_engine_result(e, id, &r)) {
            fprintf(stderr, "\ninvar generate: %s\n", left < 0 ? invar_engine_error(e) : "out of memory");
            rc = EXIT_IO;
        } else if (sc.write_failed) {
            rc = EXIT_IO;
        } else if (r.finish == INVAR_FINISH_ERROR) {
            fprintf(stderr, "invar generate: %s\n", r.error);
            rc = EXIT_REQUEST_ERRORS;
        } else {
            fputc('\n', stdout);
            if (cli_finish_output(stdout, "generate", "standard output")) rc = EXIT_IO;
            if (verbose) {
                invar_engine_stats st;
                invar_engine_get_stats(e, &st);
                fprintf(stderr, "[%lld prompt tokens, %lld generated, %.2f s, finish=%s", (long long)j.n_prompt,
                        (long long)r.n_tokens, now_seconds() - t0, r.finish == INVAR_FINISH_STOP ? "stop" : "length");
                if (st.spec_steps)
                    fprintf(stderr, ", %lld/%lld drafted tokens kept", (long long)st.spec_accepted,
                            (long long)st.spec_drafted);
                fputs("]\n", stderr);
            }
        }
    }
    invar_engine_free(e);
    job_clear(&j);
    invar_model_free(m);
    cli_spec_free(&sp);
    return rc;
}
