/* One measurement of speculative decoding: N concurrent sequences of a workload, decoded
 * plainly or with speculation, through the library (bench/spec_bench.py runs it and
 * aggregates). Prints one JSON line: decode tokens per second of wall time and of the
 * process's CPU time (from the step at which every sequence has its first token to the end,
 * so prefill is left out; on a shared machine CPU time is the steadier measure of one
 * thread), acceptance, tokens per sequence
 * forward, and a hash of every token id and logprob so runs can be compared bit for bit.
 *
 * usage: spec_bench MODEL WORKLOAD N_SEQS off|ngram|draft K MAX_TOKENS THREADS [DRAFT_MODEL]
 * workloads: edit, summarise, code (the output repeats its input) and free (it does not).
 * SPEC_BENCH_DEVICE=cuda runs the engine on the GPU (a CUDA build). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "invar.h"

#define N_VARIANTS 4

static const char *edit_prompts[N_VARIANTS] = {
    "Correct the spelling mistakes in this paragraph and write the whole paragraph out again:\n\n"
    "The quick brown fox jumpd over the lazy dog. The dog was not amused, and it barkd at the fox "
    "untill the fox ran back into the forrest. Later that day the farmer came home and saw that "
    "his chikens were all safe in the barn.",
    "Correct the spelling mistakes in this paragraph and write the whole paragraph out again:\n\n"
    "Our team meating will take place on Tuesday at ten o'clock in the main conferense room. "
    "Please bring your laptop and the quarterly report. We will discus the budget, the new hiring "
    "plan and the ofice move.",
    "Correct the spelling mistakes in this paragraph and write the whole paragraph out again:\n\n"
    "The weather tomorow will be sunny in the morning and cloudy in the afternoon. In the evening "
    "there is a chanse of light rain, so take an umbrela if you go out for diner.",
    "Correct the spelling mistakes in this paragraph and write the whole paragraph out again:\n\n"
    "To make a cup of tea, boil the water, put a tea bag in the cup and pour the water over it. "
    "Wait for three minuts, take out the tea bag and add milk or suger if you like.",
};

static const char *summarise_prompts[N_VARIANTS] = {
    "Here is a text:\n\nThe city council met on Monday evening to discuss the new bicycle lanes. "
    "The council voted to build bicycle lanes on Main Street and on River Road. Work on the "
    "bicycle lanes will start in March and end in June. The bicycle lanes will cost two million "
    "dollars.\n\nSummarise the text, reusing its sentences.",
    "Here is a text:\n\nThe library will be closed on Friday for repairs to the roof. The library "
    "will open again on Saturday at nine in the morning. Books that are due on Friday can be "
    "returned on Saturday without a fine.\n\nSummarise the text, reusing its sentences.",
    "Here is a text:\n\nThe company sold more phones this year than last year. The company sold "
    "ten million phones in Europe and twelve million phones in Asia. The company plans to open "
    "new stores in Asia next year.\n\nSummarise the text, reusing its sentences.",
    "Here is a text:\n\nThe school trip to the museum is on the fifth of May. The bus will leave "
    "the school at eight o'clock and return at four o'clock. Students should bring a packed "
    "lunch and a notebook.\n\nSummarise the text, reusing its sentences.",
};

static const char *code_prompts[N_VARIANTS] = {
    "Rename the variable cnt to count in this C function and print the whole function:\n\n"
    "int sum_positive(const int *values, int n_values) {\n    int cnt = 0;\n"
    "    for (int i = 0; i < n_values; i++) {\n        if (values[i] > 0) cnt += values[i];\n    }\n"
    "    return cnt;\n}",
    "Add a comment above each line of this Python function and print the whole function:\n\n"
    "def mean(values):\n    total = 0\n    for value in values:\n        total = total + value\n"
    "    return total / len(values)",
    "Rename the function get_val to get_value in this code and print all of it:\n\n"
    "def get_val(table, key):\n    return table[key]\n\nprint(get_val(prices, 'apple'))\n"
    "print(get_val(prices, 'pear'))\nprint(get_val(prices, 'plum'))",
    "Rewrite this C loop to count down instead of up and print the whole function:\n\n"
    "void print_all(const char **names, int n_names) {\n    for (int i = 0; i < n_names; i++) {\n"
    "        printf(\"%s\\n\", names[i]);\n    }\n}",
};

static const char *free_prompts[N_VARIANTS] = {
    "Write a short story about a dragon who learns to paint.",
    "Describe your ideal holiday.",
    "Why is the sky blue?",
    "Give me some advice on learning to cook.",
};

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int64_t *tokens_of;    /* by request id */
    int64_t step_seqs;     /* sequences that got tokens in the current step */
    int64_t last_id;
} counts;

