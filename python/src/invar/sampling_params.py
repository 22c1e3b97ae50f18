"""SamplingParams: the per-request sampling fields, named as in vLLM's offline API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

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
        presence_penalty, frequency_penalty: subtracted from the logit of each token already
            generated (once, and once per occurrence), in [-2, 2]; 0 = off.
        repetition_penalty: divides positive / multiplies negative logits of tokens of the
            prompt and the output, in (0, 10]; 1 = off.
        min_tokens: no end-of-generation or stop token before this many tokens.
        stop_token_ids: sampling one of these (at most 16) finishes the request.
        logit_bias: token id -> bias in [-100, 100] added to its logit (at most 256).
        Each of these reads only the request's own tokens, so it is batch-invariant like the
        rest; reported logprobs stay those of the raw logits.
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
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    stop_token_ids: List[int] = field(default_factory=list)
    logit_bias: Dict[int, float] = field(default_factory=dict)

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
        s.presence_penalty = float(self.presence_penalty)
        s.frequency_penalty = float(self.frequency_penalty)
        s.repetition_penalty = float(self.repetition_penalty)
        s.min_tokens = int(self.min_tokens)
        stops = list(self.stop_token_ids or [])
        if len(stops) > _lib.MAX_STOP_TOKEN_IDS:
            raise ValueError(f"at most {_lib.MAX_STOP_TOKEN_IDS} stop_token_ids, got {len(stops)}")
        s.n_stop_token_ids = len(stops)
        for i, t in enumerate(stops):
            s.stop_token_ids[i] = int(t)
        bias = dict(self.logit_bias or {})
        if len(bias) > _lib.MAX_LOGIT_BIAS:
            raise ValueError(f"at most {_lib.MAX_LOGIT_BIAS} logit_bias entries, got {len(bias)}")
        s.n_logit_bias = len(bias)
        for i, (t, b) in enumerate(bias.items()):
            s.logit_bias[i].token = int(t)
            s.logit_bias[i].bias = float(b)
        return s
