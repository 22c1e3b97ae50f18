/* invar batch: JSONL requests in, JSONL results out (in input order). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch_json.h"
#include "cli/cli_spec.h"
#include "request/request.h"

static const char *HELP =
    "usage: invar batch [options] [--input FILE] [--output FILE]\n"
    "\n"
    "Reads one JSON request per line and writes one JSON result per line, in input order.\n"
    "Request fields: id (echoed), prompt (text, special tokens such as <|im_start|> parsed\n"
    "unless parse_special is false; or an array of token ids) or messages ([{role, content}],\n"
    "content a string or [{type: \"text\", text}] parts; the model's chat template applied,\n"
    "special tokens only in the template's markup, never in contents), max_tokens (1-2^24,\n"
    "default 64; with messages also max_completion_tokens), temperature (0-100, default 0 =\n"
    "greedy), top_k (-1 or 0 = off), top_p (0-1], min_p [0-1], seed (0 to 2^64-1, exact),\n"
    "logprobs (number of top alternatives per token, 0-20), ignore_eos (keep generating past\n"
    "end-of-text), min_tokens, stop_token_ids ([ids]), logit_bias ({\"id\": -100..100}),\n"
    "presence_penalty, frequency_penalty ([-2, 2]), repetition_penalty ((0, 10]), speculate,\n"
    "spec_tokens. Any other field is an error for that line.\n"
    "The same rules as invar serve's (one decoder reads both; docs/server.md).\n"
    "Result fields: id, token_ids, logprobs (float32, printed to round-trip exactly), text,\n"
    "finish_reason (stop|length), prompt_tokens, top_logprobs; or id, line, error.\n"
    "A bad line gets an error result; the other requests are unaffected.\n"
    "\n"
    "options:\n"
    "  --model PATH           GGUF file or Hugging Face directory (default: the bundled\n"
    "                         SmolLM2-135M-Instruct)\n"
    "  --input FILE           requests (default: stdin)\n"
    "  --output FILE          results (default: stdout)\n"
    "  --timing               add per-request timing (first token, done) to each result\n" CLI_SPEC_HELP CLI_ENGINE_HELP
    "\n"
    "exit status: 0 all requests succeeded, 1 some requests failed, 2 usage, 3 model, 4 I/O\n";

typedef struct {
    invar_model *m;
    FILE *out;
    job *jobs;
    cJSON **ids;
    int64_t *lines;
    char *done;
    int64_t n, next_out;
    int64_t *valid_to_all;
    job *valid;
    bool timing;
    const char *out_name;
    bool write_failed;         /* a result was lost: nothing more is written */
    const cli_spec *spec;       /* every request's speculation (command line) */
} batch_ctx;

static void write_failed(batch_ctx *c, int err) {
    if (c->write_failed) return;
    c->write_failed = true;
    fprintf(stderr, "invar batch: cannot write %s: %s\n", c->out_name, err ? strerror(err) : "out of memory");
}

static void flush_ready(batch_ctx *c) {
    while (c->next_out < c->n && c->done[c->next_out]) {
        int64_t i = c->next_out++;
        if (c->write_failed) continue;
        char *s = result_to_json(c->m, c->ids[i], &c->jobs[i], c->lines[i], c->timing);
        errno = 0;
        /* Flushed per line so results stream; a full disk shows up here, not at exit. */
        if (!s || fprintf(c->out, "%s\n", s) < 0 || fflush(c->out) != 0) write_failed(c, s ? errno : 0);
        free(s);
    }
}

static int on_done(void *user, int64_t vi) {
    batch_ctx *c = user;
    int64_t i = c->valid_to_all[vi];
    c->jobs[i] = c->valid[vi]; /* ownership moves back */
    memset(&c->valid[vi], 0, sizeof c->valid[vi]);
    c->done[i] = 1;
    flush_ready(c);
    return c->write_failed; /* stop generating results that cannot be written */
}

