/* invar demo: the main job. A few chat prompts generated alone, then all together in one
 * batch in a shuffled order; token ids and logprobs are compared bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "cli/jobs.h"
#include "common/clock.h"
#include "request/token_text.h"

static const char *HELP =
    "usage: invar demo [--model PATH] [--max-tokens N] [--threads N]\n"
    "Generates answers to a few prompts (greedy and sampled at temperature 0.8 with seeds),\n"
    "first each alone, then all in one batch in shuffled order, and checks that every\n"
    "request's token ids and logprobs are bitwise identical. Exit status 1 if any differ.\n";

static const char *PROMPTS[] = {
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one sentence what a CPU cache is.",
    "List three prime numbers greater than 10.",
    "How do I reverse a list in Python?",
    "Why is the sky blue?",
};
#define N_PROMPTS (int64_t)(sizeof PROMPTS / sizeof *PROMPTS)

static bool same_output(const job *a, const job *b) {
    if (a->finish != b->finish || a->n_toks != b->n_toks) return false;
    for (int64_t i = 0; i < a->n_toks; i++)
        if (a->toks[i].token != b->toks[i].token ||
            memcmp(&a->toks[i].logprob, &b->toks[i].logprob, sizeof(float)))
            return false;
    return true;
}

static int prepare(const invar_model *m, job *jobs, int32_t max_tokens) {
    char err[256];
    for (int64_t i = 0; i < 2 * N_PROMPTS; i++) {
        invar_chat_message msg = {"user", PROMPTS[i % N_PROMPTS]};
        memset(&jobs[i], 0, sizeof jobs[i]);
        if (invar_chat_tokenize(m, &msg, 1, true, &jobs[i].prompt, &jobs[i].n_prompt, NULL, err, sizeof err)) {
            fprintf(stderr, "invar demo: %s\n", err);
            return -1;
        }
        invar_sampling_default(&jobs[i].samp);
        jobs[i].samp.max_tokens = max_tokens;
        if (i >= N_PROMPTS) { /* second half: sampled with a per-request seed */
            jobs[i].samp.temperature = 0.8f;
            jobs[i].samp.top_p = 0.95f;
            jobs[i].samp.seed = 1000 + (uint64_t)i;
        }
    }
    return 0;
}

int cmd_demo(int argc, char **argv) {
    const char *model_path = NULL;
    int64_t max_tokens = 48;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(HELP, stdout); return EXIT_OK; }
        if (i + 1 >= argc) { fprintf(stderr, "invar demo: unexpected argument '%s'\n", a); return EXIT_USAGE; }
        const char *v = argv[++i];
        int r = cli_engine_opt(&cfg, a + 2, v);
        if (r < 0) return EXIT_USAGE;
        if (r) continue;
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--max-tokens") && parse_i64(v, 1, 4096, &max_tokens)) {}
        else { fprintf(stderr, "invar demo: bad option '%s'\n", a); return EXIT_USAGE; }
    }
    invar_model *m = cli_load_model(model_path);
    if (!m) return EXIT_MODEL;
    const int64_t n = 2 * N_PROMPTS;
    job alone[2 * N_PROMPTS], batched[2 * N_PROMPTS];
    int rc = EXIT_OK;
    if (prepare(m, alone, (int32_t)max_tokens) || prepare(m, batched, (int32_t)max_tokens)) rc = EXIT_IO;

    char threads[32];
    if (cfg.n_threads) snprintf(threads, sizeof threads, "%d threads", cfg.n_threads);
    else snprintf(threads, sizeof threads, "all cores");
    printf("model: %s (%s), %s, %s\n", cli_model_path(model_path), invar_model_arch(m),
           cfg.device == INVAR_DEVICE_CUDA ? "GPU (cuda)" : "CPU", threads);
    invar_engine_config one = cfg;
    one.max_batch = 1;
    double t0 = now_seconds();
    for (int64_t i = 0; i < n && rc == EXIT_OK; i++)
        if (run_jobs(m, &one, &alone[i], 1, NULL, NULL, NULL)) rc = EXIT_IO;
    double t_alone = now_seconds() - t0;

    /* The same requests, all at once, submitted in a shuffled order. */
    int64_t order[2 * N_PROMPTS];
    for (int64_t i = 0; i < n; i++) order[i] = i;
    uint64_t x = 0x2545F4914F6CDD1DULL;
    for (int64_t i = n - 1; i > 0; i--) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int64_t j = (int64_t)(x % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    invar_engine_config all = cfg;
    all.max_batch = (int32_t)n;
    t0 = now_seconds();
    if (rc == EXIT_OK && run_jobs(m, &all, batched, n, order, NULL, NULL)) rc = EXIT_IO;
    double t_batch = now_seconds() - t0;

    int64_t same = 0, toks = 0;
    for (int64_t i = 0; i < n && rc == EXIT_OK; i++) {
        bool ok = same_output(&alone[i], &batched[i]);
        same += ok;
        toks += alone[i].n_toks;
        char *text = req_tokens_text(m, alone[i].toks, alone[i].n_toks);
        printf("\n[%lld] %s  (%s)\n> %s\n%s\n", (long long)i, PROMPTS[i % N_PROMPTS],
               i < N_PROMPTS ? "greedy" : "T=0.8, top_p=0.95, seeded", text ? text : "",
               ok ? "  alone == batched: identical token ids and logprobs (bitwise)"
                  : "  alone != batched: MISMATCH");
        free(text);
    }
    if (rc == EXIT_OK) {
        printf("\ninvariance: %lld/%lld requests bitwise identical alone and in a shuffled batch of %lld\n",
               (long long)same, (long long)n, (long long)n);
        printf("speed: %lld tokens, one at a time %.1f tok/s, batched %.1f tok/s\n", (long long)toks,
               (double)toks / t_alone, (double)toks / t_batch);
        if (same != n) rc = EXIT_REQUEST_ERRORS;
    }
    for (int64_t i = 0; i < n; i++) {
        job_clear(&alone[i]);
        job_clear(&batched[i]);
    }
    invar_model_free(m);
    return rc;
}
