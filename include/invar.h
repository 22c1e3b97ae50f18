/* invar: a batch-invariant LLM inference engine.
 *
 * Guarantee: a request's token ids and logprobs are bitwise identical whatever else is in
 * the batch, in whatever order requests arrive, and for any thread count (docs/invariance.md).
 * All functions are C11; strings are UTF-8. Functions that can fail take an err buffer and
 * return non-zero (or a negative id) with a one-line message in it. */
#ifndef INVAR_H
#define INVAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INVAR_MAX_TOP_LOGPROBS 20
#define INVAR_MAX_SPEC_TOKENS 16     /* drafted tokens one verification step may carry */
#define INVAR_DEFAULT_SPEC_TOKENS 4
#define INVAR_MAX_LOGIT_BIAS 256     /* logit_bias entries per request */
#define INVAR_MAX_STOP_TOKEN_IDS 16  /* stop_token_ids per request */

typedef struct invar_model invar_model;
typedef struct invar_engine invar_engine;

/* ---- model ---------------------------------------------------------------------- */
/* path: a GGUF file, or a Hugging Face model directory (config.json, safetensors,
 * tokenizer.json; docs/models.md). 0, or -1 with a one-line message in err. */
int invar_model_load(const char *path, invar_model **out, char *err, size_t errlen);
void invar_model_free(invar_model *m);
const char *invar_model_arch(const invar_model *m);
int32_t invar_model_n_vocab(const invar_model *m);
int32_t invar_model_n_ctx(const invar_model *m);     /* training context length */

/* Tokenize: writes up to cap ids, returns the total count (call again if > cap), -1 on error.
 * add_bos: prepend BOS if the model asks for it (tokenizer.ggml.add_bos_token). */
int64_t invar_tokenize(const invar_model *m, const char *text, size_t len, bool add_bos,
                       bool parse_special, int32_t *out, int64_t cap);
/* Raw bytes of one token; returns the byte count (may exceed cap), -1 for a bad id. */
int invar_token_bytes(const invar_model *m, int32_t id, char *buf, size_t cap);
bool invar_token_is_eog(const invar_model *m, int32_t id);

typedef struct {
    const char *role;
    const char *content;
} invar_chat_message;
/* Renders messages with the model's chat template; returns a malloc'd string or NULL.
 * To run a chat use invar_chat_tokenize: tokenizing this text with parse_special would
 * let a message's content forge the template's special tokens. */
char *invar_chat_render(const invar_model *m, const invar_chat_message *msgs, size_t n,
                        bool add_generation_prompt, char *err, size_t errlen);
/* Renders messages with the chat template and tokenizes the result (BOS per the model).
 * Special tokens are parsed in the template's own markup only: text in a message's content
 * such as "<|im_end|>" is ordinary text, so a message cannot close its turn or open a fake
 * system turn. *ids (malloc'd) and *n_ids receive the tokens; text, if not NULL, receives
 * the rendered text (malloc'd). Returns 0; -1 if the messages cannot be rendered (no or
 * unsupported template, bad role: message in err); -2 out of memory. */
int invar_chat_tokenize(const invar_model *m, const invar_chat_message *msgs, size_t n,
                        bool add_generation_prompt, int32_t **ids, int64_t *n_ids, char **text, char *err,
                        size_t errlen);

/* Raw logits of every position of a token sequence, [n][n_vocab], computed in chunks of
 * `chunk` tokens (0 = all at once); the bits do not depend on chunk or n_threads. */
int invar_model_logits(const invar_model *m, const int32_t *tokens, int64_t n, int64_t chunk,
                       int32_t n_threads, float *out, char *err, size_t errlen);

/* Score: the logprob of each continuation token after prompt + the continuation before it,
 * from one prefill pass (`logprobs` gets n_cont values). Bitwise equal to the logprobs the
 * engine reports when it samples those tokens step by step ("true on-policy" for RL). */
int invar_score(const invar_model *m, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                int64_t n_cont, int32_t n_threads, float *logprobs, char *err, size_t errlen);

/* Frees memory the API returned to the caller (invar_chat_render's text, invar_chat_tokenize's
 * ids and text): for callers that do not share this library's malloc, such as ctypes. */
void invar_free(void *p);

