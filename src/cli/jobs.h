/* Runs a set of requests through one engine and collects their results. */
#ifndef INVAR_CLI_JOBS_H
#define INVAR_CLI_JOBS_H
#include <stdint.h>
#include "cli/cli.h"

typedef struct {
    int32_t *prompt;            /* owned */
    int64_t n_prompt;
    invar_sampling samp;
    /* results */
    invar_finish finish;
    char *error;                /* owned */
    invar_token_info *toks;     /* owned */
    int64_t n_toks;
    double t_first, t_done;     /* seconds after run_jobs started: first token, finish */
} job;

/* Returns non-zero to stop the run (e.g. the results can no longer be written). */
typedef int (*job_done_fn)(void *user, int64_t index);

/* Submits jobs in the given order (NULL: index order), steps until all finish, calls done
 * for each as it finishes. Returns 0; 1 if done asked to stop (the unfinished jobs keep
 * finish NONE); -1 on an engine or allocation failure (message printed). */
int run_jobs(invar_model *m, const invar_engine_config *cfg, job *jobs, int64_t n, const int64_t *order,
             job_done_fn done, void *user);
void job_clear(job *j);

#endif
