#!/usr/bin/env python3
"""Write GGUF models with random weights in a real architecture's layout.

The files carry complete metadata and the tokenizer of the default SmolLM2
model (vocab 49152), so a real loader (llama.cpp, invar) accepts them.  They
exist to test the engine's forward pass on every architecture and weight type
against tools/reference_forward.py without shipping large real checkpoints.

Usage:
  python tools/make_tiny_model.py --arch llama|qwen2|qwen3|qwen3moe|deepseek2 --type Q4_1 \
      --seed 1 --out PATH [--separate-output] [--shape tiny|smollm2-135m|smollm2-1.7b|llama-3-8b] \
      [--embd-type Q8_0] [--vocab N]

qwen3moe is qwen3 (QK-norm) with every FFN routed: a float32 router
ffn_gate_inp [n_expert, n_embd] and the experts' gate/up/down as 3-D tensors
ffn_{gate,up,down}_exps (ggml ne [n_embd, n_ff_exp, n_expert] and
[n_ff_exp, n_embd, n_expert]), with the expert_count / expert_used_count /
expert_feed_forward_length keys of llama.cpp's converter (tiny: 8 experts, 4
used; --expert-weights-norm true|false also writes that key).

deepseek2 (DeepSeek-V2/V2-Lite/V3: multi-head latent attention and routed
experts with shared ones) in llama.cpp's current layout: attn_q (q_lora 0, as
V2-Lite) or attn_q_a / attn_q_a_norm / attn_q_b (--q-lora N, as V3),
attn_kv_a_mqa [kv_lora + rope, n_embd], attn_kv_a_norm, attn_k_b
[n_head, kv_lora, qk_nope] and attn_v_b [n_head, v_dim, kv_lora] with the
key_length_mla / value_length_mla keys (--merged-kv-b: the older single
attn_kv_b [n_head (qk_nope + v_dim), kv_lora] with per-head key/value lengths),
one leading dense layer, then routed layers with exp_probs_b, ffn_*_exps and
ffn_*_shexp; YaRN rope scaling.  --gating softmax (V2-Lite: no groups, no
bias, no normalisation, 2 shared experts) or sigmoid (V3: 4 groups of 2 used,
the score-correction bias, normalised weights times 2.5, 1 shared expert).

--vocab N keeps only the first N tokens of the copied vocabulary (and the
merges among them): a model whose logits and sampling cost almost nothing, for
the invariance fuzzer (tests/fuzz/fuzz_invariance.c).

Weight types: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 (quantised from Gaussian
weights with gguf.quants.quantize) and Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS
(gguf-py cannot quantise these, so valid blocks are written directly from
random quants and moderate scales, following the ggml block layouts; the
weights' true values are whatever gguf.quants.dequantize yields), and MXFP4
the same way (gguf-py 0.17 has no MXFP4 type: tools/gguf_mxfp4.py registers
it and dequantises it).

Mixes, as llama.cpp's quantiser writes them (per-tensor types; the layer
choice follows its "more bits for attn_v/ffn_down in the first, last and every
third layer" rule): Q4_K_M (Q4_K, with Q6_K for those attn_v/ffn_down and the
output), Q5_K_M (Q5_K / Q6_K likewise), Q3_K_M (Q3_K; attn_v and those ffn_down
Q5_K / Q4_K, attn_output Q4_K, output Q6_K).  EVERY (for tests) gives each
tensor the next of all the quantised types above in turn.

K-quant blocks hold 256 values along a row, so the tiny shape widens to
n_embd=256 / n_ff=512 for K types; for the SmolLM2 shape (n_embd 576, which is
not a multiple of 256) rows that don't fit fall back to Q8_0, as llama.cpp's
quantiser also falls back for such rows.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

import gguf_mxfp4  # registers MXFP4 where gguf-py lacks it

DEFAULT_TOKENIZER_MODEL = os.environ.get(
    "INVAR_MODEL",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))

ARCHES = ("llama", "qwen2", "qwen3", "qwen3moe", "deepseek2")
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K",
         "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q5_K", "IQ4_NL", "IQ4_XS", "MXFP4")
MIXES = ("Q4_K_M", "Q5_K_M", "Q3_K_M", "EVERY")
# EVERY: each quantised type in turn, one per tensor (tests: one small file, all kernels).
EVERY_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
               "IQ4_XS")
_ROLES = ("token_embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output")
K_TYPES = ("Q4_K", "Q6_K", "Q2_K", "Q3_K", "Q5_K", "IQ4_XS") + MIXES  # 256-element rows
QK_K = 256

FILE_TYPE = {
    "F32": gguf.LlamaFileType.ALL_F32,
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "BF16": gguf.LlamaFileType.MOSTLY_BF16,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "Q6_K": gguf.LlamaFileType.MOSTLY_Q6_K,
    "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0,
    "Q5_1": gguf.LlamaFileType.MOSTLY_Q5_1,
    "Q2_K": gguf.LlamaFileType.MOSTLY_Q2_K,
    "Q3_K": gguf.LlamaFileType.MOSTLY_Q3_K_S,
    "Q5_K": gguf.LlamaFileType.MOSTLY_Q5_K_S,
    "IQ4_NL": gguf.LlamaFileType.MOSTLY_IQ4_NL,
    "IQ4_XS": gguf.LlamaFileType.MOSTLY_IQ4_XS,
    "MXFP4": gguf.LlamaFileType.GUESSED,
    "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "Q5_K_M": gguf.LlamaFileType.MOSTLY_Q5_K_M,
    "Q3_K_M": gguf.LlamaFileType.MOSTLY_Q3_K_M,
    "EVERY": gguf.LlamaFileType.GUESSED,
}


def mix_type(mix: str, role: str, layer: int, n_layer: int) -> str:
    """Per-tensor type of a K-quant mix (role: attn_q/k/v/output, ffn_gate/up/down, output)."""
    more_bits = layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2
    if mix == "Q4_K_M":
        return "Q6_K" if role == "output" or (role in ("attn_v", "ffn_down") and more_bits) else "Q4_K"
    if mix == "Q5_K_M":
        return "Q6_K" if role == "output" or (role in ("attn_v", "ffn_down") and more_bits) else "Q5_K"
    if mix == "EVERY":
        role = role.replace("_exps", "")  # an expert tensor takes its dense role's turn
        slot = 0 if role == "token_embd" else 1 + 7 * n_layer if role == "output" else 7 * layer + _ROLES.index(role)
        return EVERY_TYPES[slot % len(EVERY_TYPES)]
    if mix == "Q3_K_M":
        if role == "output":
            return "Q6_K"
        if role == "attn_v" or (role == "ffn_down" and more_bits):
            return "Q5_K" if layer < 2 else "Q4_K"
        if role in ("attn_output", "ffn_down"):
            return "Q4_K"
        return "Q3_K"
    return mix


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int
    head_dim: int  # may differ from n_embd / n_head (qwen3)
    rope_base: float
    rms_eps: float
    n_expert: int = 0  # qwen3moe: experts per layer, used per token, expert FFN width
    n_expert_used: int = 0
    n_ff_exp: int = 0
    # deepseek2: MLA ranks and per-head dims (head_dim is then unused), routing
    q_lora: int = 0
    kv_lora: int = 0
    n_rot: int = 0
    qk_nope: int = 0
    v_dim: int = 0
    n_layer_dense: int = 0
    yarn_factor: float = 4.0  # deepseek2's YaRN scaling and original context
    yarn_orig_ctx: int = 256
    n_vocab: int = 0  # > the tokenizer's: padded with unused control tokens


# deepseek2's tiny shape: widths multiples of 32 (every k a Q8_0/Q4_1 row holds; n_embd 256: eight
# blocks per row, so a negative control's K split can regroup them), a latent
# head of 64 + 16, per-head q/k of 32 + 16 and values of 32; 8 experts of 64.
DEEPSEEK2_TINY = dict(n_embd=256, n_layer=3, n_head=4, n_head_kv=4, n_ff=512, n_ctx=1024, head_dim=48,
                      rope_base=10000.0, rms_eps=1e-6, n_expert=8, n_ff_exp=64, kv_lora=64, n_rot=16,
                      qk_nope=32, v_dim=32, n_layer_dense=1)


def tiny_shape(arch: str, wtype: str) -> Shape:
    if arch == "deepseek2":
        if wtype in K_TYPES:
            raise ValueError("deepseek2's tiny shape has 32-wide rows: use F32, F16, Q8_0, Q4_0, Q4_1, ...")
        return Shape(**DEEPSEEK2_TINY)
    wide = wtype in K_TYPES  # K-quant rows must be multiples of 256
    n_embd = 256 if wide else 128
    n_ff = 512 if wide else 256
    head_dim = n_embd // 4
    if arch in ("qwen3", "qwen3moe"):
        head_dim = 64 if not wide else 128  # != n_embd/n_head on purpose
    moe = arch == "qwen3moe"
    return Shape(n_embd=n_embd, n_layer=2 if arch in ("llama", "qwen3moe") else 3, n_head=4,
                 n_head_kv=2, n_ff=n_ff, n_ctx=1024 if moe else 512, head_dim=head_dim,
                 rope_base=10000.0 if arch == "llama" else 1000000.0,
                 rms_eps=1e-5 if arch == "llama" else 1e-6,
                 n_expert=8 if moe else 0, n_expert_used=4 if moe else 0,
                 n_ff_exp=(256 if wide else 64) if moe else 0)


SMOLLM2_135M = Shape(n_embd=576, n_layer=30, n_head=9, n_head_kv=3, n_ff=1536,
                     n_ctx=8192, head_dim=64, rope_base=100000.0, rms_eps=1e-5)
# SmolLM2-1.7B's shape (tied output): weights of about 1 GB in Q4_K_M, far larger than the
# cache, for the CPU decode benchmark (bench/README.md).
SMOLLM2_1_7B = Shape(n_embd=2048, n_layer=24, n_head=32, n_head_kv=32, n_ff=8192,
                     n_ctx=8192, head_dim=64, rope_base=130000.0, rms_eps=1e-5)
# Llama-3-8B's shape (its config.json): GQA 4:1 with head_dim 128, FFN 14336, an untied
# output head over a vocabulary of 128256 (the tokenizer padded with unused control
# tokens): about 4.9 GB in Q4_K_M, written through a temporary file. Use --separate-output.
LLAMA3_8B = Shape(n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, n_ff=14336,
                  n_ctx=8192, head_dim=128, rope_base=500000.0, rms_eps=1e-5, n_vocab=128256)
NAMED_SHAPES = {"smollm2-135m": SMOLLM2_135M, "smollm2-1.7b": SMOLLM2_1_7B, "llama3-8b": LLAMA3_8B,
                "llama-3-8b": LLAMA3_8B}  # the second spelling: the model's own name
# DeepSeek-V2-Lite's shape (its config.json): 27 layers, the first dense, 64 routed experts
# of 1408 (6 used, softmax, not normalised, scale 1) plus 2 shared, MLA without a query
# bottleneck, YaRN x40 over 4096. 15.7B parameters (2.4B active): about 8.5 GB in Q4_K, for
# the CPU benchmark only (bench/moe_bench.py), written tensor by tensor through a temporary
# file, so it never sits in memory.
DEEPSEEK_V2_LITE = Shape(n_embd=2048, n_layer=27, n_head=16, n_head_kv=16, n_ff=10944, n_ctx=163840,
                         head_dim=192, rope_base=10000.0, rms_eps=1e-6, n_expert=64, n_expert_used=6,
                         n_ff_exp=1408, kv_lora=512, n_rot=64, qk_nope=128, v_dim=128, n_layer_dense=1,
                         yarn_factor=40.0, yarn_orig_ctx=4096, n_vocab=102400)
DEEPSEEK2_SHAPES = {"deepseek-v2-lite": DEEPSEEK_V2_LITE}

# Small shapes the GPU kernels take (head_dim 64 or 128, widths multiples of 256 so every
# weight type fits): the second is Llama-3-8B's head layout (GQA 4:1, head_dim 128).
GPU_SHAPES = {
    "gpu-hd64": Shape(n_embd=256, n_layer=3, n_head=4, n_head_kv=2, n_ff=768,
                      n_ctx=4096, head_dim=64, rope_base=10000.0, rms_eps=1e-5),
    "gpu-hd128": Shape(n_embd=1024, n_layer=3, n_head=8, n_head_kv=2, n_ff=2048,
                       n_ctx=8192, head_dim=128, rope_base=500000.0, rms_eps=1e-5),
}


# ---------------------------------------------------------------- tokenizer

_tokenizer_cache: dict[str, list] = {}


def truncate_vocab(tok: list, n: int) -> list:
    """tokenizer.* fields with the first n tokens, the merges among them, and the special ids below n."""
    tokens = next(v for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    if not 0 < n <= len(tokens):
        raise ValueError(f"--vocab must be in 1..{len(tokens)}")
    kept = set(tokens[:n])
    out = []
    for key, val, vtype, sub in tok:
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            val = val[:n]
        elif key == "tokenizer.ggml.merges":
            val = [m for m in val if " " in m and all(p in kept for p in m.split(" ", 1))
                   and m.replace(" ", "", 1) in kept]
        elif key.endswith("_token_id") and val >= n:
            continue
        out.append((key, val, vtype, sub))
    return out


def pad_vocab(tok: list, n: int) -> list:
    """The vocabulary padded to n tokens with unused control tokens (a model's real size)."""
    out = []
    for key, val, vtype, sub in tok:
        extra = n - len(val) if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                        "tokenizer.ggml.scores") else 0
        if key == "tokenizer.ggml.tokens":
            val = list(val) + [f"<|invar_pad_{i}|>" for i in range(extra)]
        elif key == "tokenizer.ggml.token_type":
            val = list(val) + [3] * extra
        elif key == "tokenizer.ggml.scores":
            val = list(val) + [0.0] * extra
        out.append((key, val, vtype, sub))
    return out


