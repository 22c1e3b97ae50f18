"""Shared pytest fixtures: paths, and synthetic GGUF models made once per session.

Environment:
  INVAR_BUILD_DIR  cmake build directory (default <repo>/build)
  INVAR_BIN        invar binary (default $INVAR_BUILD_DIR/invar)
  INVAR_MODEL      default model (default <repo>/models/SmolLM2-135M-Instruct.Q4_1.gguf)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools"
if str(TOOLS_DIR) not in sys.path:  # tools/*.py are importable by tests
    sys.path.insert(0, str(TOOLS_DIR))

BUILD_DIR = Path(os.environ.get("INVAR_BUILD_DIR", str(REPO_ROOT / "build")))
INVAR_BIN = Path(os.environ.get("INVAR_BIN", str(BUILD_DIR / "invar")))
DEFAULT_MODEL = Path(os.environ.get(
    "INVAR_MODEL", str(REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")))

# name -> make_tiny_model.make_model keyword arguments.
SYNTHETIC_VARIANTS = {
    "llama-tied-Q4_1": dict(arch="llama", wtype="Q4_1"),
    "llama-output-Q4_1": dict(arch="llama", wtype="Q4_1", separate_output=True),
    "qwen2-Q4_1": dict(arch="qwen2", wtype="Q4_1"),
    "qwen3-Q4_1": dict(arch="qwen3", wtype="Q4_1"),
    "llama-F32": dict(arch="llama", wtype="F32"),
    "llama-F16": dict(arch="llama", wtype="F16"),
    "llama-BF16": dict(arch="llama", wtype="BF16"),
    "llama-Q8_0": dict(arch="llama", wtype="Q8_0"),
    "llama-Q4_0": dict(arch="llama", wtype="Q4_0"),
    "llama-Q4_K": dict(arch="llama", wtype="Q4_K"),
    "llama-Q6_K": dict(arch="llama", wtype="Q6_K"),
    "qwen2-Q6_K": dict(arch="qwen2", wtype="Q6_K"),
    "qwen3-Q4_K": dict(arch="qwen3", wtype="Q4_K"),
    # a tiny model per new type; vocab=4096 (the first 4096 tokens) keeps each to seconds
    "llama-Q5_0": dict(arch="llama", wtype="Q5_0", vocab=4096),
    "llama-Q5_1": dict(arch="llama", wtype="Q5_1", vocab=4096),
    "llama-IQ4_NL": dict(arch="llama", wtype="IQ4_NL", vocab=4096),
    "llama-Q2_K": dict(arch="llama", wtype="Q2_K", vocab=4096),
    "llama-Q3_K": dict(arch="llama", wtype="Q3_K", vocab=4096),
    "llama-Q5_K": dict(arch="llama", wtype="Q5_K", vocab=4096),
    "llama-IQ4_XS": dict(arch="llama", wtype="IQ4_XS", vocab=4096),
    "llama-MXFP4": dict(arch="llama", wtype="MXFP4", vocab=4096),
    # the mixed files quantisers write (per-tensor types, K-quant token embedding)
    "llama-output-Q4_K_M": dict(arch="llama", wtype="Q4_K_M", separate_output=True, vocab=4096),
    "qwen3-Q5_K_M": dict(arch="qwen3", wtype="Q5_K_M", vocab=4096),
    "llama-output-Q3_K_M": dict(arch="llama", wtype="Q3_K_M", separate_output=True, vocab=4096),
    # every quantised type, one per tensor (test_weight_types.py runs the engine suite on it)
    "llama-output-EVERY": dict(arch="llama", wtype="EVERY", separate_output=True, vocab=4096),
}

# Mixture-of-experts files (tests/python/test_moe.py): kept apart from SYNTHETIC_VARIANTS,
# whose reference test has no allowance for a token routed otherwise at a near tie.
MOE_VARIANTS = {
    "qwen3moe-F32": dict(arch="qwen3moe", wtype="F32", vocab=4096),
    "qwen3moe-nonorm-F32": dict(arch="qwen3moe", wtype="F32", vocab=4096, expert_weights_norm=False),
    "qwen3moe-Q4_1": dict(arch="qwen3moe", wtype="Q4_1", vocab=4096),
    "qwen3moe-Q4_K_M": dict(arch="qwen3moe", wtype="Q4_K_M", vocab=4096),
    # deepseek2 (tests/python/test_mla.py): V2-Lite-like (no q_lora, softmax routing, 2 shared
    # experts) and V3-like (q_lora, sigmoid with groups and the correction bias, 1 shared)
    "deepseek2-lite-F32": dict(arch="deepseek2", wtype="F32", vocab=4096),
    "deepseek2-v3-F32": dict(arch="deepseek2", wtype="F32", vocab=4096, gating="sigmoid", q_lora=64),
    "deepseek2-kvb-F32": dict(arch="deepseek2", wtype="F32", vocab=4096, merged_kv_b=True, q_lora=64),
    "deepseek2-lite-Q8_0": dict(arch="deepseek2", wtype="Q8_0", vocab=4096),
    "deepseek2-v3-Q4_1": dict(arch="deepseek2", wtype="Q4_1", vocab=4096, gating="sigmoid", q_lora=64),
}


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: the bounded server soak test (about 35 s; -m 'not soak' skips it)")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def build_dir() -> Path:
    return BUILD_DIR


@pytest.fixture(scope="session")
def invar_bin() -> Path:
    """Path of the invar binary (may not exist yet: tests decide whether to skip)."""
    return INVAR_BIN


@pytest.fixture(scope="session")
def default_model() -> Path:
    if not DEFAULT_MODEL.is_file():
        pytest.skip(f"default model {DEFAULT_MODEL} missing (set INVAR_MODEL)")
    return DEFAULT_MODEL


@pytest.fixture(scope="session")
def synthetic_model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("synthetic_models")


@pytest.fixture(scope="session")
def synthetic_model(synthetic_model_dir, default_model):
    """Factory: synthetic_model(name) -> Path of that SYNTHETIC_VARIANTS model.

    Each model is written on first use and reused for the rest of the session;
    its tokenizer is copied from the default model, so that model must exist.
    """
    import make_tiny_model

    made: dict[str, Path] = {}

    def get(name: str, seed: int = 1) -> Path:
        key = f"{name}-seed{seed}"
        if key not in made:
            path = synthetic_model_dir / f"{key}.gguf"
            make_tiny_model.make_model(str(path), seed=seed, tokenizer_src=str(default_model),
                                       **{**SYNTHETIC_VARIANTS, **MOE_VARIANTS}[name])
            made[key] = path
        return made[key]

    return get
