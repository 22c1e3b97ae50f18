#include "cli/jobs.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

void job_clear(job *j) {
    free(j->prompt);
    free(j->error);
    free(j->toks);
    memset(j, 0, sizeof *j);
}

static int collect(invar_engine *e, int64_t id, job *j) {
    invar_result r;
    if (invar_engine_result(e, id, &r) || r.finish == INVAR_FINISH_NONE) return 0;
    j->finish = r.finish;
    if (r.error) j->error = strdup(r.error);
    j->n_toks = r.n_tokens;
    j->toks = malloc(sizeof *j->toks * (size_t)(r.n_tokens ? r.n_tokens : 1));
    /* A rejected request has no tokens and r.tokens may be NULL: memcpy from NULL is UB
     * even for 0 bytes. */
    if (j->toks && r.n_tokens > 0) memcpy(j->toks, r.tokens, sizeof *j->toks * (size_t)r.n_tokens);
    invar_engine_release(e, id);
    return 1;
}

typedef struct {
    job *jobs;
    const int64_t *job_of_id; /* engine request id -> job index */
    int64_t n_ids;
    double t0;
} timing_ctx;

static void on_token(void *user, int64_t id, const invar_token_info *tok) {
    (void)tok;
    timing_ctx *t = user;
    if (id < 0 || id >= t->n_ids) return;
    job *j = &t->jobs[t->job_of_id[id]];
    if (j->t_first == 0.0) j->t_first = now_seconds() - t->t0;
}

int run_jobs(invar_model *m, const invar_engine_config *cfg, job *jobs, int64_t n, const int64_t *order,
             job_done_fn done, void *user) {
    char err[256];
    invar_engine *e;
    if (invar_engine_create(m, cfg, &e, err, sizeof err)) {
        fprintf(stderr, "invar: %s\n", err);
        return -1;
    }
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    char *finished = calloc((size_t)(n ? n : 1), 1);
    int64_t *job_of_id = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    int rc = (ids && finished && job_of_id) ? 0 : -1;
    bool oom = rc != 0;
    progress pg;
    progress_start(&pg, n);
    int64_t n_done = 0, n_tok = 0;
    timing_ctx tc = {jobs, job_of_id, 0, now_seconds()};
    invar_engine_set_callback(e, on_token, &tc);
    for (int64_t k = 0; k < n && rc == 0; k++) {
        int64_t i = order ? order[k] : k;
        jobs[i].t_first = jobs[i].t_done = 0.0;
        ids[i] = invar_engine_submit(e, jobs[i].prompt, jobs[i].n_prompt, &jobs[i].samp);
        if (ids[i] < 0) {
            rc = -1;
            oom = true;
            break;
        }
        job_of_id[ids[i]] = i; /* ids count up from 0 in submission order */
        tc.n_ids = ids[i] + 1;
    }
    while (rc == 0 && n_done < n) {
        int left = invar_engine_step(e);
        if (left < 0) {
            fprintf(stderr, "invar: %s\n", invar_engine_error(e));
            rc = -1;
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            if (finished[i] || !collect(e, ids[i], &jobs[i])) continue;
            finished[i] = 1;
            jobs[i].t_done = now_seconds() - tc.t0;
            n_done++;
            n_tok += jobs[i].n_toks;
            if (done && done(user, i)) rc = 1; /* the caller cannot use more results */
        }
        progress_update(&pg, n_done, n_tok);
    }
    progress_end(&pg);
    if (oom) fprintf(stderr, "invar: out of memory\n");
    free(ids);
    free(job_of_id);
    free(finished);
    invar_engine_free(e);
    return rc;
}