static void on_token(void *user, int64_t id, const invar_token_info *tok) {
    (void)tok;
    counts *c = user;
    c->tokens_of[id]++;
    if (id != c->last_id) c->step_seqs++; /* a sequence's tokens of a step arrive together */
    c->last_id = id;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s MODEL WORKLOAD N_SEQS off|ngram|draft K MAX_TOKENS THREADS [DRAFT_MODEL]\n", argv[0]);
        return 2;
    }
    const char *workload = argv[2];
    const int n = atoi(argv[3]), k = atoi(argv[5]), max_tokens = atoi(argv[6]), threads = atoi(argv[7]);
    const char **prompts = !strcmp(workload, "edit")        ? edit_prompts
                           : !strcmp(workload, "summarise") ? summarise_prompts
                           : !strcmp(workload, "code")      ? code_prompts
                           : !strcmp(workload, "free")      ? free_prompts
                                                            : NULL;
    if (!prompts || n < 1 || n > 64 || k < 0 || k > INVAR_MAX_SPEC_TOKENS || max_tokens < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    invar_spec_mode mode = !strcmp(argv[4], "ngram") ? INVAR_SPEC_NGRAM : !strcmp(argv[4], "draft") ? INVAR_SPEC_DRAFT : INVAR_SPEC_OFF;
    char err[256];
    invar_model *m = NULL, *dm = NULL;
    if (invar_model_load(argv[1], &m, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    if (argc > 8 && invar_model_load(argv[8], &dm, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    cfg.n_threads = threads;
    cfg.max_batch = n;
    const char *dev = getenv("SPEC_BENCH_DEVICE");
    if (dev && !strcmp(dev, "cuda")) cfg.device = INVAR_DEVICE_CUDA;
    cfg.draft_model = dm;
    invar_engine *e;
    if (invar_engine_create(m, &cfg, &e, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    counts c = {calloc((size_t)n, sizeof(int64_t)), 0, -1};
    invar_engine_set_callback(e, on_token, &c);
    for (int i = 0; i < n; i++) {
        invar_chat_message msg = {"user", prompts[i % N_VARIANTS]};
        int32_t *ids;
        int64_t n_ids;
        if (invar_chat_tokenize(m, &msg, 1, true, &ids, &n_ids, NULL, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
        invar_sampling s;
        invar_sampling_default(&s);
        s.max_tokens = max_tokens;
        s.speculate = mode;
        s.spec_tokens = k;
        if (invar_engine_submit(e, ids, n_ids, &s) != i) return fprintf(stderr, "submit failed\n"), 1;
        free(ids);
    }
    /* Prefill until every sequence has its first token; then time the decode. */
    int left = 1;
    for (;;) {
        int all = 1;
        for (int i = 0; i < n; i++) all &= c.tokens_of[i] > 0;
        if (all || left == 0) break;
        left = invar_engine_step(e);
        if (left < 0) return fprintf(stderr, "%s\n", invar_engine_error(e)), 1;
    }
    invar_engine_stats s0;
    invar_engine_get_stats(e, &s0);
    int64_t tok0 = 0, seq_steps = 0;
    for (int i = 0; i < n; i++) tok0 += c.tokens_of[i];
    const double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    while (left > 0) {
        c.step_seqs = 0;
        c.last_id = -1;
        left = invar_engine_step(e);
        if (left < 0) return fprintf(stderr, "%s\n", invar_engine_error(e)), 1;
        seq_steps += c.step_seqs;
    }
    const double dt = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    invar_engine_stats s1;
    invar_engine_get_stats(e, &s1);
    int64_t tok1 = 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++) {
        invar_result r;
        invar_engine_result(e, i, &r);
        tok1 += r.n_tokens;
        for (int64_t t = 0; t < r.n_tokens; t++) {
            h = fnv(h, &r.tokens[t].token, sizeof r.tokens[t].token);
            h = fnv(h, &r.tokens[t].logprob, sizeof r.tokens[t].logprob);
        }
    }
    const int64_t decoded = tok1 - tok0, drafted = s1.spec_drafted - s0.spec_drafted,
                  kept = s1.spec_accepted - s0.spec_accepted;
    printf("{\"workload\": \"%s\", \"n_seqs\": %d, \"mode\": \"%s\", \"k\": %d, \"threads\": %d, "
           "\"decode_tokens\": %lld, \"decode_s\": %.6f, \"tokens_per_s\": %.3f, \"decode_cpu_s\": %.6f, "
           "\"tokens_per_cpu_s\": %.3f, \"drafted\": %lld, "
           "\"accepted\": %lld, \"acceptance\": %.4f, \"tokens_per_seq_forward\": %.4f, "
           "\"output_hash\": \"%016llx\"}\n",
           workload, n, argv[4], k, threads, (long long)decoded, dt, dt > 0 ? (double)decoded / dt : 0.0, cpu,
           cpu > 0 ? (double)decoded / cpu : 0.0,
           (long long)drafted, (long long)kept, drafted ? (double)kept / (double)drafted : 0.0,
           seq_steps ? (double)decoded / (double)seq_steps : 0.0, (unsigned long long)h);
    free(c.tokens_of);
    invar_engine_free(e);
    invar_model_free(m);
    invar_model_free(dm);
    return 0;
}
