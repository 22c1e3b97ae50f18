"""Result types of LLM.generate, in the shape of vLLM's offline API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Logprob:
    """One token's log-probability at one position.

    logprob is the log-softmax of the raw logits (temperature 1, no truncation) as the engine's
    float32, widened exactly to a Python float; rank is its 1-based place among the reported
    alternatives (None when it is not among them)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One generated sequence.

    Attributes:
        index: its index among the request's outputs (always 0: one output per request).
        text: the generated text (a final end-of-generation token is not included).
        token_ids: the generated token ids (a final end-of-generation token included).
        token_logprobs: the logprob of each generated token, as floats: bitwise the engine's
            float32 values, equal to what ``LLM.score`` returns for the same tokens.
        logprobs: per generated token, a dict token id -> Logprob holding the chosen token and
            the top ``SamplingParams.logprobs`` alternatives (vLLM's shape).
        cumulative_logprob: the sum of token_logprobs.
        finish_reason: "stop" (end-of-generation token), "length" (max_tokens or the context
            limit) or "cancelled".
    """

    index: int
    text: str
    token_ids: List[int]
    token_logprobs: List[float]
    logprobs: List[Dict[int, Logprob]]
    cumulative_logprob: float
    finish_reason: str


@dataclass
class RequestOutput:
    """The result of one prompt.

    Attributes:
        request_id: the engine's id of the request, as a string.
        prompt: the prompt text, or None when token ids were given.
        prompt_token_ids: the prompt's tokens (BOS included when the model adds one).
        prompt_logprobs: with SamplingParams.prompt_logprobs, None for the first prompt token
            and then each prompt token's logprob given the tokens before it; else None.
        outputs: one CompletionOutput.
        finished: always True for LLM.generate's results.
    """

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[float]]]
    outputs: List[CompletionOutput] = field(default_factory=list)
    finished: bool = True