/* ---- sampling ------------------------------------------------------------------- */
/* Speculative decoding (docs/speculation.md): a draft proposes the next tokens, the model
 * scores them all in one forward, and a drafted token is kept only if it equals the token
 * plain decoding chooses at that position. It changes the speed, never a bit of the output. */
typedef enum {
    INVAR_SPEC_OFF = 0,
    INVAR_SPEC_NGRAM,           /* prompt lookup: continue the latest earlier match of the
                                   sequence's last tokens; no extra model */
    INVAR_SPEC_DRAFT            /* the engine's draft model (invar_engine_config.draft_model) */
} invar_spec_mode;

/* One logit_bias entry: bias (in [-100, 100]) is added to the token's logit before sampling. */
typedef struct {
    int32_t token;
    float bias;
} invar_logit_bias;

/* Logits processing, all per request (it reads only this request's own tokens, so it is as
 * batch-invariant as the rest), applied to a copy of the row in this fixed order before
 * temperature and truncation: repetition_penalty (each distinct token of prompt + output:
 * logit / p if the logit is > 0, else logit * p), then frequency and presence penalties
 * (each distinct output token seen c times: logit - (c * frequency + presence)), then
 * logit_bias (in the order given), then min_tokens (end-of-generation and stop_token_ids
 * tokens get -inf until min_tokens tokens exist). Reported logprobs stay those of the raw
 * logits (invar_token_info.logprob). */
typedef struct {
    int32_t max_tokens;     /* > 0 */
    float temperature;      /* 0 = greedy (argmax, lowest id on ties) */
    int32_t top_k;          /* 0 = off */
    float top_p;            /* 1 = off */
    float min_p;            /* 0 = off */
    uint64_t seed;          /* with temperature > 0: draws keyed by (seed, position) */
    int32_t top_logprobs;   /* alternatives reported per token, 0..INVAR_MAX_TOP_LOGPROBS */
    bool ignore_eos;        /* keep going past end-of-generation tokens */
    float presence_penalty;     /* [-2, 2], 0 = off */
    float frequency_penalty;    /* [-2, 2], 0 = off */
    float repetition_penalty;   /* (0, 10], 1 = off */
    int32_t min_tokens;         /* [0, max_tokens]: no end-of-generation or stop token before */
    int32_t n_stop_token_ids;   /* 0..INVAR_MAX_STOP_TOKEN_IDS */
    int32_t stop_token_ids[INVAR_MAX_STOP_TOKEN_IDS]; /* sampling one finishes the request
                                   (INVAR_FINISH_STOP; the token is the last one reported) */
    int32_t n_logit_bias;       /* 0..INVAR_MAX_LOGIT_BIAS */
    invar_logit_bias logit_bias[INVAR_MAX_LOGIT_BIAS]; /* token ids in [0, n_vocab) */
    bool prompt_logprobs;   /* also report the logprob of every prompt token from position 1
                               (invar_result.prompt_logprobs), computed in the request's own
                               prefill: chunked, preemptible, cancellable, its KV inside the
                               engine's budget; bitwise equal to invar_engine_score (and on the
                               CPU to invar_score). Such a request takes prefix-cache hits only
                               for prompt positions whose logprobs it already has. */
    invar_spec_mode speculate;  /* speculative decoding, default off */
    int32_t spec_tokens;        /* drafted tokens per step, 1..INVAR_MAX_SPEC_TOKENS; 0 = the
                                   default (INVAR_DEFAULT_SPEC_TOKENS) */
} invar_sampling;
void invar_sampling_default(invar_sampling *s);

/* ---- engine --------------------------------------------------------------------- */
/* Where the forward pass runs. CUDA: an sm_90 GPU (H100/H200); weights go to the device as
 * bf16 (quantised GGUF types are dequantised at load), KV cache and sampling stay there. */
typedef enum { INVAR_DEVICE_CPU = 0, INVAR_DEVICE_CUDA = 1 } invar_device;

/* The CPU KV cache's element type. F16: IEEE halves, rounded to nearest even once when a
 * position is stored and widened exactly when read: half the memory per block (kv_mem_mb
 * holds twice the blocks), the same invariance (a position's stored bits depend on its own
 * K/V alone). The CUDA backend keeps its own cache and refuses F16. */
typedef enum { INVAR_KV_F32 = 0, INVAR_KV_F16 = 1 } invar_kv_type;

