"""Hugging Face directories written by transformers itself, against transformers' forward.

test_hf_model.py checks directories made by our own converter against the GGUF path; a
mistake shared by the converter and the loader (a rope layout, a routing rule) would pass
there. Here a tiny model with random weights is built by transformers (torch, float32, seed
fixed), saved with save_pretrained (safetensors), and invar's logits on that directory are
compared with transformers' own forward on the same token ids. float32 on both sides, but a
different summation order: agreement is asserted as a relative RMS error below TOL over all
positions' logits (measured: 3e-7 to 5e-7, 2e-6 with BF16 weights); a wrong rope pairing, YaRN factor or routing
rule gives errors of order 1e-1 (the controls below). The tokenizer files are the synthetic
models' (vocab 4096): only the token ids matter here. Architectures: qwen3_moe, deepseek_v3,
deepseek_v2 (whose YaRN reference gets the softmax factor 4.57.1 leaves out: see
build_deepseek_v2).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import INVAR_BIN

if os.environ.get("INVAR_REQUIRE_TORCH") == "1":  # scripts/test.sh: fail rather than skip
    import torch  # noqa: F401
    import transformers  # noqa: F401
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
gguf_to_hf = pytest.importorskip("gguf_to_hf")
pytestmark = pytest.mark.skipif(not INVAR_BIN.exists(), reason=f"{INVAR_BIN} not built")

TOL = 1e-4
VOCAB = 4096
IDS = [1, 2, 3, 400, 3000, 1956, 905, 216, 33, 34, 35, 28, 1085, 17, 9, 42]


def run(args):
    import subprocess
    return subprocess.run([str(INVAR_BIN), *args], capture_output=True, text=True, timeout=600)


def randomise(model, seed):
    """Weights of unit-ish scale (transformers' init, std 0.02, would leave the logits near 0
    and the router near uniform, so a routing or rope mistake would hardly show): matrices
    N(0, 1/fan_in), norms 1 + N(0, 0.1^2), biases N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            if name == "model.embed_tokens.weight":
                p.mul_(p.shape[-1] ** 0.5)  # embeddings of unit RMS, as real ones are about


def save(model, d: Path, tokenizer_gguf: Path) -> Path:
    model.save_pretrained(str(d), safe_serialization=True)
    gguf_to_hf.write_tokenizer(gguf_to_hf.Meta(gguf.GGUFReader(str(tokenizer_gguf))), str(d))
    return d


def reference_logits(model) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([IDS])).logits[0].double().numpy()


def invar_logits(d: Path, tmp_path: Path) -> np.ndarray:
    out = tmp_path / "logits.bin"
    p = run(["logits", "--model", str(d), "--tokens", ",".join(map(str, IDS)), "--out", str(out)])
    assert p.returncode == 0, p.stderr
    return np.fromfile(out, dtype=np.float32).reshape(len(IDS), -1).astype(np.float64)


def rel_rms(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - ref) ** 2) / np.mean(ref ** 2)))


# ---------------------------------------------------------------- qwen3_moe


@pytest.fixture(scope="module")
def qwen3moe(tmp_path_factory, synthetic_model):
    """(directory, transformers' logits) of a tiny Qwen3MoeForCausalLM: 2 layers, 8 experts,
    top-2, norm_topk_prob true, GQA 4/2 heads, head_dim 16 != hidden/heads, untied lm_head."""
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        norm_topk_prob=True, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=256,
        tie_word_embeddings=False, attn_implementation="eager")
    model = transformers.Qwen3MoeForCausalLM(cfg).float().eval()
    randomise(model, 1)
    d = save(model, tmp_path_factory.mktemp("tf_qwen3moe") / "m", synthetic_model("qwen3moe-F32"))
    return d, reference_logits(model)


def test_qwen3moe_matches_transformers(qwen3moe, tmp_path):
    d, ref = qwen3moe
    err = rel_rms(invar_logits(d, tmp_path), ref)
    print(f"qwen3_moe: rms relative error vs transformers {err:.3g}")
    assert err < TOL, err


def test_qwen3moe_norm_topk_prob_is_compared(qwen3moe, tmp_path):
    """The negative control: the same directory with norm_topk_prob flipped to false (an
    invar that ignored the key, or transformers' default) misses the reference by far."""
    d, ref = qwen3moe
    cfg = json.loads((d / "config.json").read_text())
    cfg["norm_topk_prob"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    try:
        err = rel_rms(invar_logits(d, tmp_path), ref)
    finally:
        cfg["norm_topk_prob"] = True
        (d / "config.json").write_text(json.dumps(cfg))
    print(f"qwen3_moe with norm_topk_prob false: rms relative error {err:.3g}")
    assert err > 100 * TOL, err


# ---------------------------------------------------------------- deepseek_v3

DS_BASE = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
    first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
    num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
    kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, rope_theta=10000.0,
    max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False, attn_implementation="eager")
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 0.707,
        "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1}
