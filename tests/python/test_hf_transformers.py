"""Hugging Face directories written by transformers itself, against transformers' forward.

test_hf_model.py checks directories made by our own converter against the GGUF path; a
mistake shared by the converter and the loader (a rope layout, a routing rule) would pass
there. Here a tiny model with random weights is built by transformers (torch, float32, seed
fixed), saved with save_pretrained (safetensors), and invar's logits on that directory are
compared with transformers' own forward on the same token ids. float32 on both sides, but a
different summation order: agreement is asserted as a relative RMS error below TOL over all
positions' logits (measured: about 1e-7); a wrong rope pairing, YaRN factor or routing rule
gives errors of order 1e-1. The tokenizer files are the synthetic models' (vocab 4096): only
the token ids matter here.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import INVAR_BIN

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
    assert err > 100 * TOL, err
