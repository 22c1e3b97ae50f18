/* invar score: per-token logprobs of a continuation after a prompt, from one prefill pass. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/float_format.h"

static const char *HELP =
    "usage: invar score [--model PATH] [--threads N] [--device cpu|cuda] [--kv-type f32|f16]\n"
    "                   PROMPT CONTINUATION\n"
    "       invar score [--model PATH] --prompt-ids 1,2,3 --continuation-ids 4,5\n"
    "\n"
    "Prints {\"prompt_tokens\", \"token_ids\", \"logprobs\"} for the continuation's tokens, computed\n"
    "in one prefill pass. They equal, bit for bit, the logprobs `invar batch` reports when it\n"
    "samples those same tokens on the same device (the importance ratio of an RL trainer is\n"
    "exactly 1).\n"
    "PROMPT is tokenized with special tokens parsed (BOS per the model); CONTINUATION without BOS.\n";

/* On the CPU with an f32 cache the model-level path; elsewhere through an engine on that
 * device and cache type (the same forward the engine samples with there). */
static int score(invar_model *m, invar_engine_config *cfg, int32_t threads, int32_t *const ids[2],
                 const int64_t n[2], float *lp, char *err, size_t errlen) {
    if (cfg->device == INVAR_DEVICE_CPU && cfg->kv_type == INVAR_KV_F32) return invar_score(m, ids[0], n[0], ids[1], n[1], threads, lp, err, errlen);
    cfg->n_threads = threads;
    cfg->max_batch = 1;
    cfg->kv_blocks = 1; /* scoring allocates its own KV */
    invar_engine *e;
    if (invar_engine_create(m, cfg, &e, err, errlen)) return -1;
    int rc = invar_engine_score(e, ids[0], n[0], ids[1], n[1], lp, err, errlen);
    invar_engine_free(e);
    return rc;
}

int cmd_score(int argc, char **argv) {
    const char *model_path = NULL, *texts[2] = {NULL, NULL}, *ids_opt[2] = {NULL, NULL};
    int64_t threads = 1;
    int n_texts = 0;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(HELP, stdout); return EXIT_OK; }
        if (strncmp(a, "--", 2)) {
            if (n_texts == 2) { fprintf(stderr, "invar score: too many arguments\n"); return EXIT_USAGE; }
            texts[n_texts++] = a;
            continue;
        }
        if (i + 1 >= argc) { fprintf(stderr, "invar score: %s needs a value\n", a); return EXIT_USAGE; }
        const char *v = argv[++i];
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--prompt-ids")) ids_opt[0] = v;
        else if (!strcmp(a, "--continuation-ids")) ids_opt[1] = v;
        else if (!strcmp(a, "--threads") && parse_i64(v, 1, 256, &threads)) {}
        else if (!strcmp(a, "--device") || !strcmp(a, "--cuda-device") || !strcmp(a, "--cuda-gemm") ||
                 !strcmp(a, "--cuda-graphs") || !strcmp(a, "--kv-type")) {
            if (cli_engine_opt(&cfg, a + 2, v) < 0) return EXIT_USAGE;
        } else { fprintf(stderr, "invar score: bad option '%s'\n", a); return EXIT_USAGE; }
    }
    bool by_ids = ids_opt[0] && ids_opt[1];
    if (!by_ids && n_texts != 2) { fputs(HELP, stderr); return EXIT_USAGE; }
    invar_model *m = cli_load_model(model_path);
    if (!m) return EXIT_MODEL;
    int32_t *ids[2] = {NULL, NULL};
    int64_t n[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        if (by_ids) {
            ids[k] = parse_id_list(ids_opt[k], &n[k]);
        } else {
            size_t len = strlen(texts[k]);
            ids[k] = malloc(sizeof(int32_t) * (len + 8));
            if (ids[k]) n[k] = invar_tokenize(m, texts[k], len, k == 0, k == 0, ids[k], (int64_t)len + 8);
        }
    }
    int rc = EXIT_OK;
    float *lp = malloc(sizeof(float) * (size_t)(n[1] > 0 ? n[1] : 1));
    char err[256];
    if (!ids[0] || !ids[1] || n[0] <= 0 || n[1] <= 0 || !lp) {
        fprintf(stderr, "invar score: prompt and continuation must be non-empty\n");
        rc = EXIT_USAGE;
    } else if (score(m, &cfg, (int32_t)threads, ids, n, lp, err, sizeof err)) {
        fprintf(stderr, "invar score: %s\n", err);
        rc = EXIT_USAGE;
    } else {
        printf("{\"prompt_tokens\":%lld,\"token_ids\":[", (long long)n[0]);
        for (int64_t i = 0; i < n[1]; i++) printf(i ? ",%d" : "%d", ids[1][i]);
        printf("],\"logprobs\":[");
        for (int64_t i = 0; i < n[1]; i++) {
            char buf[32];
            format_f32(buf, sizeof buf, lp[i]);
            printf(i ? ",%s" : "%s", buf);
        }
        printf("]}\n");
        if (cli_finish_output(stdout, "score", "standard output")) rc = EXIT_IO;
    }
    free(lp);
    free(ids[0]);
    free(ids[1]);
    invar_model_free(m);
    return rc;
}