typedef struct {
    int32_t n_threads;          /* 0 = number of online CPUs */
    int32_t max_batch;          /* sequences per step (default 16) */
    int32_t max_batch_tokens;   /* tokens per forward: decodes + prefill chunks (default 512) */
    int32_t n_ctx;              /* per-sequence context limit, 0 = the model's */
    int64_t kv_mem_mb;          /* KV-cache memory budget (default 1024) */
    int64_t kv_blocks;          /* if > 0: exactly this many 16-token KV blocks (overrides kv_mem_mb) */
    bool no_prefix_cache;       /* turn the prefix cache off */
    invar_device device;        /* default INVAR_DEVICE_CPU */
    int32_t cuda_device;        /* GPU ordinal for INVAR_DEVICE_CUDA */
    bool cuda_gemm_cublas;      /* CUDA: cuBLAS GEMMs, faster but NOT batch-invariant (for
                                   measuring the cost of invariance; never for real use) */
    bool cuda_no_graphs;        /* CUDA: run decode steps eagerly instead of replaying the CUDA
                                   graphs captured at start-up (same bits, more launch overhead) */
    const invar_model *draft_model; /* for INVAR_SPEC_DRAFT requests: a model sharing this one's
                                   vocabulary, run on the CPU with KV storage of its own; NULL =
                                   none. The caller keeps it alive while the engine lives. */
    int32_t spec_step_tokens;   /* speculation: the most tokens a step's decodes carry together
                                   with their drafts; drafts past it wait. 0 = the device's
                                   default: CPU 4 (a forward of 2, 3, 4 tokens costs about 1.3,
                                   1.5, 1.6 one-token forwards, of 5 already 2.3: drafts pay
                                   only for one to three sequences), CUDA 64 (untuned) */
    invar_kv_type kv_type;      /* the KV cache's elements (default INVAR_KV_F32) */
} invar_engine_config;
void invar_engine_config_default(invar_engine_config *c);

typedef enum {
    INVAR_FINISH_NONE = 0,      /* still running */
    INVAR_FINISH_STOP,          /* end-of-generation token */
    INVAR_FINISH_LENGTH,        /* max_tokens or the context limit */
    INVAR_FINISH_ERROR,         /* rejected: see invar_result.error */
    INVAR_FINISH_CANCELLED
} invar_finish;

/* One generated token, as reported to the callback and in results. */
typedef struct {
    int32_t token;
    float logprob;              /* log-softmax of the raw logits (temperature 1, no truncation) */
    int32_t n_top;
    int32_t top_ids[INVAR_MAX_TOP_LOGPROBS];
    float top_logprobs[INVAR_MAX_TOP_LOGPROBS];
} invar_token_info;

/* Called from invar_engine_step for each new token of each request. */
typedef void (*invar_token_cb)(void *user, int64_t request_id, const invar_token_info *tok);

/* An engine is safe to use from several threads: submit, cancel, result, release and stats
 * may be called while another thread is inside invar_engine_step (they wait for the step's
 * lock). The token callback runs inside step; it may call engine functions itself. */
int invar_engine_create(invar_model *m, const invar_engine_config *cfg, invar_engine **out,
                        char *err, size_t errlen);
void invar_engine_free(invar_engine *e);
void invar_engine_set_callback(invar_engine *e, invar_token_cb cb, void *user);

/* Queues a request; returns its id (>= 0). A request that can never run (empty, over the
 * context, over the KV budget, bad parameters) still gets an id and finishes at once
 * with INVAR_FINISH_ERROR; -1 only for allocation failure. */
int64_t invar_engine_submit(invar_engine *e, const int32_t *prompt, int64_t n_prompt,
                            const invar_sampling *s);
/* Runs one forward over the scheduled tokens. Returns the number of unfinished requests,
 * or -1 on an internal error (message via invar_engine_error). */
int invar_engine_step(invar_engine *e);
const char *invar_engine_error(const invar_engine *e);
/* What the device set up at start-up (e.g. "cuda graphs: ..."), or "" (never NULL). */
const char *invar_engine_device_info(const invar_engine *e);
int invar_engine_cancel(invar_engine *e, int64_t request_id);

