"""ctypes declarations of include/invar.h and the loading of libinvar.so.

The structures mirror the C header field by field: a change to a struct in invar.h must be
made here too."""

from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint64, c_void_p)
from pathlib import Path

MAX_TOP_LOGPROBS = 20

FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_ERROR, FINISH_CANCELLED = range(5)
DEVICE_CPU, DEVICE_CUDA = 0, 1
KV_F32, KV_F16 = 0, 1  # invar_kv_type
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


MAX_LOGIT_BIAS = 256
MAX_STOP_TOKEN_IDS = 16


class LogitBias(Structure):
    _fields_ = [("token", c_int32), ("bias", c_float)]


# Mirrors invar_sampling in include/invar.h, field for field.
class Sampling(Structure):
    _fields_ = [("max_tokens", c_int32), ("temperature", c_float), ("top_k", c_int32), ("top_p", c_float),
                ("min_p", c_float), ("seed", c_uint64), ("top_logprobs", c_int32), ("ignore_eos", c_bool),
                ("presence_penalty", c_float), ("frequency_penalty", c_float), ("repetition_penalty", c_float),
                ("min_tokens", c_int32), ("n_stop_token_ids", c_int32),
                ("stop_token_ids", c_int32 * MAX_STOP_TOKEN_IDS), ("n_logit_bias", c_int32),
                ("logit_bias", LogitBias * MAX_LOGIT_BIAS), ("prompt_logprobs", c_bool), ("speculate", c_int),
                ("spec_tokens", c_int32)]


class EngineConfig(Structure):
    _fields_ = [("n_threads", c_int32), ("max_batch", c_int32), ("max_batch_tokens", c_int32), ("n_ctx", c_int32),
                ("kv_mem_mb", c_int64), ("kv_blocks", c_int64), ("no_prefix_cache", c_bool), ("device", c_int),
                ("cuda_device", c_int32), ("cuda_gemm_cublas", c_bool), ("cuda_no_graphs", c_bool),
                ("draft_model", c_void_p), ("spec_step_tokens", c_int32), ("kv_type", c_int)]


class TokenInfo(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float), ("n_top", c_int32),
                ("top_ids", c_int32 * MAX_TOP_LOGPROBS), ("top_logprobs", c_float * MAX_TOP_LOGPROBS)]


class Result(Structure):
    _fields_ = [("finish", c_int), ("error", c_char_p), ("n_tokens", c_int64), ("tokens", POINTER(TokenInfo)),
                ("n_prompt", c_int64), ("n_prompt_logprobs", c_int64), ("prompt_logprobs", POINTER(c_float)),
                ("prompt_top", POINTER(TokenInfo)), ("n_cached_prompt", c_int64)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class Tensor(Structure):
    _fields_ = [("name", c_char_p), ("type", ctypes.c_uint32), ("n_dims", c_int32), ("ne", c_int64 * 4),
                ("data", c_void_p), ("n_bytes", c_size_t)]


class EngineStats(Structure):
    _fields_ = [(name, c_int64) for name in (
        "n_queued", "n_running", "kv_blocks_total", "kv_blocks_free", "prefix_blocks_hit",
        "prefix_blocks_looked_up", "preemptions", "tokens_computed", "tokens_generated", "spec_steps",
        "spec_drafted", "spec_accepted")]


ERR_LEN = 512
ErrBuf = c_char * ERR_LEN

# name: (restype, argtypes)
_SIGNATURES = {
    "invar_model_load": (c_int, [c_char_p, POINTER(c_void_p), c_char_p, c_size_t]),
    "invar_model_free": (None, [c_void_p]),
    "invar_model_arch": (c_char_p, [c_void_p]),
    "invar_model_n_vocab": (c_int32, [c_void_p]),
    "invar_model_n_ctx": (c_int32, [c_void_p]),
    "invar_tokenize": (c_int64, [c_void_p, c_char_p, c_size_t, c_bool, c_bool, POINTER(c_int32), c_int64]),
    "invar_token_bytes": (c_int, [c_void_p, c_int32, c_char_p, c_size_t]),
    "invar_token_is_eog": (c_bool, [c_void_p, c_int32]),
    "invar_chat_render": (c_void_p, [c_void_p, POINTER(ChatMessage), c_size_t, c_bool, c_char_p, c_size_t]),
    "invar_chat_tokenize": (c_int, [c_void_p, POINTER(ChatMessage), c_size_t, c_bool, POINTER(POINTER(c_int32)),
                                    POINTER(c_int64), POINTER(c_void_p), c_char_p, c_size_t]),
    "invar_free": (None, [c_void_p]),
    "invar_sampling_default": (None, [POINTER(Sampling)]),
    "invar_engine_config_default": (None, [POINTER(EngineConfig)]),
    "invar_engine_create": (c_int, [c_void_p, POINTER(EngineConfig), POINTER(c_void_p), c_char_p, c_size_t]),
    "invar_engine_free": (None, [c_void_p]),
    "invar_engine_submit": (c_int64, [c_void_p, POINTER(c_int32), c_int64, POINTER(Sampling)]),
    "invar_engine_step": (c_int, [c_void_p]),
    "invar_engine_error": (c_char_p, [c_void_p]),
    "invar_engine_cancel": (c_int, [c_void_p, c_int64]),
    "invar_engine_result": (c_int, [c_void_p, c_int64, POINTER(Result)]),
    "invar_engine_release": (None, [c_void_p, c_int64]),
    "invar_engine_get_stats": (None, [c_void_p, POINTER(EngineStats)]),
    "invar_engine_update_weights": (c_int, [c_void_p, POINTER(Tensor), c_size_t, c_char_p, c_size_t]),
    "invar_engine_load_weights": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t]),
    "invar_engine_score": (c_int, [c_void_p, POINTER(c_int32), c_int64, POINTER(c_int32), c_int64,
                                   POINTER(c_float), c_char_p, c_size_t]),
}


def _library_path() -> str:
    """INVAR_LIBRARY (a path to libinvar.so) if set, else the copy installed with the package."""
    env = os.environ.get("INVAR_LIBRARY")
    if env:
        return env
    return str(Path(__file__).resolve().parent / "libinvar.so")


def _load() -> ctypes.CDLL:
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"invar: cannot load the C library {path}: {e} (set INVAR_LIBRARY to a libinvar.so "
                          "built with cmake --build build --target invar_shared)") from e
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()


def err_text(buf: ctypes.Array) -> str:
    return bytes(buf.value).decode("utf-8", "replace")


def int_array(ids: "list[int]") -> ctypes.Array:
    return (c_int32 * max(1, len(ids)))(*ids)
