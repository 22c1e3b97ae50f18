"""LLM.update_weights / load_weights (docs/python.md): new weights in a live engine compute
bitwise what an engine loaded from a file with those weights computes."""

from __future__ import annotations

import functools
import os
import struct

import numpy as np
import pytest

from invar_pkg import invar

PROMPTS = [[1, 504, 358, 282, 3], [1, 77, 88, 99, 100, 101, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]]


def bits(xs):
    return [struct.unpack("<I", struct.pack("<f", x))[0] for x in xs]


def outputs(llm):
    ps = [invar.SamplingParams(temperature=0.0, max_tokens=6, logprobs=2, ignore_eos=True),
          invar.SamplingParams(temperature=0.9, seed=3, max_tokens=6, logprobs=2, ignore_eos=True)]
    outs = llm.generate(PROMPTS, ps)
    return [(o.outputs[0].token_ids, bits(o.outputs[0].token_logprobs)) for o in outs]


@functools.lru_cache(maxsize=None)
def reader(path):
    import gguf

    return gguf.GGUFReader(str(path))


def file_weights(path):
    return {t.name: np.array(t.data).reshape([int(n) for n in reversed(t.shape)]) for t in reader(path).tensors}


@pytest.fixture(scope="module")
def models(tmp_path_factory, default_model):
    """Tiny llama models with a 512-token vocabulary (fast to write, read and run): F32 with
    seeds 1 and 2, and Q4_1 with seed 1."""
    if not os.path.exists(str(default_model)):
        pytest.skip("INVAR_MODEL not found")
    import make_tiny_model

    d = tmp_path_factory.mktemp("weights")
    out = []
    for wtype, seed in (("F32", 1), ("F32", 2), ("Q4_1", 1)):
        path = d / f"tiny-{wtype}-{seed}.gguf"
        make_tiny_model.make_model(str(path), arch="llama", wtype=wtype, seed=seed, vocab=512,
                                   tokenizer_src=str(default_model))
        out.append(path)
    return out


def test_update_from_dict_equals_loading_the_file(models):
    a_path, b_path, _ = models
    with invar.LLM(str(b_path), threads=2) as b:
        want = outputs(b)
        want_score = b.score(PROMPTS, [[5, 6, 7], [8, 9]])
    with invar.LLM(str(a_path), threads=2) as a:
        before = outputs(a)
        assert before != want  # the two models differ
        a.update_weights(file_weights(b_path))
        assert outputs(a) == want
        assert [bits(s) for s in a.score(PROMPTS, [[5, 6, 7], [8, 9]])] == [bits(s) for s in want_score]
        a.update_weights(file_weights(a_path))  # and back
        assert outputs(a) == before


def test_load_weights_from_a_file(models):
    a_path, b_path, _ = models
    with invar.LLM(str(b_path), threads=2) as b:
        want = outputs(b)
    with invar.LLM(str(a_path), threads=2) as a:
        outputs(a)  # fills the prefix cache with a's KV
        a.load_weights(str(b_path))
        assert outputs(a) == want


def test_float16_and_type_change(models):
    """A quantised model takes float weights: a Q4_1 matrix as float16 and as float32 (the same
    values) give the same bits as each other."""
    import gguf

    q_path = models[2]
    t = next(t for t in reader(q_path).tensors if t.name == "blk.0.ffn_up.weight")
    w = (gguf.dequantize(t.data, t.tensor_type) * 1.5).astype(np.float16)
    with invar.LLM(str(q_path), threads=2) as llm:
        before = outputs(llm)
        llm.update_weights({"blk.0.ffn_up.weight": w})
        f16 = outputs(llm)
        llm.update_weights({"blk.0.ffn_up.weight": w.astype(np.float32)})
        assert outputs(llm) == f16
        assert f16 != before


def test_bad_updates_raise_and_change_nothing(models):
    a_path, _, _ = models
    with invar.LLM(str(a_path), threads=2) as a:
        before = outputs(a)
        good = file_weights(a_path)["blk.0.attn_q.weight"] * 2
        with pytest.raises(invar.InvarError, match="no tensor blk.0.nope.weight"):
            a.update_weights({"blk.0.attn_q.weight": good, "blk.0.nope.weight": good})
        with pytest.raises(invar.InvarError, match="must have"):
            a.update_weights({"blk.0.attn_q.weight": good[:-1]})
        with pytest.raises(TypeError):
            a.update_weights({"blk.0.attn_q.weight": good.astype(np.int32)})
        with pytest.raises(invar.InvarError):
            a.load_weights("/nonexistent.gguf")
        assert outputs(a) == before
