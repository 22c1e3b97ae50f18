"""invar: a batch-invariant LLM inference engine (Python binding of the C library).

A request's token ids and logprobs are bitwise the same whatever else runs beside it, and
``LLM.score`` returns bitwise the logprobs ``LLM.generate`` reported for the same tokens.
See docs/python.md."""

from .errors import InvarError
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "InvarError"]
__version__ = "0.1.0"
