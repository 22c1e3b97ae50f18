/* Step staging for the CUDA backend (cuda_step.h). */
#ifdef INVAR_HAVE_CUDA
#include "backend/cuda_step.h"

#include <cuda_runtime_api.h>
#include <string.h>

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

step_layout step_layout_of(const step_caps *k) {
    step_layout l;
    size_t at = 0;
#define PLACE(field, bytes) (l.field = at, at = align16(at + (bytes)))
    PLACE(counts, 4 * sizeof(int32_t));
    PLACE(tokens, k->tokens * sizeof(int32_t));
    PLACE(pos, k->tokens * sizeof(int32_t));
    PLACE(slot, k->tokens * sizeof(int32_t));
    PLACE(logit_rows, k->logits * sizeof(int32_t));
    PLACE(ctx_len, k->seqs * sizeof(int32_t));
    PLACE(tok_pos, k->tokens * sizeof(int32_t));
    PLACE(tok_pbase, k->tokens * sizeof(int32_t));
    PLACE(tok_seq, k->tokens * sizeof(int32_t));
    PLACE(items, k->items * sizeof(invar_cuda_attn_item));
    PLACE(btab, k->btab * sizeof(int32_t));
#undef PLACE
    l.end = at;
    return l;
}

step_arrays step_arrays_at(unsigned char *base, const step_layout *l) {
    return (step_arrays){
        .counts = (int32_t *)(base + l->counts),
        .tokens = (int32_t *)(base + l->tokens),
        .pos = (int32_t *)(base + l->pos),
        .slot = (int32_t *)(base + l->slot),
        .logit_rows = (int32_t *)(base + l->logit_rows),
        .ctx_len = (int32_t *)(base + l->ctx_len),
        .tok_pos = (int32_t *)(base + l->tok_pos),
        .tok_pbase = (int32_t *)(base + l->tok_pbase),
        .tok_seq = (int32_t *)(base + l->tok_seq),
        .btab = (int32_t *)(base + l->btab),
        .items = (invar_cuda_attn_item *)(base + l->items),
    };
}

int step_staging_init(step_staging *s, void *stream) {
    memset(s, 0, sizeof *s);
    s->stream = stream;
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return -1;
    s->copied = ev;
    return 0;
}

int step_staging_fit(step_staging *s, size_t bytes) {
    if (bytes <= s->bytes) return 0;
    if (cudaStreamSynchronize((cudaStream_t)s->stream) != cudaSuccess) return -1;
    cudaFreeHost(s->host);
    cudaFree(s->dev);
    s->host = NULL;
    s->dev = NULL;
    s->bytes = 0;
    size_t want = bytes + bytes / 4 + 4096;
    if (cudaMallocHost((void **)&s->host, want) != cudaSuccess) {
        s->host = NULL;
        return -1;
    }
    if (cudaMalloc((void **)&s->dev, want) != cudaSuccess) {
        s->dev = NULL;
        return -1;
    }
    s->bytes = want;
    return 0;
}

int step_staging_wait(step_staging *s) {
    return cudaEventSynchronize((cudaEvent_t)s->copied) == cudaSuccess ? 0 : -1;
}

int step_staging_upload(step_staging *s, size_t from, size_t to) {
    if (to <= from) return 0;
    return cudaMemcpyAsync(s->dev + from, s->host + from, to - from, cudaMemcpyHostToDevice,
                           (cudaStream_t)s->stream) == cudaSuccess
               ? 0
               : -1;
}

int step_staging_uploaded(step_staging *s) {
    return cudaEventRecord((cudaEvent_t)s->copied, (cudaStream_t)s->stream) == cudaSuccess ? 0 : -1;
}

void step_staging_free(step_staging *s) {
    if (s->copied) cudaEventDestroy((cudaEvent_t)s->copied);
    cudaFreeHost(s->host);
    cudaFree(s->dev);
    memset(s, 0, sizeof *s);
}
#endif
