#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char *USAGE =
    "invar: a batch-invariant LLM inference engine\n"
    "\n"
    "usage: invar <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate   generate text for one prompt, streamed to stdout\n"
    "  batch      run JSONL requests, write JSONL results\n"
    "  demo       a few prompts alone and batched, with the bitwise invariance check shown\n"
    "  tokenize   print the token ids of a text\n"
    "  score      logprobs of a continuation after a prompt, in one pass (RL scoring)\n"
    "  serve      OpenAI-compatible HTTP server (completions, chat, streaming, metrics)\n"
    "  logits     dump the raw logits of a token sequence (for reference tests)\n"
    "\n"
    "Run 'invar <command> --help' for a command's options. Without --model, invar uses\n"
    "$INVAR_MODEL or models/" DEFAULT_MODEL_NAME ".\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "batch")) return cmd_batch(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "score")) return cmd_score(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    fprintf(stderr, "invar: unknown command '%s'\n\n%s", cmd, USAGE);
    return EXIT_USAGE;
}
