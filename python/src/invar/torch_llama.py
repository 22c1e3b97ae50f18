"""A float reference of invar's Llama-family forward pass in PyTorch, for gradients.

invar computes a trainer's logprobs (bitwise the sampler's); this module computes the same
function in float32 torch, so that autograd can give its gradient (invar.torch_logprobs uses
it as the backward of invar's forward). It follows the semantics of docs/architecture.md and
tools/reference_forward.py: RMSNorm, RoPE ("normal" pairs (2i, 2i+1) for llama, NEOX pairs
(i, i + n_rot/2) for qwen2/qwen3), grouped-query causal attention scaled by 1/sqrt(head_dim),
qwen2's Q/K/V biases, qwen3's per-head Q/K norms, a SiLU-gated FFN, and the output matrix or
the tied embedding. Parameters keep the GGUF tensor names and numpy axis order, so
``gguf_state_dict()`` feeds ``LLM.update_weights`` directly.

Needs torch and gguf (``pip install torch gguf``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch


@dataclass
class LlamaConfig:
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

    @property
    def neox(self) -> bool:
        return self.arch in ("qwen2", "qwen3")


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _read_gguf(path: str) -> "tuple[LlamaConfig, Dict[str, np.ndarray], Dict[str, str]]":
    import gguf

    r = gguf.GGUFReader(str(path))
    arch = _field(r, "general.architecture")
    if arch not in ("llama", "qwen2", "qwen3"):
        raise ValueError(f"unsupported architecture {arch!r}")
    tensors: Dict[str, np.ndarray] = {}
    types: Dict[str, str] = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        raw = np.asarray(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            arr = raw.view(np.float32)
        else:
            arr = gguf.quants.dequantize(raw, t.tensor_type)
        tensors[t.name] = np.asarray(arr, dtype=np.float32).reshape(shape)
        types[t.name] = t.tensor_type.name
    n_embd = int(_field(r, f"{arch}.embedding_length"))
    n_head = int(_field(r, f"{arch}.attention.head_count"))
    head_dim = int(_field(r, f"{arch}.attention.key_length", n_embd // n_head))
    cfg = LlamaConfig(arch=arch, n_embd=n_embd, n_layer=int(_field(r, f"{arch}.block_count")), n_head=n_head,
                      n_head_kv=int(_field(r, f"{arch}.attention.head_count_kv", n_head)), head_dim=head_dim,
                      n_rot=int(_field(r, f"{arch}.rope.dimension_count", head_dim)),
                      rope_base=float(_field(r, f"{arch}.rope.freq_base", 10000.0)),
                      rms_eps=float(_field(r, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
                      n_vocab=int(tensors["token_embd.weight"].shape[0]))
    return cfg, tensors, types


class TorchLlama(torch.nn.Module):
    """The model as torch parameters named by GGUF tensor name (``params[name]``).

    Args:
        cfg: hyperparameters.
        tensors: GGUF name -> float array in numpy axis order.
        dtype: the parameters' dtype (torch.float32 or torch.bfloat16); the forward pass
            computes in float32 either way.
        device: where the parameters live and the forward runs (a torch device: "cpu",
            "cuda", ...); default the CPU.
    """

    def __init__(self, cfg: LlamaConfig, tensors: Dict[str, np.ndarray], dtype: torch.dtype = torch.float32,
                 device: "torch.device | str | None" = None):
        super().__init__()
        self.cfg = cfg
        # GGUF names contain dots, which nn.Module attribute names cannot: keep them in a
        # ParameterDict under an escaped key and expose the GGUF name through params.
        self._p = torch.nn.ParameterDict()
        self.names: List[str] = []
        for name, arr in tensors.items():
            if name == "rope_freqs.weight":
                raise ValueError("rope_freqs.weight (RoPE frequency factors) is not supported by the reference")
            self._p[name.replace(".", "__")] = torch.nn.Parameter(torch.tensor(arr, dtype=dtype, device=device))
            self.names.append(name)

    @classmethod
    def from_gguf(cls, path: str, dtype: torch.dtype = torch.float32,
                  device: "torch.device | str | None" = None) -> "TorchLlama":
        """Loads a GGUF model (any weight type, dequantised) as float parameters."""
        cfg, tensors, _ = _read_gguf(path)
        return cls(cfg, tensors, dtype, device)

    @property
    def device(self) -> torch.device:
        """Where the parameters are (and the forward's results)."""
        return next(iter(self._p.values())).device

    @property
    def params(self) -> Dict[str, torch.nn.Parameter]:
        return {n: self._p[n.replace(".", "__")] for n in self.names}

    def gguf_state_dict(self) -> Dict[str, torch.Tensor]:
        """GGUF name -> detached tensor: what LLM.update_weights takes."""
        return {n: p.detach() for n, p in self.params.items()}

    def weights_version(self) -> int:
        """Changes whenever a parameter is modified in place (an optimizer step)."""
        return sum(p._version for p in self.parameters())

    def _w(self, name: str) -> Optional[torch.Tensor]:
        key = name.replace(".", "__")
        return self._p[key].float() if key in self._p else None

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.cfg.rms_eps) * w

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """RoPE of x [B, T, H, D] at positions pos ([T], or [B, T] for per-sequence offsets)."""
        c = self.cfg
        half = c.n_rot // 2
        inv = c.rope_base ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2.0 / c.n_rot)
        ang = pos.to(device=x.device, dtype=torch.float64)[..., None] * inv
        cos, sin = torch.cos(ang).float().unsqueeze(-2), torch.sin(ang).float().unsqueeze(-2)
        if c.neox:
            a, b, rest = x[..., :half], x[..., half:c.n_rot], x[..., c.n_rot:]
            return torch.cat([a * cos - b * sin, a * sin + b * cos, rest], -1)
        a, b, rest = x[..., 0:c.n_rot:2], x[..., 1:c.n_rot:2], x[..., c.n_rot:]
        rot = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
        return torch.cat([rot, rest], -1)

    def _run(self, idx: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor,
             past: Optional[List["tuple[torch.Tensor, torch.Tensor]"]] = None
             ) -> "tuple[torch.Tensor, List[tuple[torch.Tensor, torch.Tensor]]]":
        """The layers over token ids idx [B, T] at positions pos ([T] or [B, T]).

        mask [1 or B, T, S] is True where query t must not see key s; the keys are past's
        (per layer [B, P, n_head_kv, head_dim], after RoPE) followed by idx's own, S = P + T.
        Returns the final-normed hidden states [B, T, n_embd] and each layer's own keys and
        values (after RoPE), which a later call can take as past."""
        c = self.cfg
        B, T = idx.shape
        hd = c.head_dim
        x = self._w("token_embd.weight")[idx]
        group = c.n_head // c.n_head_kv
        kv = []
        for i in range(c.n_layer):
            p = f"blk.{i}."
            h = self._rms(x, self._w(p + "attn_norm.weight"))
            q, k, v = (h @ self._w(p + f"attn_{n}.weight").T for n in "qkv")
            if self._w(p + "attn_q.bias") is not None:
                q, k, v = q + self._w(p + "attn_q.bias"), k + self._w(p + "attn_k.bias"), v + self._w(p + "attn_v.bias")
            q, k, v = q.view(B, T, c.n_head, hd), k.view(B, T, c.n_head_kv, hd), v.view(B, T, c.n_head_kv, hd)
            if self._w(p + "attn_q_norm.weight") is not None:
                q, k = self._rms(q, self._w(p + "attn_q_norm.weight")), self._rms(k, self._w(p + "attn_k_norm.weight"))
            q, k = self._rope(q, pos), self._rope(k, pos)
            kv.append((k, v))
            if past is not None:
                k, v = torch.cat([past[i][0], k], 1), torch.cat([past[i][1], v], 1)
            k, v = k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)
            s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
            a = torch.softmax(s.masked_fill(mask[:, None], float("-inf")), -1)
            x = x + torch.einsum("bhts,bshd->bthd", a, v).reshape(B, T, -1) @ self._w(p + "attn_output.weight").T
            h = self._rms(x, self._w(p + "ffn_norm.weight"))
            g, u = h @ self._w(p + "ffn_gate.weight").T, h @ self._w(p + "ffn_up.weight").T
            x = x + (torch.nn.functional.silu(g) * u) @ self._w(p + "ffn_down.weight").T
        return self._rms(x, self._w("output_norm.weight")), kv

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Final-normed hidden states [B, T, n_embd] of right-padded token ids [B, T] (each
        position sees only the positions before it, so padding after a sequence changes none
        of its values)."""
        T, d = idx.shape[1], self.device
        idx = idx.to(d)
        return self._run(idx, torch.arange(T, device=d), _causal(T, d))[0]

    def _output(self) -> torch.Tensor:
        out = self._w("output.weight")
        return out if out is not None else self._w("token_embd.weight")

    def forward(self, ids: Sequence[int]) -> torch.Tensor:
        """Logits [T, n_vocab] (float32) of every position of one sequence."""
        return self.hidden(torch.tensor([list(ids)], dtype=torch.long, device=self.device))[0] @ self._output().T

    def token_logprobs(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> torch.Tensor:
        """log p(continuation token | prompt + the continuation before it), all pairs
        concatenated in order (float32, differentiable).

        Each distinct prompt runs once (an RL group's samples share theirs): one padded batch
        of the distinct prompts, then one padded batch of the continuations attending to
        their prompt's keys and values; the output matrix runs only on the positions that
        predict a continuation token."""
        prompts = [list(p) for p in prompts]
        continuations = [list(c) for c in continuations]
        d = self.device
        if not prompts or not any(continuations):
            return torch.zeros(0, device=d)
        if any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token")
        first: Dict[tuple, int] = {}
        grp = [first.setdefault(tuple(p), len(first)) for p in prompts]
        uniq = list(first)
        U, Tp = len(uniq), max(len(p) for p in uniq)
        idx_p = torch.zeros(U, Tp, dtype=torch.long)
        for u, p in enumerate(uniq):
            idx_p[u, :len(p)] = torch.tensor(p, dtype=torch.long)
        h_p, kv_p = self._run(idx_p.to(d), torch.arange(Tp, device=d), _causal(Tp, d))
        hs = [h_p.reshape(U * Tp, -1)]
        # The continuations without their last token (whose successor is not scored).
        inputs = [c[:-1] for c in continuations]
        B, Tc = len(continuations), max(len(x) for x in inputs)
        lp_len = torch.tensor([len(p) for p in prompts], device=d)
        if Tc:
            g = torch.tensor(grp, device=d)
            idx_c = torch.zeros(B, Tc, dtype=torch.long)
            for b, x in enumerate(inputs):
                if x:
                    idx_c[b, :len(x)] = torch.tensor(x, dtype=torch.long)
            pos = lp_len[:, None] + torch.arange(Tc, device=d)[None, :]
            beyond = torch.arange(Tp, device=d)[None, None, :] >= lp_len[:, None, None]  # another prompt's padding
            mask = torch.cat([beyond.expand(B, Tc, Tp), _causal(Tc, d).expand(B, Tc, Tc)], 2)
            h_c, _ = self._run(idx_c.to(d), pos, mask, [(k[g], v[g]) for k, v in kv_p])
            hs.append(h_c.reshape(B * Tc, -1))
        rows, targets = [], []
        for b, c in enumerate(continuations):
            for j, tok in enumerate(c):
                rows.append(grp[b] * Tp + len(prompts[b]) - 1 if j == 0 else U * Tp + b * Tc + j - 1)
                targets.append(int(tok))
        h = torch.cat(hs)[torch.tensor(rows, device=d)]
        lp = torch.log_softmax(h @ self._output().T, -1)
        return lp.gather(1, torch.tensor(targets, device=d)[:, None])[:, 0]


def _causal(T: int, device: torch.device) -> torch.Tensor:
    """[1, T, T], True where query t must not see key s (s > t)."""
    return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), 1)[None]
