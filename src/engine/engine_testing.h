/* Hooks for tests only (negative controls). Not part of the public API. */
#ifndef INVAR_ENGINE_TESTING_H
#define INVAR_ENGINE_TESTING_H
#include "model/forward.h"
#include "invar.h"

/* Swaps the CPU backend's matmul (NULL restores the invariant one); -1 for an engine on another device. */
int invar_engine_testing_set_matmul(invar_engine *e, matmul_fn fn);
/* The engine's backend, for test hooks that live in the backends (backend.h). */
struct backend;
struct backend *invar_engine_testing_backend(invar_engine *e);
/* Request slots the engine has storage for (live requests plus holes not yet compacted):
 * stays bounded by the live count however many requests were served. */
int64_t invar_engine_testing_request_slots(invar_engine *e);
/* Sets the CUDA backend's GEMM (backend.h: backend_gemm_mode); -1 for another device. */
int invar_engine_testing_set_cuda_gemm(invar_engine *e, int mode);
/* A draft source for speculating requests (invar_sampling.speculate != OFF) in place of the
 * real ones: proposes up to k tokens to follow seq[0..n_seq) of the request into out and
 * returns how many. Runs inside invar_engine_step; it must not call the engine. NULL
 * restores the real drafts. */
typedef int32_t (*invar_testing_drafter)(void *user, int64_t request_id, const int32_t *seq, int64_t n_seq,
                                         int32_t k, int32_t *out);
void invar_engine_testing_set_drafter(invar_engine *e, invar_testing_drafter fn, void *user);
/* NEGATIVE CONTROL: sampled requests' drafts are verified by rejection sampling
 * (spec_rejection.h), distribution-preserving but not bit-preserving. */
void invar_engine_testing_set_spec_rejection(invar_engine *e, bool on);
/* NEGATIVE CONTROL: every sampling row of a step whose request has logits processing
 * (penalties, min_tokens) reads the token history of the step's first row instead of its
 * own, as a penalty state kept per batch rather than per request would. */
void invar_engine_testing_set_shared_history(invar_engine *e, bool on);
/* NEGATIVE CONTROL: weight updates leave the prefix cache, the running requests' KV and the
 * backend as they were (valid only for an update that keeps every tensor's type). */
void invar_engine_testing_set_stale_kv(invar_engine *e, bool on);
/* invar_score with a chosen matmul (NULL: the invariant one). */
int invar_score_testing(const invar_model *m, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                        int64_t n_cont, int32_t n_threads, float *logprobs, matmul_fn mm, char *err,
                        size_t errlen);

/* NEGATIVE CONTROL: invar_score whose MLA prefill rows attend in the plain, non-absorbed
 * formulation (model/mla.h); -1 for a model without MLA. */
int invar_score_testing_mla_prefill_plain(const invar_model *m, const int32_t *prompt, int64_t n_prompt,
                                          const int32_t *cont, int64_t n_cont, int32_t n_threads, float *logprobs,
                                          char *err, size_t errlen);

#endif