typedef struct {
    invar_finish finish;
    const char *error;              /* for INVAR_FINISH_ERROR */
    int64_t n_tokens;
    const invar_token_info *tokens; /* n_tokens entries, valid until release */
    int64_t n_prompt;
    /* With invar_sampling.prompt_logprobs: prompt_logprobs[i] is the logprob of prompt token
     * i + 1 given the tokens before it. Entries arrive in order as prefill chunks complete
     * (n_prompt - 1 of them once the prompt is computed); valid until release. */
    int64_t n_prompt_logprobs;
    const float *prompt_logprobs;
    /* With prompt_logprobs and top_logprobs > 0: prompt_top[i] holds the top_logprobs best
       alternatives at prompt position i + 1 (token = that prompt token, logprob as above),
       n_prompt_logprobs entries; else NULL. */
    const invar_token_info *prompt_top;
    int64_t n_cached_prompt;    /* prompt tokens the prefix cache supplied when it started */
} invar_result;
/* Counters for metrics and tests. */
typedef struct {
    int64_t n_queued, n_running;
    int64_t kv_blocks_total, kv_blocks_free;   /* free includes evictable cached blocks */
    int64_t prefix_blocks_hit, prefix_blocks_looked_up;
    int64_t preemptions;
    int64_t tokens_computed, tokens_generated;
    int64_t spec_steps;         /* verification steps: a request's forward with drafted tokens */
    int64_t spec_drafted;       /* drafted tokens scored in them */
    int64_t spec_accepted;      /* of those, equal to plain decoding's choice (kept) */
} invar_engine_stats;
void invar_engine_get_stats(invar_engine *e, invar_engine_stats *out);

/* invar_score and invar_model_logits through the engine's own backend (its device): the
 * same bits as the tokens and logprobs the engine samples on that device. Each call runs
 * one sequence on KV storage of its own (outside kv_mem_mb), under the engine's lock,
 * uncancellable; a request with invar_sampling.prompt_logprobs gets a prompt's logprobs
 * through the scheduler and the KV budget instead. */
int invar_engine_score(invar_engine *e, const int32_t *prompt, int64_t n_prompt, const int32_t *cont,
                       int64_t n_cont, float *logprobs, char *err, size_t errlen);
int invar_engine_logits(invar_engine *e, const int32_t *tokens, int64_t n, int64_t chunk, float *out,
                        char *err, size_t errlen);

/* ---- weight updates ------------------------------------------------------------ */
/* One tensor of new weights, named and laid out as in GGUF. */
typedef struct {
    const char *name;       /* e.g. "blk.0.attn_q.weight", "token_embd.weight" */
    uint32_t type;          /* ggml type id: 0 F32, 1 F16, 30 BF16, or any type the model
                               computes with (a quantised type's blocks as in GGUF) */
    int32_t n_dims;         /* 1..4 */
    int64_t ne[4];          /* ne[0] is the contiguous dimension (a C/numpy array's last axis) */
    const void *data;       /* copied by the call */
    size_t n_bytes;
} invar_tensor;

/* Replaces weights of the engine's model while it runs (an RL trainer's new policy). Each
 * tensor must have the shape of the one it replaces; its type may differ. All or nothing: on
 * an error (unknown name, wrong shape, size or type: message in err) nothing changes. After
 * it the engine computes exactly as an engine on a model file holding those weights: the
 * prefix cache is emptied and every running request gives back its KV and is queued again,
 * to recompute its prompt and the tokens generated so far with the new weights (those tokens
 * and their logprobs stay as they were sampled). rope_freqs.weight cannot be replaced. The
 * device's copy of the weights is made anew (on CUDA an upload, the old copy freed after).
 * The model must not be in use elsewhere meanwhile (another engine, invar_score); another
 * engine on the same model would keep stale caches. Returns 0, or -1. */
int invar_engine_update_weights(invar_engine *e, const invar_tensor *tensors, size_t n, char *err, size_t errlen);
/* invar_engine_update_weights with every weight the model computes with, from a GGUF file of
 * the same architecture and shapes (its other tensors are ignored). */
int invar_engine_load_weights(invar_engine *e, const char *path, char *err, size_t errlen);

/* Result so far of a request (finish == NONE while running); 0, or -1 for an unknown id. */
int invar_engine_result(invar_engine *e, int64_t request_id, invar_result *out);
/* Forgets a finished request and frees its result. */
void invar_engine_release(invar_engine *e, int64_t request_id);

#ifdef __cplusplus
}
#endif
#endif
