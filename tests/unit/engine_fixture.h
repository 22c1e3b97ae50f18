/* Shared by the end-to-end engine tests: the default model, prompts, and a runner. */
#ifndef INVAR_TEST_ENGINE_FIXTURE_H
#define INVAR_TEST_ENGINE_FIXTURE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "invar.h"

/* The tests' model; never NULL (it exits when the model does not load). */
static inline invar_model *fixture_model(void) {
    const char *env = getenv("INVAR_MODEL");
    char path[4096];
    if (env && *env) snprintf(path, sizeof path, "%s", env);
    else snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", INVAR_SOURCE_DIR);
    char err[256];
    invar_model *m = NULL;
    if (invar_model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "cannot load %s: %s (run scripts/fetch_model.sh)\n", path, err);
        exit(1); /* every test of the file needs it: fail at once, with the message above */
    }
    return m;
}

/* The KV cache type the engine suites run with: f16 under INVAR_TEST_KV_TYPE=f16 (their
 * second ctest entries, *_kv_f16 in CMakeLists.txt), else f32. */
static inline invar_kv_type fixture_kv_type(void) {
    const char *t = getenv("INVAR_TEST_KV_TYPE");
    return t && !strcmp(t, "f16") ? INVAR_KV_F16 : INVAR_KV_F32;
}

typedef struct {
    int32_t *ids;
    int64_t n;
} prompt_ids;

/* n different prompts of varied lengths (about 10 to 40 tokens). */
static inline prompt_ids *fixture_prompts(const invar_model *m, int n) {
    static const char *topics[] = {"the ocean", "prime numbers", "a red bicycle", "C programming",
                                   "the French revolution", "photosynthesis", "chess openings", "jazz"};
    prompt_ids *p = calloc((size_t)n, sizeof *p);
    char text[2048];
    for (int i = 0; i < n; i++) {
        int len = snprintf(text, sizeof text, "<|im_start|>user\nTell me about %s (question %d).", topics[i % 8], i);
        for (int r = 0; r < (i * 7) % 5; r++)
            len += snprintf(text + len, sizeof text - (size_t)len, " Please add detail number %d.", r);
        snprintf(text + len, sizeof text - (size_t)len, "<|im_end|>\n<|im_start|>assistant\n");
        p[i].ids = malloc(sizeof(int32_t) * 1024);
        p[i].n = invar_tokenize(m, text, strlen(text), true, true, p[i].ids, 1024);
    }
    return p;
}

static inline void fixture_prompts_free(prompt_ids *p, int n) {
    for (int i = 0; i < n; i++) free(p[i].ids);
    free(p);
}

/* A finished request's output. */
typedef struct {
    invar_finish finish;
    int64_t n;
    int32_t tok[64];
    float lp[64];
} run_out;

#endif
