/* Stands in for the CUDA backend in builds without CUDA. */
#include <stdio.h>

#include "backend/backend.h"

#ifndef INVAR_HAVE_CUDA
int backend_cuda_create(model *m, const backend_opts *o, backend **out, char *err, size_t errlen) {
    (void)m;
    (void)o;
    *out = NULL;
    snprintf(err, errlen, "this build of invar has no CUDA backend (configure with -DINVAR_CUDA=ON where nvcc is installed)");
    return -1;
}

int backend_cuda_set_gemm_mode(backend *b, backend_gemm_mode mode) {
    (void)b;
    (void)mode;
    return -1;
}

int backend_cuda_set_moe_combine(backend *b, moe_combine_mode mode) {
    (void)b;
    (void)mode;
    return -1;
}

const uint64_t *backend_cuda_moe_counts_seen(backend *b) {
    (void)b;
    return NULL;
}

int backend_cuda_set_mla_split_by_batch(backend *b, bool on) {
    (void)b;
    (void)on;
    return -1;
}
#endif
