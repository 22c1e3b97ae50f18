"""SamplingParams: the per-request sampling fields, named as in vLLM's offline API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import _lib


@dataclass
class SamplingParams:
    """How one request is sampled.

    Attributes:
        temperature: 0 for greedy decoding (argmax, lowest id on ties); > 0 samples.
        top_p: nucleus sampling mass, 1.0 = off.
        top_k: keep the k most likely tokens, 0 (or -1, as in vLLM) = off.
        min_p: drop tokens below min_p times the top probability, 0 = off.
        seed: the random draw for the token at position p is a pure function of (seed, p), so
            two requests with the same prompt and seed sample the same tokens. None means 0.
            Give each sample of a group its own seed to get different completions.
        max_tokens: the most tokens to generate (> 0).
        logprobs: how many top alternatives to report per token (0..20); the chosen token's
            logprob is always reported. None = 0.
        prompt_logprobs: also report the logprob of every prompt token from position 1.
        ignore_eos: keep generating past end-of-generation tokens.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    max_tokens: int = 16
    logprobs: Optional[int] = None
    prompt_logprobs: bool = False
    ignore_eos: bool = False

    def _to_c(self) -> _lib.Sampling:
        s = _lib.Sampling()
        _lib.lib.invar_sampling_default(s)
        if not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        n_top = 0 if self.logprobs is None else int(self.logprobs)
        if not 0 <= n_top <= _lib.MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must be 0..{_lib.MAX_TOP_LOGPROBS}, got {self.logprobs!r}")
        seed = 0 if self.seed is None else int(self.seed)
        if not 0 <= seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed!r}")
        s.max_tokens = self.max_tokens
        s.temperature = float(self.temperature)
        s.top_p = float(self.top_p)
        s.top_k = 0 if self.top_k in (None, -1) else int(self.top_k)
        s.min_p = float(self.min_p)
        s.seed = seed
        s.top_logprobs = n_top
        s.prompt_logprobs = bool(self.prompt_logprobs)
        s.ignore_eos = bool(self.ignore_eos)
        return s
