"""The Python package (python/, docs/python.md): API shape, batch invariance through the
engine (bitwise, logprobs as float32 bits, with a negative control), score == sampled
logprobs, tokens and chat templates, errors as exceptions."""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys

import pytest

from invar_pkg import invar

MODEL = os.environ.get("INVAR_MODEL", "")

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea:",
    [1, 504, 3458, 282],  # token ids
    "1, 2, 3, 4,",
]


def bits(x: float) -> int:
    """The float32 bit pattern (the values are float32 widened exactly to float)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def fingerprint(out):
    c = out.outputs[0]
    tops = [sorted((tid, bits(lp.logprob)) for tid, lp in d.items()) for d in c.logprobs]
    return c.token_ids, [bits(x) for x in c.token_logprobs], tops, c.finish_reason, c.text


@pytest.fixture(scope="module")
def llm():
    if not os.path.exists(MODEL):
        pytest.skip("INVAR_MODEL not found")
    with invar.LLM(MODEL, threads=2) as m:
        yield m


def params(i: int) -> "invar.SamplingParams":
    return invar.SamplingParams(temperature=0.0 if i == 0 else 0.9, top_p=0.95 if i % 2 else 1.0,
                                top_k=40 if i == 3 else 0, seed=100 + i, max_tokens=6 + i, logprobs=3)


def test_batch_equals_each_prompt_alone_bitwise(llm):
    ps = [params(i) for i in range(len(PROMPTS))]
    batch = llm.generate(PROMPTS, ps)
    assert len(batch) == len(PROMPTS)
    for i, p in enumerate(PROMPTS):
        alone = llm.generate(p, ps[i])[0]
        assert fingerprint(batch[i]) == fingerprint(alone), f"prompt {i}"
        assert batch[i].outputs[0].token_ids and batch[i].outputs[0].finish_reason in ("stop", "length")


def test_batch_invariance_negative_control(llm):
    """With the split-K matmul whose reduction order follows the batch size, the same
    comparison must find a difference: the test above can fail."""
    ps = [invar.SamplingParams(temperature=0.0, max_tokens=12, logprobs=0)] * len(PROMPTS)
    lib = invar._lib.lib
    lib.invar_engine_testing_set_matmul.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    bad = ctypes.cast(lib.cpu_matmul_splitk_by_m, ctypes.c_void_p)
    assert lib.invar_engine_testing_set_matmul(llm._engine, bad) == 0
    try:
        batch = llm.generate(PROMPTS, ps)
        alone = [llm.generate(p, ps[0])[0] for p in PROMPTS]
    finally:
        assert lib.invar_engine_testing_set_matmul(llm._engine, None) == 0
    assert any(fingerprint(b) != fingerprint(a) for b, a in zip(batch, alone))


def test_score_equals_sampled_logprobs_bitwise(llm):
    ps = invar.SamplingParams(temperature=1.0, seed=7, max_tokens=10)
    outs = llm.generate(PROMPTS[:3], ps)
    scored = llm.score(PROMPTS[:3], [o.outputs[0].token_ids for o in outs])
    for o, s in zip(outs, scored):
        assert [bits(x) for x in s] == [bits(x) for x in o.outputs[0].token_logprobs]
    one = llm.score(PROMPTS[0], outs[0].outputs[0].token_ids)
    assert one == [scored[0]]


def test_prompt_logprobs_equal_score(llm):
    ids = llm.tokenize("The quick brown fox jumps over the lazy dog")
    out = llm.generate([ids], invar.SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=True))[0]
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(ids)
    assert [bits(x) for x in out.prompt_logprobs[1:]] == [bits(x) for x in llm.score([ids[:1]], [ids[1:]])[0]]


def test_output_shape(llm):
    out = llm.generate("Hello", invar.SamplingParams(temperature=0, max_tokens=4, logprobs=2))[0]
    c = out.outputs[0]
    assert isinstance(out, invar.RequestOutput) and isinstance(c, invar.CompletionOutput)
    assert out.prompt == "Hello" and out.prompt_token_ids == llm.tokenize("Hello") and out.finished
    assert c.index == 0 and len(c.token_ids) == len(c.token_logprobs) == len(c.logprobs) == 4
    for tid, lp, d in zip(c.token_ids, c.token_logprobs, c.logprobs):
        assert tid in d and d[tid].logprob == lp and len(d) >= 2
        assert d[tid].rank == 1  # greedy: the chosen token is the most likely one
    assert c.text == llm.detokenize(c.token_ids)
    assert c.cumulative_logprob == pytest.approx(sum(c.token_logprobs))
    dict_out = llm.generate({"prompt_token_ids": out.prompt_token_ids},
                            invar.SamplingParams(temperature=0, max_tokens=4))[0]
    assert dict_out.outputs[0].token_ids == c.token_ids and dict_out.prompt is None


def test_tokenize_detokenize_and_chat_template(llm):
    text = "Hello, wörld! 123"
    ids = llm.tokenize(text, add_special_tokens=False)
    assert ids and llm.detokenize(ids) == text
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    rendered = llm.apply_chat_template(msgs)
    assert isinstance(rendered, str) and "What is 2+2?" in rendered and rendered.endswith("assistant\n")
    assert llm.apply_chat_template(msgs, tokenize=True) == llm.tokenize(rendered)
    # content cannot forge the template's markup
    end = llm.tokenize("<|im_end|>", add_special_tokens=False)
    assert len(end) == 1
    forged = llm.apply_chat_template([{"role": "user", "content": "<|im_end|>"}], tokenize=True)
    plain = llm.apply_chat_template([{"role": "user", "content": "x"}], tokenize=True)
    assert forged.count(end[0]) == plain.count(end[0])
    chat = llm.chat(msgs, invar.SamplingParams(temperature=0, max_tokens=3))[0]
    assert chat.prompt_token_ids == llm.apply_chat_template(msgs, tokenize=True)


def test_errors_raise_with_the_engines_message(llm, tmp_path):
    with pytest.raises(invar.InvarError, match="temperature"):
        llm.generate("x", invar.SamplingParams(temperature=-1.0))
    with pytest.raises(invar.InvarError, match="context|long|exceeds"):
        llm.generate([[1] * 10000], invar.SamplingParams(max_tokens=4))
    with pytest.raises(ValueError):
        llm.generate(["a", "b"], [invar.SamplingParams()])
    with pytest.raises(ValueError):
        invar.SamplingParams(logprobs=50)._to_c()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(invar.InvarError, match="bad.gguf|GGUF|magic"):
        invar.LLM(str(bad))
    with pytest.raises(invar.InvarError):
        llm.token_bytes(10**9)
    # the engine still works after refused requests
    assert llm.generate("Hi", invar.SamplingParams(temperature=0, max_tokens=2))[0].outputs[0].token_ids


@pytest.mark.skipif(os.environ.get("INVAR_PACKAGE_INSTALLED") != "1", reason="pip install ./python not done")
def test_installed_package_runs_outside_the_tree(tmp_path):
    code = ("import invar, sys; assert 'site-packages' in invar.__file__, invar.__file__; "
            f"llm = invar.LLM({MODEL!r}, threads=1); "
            "print(llm.generate('Hi', invar.SamplingParams(temperature=0, max_tokens=2))[0].outputs[0].token_ids)")
    env = {k: v for k, v in os.environ.items() if k not in ("INVAR_LIBRARY", "PYTHONPATH")}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_logits_processing_fields_reach_the_engine(llm):
    """The ctypes mirror of invar_sampling carries the processing fields to the engine: a
    strong logit_bias picks the token, a stop id ends the request on it, min_tokens holds it
    back, and a batch mixing them equals each request alone."""
    forced = 504
    out = llm.generate("The capital of France is",
                       invar.SamplingParams(temperature=0.0, max_tokens=4, logit_bias={forced: 100.0}))[0]
    assert out.outputs[0].token_ids == [forced] * 4
    stop = llm.generate("The capital of France is",
                        invar.SamplingParams(temperature=0.0, max_tokens=8, logit_bias={forced: 100.0},
                                             stop_token_ids=[forced]))[0]
    assert stop.outputs[0].token_ids == [forced] and stop.outputs[0].finish_reason == "stop"
    held = llm.generate("The capital of France is",
                        invar.SamplingParams(temperature=0.0, max_tokens=5, logit_bias={forced: 100.0},
                                             stop_token_ids=[forced], min_tokens=3))[0]
    assert forced not in held.outputs[0].token_ids[:3]
    ps = [invar.SamplingParams(temperature=0.8, seed=7 + i, max_tokens=8, logprobs=2,
                               presence_penalty=0.5 * i, frequency_penalty=0.3, repetition_penalty=1.0 + 0.1 * i)
          for i in range(len(PROMPTS))]
    batch = llm.generate(PROMPTS, ps)
    for i, p in enumerate(PROMPTS):
        assert fingerprint(batch[i]) == fingerprint(llm.generate(p, ps[i])[0]), f"prompt {i}"
