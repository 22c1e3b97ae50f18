/* Shared pieces of the invar command-line program. */
#ifndef INVAR_CLI_H
#define INVAR_CLI_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "invar.h"

/* Exit codes. */
enum { EXIT_OK = 0, EXIT_REQUEST_ERRORS = 1, EXIT_USAGE = 2, EXIT_MODEL = 3, EXIT_IO = 4 };

#define DEFAULT_MODEL_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"

/* --model, else $INVAR_MODEL, else models/<default> under the cwd or beside the binary. */
const char *cli_model_path(const char *opt);
/* Loads the model or prints why not; NULL on failure. */
invar_model *cli_load_model(const char *opt_path);

/* Engine options shared by every command that generates: handles --threads, --max-batch,
 * --max-batch-tokens, --n-ctx, --kv-mem-mb, --kv-type, --device, --cuda-device, --cuda-gemm, --cuda-graphs; returns 1 if it consumed the option, 0 if
 * not one of these, -1 on a bad value. */
int cli_engine_opt(invar_engine_config *c, const char *name, const char *val);
#define CLI_ENGINE_HELP \
    "  --threads N            worker threads (default: all cores; results do not depend on it)\n" \
    "  --max-batch N          sequences per forward step (default 16)\n" \
    "  --max-batch-tokens N   tokens per forward step, decodes + prefill chunks (default 512)\n" \
    "  --n-ctx N              per-sequence context limit (default: the model's)\n" \
    "  --kv-mem-mb N          KV-cache memory budget in MiB (default 1024)\n" \
    "  --kv-type f32|f16      KV-cache elements (default f32; f16: twice the blocks in the budget,\n" \
    "                         rounded once when stored; CPU only)\n" \
    "  --device cpu|cuda      where the model runs (default cpu; cuda: an sm_90 GPU, weights as bf16)\n" \
    "  --cuda-device N        GPU ordinal (default 0)\n" \
    "  --cuda-gemm invariant|cublas  cublas: faster GEMMs that are NOT batch-invariant (to measure\n" \
    "                         the cost of invariance; default invariant)\n" \
    "  --cuda-graphs on|off   decode steps replay CUDA graphs captured at start-up (default on;\n" \
    "                         off runs them eagerly, with the same bits)\n"

bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool parse_f32(const char *s, float *out);
bool parse_u64(const char *s, uint64_t *out);


/* Ends writing to f: flushes it (buffered writes fail only then), checks its error flag,
 * and closes it unless it is stdout. Prints "invar CMD: cannot write NAME: reason" and
 * returns -1 if any byte written to f may have been lost. */
int cli_finish_output(FILE *f, const char *cmd, const char *name);

/* A terminal progress bar on stderr (no-op when stderr is not a terminal). */
typedef struct {
    bool on;
    int64_t total;
    double t0;
} progress;
void progress_start(progress *p, int64_t total);
void progress_update(progress *p, int64_t done, int64_t tokens);
void progress_end(progress *p);

int cmd_generate(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* "1,2,3" -> malloc'd ids; NULL if malformed. */
int32_t *parse_id_list(const char *s, int64_t *n);

#endif
