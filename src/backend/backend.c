/* Backend selection. */
#include "backend/backend.h"

#include <stdio.h>

int backend_create(invar_device device, model *m, const backend_opts *o, backend **out, char *err,
                   size_t errlen) {
    *out = NULL;
    if (o->max_tokens <= 0 || o->max_logits <= 0 || o->n_threads <= 0) {
        snprintf(err, errlen, "backend: bad sizes");
        return -1;
    }
    if (device == INVAR_DEVICE_CUDA && o->kv_type != ATTN_KV_F32) {
        /* the GPU's KV cache is its own (docs/cuda.md); kv_type sizes only the CPU's */
        snprintf(err, errlen, "kv_type f16 is for the CPU backend: the CUDA backend keeps its own KV cache format");
        return -1;
    }
    switch (device) {
    case INVAR_DEVICE_CPU: return backend_cpu_create(m, o, out, err, errlen);
    case INVAR_DEVICE_CUDA: return backend_cuda_create(m, o, out, err, errlen);
    }
    snprintf(err, errlen, "unknown device %d", (int)device);
    return -1;
}

void backend_destroy(backend *b) {
    if (b) b->ops->destroy(b);
}

int backend_rows_ok(backend *b, int64_t n) {
    if (n >= 0 && n <= b->n_logits) return 1;
    snprintf(b->error, sizeof b->error, "asked for %lld logits rows, the last forward made %lld", (long long)n,
             (long long)b->n_logits);
    return 0;
}