static int read_requests(batch_ctx *c, FILE *in) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0, alloc = 0;
    while ((len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        size_t k = 0;
        while (k < (size_t)len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n')) k++;
        if (k == (size_t)len) continue; /* blank line */
        if (c->n == alloc) {
            alloc = alloc ? alloc * 2 : 64;
            c->jobs = realloc(c->jobs, sizeof *c->jobs * (size_t)alloc);
            c->ids = realloc(c->ids, sizeof *c->ids * (size_t)alloc);
            c->lines = realloc(c->lines, sizeof *c->lines * (size_t)alloc);
            if (!c->jobs || !c->ids || !c->lines) { free(line); return -1; }
        }
        int64_t i = c->n++;
        job *j = &c->jobs[i];
        memset(j, 0, sizeof *j);
        c->lines[i] = lineno;
        bool trailing = false;
        cJSON *o = req_parse_json(line, (size_t)len, &trailing);
        c->ids[i] = NULL;
        char err[256];
        const char *bad;
        if (!o) {
            bad = trailing ? "invalid JSON: unexpected data after the JSON value" : "invalid JSON";
        } else {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
            if (id) c->ids[i] = cJSON_Duplicate(id, 1);
            bad = batch_request(c->m, o, c->spec, j, err, sizeof err);
            cJSON_Delete(o);
        }
        if (bad) {
            j->finish = INVAR_FINISH_ERROR;
            j->error = strdup(bad);
        }
    }
    free(line);
    return 0;
}

int cmd_batch(int argc, char **argv) {
    const char *model_path = NULL, *in_path = NULL, *out_path = NULL;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    bool timing = false;
    cli_spec sp = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(HELP, stdout); return EXIT_OK; }
        if (!strcmp(a, "--timing")) { timing = true; continue; }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "invar batch: unexpected argument '%s' (see --help)\n", a);
            return EXIT_USAGE;
        }
        const char *name = a + 2, *val = argv[++i];
        int r = cli_engine_opt(&cfg, name, val);
        if (r == 0) r = cli_spec_opt(&sp, &cfg, name, val);
        if (r < 0) return EXIT_USAGE;
        if (r) continue;
        if (!strcmp(name, "model")) model_path = val;
        else if (!strcmp(name, "input")) in_path = val;
        else if (!strcmp(name, "output")) out_path = val;
        else { fprintf(stderr, "invar batch: unknown option '%s' (see --help)\n", a); return EXIT_USAGE; }
    }
    FILE *in = stdin, *out = stdout;
    if (in_path && !(in = fopen(in_path, "r"))) {
        fprintf(stderr, "invar batch: cannot open input '%s'\n", in_path);
        return EXIT_IO;
    }
    batch_ctx c = {0};
    c.timing = timing;
    c.m = cli_load_model(model_path);
    c.spec = &sp;
    int spec_rc = c.m ? cli_spec_load(&sp, &cfg) : EXIT_MODEL;
    if (spec_rc) {
        invar_model_free(c.m);
        if (in != stdin) fclose(in);
        return spec_rc;
    }
    int rc = read_requests(&c, in) ? EXIT_IO : EXIT_OK;
    if (in != stdin) fclose(in);
    if (rc == EXIT_OK && out_path) {
        FILE *f = fopen(out_path, "w");
        if (f) out = f; /* out stays stdout on failure: it is closed below unless stdout */
        else {
            fprintf(stderr, "invar batch: cannot open output '%s': %s\n", out_path, strerror(errno));
            rc = EXIT_IO;
        }
    }
    c.out = out;
    c.out_name = out_path ? out_path : "standard output";
    c.done = calloc((size_t)c.n + 1, 1);
    c.valid_to_all = malloc(sizeof(int64_t) * ((size_t)c.n + 1));
    job *valid = malloc(sizeof(job) * ((size_t)c.n + 1));
    if (rc == EXIT_OK && (!c.done || !c.valid_to_all || !valid)) rc = EXIT_IO;
    if (rc == EXIT_OK) {
        int64_t nv = 0;
        for (int64_t i = 0; i < c.n; i++) {
            if (c.jobs[i].finish == INVAR_FINISH_ERROR) c.done[i] = 1;
            else { c.valid_to_all[nv] = i; valid[nv++] = c.jobs[i]; }
        }
        flush_ready(&c);
        /* Results stream out in input order as soon as a prefix of requests is done. */
        c.valid = valid;
        if (run_jobs(c.m, &cfg, valid, nv, NULL, on_done, &c) < 0) rc = EXIT_IO;
        for (int64_t v = 0; v < nv; v++)
            if (!c.done[c.valid_to_all[v]]) c.jobs[c.valid_to_all[v]] = valid[v];
        flush_ready(&c);
        if (c.write_failed) rc = EXIT_IO;
        for (int64_t i = 0; i < c.n && rc == EXIT_OK; i++)
            if (c.jobs[i].finish == INVAR_FINISH_ERROR) rc = EXIT_REQUEST_ERRORS;
    }
    for (int64_t i = 0; i < c.n; i++) {
        job_clear(&c.jobs[i]);
        cJSON_Delete(c.ids[i]);
    }
    free(valid);
    free(c.jobs);
    free(c.ids);
    free(c.lines);
    free(c.done);
    free(c.valid_to_all);
    /* Reported once: a failure flush_ready already printed is not printed again. */
    if (c.write_failed) {
        if (out != stdout) fclose(out);
    } else if (cli_finish_output(out, "batch", c.out_name)) {
        rc = EXIT_IO;
    }
    invar_model_free(c.m);
    cli_spec_free(&sp);
    return rc;
}
