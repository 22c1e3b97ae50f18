"""The trainer's side of RL with invar: per-token logprobs whose forward values are invar's
(bitwise the sampler's) and whose gradient comes from the float torch reference.

    from invar.trainer import TorchLlama, sync_weights, token_logprobs
    model = TorchLlama.from_gguf("model-f32.gguf")          # the policy, as torch parameters
    llm = invar.LLM("model-f32.gguf")                       # the sampler
    outs = llm.generate(prompts, params)                    # rollouts, with their logprobs
    lp = token_logprobs(llm, model, prompt_ids, completion_ids)   # == the rollouts' logprobs, bitwise
    loss = -(advantages * torch.exp(lp - lp.detach())).mean(); loss.backward()
    optimizer.step(); sync_weights(llm, model)              # the sampler gets the new policy

Needs torch and gguf."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .errors import InvarError
from .llm import LLM
from .torch_llama import LlamaConfig, TorchLlama

__all__ = ["TorchLlama", "LlamaConfig", "sync_weights", "token_logprobs", "InvarLogprobs"]

_SYNCED = "_invar_synced_version"


def sync_weights(llm: LLM, model: TorchLlama) -> None:
    """Loads the model's current parameters into the live engine (LLM.update_weights)."""
    llm.update_weights(model.gguf_state_dict())
    setattr(model, _SYNCED, (id(llm), model.weights_version()))


class InvarLogprobs(torch.autograd.Function):
    """forward: invar's logprobs (LLM.score) of the continuation tokens, as float32 values;
    backward: the vector-Jacobian product of the torch reference's logprobs (TorchLlama) with
    respect to its parameters. The two forwards are the same function up to float rounding
    (the torch one is not invar's bits), so the gradient is the reference's gradient at those
    weights."""

    @staticmethod
    def forward(ctx: Any, llm: LLM, model: TorchLlama, prompts: Any, conts: Any, *params: torch.Tensor) -> torch.Tensor:
        vals = llm.score(prompts, conts)
        ctx.model, ctx.prompts, ctx.conts = model, prompts, conts
        ctx.n_params = len(params)
        return torch.tensor([x for row in vals for x in row], dtype=torch.float32, device=model.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        params = list(ctx.model.parameters())
        with torch.enable_grad():
            ref = ctx.model.token_logprobs(ctx.prompts, ctx.conts)
            grads = torch.autograd.grad(ref, params, grad_outputs=grad, allow_unused=True)
        return (None, None, None, None, *grads)


def token_logprobs(llm: LLM, model: TorchLlama, prompts: Sequence[Sequence[int]],
                   continuations: Sequence[Sequence[int]]) -> torch.Tensor:
    """Per-token logprobs of each continuation after its prompt, concatenated in order.

    The values are invar's, bitwise equal to the logprobs LLM.generate reported when it
    sampled those tokens with the same weights; the gradient flows to model's parameters
    through the float torch reference.

    Raises:
        InvarError: the engine does not hold the model's current parameters (call
            sync_weights after every optimizer step), or the engine's own errors.
    """
    synced = getattr(model, _SYNCED, None)
    if synced != (id(llm), model.weights_version()):
        raise InvarError("the engine does not hold the model's current weights: call invar.trainer.sync_weights "
                         "(llm, model) after changing them")
    prompts = [list(p) for p in prompts]
    continuations = [list(c) for c in continuations]
    return InvarLogprobs.apply(llm, model, prompts, continuations, *model.parameters())