# V3-like (query bottleneck, YaRN, rope_interleave; F32 and BF16) and V2-Lite-like (plain
# query, no scaling, rope dims in halves): 3 layers, the first dense, 8 experts in 4 groups of which 2 are used,
# top-3, one shared expert, v_head_dim != qk dims.
DS_VARIANTS = {
    "v3": dict(q_lora_rank=32, rope_scaling=YARN, rope_interleave=True),
    "plain-halves": dict(q_lora_rank=None, rope_scaling=None, rope_interleave=False),
    "v3-bf16": dict(q_lora_rank=32, rope_scaling=YARN, rope_interleave=True, bf16=True),
}


def build_deepseek(d: Path, tokenizer_gguf: Path, bf16=False, **kw):
    """bf16: saved as BF16 (as released checkpoints are), the reference the float32 model of
    the same rounded values."""
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(**{**DS_BASE, **kw})
    model = transformers.DeepseekV3ForCausalLM(cfg).float().eval()
    randomise(model, 2)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # a buffer, not a parameter: biased selection differs from unbiased
        for layer in model.model.layers[cfg.first_k_dense_replace:]:
            b = layer.mlp.gate.e_score_correction_bias
            b.copy_(0.1 * torch.randn(b.shape, generator=g))
        if bf16:
            for t in list(model.parameters()) + list(model.buffers()):
                t.copy_(t.bfloat16().float())
    ref = reference_logits(model)
    return save(model.to(torch.bfloat16) if bf16 else model, d, tokenizer_gguf), ref


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory, synthetic_model):
    root = tmp_path_factory.mktemp("tf_deepseek")
    tok = synthetic_model("qwen3moe-F32")
    return {name: build_deepseek(root / name, tok, **kw) for name, kw in DS_VARIANTS.items()}


@pytest.mark.parametrize("variant", list(DS_VARIANTS))
def test_deepseek_v3_matches_transformers(deepseek, tmp_path, variant):
    d, ref = deepseek[variant]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "deepseek_v3" and cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    err = rel_rms(invar_logits(d, tmp_path), ref)
    print(f"deepseek_v3 {variant}: rms relative error vs transformers {err:.3g}")
    assert err < TOL, err


NULL = object()  # edited(config=...): write the key as JSON null


def edited(d: Path, tmp_path: Path, name: str, config=None, drop=None, add=None) -> Path:
    """A copy of d with config.json keys replaced (None: removed, NULL: null), a tensor
    dropped or tensors added (name -> numpy array)."""
    import shutil
    out = tmp_path / name
    shutil.copytree(d, out)
    if config:
        cfg = json.loads((out / "config.json").read_text())
        for k, v in config.items():
            if isinstance(v, dict) and isinstance(cfg.get(k), dict):
                cfg[k] = {**cfg[k], **v}
            elif v is None:
                cfg.pop(k, None)
            elif v is NULL:
                cfg[k] = None
            else:
                cfg[k] = v
        (out / "config.json").write_text(json.dumps(cfg))
    if drop or add:
        from safetensors.numpy import load_file, save_file
        t = load_file(str(out / "model.safetensors"))
        if drop:
            del t[drop]
        t.update(add or {})
        save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


# Each changes what transformers would compute; reading the changed key must move invar's
# logits far off the reference (the keys are really read, the test really sees rope and YaRN).
DS_CONTROLS = {
    "rope_interleave": {"rope_interleave": False},
    "yarn mscale": {"rope_scaling": {"mscale": 1.0, "mscale_all_dim": 1.0}},
    "yarn factor": {"rope_scaling": {"factor": 2.0}},
    "routed_scaling_factor": {"routed_scaling_factor": 1.0},
    "topk_group": {"topk_group": 4},
}


@pytest.mark.parametrize("case", list(DS_CONTROLS))
def test_deepseek_v3_keys_are_compared(deepseek, tmp_path, case):
    d, ref = deepseek["v3"]
    err = rel_rms(invar_logits(edited(d, tmp_path, "m", config=DS_CONTROLS[case]), tmp_path), ref)
    print(f"deepseek_v3 with {case} changed: rms relative error {err:.3g}")
    assert err > 100 * TOL, (case, err)


