/* libFuzzer invariance target (SQLite's "fuzzinvariants" idea): the input bytes choose a
 * serving scenario on a tiny generated model, and the property is the engine's guarantee:
 * every request's result (finish reason, token ids, logprobs and top alternatives, bit for
 * bit) equals the same request's result run alone. It aborts on the first difference.
 *
 * The bytes choose: thread count (1-3), sequences per step, tokens per step (1-64: how
 * prompts are cut into prefill chunks), the KV budget (down to the largest request's need,
 * which forces preemption and recompute), the prefix cache on or off, and the requests:
 * prompts of 1-40 token ids (fresh, a duplicate of an earlier request, or an earlier prompt's
 * prefix plus fresh ids, for prefix-cache hits), 1-4 new tokens, greedy or sampled (top-k,
 * top-p, min-p, seeds), top logprobs, ignore-EOS, and when each arrives (arrival order, and
 * 0-3 engine steps before it is submitted).
 *
 * Model: $INVAR_FUZZ_MODEL, else <build dir>/tiny_llama_q8_0.gguf, which scripts/test.sh
 * writes once with tools/make_tiny_model.py (--arch llama --type Q8_0). Solo results are
 * computed on one engine (1 thread, 1 sequence per step, no prefix cache) and kept, so an
 * input mostly costs its batched run.
 *
 * Negative control: INVAR_FUZZ_NEGATIVE_CONTROL=attention (the attention split follows the
 * tokens in the forward) or =draw (a row's draw follows its place in the step) makes every
 * engine of the run, solo and batched, that non-invariant variant; the property must then
 * fail on the seed corpus (scripts/test.sh checks that it does). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine_testing.h"
#include "invar.h"

#define MAX_REQS 6
#define MAX_PROMPT 40
#define MAX_NEW 4
#define CACHE_SLOTS 4096

static invar_model *g_model;
static invar_engine *g_solo;
static int32_t g_vocab;
static const char *g_control; /* INVAR_FUZZ_NEGATIVE_CONTROL, or NULL */

static invar_engine *engine(const invar_engine_config *c) {
    char err[256];
    invar_engine *e;
    if (invar_engine_create(g_model, c, &e, err, sizeof err)) {
        fprintf(stderr, "fuzz_invariance: %s\n", err);
        abort();
    }
    struct backend *be = invar_engine_testing_backend(e);
    if (g_control && !strcmp(g_control, "attention")) backend_cpu_set_attention(be, ATTN_SPLIT_BY_BATCH);
    else if (g_control && !strcmp(g_control, "draw")) backend_cpu_set_draw_by_row(be, true);
    else if (g_control && *g_control) {
        fprintf(stderr, "fuzz_invariance: INVAR_FUZZ_NEGATIVE_CONTROL must be attention or draw\n");
        abort();
    }
    return e;
}

typedef struct {
    int32_t prompt[MAX_PROMPT];
    int64_t n_prompt;
    invar_sampling s;
} request;

typedef struct {
    invar_finish finish;
    int64_t n;
    invar_token_info tok[MAX_NEW];
} outcome;

/* Solo results by request, open addressing on a hash of the request's bytes. */
typedef struct {
    int used;
    request r;
    outcome o;
} cache_slot;
static cache_slot *g_cache;

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t request_hash(const request *r) {
    uint64_t h = hash_bytes(r->prompt, sizeof(int32_t) * (size_t)r->n_prompt, 0xcbf29ce484222325ULL);
    h = hash_bytes(&r->s.max_tokens, sizeof r->s.max_tokens, h);
    h = hash_bytes(&r->s.temperature, sizeof r->s.temperature, h);
    h = hash_bytes(&r->s.top_k, sizeof r->s.top_k, h);
    h = hash_bytes(&r->s.top_p, sizeof r->s.top_p, h);
    h = hash_bytes(&r->s.min_p, sizeof r->s.min_p, h);
    h = hash_bytes(&r->s.seed, sizeof r->s.seed, h);
    h = hash_bytes(&r->s.top_logprobs, sizeof r->s.top_logprobs, h);
    return hash_bytes(&r->s.ignore_eos, sizeof r->s.ignore_eos, h);
}

static int same_request(const request *a, const request *b) {
    return a->n_prompt == b->n_prompt && !memcmp(a->prompt, b->prompt, sizeof(int32_t) * (size_t)a->n_prompt) &&
           a->s.max_tokens == b->s.max_tokens && a->s.temperature == b->s.temperature && a->s.top_k == b->s.top_k &&
           a->s.top_p == b->s.top_p && a->s.min_p == b->s.min_p && a->s.seed == b->s.seed &&
           a->s.top_logprobs == b->s.top_logprobs && a->s.ignore_eos == b->s.ignore_eos;
}

