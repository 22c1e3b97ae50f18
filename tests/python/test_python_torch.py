"""invar.trainer (docs/python.md): the autograd.Function whose forward is invar's logprobs
and whose backward is the float torch reference's gradient.
  * forward == the logprobs LLM.generate sampled, bitwise (F32 and BF16 weights)
  * the torch reference computes the same function: |reference - invar| < 2e-4 (F32)
  * gradient == the pure torch model's gradient (exactly: the same backward)
  * gradient == central finite differences of invar's own forward along random directions,
    within 2 % (F32 weights, eps 1e-2 of the weights' scale)
  * a stale engine (weights changed without sync_weights) is refused
Skipped when torch is not installed, except under INVAR_REQUIRE_TORCH=1 (scripts/test.sh
installs torch and sets it, so CI cannot skip these silently).

INVAR_TEST_DEVICE=cuda runs the same tests with the engine on the GPU and the torch model on
it too (scripts/cuda_python_run.sh, on a CUDA build): the models get the GPU kernels' head
dim (64); the engine holds bf16 weights there, so the reference tolerance is bf16's and the
finite-difference check (which needs the engine to see an eps-sized change) is CPU-only."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

if os.environ.get("INVAR_REQUIRE_TORCH") == "1":
    import torch  # noqa: F401  (an ImportError here fails the run instead of skipping it)
torch = pytest.importorskip("torch")
pytest.importorskip("gguf")

from invar_pkg import invar  # noqa: E402
from invar.trainer import TorchLlama, sync_weights, token_logprobs  # noqa: E402

PROMPTS = [[1, 504, 358, 282, 3], [1, 77, 88, 99, 100, 101, 7, 8]]
DEVICE = os.environ.get("INVAR_TEST_DEVICE", "cpu")
GPU = DEVICE == "cuda"


def engine(path):
    return invar.LLM(str(path), threads=2, device=DEVICE)


def policy(path, dtype=torch.float32):
    return TorchLlama.from_gguf(str(path), dtype=dtype, device=DEVICE)


def bits(xs):
    return [struct.unpack("<I", struct.pack("<f", float(x)))[0] for x in xs]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, default_model):
    if not os.path.exists(str(default_model)):
        pytest.skip("INVAR_MODEL not found")
    import make_tiny_model

    d = tmp_path_factory.mktemp("torch")
    out = {}
    for wtype in ("F32", "BF16"):
        path = d / f"tiny-{wtype}.gguf"
        make_tiny_model.make_model(str(path), arch="llama", wtype=wtype, seed=5, vocab=512,
                                   shape="gpu-hd64" if GPU else "tiny", tokenizer_src=str(default_model))
        out[wtype] = path
    return out


def rollouts(llm):
    ps = [invar.SamplingParams(temperature=1.0, seed=10 + i, max_tokens=8, ignore_eos=True) for i in range(2)]
    return [o.outputs[0] for o in llm.generate(PROMPTS, ps)]


@pytest.mark.parametrize("wtype,dtype", [("F32", torch.float32), ("BF16", torch.bfloat16)])
def test_forward_equals_sampled_logprobs_bitwise(tiny, wtype, dtype):
    model = policy(tiny[wtype], dtype)
    with engine(tiny[wtype]) as llm:
        sync_weights(llm, model)  # the parameters (F32/BF16 as in the file) into the engine
        outs = rollouts(llm)
        lp = token_logprobs(llm, model, PROMPTS, [o.token_ids for o in outs])
        want = [x for o in outs for x in o.token_logprobs]
        assert bits(lp.tolist()) == bits(want)
        ref = model.token_logprobs(PROMPTS, [o.token_ids for o in outs]).detach()
        tol = 3e-2 if GPU else 2e-4 if wtype == "F32" else 2e-3
        err = float((ref - lp.detach()).abs().max())
        print(f"{DEVICE} {wtype}: |torch reference - invar| max {err:.3g} (tolerance {tol:g})")
        assert err < tol


def test_gradient_equals_the_torch_model(tiny):
    model = policy(tiny["F32"])
    with engine(tiny["F32"]) as llm:
        sync_weights(llm, model)
        conts = [o.token_ids for o in rollouts(llm)]
        coef = torch.linspace(-1, 1, sum(len(c) for c in conts), device=model.device)
        (coef * token_logprobs(llm, model, PROMPTS, conts)).sum().backward()
        got = {n: p.grad.clone() for n, p in model.params.items()}
        model.zero_grad()
        (coef * model.token_logprobs(PROMPTS, conts)).sum().backward()
        for n, p in model.params.items():
            assert torch.equal(got[n], p.grad), n


def test_gradient_matches_finite_differences_of_invar(tiny):
    if GPU:
        pytest.skip("the GPU engine holds bf16 weights: an eps-sized change is rounded away")
    model = policy(tiny["F32"])
    gen = torch.Generator().manual_seed(0)
    with engine(tiny["F32"]) as llm:
        sync_weights(llm, model)
        conts = [o.token_ids for o in rollouts(llm)]
        coef = torch.randn(sum(len(c) for c in conts), generator=gen)

        def loss() -> float:
            sync_weights(llm, model)
            return float((coef * token_logprobs(llm, model, PROMPTS, conts)).sum())

        model.zero_grad()
        (coef * token_logprobs(llm, model, PROMPTS, conts)).sum().backward()
        for name in ("blk.0.attn_q.weight", "blk.1.ffn_down.weight", "token_embd.weight", "output_norm.weight"):
            p = model.params[name]
            d = torch.randn(p.shape, generator=gen)
            eps = 1e-2 * float(p.detach().abs().mean()) / float(d.abs().mean())
            analytic = float((p.grad * d).sum())
            with torch.no_grad():
                p += eps * d
                up = loss()
                p -= 2 * eps * d
                down = loss()
                p += eps * d
            numeric = (up - down) / (2 * eps)
            print(f"{name}: finite difference {numeric:.6g}, gradient {analytic:.6g}")
            assert abs(numeric - analytic) <= 0.02 * abs(analytic) + 1e-3, (name, numeric, analytic)


def test_stale_engine_is_refused(tiny):
    model = policy(tiny["F32"])
    with engine(tiny["F32"]) as llm:
        sync_weights(llm, model)
        with torch.no_grad():
            model.params["blk.0.attn_q.weight"].mul_(1.1)
        with pytest.raises(invar.InvarError, match="sync_weights"):
            token_logprobs(llm, model, PROMPTS[:1], [[5, 6]])
        sync_weights(llm, model)
        assert token_logprobs(llm, model, PROMPTS[:1], [[5, 6]]).shape == (2,)


def test_shared_prompts_run_once_with_the_same_values(tiny):
    """token_logprobs runs each distinct prompt once (an RL group's samples share it); the
    values and the gradient equal the full per-sequence forward's (model.hidden on prompt +
    continuation, right-padded), and invar's own forward agrees bitwise with the rollouts
    whatever the grouping (prompts of different lengths, empty and one-token continuations)."""
    model = policy(tiny["F32"])
    prompts = [PROMPTS[i % 2] for i in range(6)] + [[1, 9]]
    with engine(tiny["F32"]) as llm:
        sync_weights(llm, model)
        ps = [invar.SamplingParams(temperature=1.0, seed=30 + i, max_tokens=1 + i % 4, ignore_eos=True)
              for i in range(len(prompts))]
        outs = [o.outputs[0] for o in llm.generate(prompts, ps)]
        conts = [o.token_ids for o in outs]
        conts[3] = []  # a sequence with nothing to score
        assert bits(token_logprobs(llm, model, prompts, conts).tolist()) == bits(
            [x for i, o in enumerate(outs) if i != 3 for x in o.token_logprobs])
    shared = model.token_logprobs(prompts, conts)
    d = model.device
    seqs = [p + c for p, c in zip(prompts, conts)]
    idx = torch.zeros(len(seqs), max(map(len, seqs)), dtype=torch.long)
    rows, cols, targets = [], [], []
    for b, (p, c) in enumerate(zip(prompts, conts)):
        idx[b, :len(seqs[b])] = torch.tensor(seqs[b])
        for j, t in enumerate(c):
            rows, cols, targets = rows + [b], cols + [len(p) - 1 + j], targets + [t]
    h = model.hidden(idx)[torch.tensor(rows, device=d), torch.tensor(cols, device=d)]
    full = torch.log_softmax(h @ model._output().T, -1).gather(1, torch.tensor(targets, device=d)[:, None])[:, 0]
    assert shared.shape == full.shape
    assert float((shared - full).abs().max()) < 1e-5
    params = list(model.parameters())
    for gs, gf in zip(torch.autograd.grad(shared.sum(), params), torch.autograd.grad(full.sum(), params)):
        assert float((gs - gf).abs().max()) <= 1e-5 * (1 + float(gf.abs().max()))