DS_REFUSED = {
    "missing expert": (dict(drop="model.layers.2.mlp.experts.7.up_proj.weight"),
                       "tensor model.layers.2.mlp.experts.7.up_proj.weight is missing (8 experts"),
    "missing bias": (dict(drop="model.layers.1.mlp.gate.e_score_correction_bias"),
                     "tensor model.layers.1.mlp.gate.e_score_correction_bias is missing"),
    "mscale": (dict(config={"rope_scaling": {"mscale": 1.0}}),
               "mscale 1 and mscale_all_dim 0.707 must be equal and nonzero"),
    "attention_factor": (dict(config={"rope_scaling": {"attention_factor": 1.2}}),
                         "rope_scaling attention_factor is not supported"),
    "beta_fast": (dict(config={"rope_scaling": {"beta_fast": 16}}), "rope_scaling beta_fast must be 32"),
    "scoring_func": (dict(config={"scoring_func": "softmax"}), 'scoring_func must be "sigmoid"'),
    "q_lora_rank absent": (dict(config={"q_lora_rank": None}), "missing q_lora_rank (null: queries without"),
    "groups": (dict(config={"n_group": 3}), "n_routed_experts 8 is not a multiple of n_group 3"),
    "kv_lora_rank": (dict(config={"kv_lora_rank": 1 << 20}), "kv_lora_rank must be an integer in [1, 574]"),
    "num_key_value_heads": (dict(config={"num_key_value_heads": 2}), "num_key_value_heads 2 != num_attention_heads 4"),
    "fp8": (dict(config={"quantization_config": {"quant_method": "fp8"}}), "quantization_config: quantized"),
    "read as deepseek_v2": (dict(config={"model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"]}),
                            "norm_topk_prob true is not supported for deepseek_v2"),
    "mtp tensor past the layers": (dict(config={"num_nextn_predict_layers": 0, "num_hidden_layers": 2,
                                                "first_k_dense_replace": 1}),
                                   "tensor 'model.layers.2."),
}


@pytest.mark.parametrize("case", list(DS_REFUSED))
def test_deepseek_v3_refused(deepseek, tmp_path, case):
    d, _ = deepseek["v3"]
    edit, message = DS_REFUSED[case]
    p = run(["logits", "--model", str(edited(d, tmp_path, "m", **edit)), "--tokens", "1,2", "--out",
             str(tmp_path / "x.bin")])
    assert p.returncode != 0 and message in p.stderr, p.stderr


def test_deepseek_v3_mtp_layers_skipped(deepseek, tmp_path):
    """num_nextn_predict_layers: the layers stored after the last are skipped (DeepSeek-V3
    keeps its multi-token-prediction module as model.layers.<num_hidden_layers>); the same
    file without the key is refused (the mtp-tensor case of test_deepseek_v3_refused)."""
    d, _ = deepseek["v3"]
    out = edited(d, tmp_path, "m", config={"num_nextn_predict_layers": 1, "num_hidden_layers": 2})
    p = run(["logits", "--model", str(out), "--tokens", "1,2", "--out", str(tmp_path / "x.bin")])
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "x.bin").stat().st_size == 2 * VOCAB * 4


# ---------------------------------------------------------------- deepseek_v2

DS2_BASE = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
    first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=2, n_routed_experts=8,
    num_experts_per_tok=3, norm_topk_prob=False, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
    v_head_dim=12, rope_theta=10000.0, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
    attn_implementation="eager")
# V2-like (query bottleneck, group_limited_greedy over 4 groups of which 2, routed scale 2,
# YaRN) and V2-Lite-like (plain query, greedy, scale 1, no rope scaling): softmax gating,
# 3 layers, the first dense, top-3, two shared experts.
DS2_VARIANTS = {
    "v2": dict(q_lora_rank=32, topk_method="group_limited_greedy", n_group=4, topk_group=2,
               routed_scaling_factor=2.0, rope_scaling=YARN),
    "lite": dict(q_lora_rank=None, topk_method="greedy", routed_scaling_factor=1.0, rope_scaling=None),
}


def yarn_softmax_factor(cfg) -> float:
    """DeepSeek's YaRN softmax factor, mscale(factor, mscale_all_dim)^2 (1 without YaRN)."""
    s = cfg.rope_scaling
    if not s or not s.get("mscale_all_dim") or s["factor"] <= 1:
        return 1.0
    return (0.1 * s["mscale_all_dim"] * np.log(s["factor"]) + 1.0) ** 2