def tokenizer_fields(src_path: str) -> list:
    """(key, value, type, sub_type) for every tokenizer.* key of src_path."""
    if src_path not in _tokenizer_cache:
        reader = gguf.GGUFReader(src_path)
        out = []
        for key, field in reader.fields.items():
            if not key.startswith("tokenizer."):
                continue
            vtype = field.types[0]
            sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
            out.append((key, field.contents(), vtype, sub))
        _tokenizer_cache[src_path] = out
    return _tokenizer_cache[src_path]


# ---------------------------------------------------------------- K-quants

def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).view(np.uint8).reshape(-1, 2)


def _pack_q4k_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """Pack 8 six-bit scales and 8 six-bit mins per block into 12 bytes."""
    sc = sc.astype(np.uint8)
    mn = mn.astype(np.uint8)
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 0x3F) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (mn[:, 0:4] & 0x3F) | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((mn[:, 4:8] & 0x0F) << 4)
    return out


def random_q4_k(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Valid Q4_K blocks: value = d*sc*q - dmin*m, q in 0..15, roughly zero-mean."""
    nb = rows * cols // QK_K
    sc = rng.integers(16, 64, size=(nb, 8))
    # dmin = 8*d makes m ~ sc*7.5/8 <= 59 centre each 32-sub-block near zero.
    mn = np.clip(np.rint(sc * 7.5 / 8 + rng.integers(-2, 3, size=(nb, 8))), 0, 63)
    # std of d*sc*q is about d*sc*4.6; pick d so the tensor std is ~std.
    d = (std / (40 * 4.6)) * rng.uniform(0.7, 1.3, size=nb)
    dmin = 8 * d
    qs = rng.integers(0, 256, size=(nb, QK_K // 2), dtype=np.uint8)
    blocks = np.concatenate([_f16_bytes(d), _f16_bytes(dmin),
                             _pack_q4k_scales(sc, mn), qs], axis=1)
    assert blocks.shape[1] == gguf.GGML_QUANT_SIZES[QT.Q4_K][1]
    return blocks.reshape(rows, -1)


def random_q6_k(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Valid Q6_K blocks: value = d*scale*(q-32), q in 0..63, signed int8 scales."""
    nb = rows * cols // QK_K
    ql = rng.integers(0, 256, size=(nb, QK_K // 2), dtype=np.uint8)
    qh = rng.integers(0, 256, size=(nb, QK_K // 4), dtype=np.uint8)
    mag = rng.integers(8, 41, size=(nb, QK_K // 16))
    sign = np.where(rng.random((nb, QK_K // 16)) < 0.5, -1, 1)
    scales = (mag * sign).astype(np.int8).view(np.uint8)
    # std of scale*(q-32) is about 25*18.5.
    d = (std / (25 * 18.5)) * rng.uniform(0.7, 1.3, size=nb)
    blocks = np.concatenate([ql, qh, scales, _f16_bytes(d)], axis=1)
    assert blocks.shape[1] == gguf.GGML_QUANT_SIZES[QT.Q6_K][1]
    return blocks.reshape(rows, -1)


def _blocks(nb: int, *parts: np.ndarray, qtype) -> np.ndarray:
    out = np.concatenate([p.reshape(nb, -1).astype(np.uint8) for p in parts], axis=1)
    assert out.shape[1] == gguf.GGML_QUANT_SIZES[qtype][1], qtype
    return out


def _bytes(rng: np.random.Generator, nb: int, n: int) -> np.ndarray:
    return rng.integers(0, 256, size=(nb, n), dtype=np.uint8)


def random_q2_k(rng, rows, cols, std):
    """Q2_K: value = d*sc*q - dmin*m per 16, q in 0..3; m ~ 1.5 sc centres each group."""
    nb = rows * cols // QK_K
    sc = rng.integers(6, 11, size=(nb, 16))
    mn = np.clip(np.rint(sc * 1.5), 0, 15)
    d = (std / 9.0) * rng.uniform(0.7, 1.3, size=nb)
    scales = (sc | (mn.astype(np.int64) << 4)).astype(np.uint8)
    return _blocks(nb, scales, _bytes(rng, nb, 64), _f16_bytes(d), _f16_bytes(d), qtype=QT.Q2_K).reshape(rows, -1)


def random_q3_k(rng, rows, cols, std):
    """Q3_K: value = d*(u-32)*q per 16, q in -4..3, u six-bit; |u-32| in 8..31 of either sign."""
    nb = rows * cols // QK_K
    mag = rng.integers(8, 32, size=(nb, 16))
    u = np.where(rng.random((nb, 16)) < 0.5, 32 - mag, 32 + np.minimum(mag, 31)).astype(np.uint8)
    sc = np.empty((nb, 12), dtype=np.uint8)
    sc[:, 0:8] = (u[:, 0:8] & 0x0F) | ((u[:, 8:16] & 0x0F) << 4)
    hi = (u >> 4) & 3
    sc[:, 8:12] = hi[:, 0:4] | (hi[:, 4:8] << 2) | (hi[:, 8:12] << 4) | (hi[:, 12:16] << 6)
    d = (std / 46.0) * rng.uniform(0.7, 1.3, size=nb)
    return _blocks(nb, _bytes(rng, nb, 32), _bytes(rng, nb, 64), sc, _f16_bytes(d), qtype=QT.Q3_K).reshape(rows, -1)


def random_q5_k(rng, rows, cols, std):
    """Q5_K: as Q4_K with q in 0..31 (fifth bits in qh); dmin = 16 d centres each 32."""
    nb = rows * cols // QK_K
    sc = rng.integers(16, 64, size=(nb, 8))
    mn = np.clip(np.rint(sc * 15.5 / 16 + rng.integers(-2, 3, size=(nb, 8))), 0, 63)
    d = (std / (40 * 9.2)) * rng.uniform(0.7, 1.3, size=nb)
    return _blocks(nb, _f16_bytes(d), _f16_bytes(16 * d), _pack_q4k_scales(sc, mn), _bytes(rng, nb, 32),
                   _bytes(rng, nb, 128), qtype=QT.Q5_K).reshape(rows, -1)


def random_iq4_nl(rng, rows, cols, std):
    """IQ4_NL: value = d * codebook[nibble] (codebook std ~ 66)."""
    nb = rows * cols // 32
    d = (std / 66.0) * rng.uniform(0.7, 1.3, size=nb)
    return _blocks(nb, _f16_bytes(d), _bytes(rng, nb, 16), qtype=QT.IQ4_NL).reshape(rows, -1)


def random_iq4_xs(rng, rows, cols, std):
    """IQ4_XS: value = d*(u-32)*codebook[nibble] per 32, u six-bit; |u-32| in 8..31."""
    nb = rows * cols // QK_K
    mag = rng.integers(8, 32, size=(nb, 8))
    u = np.where(rng.random((nb, 8)) < 0.5, 32 - mag, 32 + np.minimum(mag, 31)).astype(np.uint16)
    lo = (u & 0x0F).astype(np.uint8)
    scales_l = lo[:, 0::2] | (lo[:, 1::2] << 4)
    sh = np.zeros(nb, dtype=np.uint16)
    for j in range(8):
        sh |= ((u[:, j] >> 4) & 3) << (2 * j)
    d = (std / (20 * 66.0)) * rng.uniform(0.7, 1.3, size=nb)
    return _blocks(nb, _f16_bytes(d), sh.view(np.uint8).reshape(nb, 2), scales_l, _bytes(rng, nb, 128),
                   qtype=QT.IQ4_XS).reshape(rows, -1)


RANDOM_BLOCKS = {"Q4_K": random_q4_k, "Q6_K": random_q6_k, "Q2_K": random_q2_k, "Q3_K": random_q3_k,
                 "Q5_K": random_q5_k, "IQ4_NL": random_iq4_nl, "IQ4_XS": random_iq4_xs,
                 "MXFP4": gguf_mxfp4.random_mxfp4}


# ---------------------------------------------------------------- tensors

def random_q4_0(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Valid Q4_0 blocks straight from random nibbles: value = d*(q-8), std of q-8 about 4.6."""
    nb = rows * cols // 32
    d = (std / 4.6) * rng.uniform(0.7, 1.3, size=nb)
    qs = rng.integers(0, 256, size=(nb, 16), dtype=np.uint8)
    return _blocks(nb, _f16_bytes(d), qs, qtype=QT.Q4_0).reshape(rows, -1)


def encode(rng: np.random.Generator, rows: int, cols: int, std: float, wtype: str, fallback: str = "Q8_0"):
    """Random [rows, cols] matrix in wtype: (array, raw_dtype or None, type used).  K-quant
    rows that are not a multiple of 256 long fall back to `fallback` (as a real quantiser
    falls back for short rows); "Q4_0r" is Q4_0 from random blocks (fast at any size)."""
    if wtype in K_TYPES and cols % QK_K != 0:
        wtype = fallback
    if wtype == "Q4_0r":
        return random_q4_0(rng, rows, cols, std), QT.Q4_0, "Q4_0"
    if wtype in RANDOM_BLOCKS:
        return RANDOM_BLOCKS[wtype](rng, rows, cols, std), QT[wtype], wtype
    w = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
    if wtype == "F32":
        return w, None, wtype
    if wtype == "F16":
        return w.astype(np.float16), None, wtype
    qt = QT[wtype]
    return gguf.quants.quantize(w, qt), qt, wtype


def default_embd_type(wtype: str) -> str:
    # Quantised real models usually keep the embedding at 8 bits.
    return wtype if wtype in ("F32", "F16", "BF16") else "Q8_0"


def write_and_close(w: "gguf.GGUFWriter") -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_model(out: str, arch: str = "llama", wtype: str = "Q4_1", seed: int = 1,
               separate_output: bool = False, shape: str = "tiny",
               embd_type: str | None = None,
               tokenizer_src: str = DEFAULT_TOKENIZER_MODEL, quiet: bool = True,
               vocab: int | None = None, expert_weights_norm: bool | None = None,
               gating: str = "softmax", q_lora: int = 0, merged_kv_b: bool = False) -> str:
    if arch not in ARCHES:
        raise ValueError(f"unknown arch {arch!r}")
    if wtype not in TYPES + MIXES:
        raise ValueError(f"unknown weight type {wtype!r}")
    mix_output = wtype in MIXES and embd_type is None  # the mix picks token_embd / output types
    embd_type = embd_type or (wtype if mix_output else default_embd_type(wtype))
    if shape == "tiny":
        s = tiny_shape(arch, wtype)
    elif shape in DEEPSEEK2_SHAPES:
        if arch != "deepseek2":
            raise ValueError(f"shape {shape} is deepseek2's")
        s = DEEPSEEK2_SHAPES[shape]
    elif shape in NAMED_SHAPES or shape in GPU_SHAPES:
        s = NAMED_SHAPES[shape] if shape in NAMED_SHAPES else GPU_SHAPES[shape]
        if arch in ("qwen3", "qwen3moe"):
            s = replace(s, rms_eps=1e-6)
        if arch == "qwen3moe":
            s = replace(s, n_expert=8, n_expert_used=4, n_ff_exp=s.n_ff // 2)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    if arch == "deepseek2":
        if shape in DEEPSEEK2_SHAPES:
            if gating != "softmax" or q_lora or merged_kv_b:
                raise ValueError(f"deepseek2 {shape}: V2-Lite's softmax routing, no q_lora, split k_b/v_b only")
            return _make_deepseek2(out, DEEPSEEK2_SHAPES[shape], wtype, seed, separate_output, embd_type,
                                   tokenizer_src, quiet, vocab, gating, merged_kv_b, big=True)
        if shape != "tiny":
            raise ValueError(f"deepseek2: shape tiny or {', '.join(DEEPSEEK2_SHAPES)}")
        s = replace(s, q_lora=q_lora, n_expert_used=4 if gating == "softmax" else 3)  # >= 3: order matters
        return _make_deepseek2(out, s, wtype, seed, separate_output, embd_type, tokenizer_src, quiet, vocab,
                               gating, merged_kv_b)

    tok = tokenizer_fields(tokenizer_src)
    if vocab is not None:
        tok = truncate_vocab(tok, vocab)
    if s.n_vocab:
        tok = pad_vocab(tok, s.n_vocab)
    n_vocab = next(len(v) for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    rng = np.random.default_rng(seed)
    big = s.n_layer * s.n_embd * s.n_ff > 1 << 31  # benchmark-sized: spill tensors to a temporary file
    w = gguf.GGUFWriter(out, arch, use_temp_file=big)

    w.add_name(f"invar-synthetic-{arch}-{shape}-{wtype}-seed{seed}")
    w.add_type("model")
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_rope_dimension_count(s.head_dim)
    w.add_vocab_size(n_vocab)
    if s.n_expert:
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(s.n_expert_used)
        w.add_expert_feed_forward_length(s.n_ff_exp)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
        if expert_weights_norm is not None:
            w.add_expert_weights_norm(expert_weights_norm)
    if arch in ("qwen3", "qwen3moe") or s.head_dim * s.n_head != s.n_embd:
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
    w.add_file_type(FILE_TYPE[wtype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, val, vtype, sub in tok:
        w.add_key_value(key, val, vtype, sub_type=sub)

    used: dict[str, int] = {}

    def add(name: str, rows: int, cols: int, std: float, t: str) -> None:
        if t in MIXES:  # the mix's type for this tensor
            parts = name.split(".")
            layer = int(parts[1]) if parts[0] == "blk" else 0
            t = mix_type(t, parts[2] if parts[0] == "blk" else parts[0], layer, s.n_layer)
        arr, raw, t_used = encode(rng, rows, cols, std, t)
        used[t_used] = used.get(t_used, 0) + 1
        w.add_tensor(name, arr, raw_dtype=raw)

    def add_experts(name: str, rows: int, cols: int, std: float, t: str) -> None:
        """[n_expert, rows, cols]: the experts' matrices one after another."""
        if t in MIXES:
            t = mix_type(t, name.split(".")[2], int(name.split(".")[1]), s.n_layer)
        arr, raw, t_used = encode(rng, s.n_expert * rows, cols, std, t)
        used[t_used] = used.get(t_used, 0) + 1
        w.add_tensor(name, arr.reshape(s.n_expert, rows, -1), raw_dtype=raw)

    def add_f32(name: str, arr: np.ndarray) -> None:
        w.add_tensor(name, arr.astype(np.float32))

    def norm_weight(n: int) -> np.ndarray:
        return 1.0 + 0.1 * rng.standard_normal(n)

    d, hd = s.n_embd, s.head_dim
    q_dim, kv_dim = s.n_head * hd, s.n_head_kv * hd
    # std ~ 0.5..1 / sqrt(fan_in) keeps the residual stream well-behaved.
    add("token_embd.weight", n_vocab, d, 0.05, embd_type)
    for i in range(s.n_layer):
        p = f"blk.{i}."
        add_f32(p + "attn_norm.weight", norm_weight(d))
        add(p + "attn_q.weight", q_dim, d, 1.0 / np.sqrt(d), wtype)
        add(p + "attn_k.weight", kv_dim, d, 1.0 / np.sqrt(d), wtype)
        add(p + "attn_v.weight", kv_dim, d, 1.0 / np.sqrt(d), wtype)
        if arch == "qwen2":
            add_f32(p + "attn_q.bias", 0.1 * rng.standard_normal(q_dim))
            add_f32(p + "attn_k.bias", 0.1 * rng.standard_normal(kv_dim))
            add_f32(p + "attn_v.bias", 0.1 * rng.standard_normal(kv_dim))
        if arch in ("qwen3", "qwen3moe"):
            add_f32(p + "attn_q_norm.weight", norm_weight(hd))
            add_f32(p + "attn_k_norm.weight", norm_weight(hd))
        add(p + "attn_output.weight", d, q_dim, 0.5 / np.sqrt(q_dim), wtype)
        add_f32(p + "ffn_norm.weight", norm_weight(d))
        if s.n_expert:
            # router logits of std ~2: tokens spread over the experts, with clear top-k choices
            add_f32(p + "ffn_gate_inp.weight", 2.0 / np.sqrt(d) * rng.standard_normal((s.n_expert, d)))
            add_experts(p + "ffn_gate_exps.weight", s.n_ff_exp, d, 1.0 / np.sqrt(d), wtype)
            add_experts(p + "ffn_up_exps.weight", s.n_ff_exp, d, 1.0 / np.sqrt(d), wtype)
            add_experts(p + "ffn_down_exps.weight", d, s.n_ff_exp, 0.5 / np.sqrt(s.n_ff_exp), wtype)
            continue
        add(p + "ffn_gate.weight", s.n_ff, d, 1.0 / np.sqrt(d), wtype)
        add(p + "ffn_up.weight", s.n_ff, d, 1.0 / np.sqrt(d), wtype)
        add(p + "ffn_down.weight", d, s.n_ff, 0.5 / np.sqrt(s.n_ff), wtype)
    add_f32("output_norm.weight", norm_weight(d))
    if separate_output:
        add("output.weight", n_vocab, d, 0.05, embd_type)

    write_and_close(w)
    if not quiet:
        print(f"wrote {out}: arch={arch} shape={shape} n_embd={d} layers={s.n_layer} "
              f"head_dim={hd} types={used}", file=sys.stderr)
    return out


def _make_deepseek2(out: str, s: Shape, wtype: str, seed: int, separate_output: bool, embd_type: str,
                    tokenizer_src: str, quiet: bool, vocab: int | None, gating: str, merged_kv_b: bool,
                    big: bool = False) -> str:
    """deepseek2 in llama.cpp's layout (the module docstring); gating softmax or sigmoid.
    big: a benchmark-sized file: tensors spill to a temporary file as they are made, and
    K-quant rows not a multiple of 256 long (k_b's 128, the experts' down 1408, the dense
    down 10944) are random Q4_0 blocks (llama.cpp's quantiser would pick Q5_0, which
    invar's kernels decode on a slower generic path; Q4_0 keeps the file the same size)."""
    if gating not in ("softmax", "sigmoid"):
        raise ValueError(f"unknown gating {gating!r}")
    v3 = gating == "sigmoid"
    n_shared = 1 if v3 else 2
    tok = tokenizer_fields(tokenizer_src)
    if vocab is not None:
        tok = truncate_vocab(tok, vocab)
    if s.n_vocab:
        tok = pad_vocab(tok, s.n_vocab)
    n_vocab = next(len(v) for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")
    rng = np.random.default_rng(seed)
    arch = "deepseek2"
    w = gguf.GGUFWriter(out, arch, use_temp_file=big)
    fallback = "Q4_0r" if big else "Q8_0"
    H, R, rope, nope, vd, d = s.n_head, s.kv_lora, s.n_rot, s.qk_nope, s.v_dim, s.n_embd
    w.add_name(f"invar-synthetic-{arch}-{gating}-q{s.q_lora}-{wtype}-seed{seed}")
    w.add_type("model")
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(d)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(H)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_vocab_size(n_vocab)
    w.add_leading_dense_block_count(s.n_layer_dense)
    if s.q_lora:
        w.add_q_lora_rank(s.q_lora)
    w.add_kv_lora_rank(R)
    if merged_kv_b:  # older files: the per-head sizes, one KV head per query head
        w.add_head_count_kv(H)
        w.add_key_length(nope + rope)
        w.add_value_length(vd)
    else:  # llama.cpp's current converter: the latent cache's view, per-head sizes apart
        w.add_head_count_kv(1)
        w.add_key_length(R + rope)
        w.add_value_length(R)
        w.add_key_length_mla(nope + rope)
        w.add_value_length_mla(vd)
    w.add_rope_dimension_count(rope)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(s.yarn_factor)
    w.add_rope_scaling_orig_ctx_len(s.yarn_orig_ctx)
    w.add_rope_scaling_yarn_log_mul(0.1 * 0.707)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_shared_count(n_shared)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    w.add_expert_weights_scale(2.5 if v3 else 1.0)
    w.add_expert_weights_norm(v3)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if v3 else gguf.ExpertGatingFuncType.SOFTMAX)
    if v3:  # group-limited top-k (gguf-py 0.17 has no writer method for these keys)
        w.add_uint32(f"{arch}.expert_group_count", 4)
        w.add_uint32(f"{arch}.expert_group_used_count", 2)
        w.add_uint32(f"{arch}.nextn_predict_layers", 0)  # as converters that keep V3's MTP layers write it
    w.add_file_type(FILE_TYPE[wtype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, val, vtype, sub in tok:
        w.add_key_value(key, val, vtype, sub_type=sub)

    def add(name: str, rows: int, cols: int, std: float, t: str = wtype) -> None:
        arr, raw, _ = encode(rng, rows, cols, std, t, fallback)
        w.add_tensor(name, arr, raw_dtype=raw)

    def add_stack(name: str, n: int, rows: int, cols: int, std: float) -> None:
        arr, raw, _ = encode(rng, n * rows, cols, std, wtype, fallback)
        w.add_tensor(name, arr.reshape(n, rows, -1), raw_dtype=raw)

    def add_f32(name: str, arr: np.ndarray) -> None:
        w.add_tensor(name, np.asarray(arr, dtype=np.float32))

    def norm_weight(n: int) -> np.ndarray:
        return 1.0 + 0.1 * rng.standard_normal(n)

    qk = nope + rope
    add("token_embd.weight", n_vocab, d, 0.05, embd_type)
    for i in range(s.n_layer):
        p = f"blk.{i}."
        add_f32(p + "attn_norm.weight", norm_weight(d))
        if s.q_lora:
            add(p + "attn_q_a.weight", s.q_lora, d, 1.0 / np.sqrt(d))
            add_f32(p + "attn_q_a_norm.weight", norm_weight(s.q_lora))
            add(p + "attn_q_b.weight", H * qk, s.q_lora, 1.0 / np.sqrt(s.q_lora))
        else:
            add(p + "attn_q.weight", H * qk, d, 1.0 / np.sqrt(d))
        add(p + "attn_kv_a_mqa.weight", R + rope, d, 1.0 / np.sqrt(d))
        add_f32(p + "attn_kv_a_norm.weight", norm_weight(R))
        if merged_kv_b:
            add(p + "attn_kv_b.weight", H * (nope + vd), R, 1.0 / np.sqrt(R))
        else:
            add_stack(p + "attn_k_b.weight", H, R, nope, 1.0 / np.sqrt(R))
            add_stack(p + "attn_v_b.weight", H, vd, R, 1.0 / np.sqrt(R))
        add(p + "attn_output.weight", d, H * vd, 0.5 / np.sqrt(H * vd))
        add_f32(p + "ffn_norm.weight", norm_weight(d))
        if i < s.n_layer_dense:
            add(p + "ffn_gate.weight", s.n_ff, d, 1.0 / np.sqrt(d))
            add(p + "ffn_up.weight", s.n_ff, d, 1.0 / np.sqrt(d))
            add(p + "ffn_down.weight", d, s.n_ff, 0.5 / np.sqrt(s.n_ff))
            continue
        # router logits of std ~2 (softmax) / ~1 (sigmoid): tokens spread over the experts
        add_f32(p + "ffn_gate_inp.weight", (1.0 if v3 else 2.0) / np.sqrt(d) * rng.standard_normal((s.n_expert, d)))
        if v3:
            add_f32(p + "exp_probs_b.bias", 0.1 * rng.standard_normal(s.n_expert))
        add_stack(p + "ffn_gate_exps.weight", s.n_expert, s.n_ff_exp, d, 1.0 / np.sqrt(d))
        add_stack(p + "ffn_up_exps.weight", s.n_expert, s.n_ff_exp, d, 1.0 / np.sqrt(d))
        add_stack(p + "ffn_down_exps.weight", s.n_expert, d, s.n_ff_exp, 0.5 / np.sqrt(s.n_ff_exp))
        fs = s.n_ff_exp * n_shared
        add(p + "ffn_gate_shexp.weight", fs, d, 1.0 / np.sqrt(d))
        add(p + "ffn_up_shexp.weight", fs, d, 1.0 / np.sqrt(d))
        add(p + "ffn_down_shexp.weight", d, fs, 0.5 / np.sqrt(fs))
    add_f32("output_norm.weight", norm_weight(d))
    if separate_output:
        add("output.weight", n_vocab, d, 0.05, embd_type)
    write_and_close(w)
    if not quiet:
        print(f"wrote {out}: arch={arch} gating={gating} q_lora={s.q_lora} type={wtype}", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=ARCHES, default="llama")
    ap.add_argument("--type", dest="wtype", choices=TYPES + MIXES, default="Q4_1")
    ap.add_argument("--embd-type", choices=TYPES, default=None,
                    help="type of token_embd/output (default: Q8_0 for quantised, else same)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--separate-output", action="store_true",
                    help="write output.weight instead of tying it to token_embd")
    ap.add_argument("--shape", "--llama-shape", dest="shape",
                    choices=("tiny", *NAMED_SHAPES, *GPU_SHAPES, *DEEPSEEK2_SHAPES), default="tiny")
    ap.add_argument("--tokenizer-from", default=DEFAULT_TOKENIZER_MODEL,
                    help="GGUF whose tokenizer.* keys are copied")
    ap.add_argument("--vocab", type=int, default=None,
                    help="keep only the first N tokens of the vocabulary (a cheap model for fuzzing)")
    ap.add_argument("--expert-weights-norm", choices=("true", "false"), default=None,
                    help="qwen3moe: write expert_weights_norm (absent: the key is not written; invar and "
                         "llama.cpp then normalise)")
    ap.add_argument("--gating", choices=("softmax", "sigmoid"), default="softmax",
                    help="deepseek2: V2-Lite-like softmax routing or V3-like sigmoid with groups and bias")
    ap.add_argument("--q-lora", type=int, default=0, help="deepseek2: the query's bottleneck rank (0: none)")
    ap.add_argument("--merged-kv-b", action="store_true", help="deepseek2: the older single attn_kv_b layout")
    a = ap.parse_args(argv)
    norm = None if a.expert_weights_norm is None else a.expert_weights_norm == "true"
    make_model(a.out, a.arch, a.wtype, a.seed, a.separate_output, a.shape,
               a.embd_type, a.tokenizer_from,
               quiet=False, vocab=a.vocab, expert_weights_norm=norm, gating=a.gating, q_lora=a.q_lora,
               merged_kv_b=a.merged_kv_b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
