/* Draft-model speculation: a second, smaller model sharing the target's vocabulary proposes
 * the next tokens greedily, on the CPU, with paged KV storage of its own. Its proposals only
 * decide how many tokens a step keeps (the target verifies every one), so its numerics need
 * no invariance; it is still deterministic, as every forward here is. */
#ifndef INVAR_SPEC_DRAFT_H
#define INVAR_SPEC_DRAFT_H
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "engine/block_pool.h"

/* A sequence's state in the draft model. */
typedef struct {
    int32_t *blocks;            /* block table, room for the sequence's whole length */
    int64_t n_blocks;
    int64_t n_cached;           /* positions whose draft K/V are in */
} draft_seq;

typedef struct spec_draft spec_draft;

/* One sequence to draft for: seq[0..n_seq) is the verified sequence; up to k drafts are
 * written to seq[n_seq..] (the caller has room), their count to n_out. */
typedef struct {
    int32_t *seq;
    int64_t n_seq;
    int32_t k;
    draft_seq *ds;
    int32_t n_out;
} draft_job;

/* A draft engine for `draft` next to `target`: fails with a message unless the two share
 * the vocabulary (same ids, same token bytes). n_blocks of KV, forwards of up to max_tokens
 * tokens and max_seqs sequences. */
int spec_draft_create(model *draft, const model *target, int32_t n_threads, int64_t max_tokens, int64_t max_seqs,
                      int64_t n_blocks, spec_draft **out, char *err, size_t errlen);
void spec_draft_free(spec_draft *d);

/* Gives back a sequence's draft KV (finished, preempted). */
void draft_seq_release(spec_draft *d, draft_seq *s);
/* Positions from n_valid on hold tokens that changed (rejected drafts): drop their K/V. */
void draft_seq_rollback(spec_draft *d, draft_seq *s, int64_t n_valid);

/* Drafts for n jobs (n <= max_seqs), batched: each catches its draft KV up with its sequence,
 * then proposes greedily, one forward per drafted token. A job whose KV does not fit gets
 * fewer drafts or none. Returns 0, or -1 with the backend's message in err. */
int spec_draft_propose(spec_draft *d, draft_job *jobs, int64_t n, char *err, size_t errlen);

#endif