def build_deepseek_v2(d: Path, tokenizer_gguf: Path, **kw):
    """(directory, logits, routing, stock) where routing holds each routed layer's softmax
    gate scores of every token (captured from the reference forward). transformers 4.57.1's
    DeepseekV2Attention leaves DeepSeek's YaRN factor out of the softmax scale (fixed later
    upstream; DeepSeek's own code, llama.cpp and invar apply it): the reference gets it here,
    so the comparison is with the model as trained; stock: the logits without it (None when
    this transformers applies it itself, or there is no YaRN)."""
    torch.manual_seed(0)
    cfg = transformers.DeepseekV2Config(**{**DS2_BASE, **kw})
    model = transformers.DeepseekV2ForCausalLM(cfg).float().eval()
    randomise(model, 4)
    attn = [layer.self_attn for layer in model.model.layers]
    stock = None
    if yarn_softmax_factor(cfg) != 1.0 and all(a.scaling == a.qk_head_dim ** -0.5 for a in attn):
        stock = reference_logits(model)
        for a in attn:
            a.scaling *= yarn_softmax_factor(cfg)
    scores = []
    hooks = [layer.mlp.gate.register_forward_hook(
        lambda m, args, out: scores.append(torch.softmax(args[0].reshape(-1, args[0].shape[-1]).float()
                                                         @ m.weight.float().T, dim=-1)))
        for layer in model.model.layers[cfg.first_k_dense_replace:]]
    ref = reference_logits(model)
    for h in hooks:
        h.remove()
    return save(model, d, tokenizer_gguf), ref, [s.numpy() for s in scores], stock


@pytest.fixture(scope="module")
def deepseek_v2(tmp_path_factory, synthetic_model):
    root = tmp_path_factory.mktemp("tf_deepseek_v2")
    tok = synthetic_model("qwen3moe-F32")
    return {name: build_deepseek_v2(root / name, tok, **kw) for name, kw in DS2_VARIANTS.items()}


@pytest.mark.parametrize("variant", list(DS2_VARIANTS))
def test_deepseek_v2_matches_transformers(deepseek_v2, tmp_path, variant):
    d, ref, _, _ = deepseek_v2[variant]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "deepseek_v2" and cfg["architectures"] == ["DeepseekV2ForCausalLM"]
    assert (cfg["q_lora_rank"] is None) == (variant == "lite")
    err = rel_rms(invar_logits(d, tmp_path), ref)
    print(f"deepseek_v2 {variant}: rms relative error vs transformers {err:.3g}")
    assert err < TOL, err


def test_deepseek_v2_groups_scored_by_best_expert(deepseek_v2):
    """group_limited_greedy ranks groups by their best expert; V3's rule (the sum of the two
    best) would route some token of this input to other experts (groups of two experts and
    top-3: other groups are other experts), so the match above holds only with the V2 rule
    (measured once with invar built to sum two: 9e-2 off)."""
    _, _, routing, _ = deepseek_v2["v2"]
    groups, used = DS2_VARIANTS["v2"]["n_group"], DS2_VARIANTS["v2"]["topk_group"]
    differ = 0
    for p in routing:
        g = np.sort(p.reshape(len(p), groups, -1), axis=-1)
        by_max = np.sort(np.argsort(-g[..., -1], axis=-1)[:, :used], axis=-1)
        by_sum = np.sort(np.argsort(-(g[..., -1] + g[..., -2]), axis=-1)[:, :used], axis=-1)
        differ += int(np.any(by_max != by_sum, axis=-1).sum())
    print(f"deepseek_v2: {differ} of {sum(map(len, routing))} token-layers get other groups by two-expert sums")
    assert differ > 0


def test_deepseek_v2_yarn_softmax_factor_matters(deepseek_v2, tmp_path):
    """The YaRN softmax factor the reference was given changes the logits far beyond TOL:
    without it (transformers 4.57.1 as shipped) invar's logits would not match."""
    d, _, _, stock = deepseek_v2["v2"]
    if stock is None:
        pytest.skip("this transformers applies the YaRN softmax factor itself")
    err = rel_rms(invar_logits(d, tmp_path), stock)
    print(f"deepseek_v2 v2 vs transformers without the YaRN softmax factor: rms relative error {err:.3g}")
    assert err > 100 * TOL, err


