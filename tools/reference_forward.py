#!/usr/bin/env python3
"""Independent numpy forward pass of llama / qwen2 / qwen3 / qwen3moe GGUF models.

This is the test oracle for invar's logits.  It shares no code with invar:
weights are dequantised by gguf-py (gguf.quants.dequantize) and every step is
plain numpy.  Arithmetic is float64 by default (pass dtype=np.float32 for a
float32 run; the gap between the two shows how much the oracle itself moves
under rounding).  Activations are NOT quantised, unlike llama.cpp/invar which
feed int8 activations to quantised matmuls; tests allow for that.

Semantics (as llama.cpp runs GGUF files of these architectures):
  * RMSNorm: x / sqrt(mean(x^2) + eps) * w.
  * RoPE on the first n_rot dims of each head, theta_i = pos * base^(-2i/n_rot).
    llama: "normal" rope, rotated pairs are adjacent (2i, 2i+1) (the GGUF
    converter permutes Q/K rows so this matches HF's rotate_half).
    qwen2/qwen3: NEOX rope, pairs are (i, i + n_rot/2).
  * GQA: query head h reads kv head h // (n_head / n_head_kv).
  * Causal softmax attention scaled by 1/sqrt(head_dim).
  * qwen2: biases on Q, K, V.  qwen3: RMSNorm over head_dim on each Q and K
    head (weights attn_q_norm / attn_k_norm) before rope.
  * FFN: down(silu(gate(x)) * up(x)).
  * qwen3moe: qwen3 whose every FFN is routed: p = softmax(x @ ffn_gate_inp^T)
    over all experts, the expert_used_count largest p chosen, their weights
    p / sum(chosen p) (expert_weights_norm, default true; false: p as is), and
    the FFN output sum_e w_e * down_e(silu(gate_e(x)) * up_e(x)) over the chosen
    experts, each expert's matrices a slice of the 3-D ffn_*_exps tensors.
  * deepseek2 (DeepSeek-V2 / V2-Lite / V3), in the plain textbook formulation of
    multi-head latent attention (nothing absorbed, every key and value
    decompressed): q = W_q x, or W_qb rmsnorm(W_qa x) (q_lora_rank > 0); per head
    q = [q_nope, q_pe]; [c, k_pe] = W_kva x, c = rmsnorm(c); per head k_nope = W_UK c,
    v = W_UV c (W_UK = attn_k_b transposed, W_UV = attn_v_b, or the two halves of each
    head's rows of attn_kv_b); q_pe and the one shared k_pe rotated by "normal" rope
    over rope.dimension_count dims, with YaRN as DeepSeek's code computes it (the
    interpolated / extrapolated frequency blend over the correction range of the
    original context, beta_fast 32, beta_slow 1; cos/sin unscaled as mscale ==
    mscale_all_dim; softmax scale mscale^2 / sqrt(qk_nope + rope) with mscale =
    1 + yarn_log_multiplier ln(factor)); attention over k = [k_nope, k_pe].
    The first leading_dense_block_count layers have a dense FFN, the others route:
    scores s = softmax or sigmoid of the router logits, the choice by s + exp_probs_b
    among the expert_group_used_count groups whose two best biased scores sum highest,
    the weights the unbiased s of the chosen (normalised if expert_weights_norm) times
    expert_weights_scale, plus the shared experts' FFN (ffn_*_shexp).
  * Output matrix is output.weight, or token_embd.weight when absent (tied).

CLI:  python tools/reference_forward.py MODEL.gguf --tokens 1,2,3 [--out F]
      python tools/reference_forward.py MODEL.gguf --prompt "Hi" --generate 20
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import gguf

import gguf_mxfp4  # registers MXFP4 where gguf-py lacks it


@dataclass
class Config:
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    rope_base: float
    rms_eps: float
    n_vocab: int
    neox: bool
    n_expert: int = 0
    n_expert_used: int = 0
    expert_weights_norm: bool = True
    # deepseek2
    kv_lora: int = 0
    qk_nope: int = 0
    v_dim: int = 0
    n_layer_dense: int = 0
    gating: int = 1
    n_group: int = 1
    n_group_used: int = 1
    expert_weights_scale: float = 1.0
    yarn_factor: float = 0.0
    yarn_orig_ctx: int = 0
    yarn_log_mul: float = 0.0


@dataclass
class Model:
    cfg: Config
    tensors: dict = field(default_factory=dict)  # name -> float array, numpy shape [ne1, ne0]
    types: dict = field(default_factory=dict)  # name -> GGMLQuantizationType in the file
    dtype: type = np.float64


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def dequantize_tensor(t) -> np.ndarray:
    """GGUF tensor -> float32 array shaped like numpy sees it ([ne1, ne0])."""
    shape = tuple(int(x) for x in reversed(t.shape))  # t.shape is ggml order (ne0 first)
    raw = np.asarray(t.data)
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        arr = raw.view(np.float32)
    else:
        arr = gguf_mxfp4.dequantize(raw, t.tensor_type)
    return np.asarray(arr, dtype=np.float32).reshape(shape)


_cache: dict = {}


def load_model(path: str, dtype=np.float64) -> Model:
    key = (os.path.abspath(path), np.dtype(dtype).name)
    if key in _cache:
        return _cache[key]
    r = gguf.GGUFReader(path)
    arch = _field(r, "general.architecture")
    if arch not in ("llama", "qwen2", "qwen3", "qwen3moe", "deepseek2"):
        raise ValueError(f"unsupported architecture {arch!r}")
    n_embd = int(_field(r, f"{arch}.embedding_length"))
    n_head = int(_field(r, f"{arch}.attention.head_count"))
    head_dim = int(_field(r, f"{arch}.attention.key_length", n_embd // n_head))
    tensors = {t.name: dequantize_tensor(t).astype(dtype) for t in r.tensors}
    types = {t.name: t.tensor_type for t in r.tensors}
    n_vocab = tensors["token_embd.weight"].shape[0]
    cfg = Config(
        arch=arch, n_embd=n_embd,
        n_layer=int(_field(r, f"{arch}.block_count")),
        n_head=n_head,
        n_head_kv=int(_field(r, f"{arch}.attention.head_count_kv", n_head)),
        head_dim=head_dim,
        n_rot=int(_field(r, f"{arch}.rope.dimension_count", head_dim)),
        rope_base=float(_field(r, f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(_field(r, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        n_vocab=n_vocab,
        neox=arch in ("qwen2", "qwen3", "qwen3moe"),
        n_expert=int(_field(r, f"{arch}.expert_count", 0)),
        n_expert_used=int(_field(r, f"{arch}.expert_used_count", 0)),
        expert_weights_norm=bool(_field(r, f"{arch}.expert_weights_norm", arch != "deepseek2")),
    )
    if arch == "deepseek2":
        a = arch
        rope_dims = int(_field(r, f"{a}.rope.dimension_count"))
        if _field(r, f"{a}.attention.key_length_mla") is not None:
            k_len, v_len = int(_field(r, f"{a}.attention.key_length_mla")), int(_field(r, f"{a}.attention.value_length_mla"))
        else:
            k_len, v_len = head_dim, int(_field(r, f"{a}.attention.value_length"))
        scaling = _field(r, f"{a}.rope.scaling.type")
        cfg.n_rot, cfg.neox = rope_dims, False
        cfg.kv_lora = int(_field(r, f"{a}.attention.kv_lora_rank"))
        cfg.qk_nope, cfg.v_dim = k_len - rope_dims, v_len
        cfg.n_layer_dense = int(_field(r, f"{a}.leading_dense_block_count", 0))
        cfg.gating = int(_field(r, f"{a}.expert_gating_func", 1))
        cfg.n_group = int(_field(r, f"{a}.expert_group_count", 1))
        cfg.n_group_used = int(_field(r, f"{a}.expert_group_used_count", cfg.n_group))
        cfg.expert_weights_scale = float(_field(r, f"{a}.expert_weights_scale", 1.0))
        if scaling == "yarn":
            cfg.yarn_factor = float(_field(r, f"{a}.rope.scaling.factor"))
            cfg.yarn_orig_ctx = int(_field(r, f"{a}.rope.scaling.original_context_length"))
            cfg.yarn_log_mul = float(_field(r, f"{a}.rope.scaling.yarn_log_multiplier", 0.0))
    m = Model(cfg=cfg, tensors=tensors, types=types, dtype=dtype)
    _cache.clear()  # hold at most one model: the real one is ~1 GB in float64
    _cache[key] = m
    return m


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * w


def yarn_inv_freq(cfg: Config) -> np.ndarray:
    """DeepSeek's YaRN frequencies (modeling_deepseek's DeepseekV2YarnRotaryEmbedding)."""
    dim, base, factor, orig = cfg.n_rot, cfg.rope_base, cfg.yarn_factor, cfg.yarn_orig_ctx
    freq_extra = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    freq_inter = freq_extra / factor

    def correction_dim(n_rot: float) -> float:
        return (dim * np.log(orig / (n_rot * 2 * np.pi))) / (2 * np.log(base))
    low = max(np.floor(correction_dim(32)), 0)
    high = min(np.ceil(correction_dim(1)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extra_mask = 1.0 - ramp
    return freq_inter * (1 - extra_mask) + freq_extra * extra_mask


def rope(x: np.ndarray, pos: np.ndarray, cfg: Config) -> np.ndarray:
    """x: [T, heads, head_dim]; rotate the first n_rot dims of each head."""
    n_rot = cfg.n_rot
    half = n_rot // 2
    inv_freq = cfg.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    if cfg.yarn_factor:
        inv_freq = yarn_inv_freq(cfg)
    ang = pos.astype(np.float64)[:, None] * inv_freq[None, :]  # [T, half]
    cos = np.cos(ang).astype(x.dtype)[:, None, :]
    sin = np.sin(ang).astype(x.dtype)[:, None, :]
    out = x.copy()
    if cfg.neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, cfg: Config) -> np.ndarray:
    """q: [T, n_head, hd], k/v: [T, n_head_kv, hd] -> [T, n_head*hd], causal."""
    T = q.shape[0]
    group = cfg.n_head // cfg.n_head_kv
    kk = np.repeat(k, group, axis=1)  # head h -> kv head h // group
    vv = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, kk) / np.sqrt(cfg.head_dim)
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    scores = np.where(mask[None], -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=-1, keepdims=True)
    out = np.einsum("hts,shd->thd", p, vv)
    return out.reshape(T, -1)


_QT = gguf.GGMLQuantizationType
# Activation block size engines use for the int8 dot product with each weight type.
_ACT_Q8_BLOCK = {_QT.Q4_0: 32, _QT.Q4_1: 32, _QT.Q5_0: 32, _QT.Q5_1: 32, _QT.Q8_0: 32,
                 _QT.Q4_K: 256, _QT.Q5_K: 256, _QT.Q6_K: 256}


def quantize_act_int8(x: np.ndarray, block: int) -> np.ndarray:
    """Round rows of x to int8 * per-block scale (amax/127), return the dequantised values."""
    shp = x.shape
    xb = x.reshape(*shp[:-1], shp[-1] // block, block)
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    d = (amax / 127.0).astype(np.float16).astype(x.dtype) if block == 32 else amax / 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d > 0, np.rint(xb / np.where(d > 0, d, 1)), 0)
    return (np.clip(q, -127, 127) * d).reshape(shp)


def emulate_act_rounding(x: np.ndarray, wtype) -> np.ndarray:
    """What an engine like llama.cpp does to activations before a matmul with wtype."""
    if wtype in _ACT_Q8_BLOCK:
        return quantize_act_int8(x, _ACT_Q8_BLOCK[wtype])
    if wtype == _QT.F16:
        return x.astype(np.float16).astype(x.dtype)
    if wtype == _QT.BF16:
        b = x.astype(np.float32).view(np.uint32)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000  # round to nearest even
        return b.view(np.float32).astype(x.dtype)
    return x


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def moe_ffn(h: np.ndarray, m: Model, p: str, mm, route_gaps: list | None = None) -> np.ndarray:
    """Routed FFN of layer prefix p on rows h [T, n_embd] (see the module docstring).
    route_gaps, if given, gets each row's router-logit gap between the last chosen expert
    and the first one left out: where it is tiny, an engine's rounding may choose otherwise."""
    cfg, W = m.cfg, m.tensors
    logits = mm(h, p + "ffn_gate_inp.weight")  # [T, n_expert]
    if route_gaps is not None:
        srt = np.sort(logits, axis=1)[:, ::-1]
        route_gaps.append(srt[:, cfg.n_expert_used - 1] - srt[:, cfg.n_expert_used])
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob = z / z.sum(axis=1, keepdims=True)
    chosen = np.argsort(-prob, axis=1, kind="stable")[:, :cfg.n_expert_used]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        w = prob[t, chosen[t]]
        if cfg.expert_weights_norm:
            w = w / w.sum()
        for e, we in zip(chosen[t], w):
            g = h[t] @ W[p + "ffn_gate_exps.weight"][e].T
            u = h[t] @ W[p + "ffn_up_exps.weight"][e].T
            out[t] += we * ((silu(g) * u) @ W[p + "ffn_down_exps.weight"][e].T)
    return out