static void read_outcome(invar_engine *e, int64_t id, outcome *o) {
    invar_result r;
    if (invar_engine_result(e, id, &r) || r.n_tokens > MAX_NEW) {
        fprintf(stderr, "fuzz_invariance: bad result for request %lld\n", (long long)id);
        abort();
    }
    memset(o, 0, sizeof *o);
    o->finish = r.finish;
    o->n = r.n_tokens;
    for (int64_t t = 0; t < r.n_tokens; t++) {
        const invar_token_info *in = &r.tokens[t];
        o->tok[t].token = in->token;
        o->tok[t].logprob = in->logprob;
        o->tok[t].n_top = in->n_top;
        for (int32_t k = 0; k < in->n_top && k < INVAR_MAX_TOP_LOGPROBS; k++) {
            o->tok[t].top_ids[k] = in->top_ids[k];
            o->tok[t].top_logprobs[k] = in->top_logprobs[k];
        }
    }
}

/* Runs every request to the end; aborts if the engine fails or stops making progress. */
static void drain(invar_engine *e) {
    for (int steps = 0;; steps++) {
        const int left = invar_engine_step(e);
        if (left == 0) return;
        if (left < 0 || steps > 100000) {
            fprintf(stderr, "fuzz_invariance: engine step failed or stalled: %s\n", invar_engine_error(e));
            abort();
        }
    }
}

static const outcome *solo(const request *r) {
    uint64_t i = request_hash(r) % CACHE_SLOTS;
    for (int probe = 0; probe < CACHE_SLOTS && g_cache[i].used; probe++, i = (i + 1) % CACHE_SLOTS)
        if (same_request(&g_cache[i].r, r)) return &g_cache[i].o;
    if (g_cache[i].used) memset(g_cache, 0, sizeof(cache_slot) * CACHE_SLOTS); /* full: start over */
    i = request_hash(r) % CACHE_SLOTS;
    const int64_t id = invar_engine_submit(g_solo, r->prompt, r->n_prompt, &r->s);
    if (id < 0) abort();
    drain(g_solo);
    g_cache[i].used = 1;
    g_cache[i].r = *r;
    read_outcome(g_solo, id, &g_cache[i].o);
    invar_engine_release(g_solo, id);
    return &g_cache[i].o;
}

static int same_outcome(const outcome *a, const outcome *b) {
    if (a->finish != b->finish || a->n != b->n) return 0;
    for (int64_t t = 0; t < a->n; t++) {
        const invar_token_info *x = &a->tok[t], *y = &b->tok[t];
        if (x->token != y->token || memcmp(&x->logprob, &y->logprob, sizeof x->logprob) || x->n_top != y->n_top)
            return 0;
        if (memcmp(x->top_ids, y->top_ids, sizeof(int32_t) * (size_t)x->n_top) ||
            memcmp(x->top_logprobs, y->top_logprobs, sizeof(float) * (size_t)x->n_top))
            return 0;
    }
    return 1;
}

