"""LLM(kv_cache_dtype=...): the f16 CPU KV cache through the Python package. Batch
invariance holds bitwise on it (each prompt alone == inside a batch), score equals the
sampled logprobs on it, the same kv_cache_mb holds twice the blocks, its logprobs differ
from the f32 cache's (the rounding is real), and a bad dtype is refused."""

from __future__ import annotations

import os

import pytest

from invar_pkg import invar
from test_python_api import PROMPTS, bits, fingerprint

MODEL = os.environ.get("INVAR_MODEL", "")


@pytest.fixture(scope="module")
def llms():
    if not os.path.exists(MODEL):
        pytest.skip("INVAR_MODEL not found")
    with invar.LLM(MODEL, threads=2, kv_cache_mb=64) as f32, \
            invar.LLM(MODEL, threads=2, kv_cache_mb=64, kv_cache_dtype="float16") as f16:
        yield f32, f16


def sampled(i: int) -> "invar.SamplingParams":
    return invar.SamplingParams(temperature=0.0 if i == 0 else 0.9, seed=100 + i, max_tokens=8, logprobs=2)


def test_f16_batch_equals_each_prompt_alone_bitwise(llms):
    _, f16 = llms
    ps = [sampled(i) for i in range(len(PROMPTS))]
    batch = f16.generate(PROMPTS, ps)
    for i, p in enumerate(PROMPTS):
        assert fingerprint(batch[i]) == fingerprint(f16.generate(p, ps[i])[0]), f"prompt {i}"


def test_f16_score_equals_sampled_logprobs_bitwise(llms):
    _, f16 = llms
    outs = f16.generate(PROMPTS[:3], invar.SamplingParams(temperature=1.0, seed=7, max_tokens=10))
    scored = f16.score(PROMPTS[:3], [o.outputs[0].token_ids for o in outs])
    for o, s in zip(outs, scored):
        assert [bits(x) for x in s] == [bits(x) for x in o.outputs[0].token_logprobs]


def test_f16_holds_twice_the_blocks_and_rounds(llms):
    f32, f16 = llms
    assert f16.stats()["kv_blocks_total"] == 2 * f32.stats()["kv_blocks_total"]
    ids = f32.tokenize("The quick brown fox jumps over the lazy dog. " * 4)
    a, b = f32.score([ids[:1]], [ids[1:]])[0], f16.score([ids[:1]], [ids[1:]])[0]
    assert [bits(x) for x in a] != [bits(x) for x in b]  # the f16 cache is not secretly f32
    assert max(abs(x - y) for x, y in zip(a, b)) < 0.5


def test_bad_kv_cache_dtype_raises():
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        invar.LLM(MODEL or "missing.gguf", kv_cache_dtype="bfloat16")
