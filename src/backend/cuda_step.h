/* One forward step's inputs for the CUDA backend, packed so that they reach the device in
 * one copy: token ids, positions, cache slots, logits rows, block tables and the attention
 * work lists, laid out back to back in a pinned host buffer and its device twin. */
#ifndef INVAR_CUDA_STEP_H
#define INVAR_CUDA_STEP_H
#include <stddef.h>
#include <stdint.h>
#include "invar_cuda.h"

typedef struct {            /* capacities, in entries */
    size_t tokens, logits, seqs, items, btab;
} step_caps;

typedef struct {            /* where each array starts, bytes from the buffer's start */
    size_t counts, tokens, pos, slot, logit_rows, ctx_len, tok_pos, tok_pbase, tok_seq, items, btab, end;
} step_layout;

typedef struct {            /* the arrays at one base address (host or device) */
    int32_t *counts;        /* [4]: attention items, block-table stride (graph steps) */
    int32_t *tokens, *pos, *slot, *logit_rows, *ctx_len, *tok_pos, *tok_pbase, *btab;
    int32_t *tok_seq;       /* [tokens]: each token's sequence (its block-table row; MLA) */
    invar_cuda_attn_item *items;
} step_arrays;

typedef struct {
    unsigned char *host;    /* pinned */
    unsigned char *dev;
    size_t bytes;
    void *copied;           /* cudaEvent_t: the last upload has read the host buffer */
    void *stream;           /* cudaStream_t the uploads go on */
} step_staging;

step_layout step_layout_of(const step_caps *k);
step_arrays step_arrays_at(unsigned char *base, const step_layout *l);

int step_staging_init(step_staging *s, void *stream);
/* Room for `bytes`; growing waits for the stream and reallocates (rare: sizes only grow). */
int step_staging_fit(step_staging *s, size_t bytes);
/* Waits until the host buffer may be written again. */
int step_staging_wait(step_staging *s);
/* Copies host bytes [from, to) to the device on the stream (no wait). */
int step_staging_upload(step_staging *s, size_t from, size_t to);
/* Marks the end of a step's uploads: step_staging_wait returns once they are done. */
int step_staging_uploaded(step_staging *s);
void step_staging_free(step_staging *s);

#endif
