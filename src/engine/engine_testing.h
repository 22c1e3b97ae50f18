/* Hooks for tests only (negative controls). Not part of the public API. */
#ifndef INVAR_ENGINE_TESTING_H
#define INVAR_ENGINE_TESTING_H
#include "model/forward.h"
#include "invar.h"

/* Swaps the CPU backend's matmul; -1 for an engine on another device. */
int invar_engine_testing_set_matmul(invar_engine *e, matmul_fn fn);
/* The engine's backend, for test hooks that live in the backends (backend.h). */
struct backend;
struct backend *invar_engine_testing_backend(invar_engine *e);
/* Request slots the engine has storage for (live requests plus holes not yet compacted):
 * stays bounded by the live count however many requests were served. */
int64_t invar_engine_testing_request_slots(invar_engine *e);
/* Sets the CUDA backend's GEMM (backend.h: backend_gemm_mode); -1 for another device. */
int invar_engine_testing_set_cuda_gemm(invar_engine *e, int mode);
/* invar_score with a chosen matmul (NULL: the invariant one). */
int invar_score_testing(const invar_model *m, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                        int64_t n_cont, int32_t n_threads, float *logprobs, matmul_fn mm, char *err,
                        size_t errlen);

#endif