def zero_biases(d: Path) -> dict:
    cfg = json.loads((d / "config.json").read_text())
    return {f"model.layers.{il}.mlp.gate.e_score_correction_bias": np.zeros(cfg["n_routed_experts"], np.float32)
            for il in range(cfg["first_k_dense_replace"], cfg["num_hidden_layers"])}


# Each changes what invar computes on the same weights; the comparison must see it.
DS2_CONTROLS = {
    "routed_scaling_factor dropped": ("v2", dict(config={"routed_scaling_factor": 1.0})),
    "group limit dropped": ("v2", dict(config={"topk_method": "greedy"})),
    "yarn mscale": ("v2", dict(config={"rope_scaling": {"mscale": 1.0, "mscale_all_dim": 1.0}})),
    # the same routing read as V3's with zero biases and one group: only the gating differs
    "sigmoid gating": ("lite", dict(config={"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                                            "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 1,
                                            "topk_group": 1}, add="biases")),
}


@pytest.mark.parametrize("case", list(DS2_CONTROLS))
def test_deepseek_v2_keys_are_compared(deepseek_v2, tmp_path, case):
    variant, edit = DS2_CONTROLS[case]
    d, ref, _, _ = deepseek_v2[variant]
    if edit.get("add") == "biases":
        edit = {**edit, "add": zero_biases(d)}
    err = rel_rms(invar_logits(edited(d, tmp_path, "m", **edit), tmp_path), ref)
    print(f"deepseek_v2 {variant} with {case}: rms relative error {err:.3g}")
    assert err > 100 * TOL, (case, err)


DS2_REFUSED = {
    "scoring_func": ("v2", dict(config={"scoring_func": "sigmoid"}), 'scoring_func must be "softmax"'),
    "topk_method": ("v2", dict(config={"topk_method": "noaux_tc"}),
                    'topk_method must be "greedy" or "group_limited_greedy"'),
    "norm_topk_prob": ("lite", dict(config={"norm_topk_prob": True}),
                       "norm_topk_prob true is not supported for deepseek_v2"),
    "moe_layer_freq": ("lite", dict(config={"moe_layer_freq": 2}), "moe_layer_freq 2 is not supported"),
    "no shared experts": ("lite", dict(config={"n_shared_experts": NULL}), "n_shared_experts null"),
    "groups unnamed": ("v2", dict(config={"n_group": NULL}), "group_limited_greedy needs n_group and topk_group"),
    "too few grouped experts": ("v2", dict(config={"topk_group": 1}),
                                "num_experts_per_tok 3 exceeds the 2 experts of topk_group 1 groups"),
    "rope_interleave": ("lite", dict(config={"rope_interleave": False}), "rope_interleave false: deepseek_v2"),
    "linear rope": ("lite", dict(config={"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
                    "rope scaling type 'linear' is not supported for deepseek_v2"),
    "selection bias": ("lite", dict(add="biases"),
                       "tensor 'model.layers.1.mlp.gate.e_score_correction_bias' has no place"),
    "missing q_proj": ("lite", dict(drop="model.layers.0.self_attn.q_proj.weight"),
                       "missing tensor model.layers.0.self_attn.q_proj.weight (GGUF name blk.0.attn_q.weight)"),
}


@pytest.mark.parametrize("case", list(DS2_REFUSED))
def test_deepseek_v2_refused(deepseek_v2, tmp_path, case):
    variant, edit, message = DS2_REFUSED[case]
    d = deepseek_v2[variant][0]
    if edit.get("add") == "biases":
        edit = {**edit, "add": zero_biases(d)}
    p = run(["logits", "--model", str(edited(d, tmp_path, "m", **edit)), "--tokens", "1,2", "--out",
             str(tmp_path / "x.bin")])
    assert p.returncode != 0 and message in p.stderr, p.stderr


def test_engine_invariance_suite_on_deepseek_v2(deepseek_v2):
    """The engine invariance suite (as test_mla.py runs it on deepseek2 GGUFs) on the V2-like
    directory: routing by group_limited_greedy's best-expert group scores, which no GGUF
    reaches, is a function of the token's row alone too (about 3 s)."""
    from test_moe import run_suite
    out = run_suite("test_engine_invariance", deepseek_v2["v2"][0])
    assert "0/" in out and "batched requests differ from alone" in out, out[-3000:]
    assert "# experts: 8/8 ran with token counts their alone runs never had" in out, out[-3000:]
    if os.environ.get("INVAR_TEST_QUICK", "0") in ("", "0"):
        assert "# negative control (experts combined in load order)" in out, out[-3000:]
