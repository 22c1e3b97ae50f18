/* invar tokenize / invar logits: inspection commands used by the reference tests. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char *TOKENIZE_HELP =
    "usage: invar tokenize [--model PATH] [--no-special] TEXT\n"
    "Prints the token ids of TEXT (BOS per the model; special tokens parsed unless --no-special).\n";

static const char *LOGITS_HELP =
    "usage: invar logits [--model PATH] --tokens 1,2,3 --out FILE [--chunk N] [--threads N]\n"
    "                    [--device cpu|cuda] [--kv-type f32|f16]\n"
    "Writes the raw float32 logits of every position, row-major [n_tokens][n_vocab], to FILE.\n"
    "--chunk N feeds the sequence N tokens at a time (the bits must not change).\n";

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL;
    bool special = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(TOKENIZE_HELP, stdout); return EXIT_OK; }
        if (!strcmp(argv[i], "--no-special")) special = false;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model_path = argv[++i];
        else if (!text && strncmp(argv[i], "--", 2)) text = argv[i];
        else { fprintf(stderr, "invar tokenize: unexpected argument '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    if (!text) { fputs(TOKENIZE_HELP, stderr); return EXIT_USAGE; }
    invar_model *m = cli_load_model(model_path);
    if (!m) return EXIT_MODEL;
    size_t len = strlen(text);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 8));
    int64_t n = ids ? invar_tokenize(m, text, len, true, special, ids, (int64_t)len + 8) : -1;
    for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    invar_model_free(m);
    if (cli_finish_output(stdout, "tokenize", "standard output")) return EXIT_IO;
    return n < 0 ? EXIT_USAGE : EXIT_OK;
}

int32_t *parse_id_list(const char *s, int64_t *n) {
    int64_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return NULL;
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) { free(ids); return NULL; }
        ids[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    return ids;
}

/* The CPU's model-level path (f32 cache), or an engine's backend on another device or cache type. */
static int device_logits(invar_model *m, invar_engine_config *cfg, const int32_t *ids, int64_t n, int64_t chunk,
                         int32_t threads, float *out, char *err, size_t errlen) {
    if (cfg->device == INVAR_DEVICE_CPU && cfg->kv_type == INVAR_KV_F32) return invar_model_logits(m, ids, n, chunk, threads, out, err, errlen);
    cfg->n_threads = threads;
    cfg->max_batch = 1;
    cfg->kv_blocks = 1; /* the sequence gets KV storage of its own */
    invar_engine *e;
    if (invar_engine_create(m, cfg, &e, err, errlen)) return -1;
    int rc = invar_engine_logits(e, ids, n, chunk, out, err, errlen);
    invar_engine_free(e);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *tokens = NULL, *out_path = NULL;
    int64_t chunk = 0, threads = 1;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(LOGITS_HELP, stdout); return EXIT_OK; }
        if (i + 1 >= argc) { fprintf(stderr, "invar logits: unexpected argument '%s'\n", a); return EXIT_USAGE; }
        const char *v = argv[++i];
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--tokens")) tokens = v;
        else if (!strcmp(a, "--out")) out_path = v;
        else if (!strcmp(a, "--chunk") && parse_i64(v, 1, 1 << 24, &chunk)) {}
        else if (!strcmp(a, "--threads") && parse_i64(v, 1, 256, &threads)) {}
        else if (!strcmp(a, "--device") || !strcmp(a, "--cuda-device") || !strcmp(a, "--kv-type")) {
            if (cli_engine_opt(&cfg, a + 2, v) < 0) return EXIT_USAGE;
        } else { fprintf(stderr, "invar logits: bad option '%s %s'\n", a, v); return EXIT_USAGE; }
    }
    int64_t n = 0;
    int32_t *ids = tokens ? parse_id_list(tokens, &n) : NULL;
    if (!ids || n == 0 || !out_path) { fputs(LOGITS_HELP, stderr); free(ids); return EXIT_USAGE; }
    invar_model *m = cli_load_model(model_path);
    if (!m) { free(ids); return EXIT_MODEL; }
    int64_t V = invar_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * (size_t)(n * V));
    char err[256];
    int rc = EXIT_OK;
    if (!logits || device_logits(m, &cfg, ids, n, chunk, (int32_t)threads, logits, err, sizeof err)) {
        fprintf(stderr, "invar logits: %s\n", logits ? err : "out of memory");
        rc = EXIT_USAGE;
    } else {
        FILE *f = fopen(out_path, "wb");
        if (!f) {
            fprintf(stderr, "invar logits: cannot open '%s': %s\n", out_path, strerror(errno));
            rc = EXIT_IO;
        } else {
            if (fwrite(logits, sizeof(float), (size_t)(n * V), f) != (size_t)(n * V)) {
                fprintf(stderr, "invar logits: cannot write %s: %s\n", out_path, strerror(errno));
                fclose(f);
                rc = EXIT_IO;
            } else if (cli_finish_output(f, "logits", out_path)) {
                rc = EXIT_IO;
            }
        }
    }
    free(logits);
    free(ids);
    invar_model_free(m);
    return rc;
}
