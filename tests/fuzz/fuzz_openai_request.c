/* libFuzzer target for the HTTP server's request handler: any body, as a completions and as
 * a chat request, must be either parsed into a call or rejected with an OpenAI-style error
 * (a 4xx status and a message), never crash; both paths release everything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai_api.h"

static srv_state g_state;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *env = getenv("INVAR_MODEL");
    char path[4096], err[256];
    if (env && *env) snprintf(path, sizeof path, "%s", env);
    else snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", INVAR_SOURCE_DIR);
    if (invar_model_load(path, &g_state.model, err, sizeof err)) {
        fprintf(stderr, "fuzz_openai_request: cannot load %s: %s\n", path, err);
        abort();
    }
    g_state.model_name = "SmolLM2-135M-Instruct.Q4_1.gguf";
    g_state.n_ctx = 256;
    g_state.max_body = 1 << 20;
    g_state.max_prompts = 64;
    pthread_mutex_init(&g_state.mu, NULL);
    pthread_cond_init(&g_state.work, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    for (int chat = 0; chat < 2; chat++) {
        api_request r;
        api_error e;
        memset(&r, 0, sizeof r);
        memset(&e, 0, sizeof e);
        if (api_parse(&g_state, (const char *)data, size, chat, &r, &e)) {
            if (e.status < 400 || e.status > 499 || !e.message[0]) __builtin_trap();
            char *j = api_error_json(&e);
            if (!j) __builtin_trap();
            free(j);
        } else {
            srv_call_finish(&g_state, r.call, true, false);
            api_request_free(&r);
        }
    }
    return 0;
}