def mla_attention(h: np.ndarray, m: Model, p: str, mm, pos: np.ndarray) -> np.ndarray:
    """deepseek2's attention of layer prefix p on rows h [T, n_embd], plain (non-absorbed)."""
    cfg, W = m.cfg, m.tensors
    T, H, R, rope_d, nope, vd = h.shape[0], cfg.n_head, cfg.kv_lora, cfg.n_rot, cfg.qk_nope, cfg.v_dim
    if p + "attn_q_a.weight" in W:
        qa = rms_norm(mm(h, p + "attn_q_a.weight"), W[p + "attn_q_a_norm.weight"], cfg.rms_eps)
        q = mm(qa, p + "attn_q_b.weight")
    else:
        q = mm(h, p + "attn_q.weight")
    q = q.reshape(T, H, nope + rope_d)
    kva = mm(h, p + "attn_kv_a_mqa.weight")
    c = rms_norm(kva[:, :R], W[p + "attn_kv_a_norm.weight"], cfg.rms_eps)
    k_pe = rope(kva[:, None, R:], pos, cfg)  # [T, 1, rope]
    if p + "attn_kv_b.weight" in W:
        kv_b = W[p + "attn_kv_b.weight"].reshape(H, nope + vd, R)
        w_uk, w_uv = kv_b[:, :nope], kv_b[:, nope:]
    else:
        w_uk = np.transpose(W[p + "attn_k_b.weight"], (0, 2, 1))  # [H, kv_lora, nope] -> [H, nope, kv_lora]
        w_uv = W[p + "attn_v_b.weight"]  # [H, v_dim, kv_lora]
    k_nope = np.einsum("tr,hnr->thn", c, w_uk)
    v = np.einsum("tr,hvr->thv", c, w_uv)
    k = np.concatenate([k_nope, np.broadcast_to(k_pe, (T, H, rope_d))], axis=-1)
    q = np.concatenate([q[..., :nope], rope(q[..., nope:], pos, cfg)], axis=-1)
    mscale = 1.0 + cfg.yarn_log_mul * np.log(cfg.yarn_factor) if cfg.yarn_factor > 1 else 1.0
    scores = np.einsum("thd,shd->hts", q, k) * (mscale * mscale / np.sqrt(nope + rope_d))
    scores = np.where(np.triu(np.ones((T, T), dtype=bool), k=1)[None], -np.inf, scores)
    pr = np.exp(scores - scores.max(axis=-1, keepdims=True))
    pr = pr / pr.sum(axis=-1, keepdims=True)
    return mm(np.einsum("hts,shv->thv", pr, v).reshape(T, H * vd), p + "attn_output.weight")


