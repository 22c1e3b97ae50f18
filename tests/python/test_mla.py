"""deepseek2 (multi-head latent attention, routed and shared experts) on tiny random-weight
files written by tools/make_tiny_model.py: a V2-Lite-like file (no q_lora, softmax routing,
no groups or bias, 2 shared experts), a V3-like one (q_lora, sigmoid routing in 4 groups of
which 2 are used, the score-correction bias, normalised weights times 2.5, 1 shared expert)
and the older merged attn_kv_b layout (softmax, with q_lora); each has one leading dense
layer and YaRN.

* Logits against the independent numpy forward (tools/reference_forward.py: MLA in the
  plain, non-absorbed formulation; invar runs the absorbed one), F32 tolerance of
  test_logits_reference.py (measured about 1.5e-6 rms), and a Q8_0 V2-Lite-like file within
  the quantised one (measured rms 0.028, max 0.16, argmax 0.93). Rows where a routing
  decision of the reference (a group or an expert) has a small margin are left out and
  counted, as in test_moe.py: in logit units where the choice follows logit order (softmax,
  no bias), else in score units. The quantised V3-like files are not compared: their
  sigmoid scores (slope 1/4) put a quarter to half of the rows within int8 noise of a
  routing tie (measured Q4_1, 23 of 32 rows kept at a 0.02 margin: rms 0.047, max 0.36).
* llama.cpp (llama-cpp-python, where installed) loads the V3-like and merged files and meets
  the same tolerance against the reference (measured rms 5e-4 and 8e-4: its KV cache is
  f16), which validates the reference's reading of the format (YaRN, groups, bias, scale).
  It cannot load the V2-Lite-like file: llama.cpp recognises a q_lora-less deepseek2 by
  V2-Lite's 27 layers only.
* The keys are read: the same file with YaRN's factor, the routed scale or the gating
  function changed is far from the reference.
* Bad metadata and tensor shapes are refused with a message naming them.
* The KV cache holds the latent row once per position (a KV budget's block count).
* The engine invariance suite (alone vs random batches of 2..64, chunked prefill, 1 vs 2
  threads, greedy / seeded / logits processing, its negative controls, the per-expert
  token counts and the experts-in-load-order control) and the serving suite (needle,
  prefix cache warm vs cold, preemption, score == sampled logprobs, threads) on the V3-like
  Q4_1 file; the serving suite's MLA control scores with prefill rows in the non-absorbed
  formulation (a switch in the real forward, model/mla.h) and must differ from the
  decoded logprobs.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import INVAR_BIN
from test_cli import GGUF_F32, GGUF_U32, patched_model, run
from test_logits_reference import QUANT_TOL, TOLERANCES, check, compare, run_invar_logits, synthetic_tokens
from test_moe import check_shape_refused, run_suite

rf = pytest.importorskip("reference_forward")

ROUTE_GAP = 1e-3  # F32: invar's scores differ from the float64 reference's by ~1e-6
TOKENS = [t % 4096 for t in synthetic_tokens()]
F32_VARIANTS = ["deepseek2-lite-F32", "deepseek2-v3-F32", "deepseek2-kvb-F32"]
# (tolerance, routing margin): quantised, the margin of test_moe.py in logit units (the
# softmax file's choice is by logit order) over int8 activation noise
REFERENCE_VARIANTS = {**{v: (TOLERANCES["F32"], ROUTE_GAP) for v in F32_VARIANTS},
                      "deepseek2-lite-Q8_0": (QUANT_TOL, 0.05)}


def need_bin():
    if not INVAR_BIN.is_file():
        pytest.skip(f"{INVAR_BIN} not built")


@pytest.mark.parametrize("variant", list(REFERENCE_VARIANTS))
def test_deepseek2_logits_match_reference(variant, synthetic_model, tmp_path):
    need_bin()
    tol, gap = REFERENCE_VARIANTS[variant]
    model = synthetic_model(variant)
    ref = rf.logits(str(model), TOKENS)
    got = run_invar_logits(INVAR_BIN, model, TOKENS, tmp_path / "logits.f32")
    keep = rf.routing_gaps(str(model), TOKENS) > gap
    st = compare(ref[keep], got[keep])
    print(f"{variant}: {int((~keep).sum())} of {len(TOKENS)} rows at a routing near-tie left out; {st}")
    assert keep.sum() >= len(TOKENS) * 3 // 4
    check(st, tol, f"invar vs reference [{variant}]")


@pytest.mark.parametrize("variant", ["deepseek2-v3-F32", "deepseek2-kvb-F32"])
def test_deepseek2_reference_matches_llama_cpp(variant, synthetic_model):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed "
                                    "(pip install -r requirements-llama.txt)")
    model = synthetic_model(variant)
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=512, n_batch=512, n_threads=2, logits_all=True,
                          verbose=False)
    try:
        llm.eval(TOKENS)
        got = np.array(llm.scores[:len(TOKENS)], dtype=np.float64)
    finally:
        llm.close()
    keep = rf.routing_gaps(str(model), TOKENS) > ROUTE_GAP
    st = compare(rf.logits(str(model), TOKENS)[keep], got[keep])
    print(f"llama.cpp [{variant}]: {st}")
    check(st, TOLERANCES["F32"], f"llama.cpp vs reference [{variant}]")


# (variant, key, type, value): each changes the model far beyond the F32 tolerance
READ_KEYS = [
    ("deepseek2-lite-F32", "deepseek2.rope.scaling.factor", GGUF_F32, 1.0),  # no YaRN: scale and freqs
    ("deepseek2-v3-F32", "deepseek2.expert_weights_scale", GGUF_F32, 1.0),
    ("deepseek2-v3-F32", "deepseek2.expert_gating_func", GGUF_U32, 1),  # softmax instead of sigmoid
    ("deepseek2-v3-F32", "deepseek2.expert_group_used_count", GGUF_U32, 4),  # every group
]


def test_deepseek2_keys_are_read(synthetic_model, tmp_path):
    need_bin()
    for i, (variant, key, vtype, value) in enumerate(READ_KEYS):
        base = synthetic_model(variant)
        got = run_invar_logits(INVAR_BIN, patched_model(base, tmp_path / f"k{i}.gguf", key, vtype, value), TOKENS,
                               tmp_path / "l.f32")
        st = compare(rf.logits(str(base), TOKENS), got)
        assert st["rms_rel"] > 10 * TOLERANCES["F32"].rms_rel, (key, st)


BAD_METADATA = [
    ("deepseek2.attention.kv_lora_rank", GGUF_U32, 1 << 20, "kv_lora_rank = 1048576 is outside the supported range [1, 574]"),
    ("deepseek2.attention.kv_lora_rank", GGUF_U32, 32, "key_length 80 / value_length 64 must be kv_lora_rank + rope dims (48)"),
    ("deepseek2.attention.q_lora_rank", GGUF_U32, 1 << 30, "q_lora_rank = 1073741824 is outside"),
    ("deepseek2.attention.q_lora_rank", GGUF_U32, 32, "blk.0.attn_q_a.weight has shape [256, 64], expected [256, 32]"),
    ("deepseek2.rope.dimension_count", GGUF_U32, 1 << 20, "rope.dimension_count = 1048576 is outside"),
    ("deepseek2.rope.dimension_count", GGUF_U32, 15, "rope.dimension_count 15 (must be even)"),
    ("deepseek2.attention.key_length_mla", GGUF_U32, 4096, "key_length_mla = 4096 is outside"),
    ("deepseek2.attention.value_length_mla", GGUF_U32, 16, "attn_output.weight has shape [128, 256], expected [64, 256]"),
    ("deepseek2.attention.head_count_kv", GGUF_U32, 2, "head_count_kv = 2: an MLA file (key_length_mla) has 1"),
    ("deepseek2.leading_dense_block_count", GGUF_U32, 4, "leading_dense_block_count = 4 is outside the supported range [0, 3]"),
    ("deepseek2.expert_count", GGUF_U32, 1 << 20, "expert_count = 1048576 is outside"),
    ("deepseek2.expert_used_count", GGUF_U32, 9, "expert_used_count = 9 is outside the supported range [1, 8]"),
    ("deepseek2.expert_used_count", GGUF_U32, 5, "expert_used_count 5 exceeds the 4 experts of 2 groups"),
    ("deepseek2.expert_shared_count", GGUF_U32, 1000, "expert_shared_count = 1000 is outside"),
    ("deepseek2.expert_gating_func", GGUF_U32, 3, "expert_gating_func = 3 is not supported (1 softmax, 2 sigmoid)"),
    ("deepseek2.expert_group_count", GGUF_U32, 3, "expert_count 8 is not a multiple of expert_group_count 3"),
    ("deepseek2.expert_group_count", GGUF_U32, 8, "groups of one expert"),
    ("deepseek2.expert_group_used_count", GGUF_U32, 5, "expert_group_used_count = 5 is outside the supported range [1, 4]"),
    ("deepseek2.expert_weights_scale", GGUF_F32, float("nan"), "expert_weights_scale = nan is outside"),
    ("deepseek2.expert_weights_scale", GGUF_F32, 0.0, "expert_weights_scale = 0 is outside"),
    ("deepseek2.nextn_predict_layers", GGUF_U32, 1, "nextn_predict_layers = 1: multi-token-prediction layers are not supported"),
    ("deepseek2.rope.scaling.factor", GGUF_F32, 0.5, "rope.scaling.factor = 0.5 is outside"),
    ("deepseek2.rope.scaling.original_context_length", GGUF_U32, 1 << 30, "original_context_length = 1073741824 is outside"),
    ("deepseek2.rope.scaling.yarn_log_multiplier", GGUF_F32, -1.0, "yarn_log_multiplier = -1 is outside"),
]


def test_deepseek2_metadata_refused(synthetic_model, tmp_path):
    need_bin()
    base = synthetic_model("deepseek2-v3-Q4_1")
    assert run(["tokenize", "--model", str(base), "hi"]).returncode == 0
    for i, (key, vtype, value, want) in enumerate(BAD_METADATA):
        m = patched_model(base, tmp_path / f"bad{i}.gguf", key, vtype, value)
        p = run(["generate", "--model", str(m), "--max-tokens", "1", "hi"], timeout=120)
        assert p.returncode == 3 and want in p.stderr, (key, value, p.returncode, p.stderr)
        m.unlink()


def test_deepseek2_tensor_shape_refused(synthetic_model, tmp_path):
    """attn_k_b claiming fewer heads than the metadata (its data still in the file)."""
    need_bin()
    check_shape_refused(synthetic_model("deepseek2-v3-Q4_1"), tmp_path, b"blk.2.attn_k_b.weight", 3, 2, 3,  # 4 -> 3
                        "blk.2.attn_k_b.weight has shape [32, 64, 3] (3 dims), expected [32, 64, 4]")


def test_weight_updates_refused_on_deepseek2(synthetic_model):
    from invar_pkg import invar
    from test_python_weights import file_weights, outputs

    path = synthetic_model("deepseek2-v3-F32")
    w = file_weights(path)
    with invar.LLM(str(path), threads=2) as llm:
        before = outputs(llm)
        for name in ("blk.0.attn_kv_a_mqa.weight", "blk.1.attn_output.weight"):
            with pytest.raises(invar.InvarError, match="weights of a deepseek2 model cannot be replaced yet"):
                llm.update_weights({name: w[name]})
        assert outputs(llm) == before


@pytest.mark.parametrize("variant", ["deepseek2-lite-Q8_0", "deepseek2-v3-F32"])
def test_deepseek2_cache_holds_the_latent_once(variant, synthetic_model):
    """The KV cache stores one latent row [c_kv, k_pe] per position and layer (V is read out
    of its c_kv): a budget holds budget / (n_layer * 16 * (kv_lora + rope) * 4) blocks of 16
    positions, twice what a cache storing c_kv again as V would hold."""
    import gguf
    from invar_pkg import invar

    path = synthetic_model(variant)
    f = gguf.GGUFReader(str(path)).fields
    n_layer, kv_lora, rope = (int(f[f"deepseek2.{k}"].parts[-1][0])
                              for k in ("block_count", "attention.kv_lora_rank", "rope.dimension_count"))
    per_block = n_layer * 16 * (kv_lora + rope) * 4
    budget = 8 << 20
    with invar.LLM(str(path), threads=1, kv_cache_mb=budget >> 20) as llm:
        blocks = llm.stats()["kv_blocks_total"]
    assert blocks == budget // per_block, (blocks, per_block)
    assert blocks > budget // (n_layer * 16 * (2 * kv_lora + rope) * 4)  # not c_kv twice


# The suites run on the V3-like file (q_lora, sigmoid, groups, bias: every routing step); the
# V2-Lite-like one passes them too (about 3 s more, left out for CI time).
def test_engine_invariance_suite_on_deepseek2(synthetic_model):
    out = run_suite("test_engine_invariance", synthetic_model("deepseek2-v3-Q4_1"))
    assert "0/" in out and "batched requests differ from alone" in out, out[-3000:]
    assert "# experts: 8/8 ran with token counts their alone runs never had" in out, out[-3000:]
    if os.environ.get("INVAR_TEST_QUICK", "0") in ("", "0"):
        assert "# negative control (experts combined in load order)" in out, out[-3000:]


def test_serving_determinism_suite_on_deepseek2(synthetic_model):
    out = run_suite("test_serving_determinism", synthetic_model("deepseek2-v3-Q4_1"))
    assert "FAILED" not in out, out[-3000:]
    if os.environ.get("INVAR_TEST_QUICK", "0") in ("", "0"):
        assert "# negative control (MLA prefill rows non-absorbed): 2/2 scores differ" in out, out[-3000:]
