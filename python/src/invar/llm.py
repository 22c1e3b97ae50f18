"""LLM: a model and an engine, with vLLM's offline API (generate, chat) plus scoring."""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _lib
from .errors import InvarError
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams
from .weights import tensor_records

Prompt = Union[str, Sequence[int], Mapping[str, Any]]
"""A prompt: text (tokenized with BOS and special tokens), a list of token ids, or a dict
{"prompt": text} / {"prompt_token_ids": [...]} as in vLLM."""

Message = Mapping[str, str]

_FINISH = {_lib.FINISH_STOP: "stop", _lib.FINISH_LENGTH: "length", _lib.FINISH_CANCELLED: "cancelled"}


class LLM:
    """A model loaded into one invar engine.

    Args:
        model: a GGUF file or a Hugging Face model directory.
        device: "cpu" or "cuda" (a build with the CUDA backend and an sm_90 GPU).
        threads: CPU worker threads; None = every online CPU. The results do not depend on it.
        max_batch: sequences per engine step.
        max_batch_tokens: tokens per forward (decodes plus prefill chunks).
        max_model_len: per-sequence context limit; None = the model's.
        kv_cache_mb: KV-cache memory budget in MiB.
        enable_prefix_caching: reuse the KV of shared prompt prefixes (never changes a bit).
        cuda_device: the GPU ordinal for device="cuda".
        kv_cache_dtype: "float32" or "float16": the CPU KV cache's elements. float16 holds twice
            the tokens in kv_cache_mb; each K/V value is rounded to f16 once when stored, so
            results stay batch-invariant (they differ from float32's by that rounding).

    Raises:
        InvarError: the model or engine could not be set up (the engine's message).
    """

    def __init__(self, model: str, device: str = "cpu", threads: Optional[int] = None, max_batch: int = 16,
                 max_batch_tokens: int = 512, max_model_len: Optional[int] = None, kv_cache_mb: int = 1024,
                 enable_prefix_caching: bool = True, cuda_device: int = 0,
                 kv_cache_dtype: str = "float32") -> None:
        self._model: Optional[int] = None
        self._engine: Optional[int] = None
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        kv_types = {"float32": _lib.KV_F32, "float16": _lib.KV_F16}
        if kv_cache_dtype not in kv_types:
            raise ValueError(f"kv_cache_dtype must be 'float32' or 'float16', got {kv_cache_dtype!r}")
        err = _lib.ErrBuf()
        m = ctypes.c_void_p()
        if _lib.lib.invar_model_load(str(model).encode(), ctypes.byref(m), err, _lib.ERR_LEN) != 0:
            raise InvarError(_lib.err_text(err))
        self._model = m.value
        cfg = _lib.EngineConfig()
        _lib.lib.invar_engine_config_default(cfg)
        cfg.n_threads = 0 if threads is None else int(threads)
        cfg.max_batch = int(max_batch)
        cfg.max_batch_tokens = int(max_batch_tokens)
        cfg.n_ctx = 0 if max_model_len is None else int(max_model_len)
        cfg.kv_mem_mb = int(kv_cache_mb)
        cfg.no_prefix_cache = not enable_prefix_caching
        cfg.device = _lib.DEVICE_CUDA if device == "cuda" else _lib.DEVICE_CPU
        cfg.cuda_device = int(cuda_device)
        cfg.kv_type = kv_types[kv_cache_dtype]
        e = ctypes.c_void_p()
        if _lib.lib.invar_engine_create(self._model, cfg, ctypes.byref(e), err, _lib.ERR_LEN) != 0:
            self.close()
            raise InvarError(_lib.err_text(err))
        self._engine = e.value
        self.device = device

    # ---- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the engine and the model (also done when the object is collected)."""
        if self._engine:
            _lib.lib.invar_engine_free(self._engine)
            self._engine = None
        if self._model:
            _lib.lib.invar_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> int:
        if not self._engine:
            raise InvarError("the LLM is closed")
        return self._engine

    # ---- model facts ------------------------------------------------------------------------
    @property
    def arch(self) -> str:
        """The model's architecture name (e.g. "llama")."""
        self._live()
        return _lib.lib.invar_model_arch(self._model).decode()

    @property
    def vocab_size(self) -> int:
        self._live()
        return int(_lib.lib.invar_model_n_vocab(self._model))

    # ---- tokens and text ------------------------------------------------------------------
    def tokenize(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> List[int]:
        """Token ids of text; add_special_tokens adds BOS when the model asks for one."""
        self._live()
        raw = text.encode("utf-8")
        cap = len(raw) + 8
        while True:
            buf = (ctypes.c_int32 * cap)()
            n = _lib.lib.invar_tokenize(self._model, raw, len(raw), add_special_tokens, parse_special, buf, cap)
            if n < 0:
                raise InvarError("tokenize failed")
            if n <= cap:
                return list(buf[:n])
            cap = n

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token."""
        self._live()
        buf = ctypes.create_string_buffer(64)
        n = _lib.lib.invar_token_bytes(self._model, int(token_id), buf, 64)
        if n < 0:
            raise InvarError(f"token id {token_id} is out of range")
        if n > 64:
            buf = ctypes.create_string_buffer(n)
            _lib.lib.invar_token_bytes(self._model, int(token_id), buf, n)
        return buf.raw[:n]

    def _piece(self, token_id: int) -> str:
        return self.token_bytes(token_id).decode("utf-8", "replace")

    def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of token ids (bytes concatenated, invalid UTF-8 replaced); skip_special_tokens
        drops end-of-generation tokens."""
        parts = [self.token_bytes(t) for t in token_ids
                 if not (skip_special_tokens and _lib.lib.invar_token_is_eog(self._model, int(t)))]
        return b"".join(parts).decode("utf-8", "replace")

    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                            tokenize: bool = False) -> Union[str, List[int]]:
        """Renders a conversation with the model's chat template.

        With tokenize=True returns token ids, where special tokens are parsed only in the
        template's own markup (a message's content cannot forge a turn); else the text."""
        self._live()
        arr, keep = self._messages(messages)
        err = _lib.ErrBuf()
        if not tokenize:
            p = _lib.lib.invar_chat_render(self._model, arr, len(messages), add_generation_prompt, err, _lib.ERR_LEN)
            if not p:
                raise InvarError(_lib.err_text(err))
            text = ctypes.string_at(p).decode("utf-8", "replace")
            _lib.lib.invar_free(p)
            return text
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_int64()
        rc = _lib.lib.invar_chat_tokenize(self._model, arr, len(messages), add_generation_prompt, ctypes.byref(ids),
                                          ctypes.byref(n), None, err, _lib.ERR_LEN)
        if rc != 0:
            raise InvarError(_lib.err_text(err))
        out = list(ids[:n.value])
        _lib.lib.invar_free(ids)
        del keep
        return out

    @staticmethod
    def _messages(messages: Sequence[Message]) -> "tuple[ctypes.Array, list]":
        keep = []
        arr = (_lib.ChatMessage * max(1, len(messages)))()
        for i, msg in enumerate(messages):
            role, content = msg.get("role"), msg.get("content")
            if not isinstance(role, str) or not isinstance(content, str):
                raise ValueError(f"message {i}: role and content must be strings")
            r, c = role.encode(), content.encode()
            keep += [r, c]
            arr[i].role, arr[i].content = r, c
        return arr, keep

    # ---- generation -------------------------------------------------------------------------
    def _prompt_ids(self, p: Prompt) -> "tuple[Optional[str], List[int]]":
        if isinstance(p, str):
            return p, self.tokenize(p)
        if isinstance(p, Mapping):
            if "prompt_token_ids" in p:
                return None, [int(t) for t in p["prompt_token_ids"]]
            if "prompt" in p:
                return p["prompt"], self.tokenize(p["prompt"])
            raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
        return None, [int(t) for t in p]

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None) -> List[RequestOutput]:
        """Generates a completion for each prompt, all in one engine batch.

        Args:
            prompts: one prompt or a list of them (text, token-id lists, or vLLM prompt dicts).
            sampling_params: one SamplingParams for every prompt, or a list with one per prompt;
                None = SamplingParams().

        Returns:
            One RequestOutput per prompt, in order. A request's tokens and logprobs are bitwise
            the same whatever else is in the batch.

        Raises:
            InvarError: a request was refused (the engine's message, e.g. a prompt over the
                context or bad sampling parameters), or the engine failed.
        """
        plist = self._prompt_list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(plist)
        else:
            params = list(sampling_params)
            if len(params) != len(plist):
                raise ValueError(f"{len(params)} sampling params for {len(plist)} prompts")
        reqs = [self._prompt_ids(p) for p in plist]
        return self._run(reqs, [sp._to_c() for sp in params])

    def chat(self, messages: Union[Sequence[Message], Sequence[Sequence[Message]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             add_generation_prompt: bool = True) -> List[RequestOutput]:
        """generate() on conversations rendered with the chat template (one or a list of them)."""
        convs = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        ids = [self.apply_chat_template(c, add_generation_prompt, tokenize=True) for c in convs]
        return self.generate(ids, sampling_params)

    @staticmethod
    def _prompt_list(prompts: Union[Prompt, Sequence[Prompt]]) -> List[Prompt]:
        if isinstance(prompts, (str, Mapping)):
            return [prompts]
        prompts = list(prompts)
        if prompts and all(isinstance(t, int) for t in prompts):
            return [prompts]  # one token-id list
        return prompts

    def _submit(self, ids: List[int], s: _lib.Sampling) -> int:
        rid = _lib.lib.invar_engine_submit(self._live(), _lib.int_array(ids), len(ids), s)
        if rid < 0:
            raise InvarError("out of memory submitting a request")
        return int(rid)

    def _run_all(self, ids_list: List[List[int]], cs: List[_lib.Sampling]) -> List[int]:
        """Submits every request, then steps the engine until all are finished."""
        e = self._live()
        rids: List[int] = []
        try:
            for ids, s in zip(ids_list, cs):
                rids.append(self._submit(ids, s))
            while True:
                n = _lib.lib.invar_engine_step(e)
                if n < 0:
                    raise InvarError(_lib.lib.invar_engine_error(e).decode("utf-8", "replace"))
                if n == 0:
                    break
            for rid in rids:
                r = _lib.Result()
                _lib.lib.invar_engine_result(e, rid, r)
                if r.finish == _lib.FINISH_ERROR:
                    raise InvarError((r.error or b"request failed").decode("utf-8", "replace"))
            return rids
        except BaseException:
            for rid in rids:
                _lib.lib.invar_engine_cancel(e, rid)
            while _lib.lib.invar_engine_step(e) > 0:
                pass
            for rid in rids:
                _lib.lib.invar_engine_release(e, rid)
            raise

    def _run(self, reqs: List["tuple[Optional[str], List[int]]"], cs: List[_lib.Sampling]) -> List[RequestOutput]:
        e = self._live()
        rids = self._run_all([ids for _, ids in reqs], cs)
        outs = []
        try:
            for (text, ids), s, rid in zip(reqs, cs, rids):
                r = _lib.Result()
                _lib.lib.invar_engine_result(e, rid, r)
                outs.append(self._output(rid, text, ids, s, r))
        finally:
            for rid in rids:
                _lib.lib.invar_engine_release(e, rid)
        return outs

    def _output(self, rid: int, text: Optional[str], ids: List[int], s: _lib.Sampling,
                r: _lib.Result) -> RequestOutput:
        toks = [r.tokens[i] for i in range(r.n_tokens)]
        token_ids = [t.token for t in toks]
        token_lps = [t.logprob for t in toks]
        lps: List[Dict[int, Logprob]] = []
        for t in toks:
            d = {t.top_ids[j]: Logprob(t.top_logprobs[j], j + 1, self._piece(t.top_ids[j])) for j in range(t.n_top)}
            if t.token not in d:
                d[t.token] = Logprob(t.logprob, None, self._piece(t.token))
            lps.append(d)
        shown = token_ids
        if r.finish == _lib.FINISH_STOP and shown and _lib.lib.invar_token_is_eog(self._model, shown[-1]):
            shown = shown[:-1]
        prompt_lps: Optional[List[Optional[float]]] = None
        if s.prompt_logprobs:
            prompt_lps = [None] + [r.prompt_logprobs[i] for i in range(r.n_prompt_logprobs)]
        comp = CompletionOutput(index=0, text=self.detokenize(shown, skip_special_tokens=False), token_ids=token_ids,
                                token_logprobs=token_lps, logprobs=lps, cumulative_logprob=float(sum(token_lps)),
                                finish_reason=_FINISH.get(r.finish, "error"))
        return RequestOutput(request_id=str(rid), prompt=text, prompt_token_ids=list(ids), prompt_logprobs=prompt_lps,
                             outputs=[comp])

    # ---- scoring ------------------------------------------------------------------------------
    def score(self, prompts: Union[Prompt, Sequence[Prompt]],
              continuations: Union[Sequence[int], Sequence[Sequence[int]]]) -> List[List[float]]:
        """The logprob of each continuation token after its prompt and the tokens before it.

        All pairs run in one engine batch (each as a prompt-logprobs request). The values are
        bitwise those LLM.generate reports when it samples the same tokens: the sampler's and a
        trainer's logprobs agree exactly.

        Args:
            prompts: one prompt or a list (as for generate).
            continuations: token ids, one list per prompt (for one prompt, a flat list works).

        Returns:
            One list of floats per prompt, len(continuation) each.
        """
        plist = self._prompt_list(prompts)
        conts = list(continuations)
        if conts and all(isinstance(t, int) for t in conts):
            conts = [conts]
        if len(conts) != len(plist):
            raise ValueError(f"{len(conts)} continuations for {len(plist)} prompts")
        ids_list, cs, n_cont = [], [], []
        for p, c in zip(plist, conts):
            _, ids = self._prompt_ids(p)
            c = [int(t) for t in c]
            if not ids:
                raise ValueError("score: a prompt needs at least one token")
            s = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=True)._to_c()
            ids_list.append(ids + c)
            cs.append(s)
            n_cont.append(len(c))
        e = self._live()
        rids = self._run_all(ids_list, cs)
        out = []
        try:
            for rid, n in zip(rids, n_cont):
                r = _lib.Result()
                _lib.lib.invar_engine_result(e, rid, r)
                total = r.n_prompt_logprobs
                out.append([r.prompt_logprobs[i] for i in range(total - n, total)])
        finally:
            for rid in rids:
                _lib.lib.invar_engine_release(e, rid)
        return out

    # ---- weight updates ---------------------------------------------------------------
    def update_weights(self, weights: Mapping[str, Any]) -> None:
        """Replaces weights of the live model, by GGUF tensor name (e.g. "blk.0.attn_q.weight",
        "token_embd.weight"), without restarting.

        Args:
            weights: name -> numpy array or torch tensor in numpy's axis order (a matrix as
                [out_features, in_features], as GGUF stores it), float32, float16 or (torch)
                bfloat16, with the shape of the tensor it replaces. The type may differ from
                the model file's: a quantised model takes float weights.

        Afterwards the engine computes bitwise what an engine on a model file holding those
        weights computes: the prefix cache is emptied, and requests still running (from other
        threads) recompute their KV with the new weights. All or nothing: on an error nothing
        changes.

        Raises:
            InvarError: an unknown name, wrong shape or type (the engine's message).
        """
        recs, keep = tensor_records(weights)
        err = _lib.ErrBuf()
        if _lib.lib.invar_engine_update_weights(self._live(), recs, len(weights), err, _lib.ERR_LEN) != 0:
            raise InvarError(_lib.err_text(err))
        del keep

    def load_weights(self, path: str) -> None:
        """update_weights with every weight of a GGUF file of the same architecture and shapes."""
        err = _lib.ErrBuf()
        if _lib.lib.invar_engine_load_weights(self._live(), str(path).encode(), err, _lib.ERR_LEN) != 0:
            raise InvarError(_lib.err_text(err))

    def stats(self) -> Dict[str, int]:
        """The engine's counters (KV blocks, prefix-cache hits, preemptions, tokens)."""
        st = _lib.EngineStats()
        _lib.lib.invar_engine_get_stats(self._live(), st)
        return {name: getattr(st, name) for name, _ in _lib.EngineStats._fields_}