def deepseek_moe_ffn(h: np.ndarray, m: Model, p: str, mm, route_gaps: list | None = None) -> np.ndarray:
    """deepseek2's routed FFN plus its shared experts (the module docstring). route_gaps gets
    each row's smallest margin of a routing decision (groups and experts, in selection-score
    units): where it is tiny, an engine's rounding may choose otherwise."""
    cfg, W = m.cfg, m.tensors
    E, k, G = cfg.n_expert, cfg.n_expert_used, cfg.n_group
    logits = mm(h, p + "ffn_gate_inp.weight")
    if cfg.gating == 2:
        score = 1.0 / (1.0 + np.exp(-logits))
    else:
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        score = z / z.sum(axis=1, keepdims=True)
    biased = p + "exp_probs_b.bias" in W
    sel = score + W[p + "exp_probs_b.bias"] if biased else score.copy()
    # margins in logit units where the choice is by logit order (softmax, no bias: as
    # qwen3moe's), else in score units
    margin = logits.copy() if cfg.gating == 1 and not biased else sel.copy()
    T = h.shape[0]
    gaps = np.full(T, np.inf)
    if G > 1:
        grouped = sel.reshape(T, G, E // G)
        gscore = np.sort(grouped, axis=2)[:, :, -2:].sum(axis=2)  # [T, G]
        order = np.argsort(-gscore, axis=1, kind="stable")
        gs = np.take_along_axis(gscore, order, axis=1)
        gaps = np.minimum(gaps, gs[:, cfg.n_group_used - 1] - gs[:, cfg.n_group_used])
        keep = np.zeros((T, G), dtype=bool)
        np.put_along_axis(keep, order[:, :cfg.n_group_used], True, axis=1)
        sel = np.where(np.repeat(keep, E // G, axis=1), sel, -np.inf)
        margin = np.where(np.repeat(keep, E // G, axis=1), margin, -np.inf)
    chosen = np.argsort(-sel, axis=1, kind="stable")[:, :k]
    srt = np.sort(margin, axis=1)[:, ::-1]
    gaps = np.minimum(gaps, srt[:, k - 1] - srt[:, k])
    if route_gaps is not None:
        route_gaps.append(gaps)
    out = np.zeros_like(h)
    for t in range(T):
        w = score[t, chosen[t]]
        if cfg.expert_weights_norm:
            w = w / w.sum()
        w = w * cfg.expert_weights_scale
        for e, we in zip(chosen[t], w):
            g = h[t] @ W[p + "ffn_gate_exps.weight"][e].T
            u = h[t] @ W[p + "ffn_up_exps.weight"][e].T
            out[t] += we * ((silu(g) * u) @ W[p + "ffn_down_exps.weight"][e].T)
    if p + "ffn_gate_shexp.weight" in W:
        g, u = mm(h, p + "ffn_gate_shexp.weight"), mm(h, p + "ffn_up_shexp.weight")
        out = out + mm(silu(g) * u, p + "ffn_down_shexp.weight")
    return out


def forward(m: Model, token_ids, emulate_engine: bool = False, route_gaps: list | None = None) -> np.ndarray:
    """Logits [T, n_vocab].

    route_gaps (a list, MoE models): gets one array [T] per layer (moe_ffn).

    emulate_engine=True rounds activations as llama.cpp-style engines do (int8
    per block before quantised matmuls, f16/bf16 before f16/bf16 matmuls, K/V
    stored as f16).  It is not the oracle: it only measures how far such
    legitimate rounding moves the logits, to calibrate test tolerances.
    """
    cfg, W = m.cfg, m.tensors

    def mm(h: np.ndarray, name: str) -> np.ndarray:
        if emulate_engine:
            h = emulate_act_rounding(h, m.types[name])
        return h @ W[name].T

    def kv_store(t: np.ndarray) -> np.ndarray:
        return t.astype(np.float16).astype(t.dtype) if emulate_engine else t
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("token_ids must be a non-empty 1-D sequence")
    if ids.min() < 0 or ids.max() >= cfg.n_vocab:
        raise ValueError("token id out of range")
    T = ids.size
    pos = np.arange(T)
    hd = cfg.head_dim
    x = W["token_embd.weight"][ids]
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        h = rms_norm(x, W[p + "attn_norm.weight"], cfg.rms_eps)
        if cfg.arch == "deepseek2":
            x = x + mla_attention(h, m, p, mm, pos)
            h = rms_norm(x, W[p + "ffn_norm.weight"], cfg.rms_eps)
            if i >= cfg.n_layer_dense:
                x = x + deepseek_moe_ffn(h, m, p, mm, route_gaps)
            else:
                x = x + mm(silu(mm(h, p + "ffn_gate.weight")) * mm(h, p + "ffn_up.weight"), p + "ffn_down.weight")
            continue
        q = mm(h, p + "attn_q.weight")
        k = mm(h, p + "attn_k.weight")
        v = mm(h, p + "attn_v.weight")
        if p + "attn_q.bias" in W:
            q = q + W[p + "attn_q.bias"]
            k = k + W[p + "attn_k.bias"]
            v = v + W[p + "attn_v.bias"]
        q = q.reshape(T, cfg.n_head, hd)
        k = k.reshape(T, cfg.n_head_kv, hd)
        v = v.reshape(T, cfg.n_head_kv, hd)
        if p + "attn_q_norm.weight" in W:
            q = rms_norm(q, W[p + "attn_q_norm.weight"], cfg.rms_eps)
            k = rms_norm(k, W[p + "attn_k_norm.weight"], cfg.rms_eps)
        q = rope(q, pos, cfg)
        k = kv_store(rope(k, pos, cfg))
        v = kv_store(v)
        x = x + mm(attention(q, k, v, cfg), p + "attn_output.weight")
        h = rms_norm(x, W[p + "ffn_norm.weight"], cfg.rms_eps)
        if cfg.n_expert:
            x = x + moe_ffn(h, m, p, mm, route_gaps)
            continue
        g = mm(h, p + "ffn_gate.weight")
        u = mm(h, p + "ffn_up.weight")
        x = x + mm(silu(g) * u, p + "ffn_down.weight")
    x = rms_norm(x, W["output_norm.weight"], cfg.rms_eps)
    return mm(x, "output.weight" if "output.weight" in W else "token_embd.weight")


def logits(model_path: str, token_ids, dtype=np.float64, emulate_engine: bool = False) -> np.ndarray:
    """Logits [T, n_vocab] for every position of token_ids (in `dtype`)."""
    return forward(load_model(model_path, dtype), token_ids, emulate_engine)


def routing_gaps(model_path: str, token_ids) -> np.ndarray:
    """Per position, the smallest router gap over the layers (moe_ffn); +inf for a dense model."""
    gaps: list = []
    forward(load_model(model_path), token_ids, route_gaps=gaps)
    return np.min(gaps, axis=0) if gaps else np.full(len(token_ids), np.inf)


def greedy(model_path: str, token_ids, n_new: int, eos: int | None = None,
           dtype=np.float64) -> list[int]:
    """Greedy continuation (recomputes the whole prefix each step: slow but simple)."""
    ids = list(token_ids)
    for _ in range(n_new):
        nxt = int(np.argmax(logits(model_path, ids, dtype)[-1]))
        ids.append(nxt)
        if eos is not None and nxt == eos:
            break
    return ids[len(token_ids):]


@functools.lru_cache(maxsize=8)
def _chat_template(model_path: str) -> tuple[str, str, str]:
    """(template, bos text, eos text) of a GGUF; cached: reading the vocab takes seconds."""
    r = gguf.GGUFReader(model_path)
    tmpl = _field(r, "tokenizer.chat_template")
    if tmpl is None:
        raise ValueError(f"{model_path} has no tokenizer.chat_template")
    tokens = r.fields["tokenizer.ggml.tokens"]

    def token_text(key: str) -> str:
        f = r.fields.get(key)
        if f is None:
            return ""
        return bytes(tokens.parts[tokens.data[int(f.contents())]]).decode("utf-8")

    return (tmpl, token_text("tokenizer.ggml.bos_token_id"),
            token_text("tokenizer.ggml.eos_token_id"))


def render_chat(model_path: str, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """Render the GGUF's chat template with jinja2, as transformers' apply_chat_template
    does (trim_blocks, lstrip_blocks, bos_token/eos_token strings from the vocab)."""
    import jinja2
    tmpl, bos, eos = _chat_template(os.path.abspath(model_path))

    def raise_exception(msg):
        raise jinja2.TemplateError(msg)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(tmpl).render(messages=messages,
                                        add_generation_prompt=add_generation_prompt,
                                        bos_token=bos, eos_token=eos)


def chat_prompt_text(model_path: str, user_text: str) -> str:
    """Chat-templated text for one user turn, ready for generation."""
    return render_chat(model_path, [{"role": "user", "content": user_text}])


class GGUFTokenizer:
    """Byte-level BPE tokenizer built from the GGUF's tokenizer.ggml.* keys.

    transformers' AutoTokenizer(gguf_file=...) needs torch, which this venv
    does not have, so the same tokenizer is assembled directly with the
    `tokenizers` library: vocab + merges from the file, the "smollm"
    pre-tokenizer (single digits, then GPT-2 byte-level split) and every
    control token (token_type 3) matched whole, as llama.cpp's special=True does.
    """

    def __init__(self, model_path: str):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
        r = gguf.GGUFReader(model_path)
        kind = _field(r, "tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"only gpt2-style BPE tokenizers are supported, got {kind!r}")
        tokens = _field(r, "tokenizer.ggml.tokens")
        types = _field(r, "tokenizer.ggml.token_type")
        merges = [tuple(m.split(" ", 1)) for m in _field(r, "tokenizer.ggml.merges")]
        tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        tk.decoder = decoders.ByteLevel()
        tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                               for t, ty in zip(tokens, types) if ty == 3])
        self.tk = tk
        self.eos_id = int(_field(r, "tokenizer.ggml.eos_token_id", -1))

    def encode(self, text: str) -> list[int]:
        return self.tk.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self.tk.decode(list(ids), skip_special_tokens=False)


def load_tokenizer(model_path: str) -> GGUFTokenizer:
    return GGUFTokenizer(model_path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="numpy reference forward for GGUF models")
    ap.add_argument("model")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--prompt", help="user message; chat template applied")
    ap.add_argument("--generate", type=int, default=0, help="greedy tokens to generate")
    ap.add_argument("--float32", action="store_true", help="compute in float32")
    ap.add_argument("--out", help="write float32 logits [T, vocab] row-major here")
    a = ap.parse_args(argv)
    dtype = np.float32 if a.float32 else np.float64
    tok = None
    if a.tokens:
        ids = [int(x) for x in a.tokens.split(",") if x.strip()]
    elif a.prompt is not None:
        tok = load_tokenizer(a.model)
        ids = tok.encode(chat_prompt_text(a.model, a.prompt))
    else:
        ap.error("give --tokens or --prompt")
    lg = logits(a.model, ids, dtype)
    print(f"{len(ids)} tokens, logits shape {lg.shape}, argmax last = {int(lg[-1].argmax())}")
    if a.out:
        lg.astype("<f4").tofile(a.out)
    if a.generate:
        eos = int(_field(gguf.GGUFReader(a.model), "tokenizer.ggml.eos_token_id", -1))
        new = greedy(a.model, ids, a.generate, eos=eos, dtype=dtype)
        print("generated ids:", new)
        if tok is None:
            tok = load_tokenizer(a.model)
        print("text:", repr(tok.decode(new)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
