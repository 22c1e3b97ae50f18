"""llama.cpp through llama-cpp-python's low-level bindings: the model and context set-up
shared by the benchmarks and scripts/logit_error.py, so every comparison uses one
configuration (quiet log, flash attention on, no perf counters)."""
import ctypes

_QUIET = []


def load_model(path):
    """(llama_cpp module, model) for a GGUF file; llama.cpp's log is silenced."""
    import llama_cpp as L
    if not _QUIET:   # a no-op log callback, kept alive for the life of the process
        _QUIET.append(L.llama_log_callback(lambda level, text, user: None))
    L.llama_log_set(_QUIET[0], ctypes.c_void_p(0))
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    if not model:
        raise RuntimeError(f"llama.cpp cannot load {path}")
    return L, model


def new_context(L, model, threads, n_ctx, n_batch, n_seq, kv_unified=False):
    """A context with n_seq sequences (each in its own KV stream unless kv_unified), the
    same thread count for batch and single-token work, flash attention on."""
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = cp.n_ubatch = n_batch
    cp.n_seq_max = n_seq
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cp.kv_unified = kv_unified
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise RuntimeError("llama.cpp context creation failed")
    return ctx


def n_vocab(L, model):
    return L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))


def fill_batch(batch, entries):
    """entries: (token, position, sequence id, want logits) per batch slot."""
    for i, (tok, pos, seq, want) in enumerate(entries):
        batch.token[i] = tok
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = 1 if want else 0
    batch.n_tokens = len(entries)