/* The input, read a byte at a time; 0 once it runs out. */
typedef struct {
    const uint8_t *p;
    size_t n, at;
} bytes;
static unsigned next(bytes *b) { return b->at < b->n ? b->p[b->at++] : 0u; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *env = getenv("INVAR_FUZZ_MODEL");
    char path[4096], err[256];
    if (env && *env) snprintf(path, sizeof path, "%s", env);
    else snprintf(path, sizeof path, "%s/tiny_llama_q8_0.gguf", INVAR_BINARY_DIR);
    if (invar_model_load(path, &g_model, err, sizeof err)) {
        fprintf(stderr,
                "fuzz_invariance: cannot load %s: %s\n(write it with: python tools/make_tiny_model.py --arch llama "
                "--type Q8_0 --out %s, or set INVAR_FUZZ_MODEL)\n",
                path, err, path);
        abort();
    }
    g_vocab = invar_model_n_vocab(g_model);
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.n_threads = 1;
    c.max_batch = 1;
    c.kv_blocks = 64;
    c.no_prefix_cache = true;
    g_control = getenv("INVAR_FUZZ_NEGATIVE_CONTROL");
    g_cache = calloc(CACHE_SLOTS, sizeof *g_cache);
    if (!g_cache) abort();
    g_solo = engine(&c);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bytes in = {data, size, 0};
    invar_engine_config c;
    invar_engine_config_default(&c);
    c.n_threads = 1 + (int32_t)(next(&in) % 3);
    c.max_batch = 1 + (int32_t)(next(&in) % 8);
    c.max_batch_tokens = 1 + (int32_t)(next(&in) % 64);
    const unsigned kv = next(&in), flags = next(&in);
    c.no_prefix_cache = flags & 1;
    const int n_reqs = 1 + (int)(next(&in) % MAX_REQS);
    request reqs[MAX_REQS];
    int delay[MAX_REQS];
    int64_t need = 1;
    for (int i = 0; i < n_reqs; i++) {
        request *r = &reqs[i];
        const unsigned kind = next(&in), len = 1 + next(&in) % MAX_PROMPT;
        const int from = i ? (int)(next(&in) % (unsigned)i) : 0;
        if (i && kind % 4 == 1) { /* a duplicate of an earlier request */
            *r = reqs[from];
        } else {
            r->n_prompt = 0;
            if (i && kind % 4 == 2) { /* an earlier prompt's prefix, then fresh ids */
                const int64_t keep = (int64_t)(next(&in) % (unsigned)reqs[from].n_prompt) + 1;
                memcpy(r->prompt, reqs[from].prompt, sizeof(int32_t) * (size_t)keep);
                r->n_prompt = keep;
            }
            while (r->n_prompt < (int64_t)len) {
                const unsigned id = next(&in) | next(&in) << 8;
                r->prompt[r->n_prompt++] = (int32_t)(id % (unsigned)g_vocab);
            }
            invar_sampling_default(&r->s);
            const unsigned s = next(&in);
            static const float temps[] = {0.0f, 0.7f, 1.3f, 0.0f};
            r->s.max_tokens = 1 + (int32_t)(kind / 4 % MAX_NEW);
            r->s.temperature = temps[s & 3];
            r->s.top_k = s & 4 ? 5 : 0;
            r->s.top_p = s & 8 ? 0.9f : 1.0f;
            r->s.min_p = s & 16 ? 0.05f : 0.0f;
            r->s.ignore_eos = s & 32;
            r->s.top_logprobs = (int32_t)(s >> 6);
            r->s.seed = next(&in);
        }
        delay[i] = (int)(kind / 16 % 4);
        const int64_t blocks = (r->n_prompt + r->s.max_tokens + 15) / 16;
        need = blocks > need ? blocks : need;
    }
    /* KV: plenty, or from the largest request's need up (preemption and recompute). */
    c.kv_blocks = kv % 4 == 0 ? 256 : need + (int64_t)(kv / 4 % 8);

    invar_engine *e = engine(&c);
    int64_t ids[MAX_REQS];
    for (int i = 0; i < n_reqs; i++) {
        for (int k = 0; k < delay[i]; k++)
            if (invar_engine_step(e) < 0) abort();
        ids[i] = invar_engine_submit(e, reqs[i].prompt, reqs[i].n_prompt, &reqs[i].s);
        if (ids[i] < 0) abort();
    }
    drain(e);
    for (int i = 0; i < n_reqs; i++) {
        outcome got;
        read_outcome(e, ids[i], &got);
        const outcome *want = solo(&reqs[i]);
        if (!same_outcome(&got, want)) {
            fprintf(stderr,
                    "fuzz_invariance: request %d (%lld prompt tokens, T=%g) differs from its solo run "
                    "(threads %d, max_batch %d, max_batch_tokens %d, kv_blocks %lld, prefix cache %s)\n",
                    i, (long long)reqs[i].n_prompt, (double)reqs[i].s.temperature, c.n_threads, c.max_batch,
                    c.max_batch_tokens, (long long)c.kv_blocks, c.no_prefix_cache ? "off" : "on");
            abort();
        }
    }
    invar_engine_stats st;
    invar_engine_get_stats(e, &st);
    if (getenv("INVAR_FUZZ_VERBOSE"))
        fprintf(stderr,
                "fuzz_invariance: %d requests, threads %d, max_batch %d, max_batch_tokens %d, kv_blocks %lld, "
                "prefix cache %s: %lld preemptions, %lld prefix blocks hit, all equal to solo\n",
                n_reqs, c.n_threads, c.max_batch, c.max_batch_tokens, (long long)c.kv_blocks,
                c.no_prefix_cache ? "off" : "on", (long long)st.preemptions, (long long)st.prefix_blocks_hit);
    if (st.kv_blocks_free != st.kv_blocks_total) {
        fprintf(stderr, "fuzz_invariance: %lld of %lld KV blocks not returned\n",
                (long long)(st.kv_blocks_total - st.kv_blocks_free), (long long)st.kv_blocks_total);
        abort();
    }
    invar_engine_free(e);
    return 0;
}
