#!/usr/bin/env python3
"""The PyTorch fast path the GPU benchmark compares against, on the shapes of
tools/make_bench_model.py (Llama-3-8B: 32 layers, 4096 wide, GQA 32/8 x 128, FFN 14336,
vocabulary 128256): bf16 weights, cuBLAS GEMMs (torch.matmul), SDPA attention, a static KV
cache, and the decode step captured in a CUDA graph. Not batch-invariant. Prints and writes
prefill tokens/s (T = 512, 2048, 8192) and decode tokens/s (B = 1..256 at context 1024).
Usage: torch_e2e.py OUT.json
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

N_LAYER, D, FF, H, KV, HD, V = 32, 4096, 14336, 32, 8, 128, 128256
dev, dt = "cuda", torch.bfloat16


def weights():
    g = torch.Generator(device=dev).manual_seed(1)
    r = lambda *s: torch.randn(*s, device=dev, dtype=dt, generator=g) * 0.02  # noqa: E731
    layers = [dict(qkv=r((H + 2 * KV) * HD, D), o=r(D, H * HD), gu=r(2 * FF, D), down=r(D, FF),
                   n1=torch.ones(D, device=dev, dtype=dt), n2=torch.ones(D, device=dev, dtype=dt))
              for _ in range(N_LAYER)]
    return layers, r(V, D), r(V, D), torch.ones(D, device=dev, dtype=dt)


LAYERS, EMB, OUT, NORM = weights()
INV_FREQ = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=dev).float() / HD))


def rope(x, pos):
    a = pos[..., None].float() * INV_FREQ
    c, s = a.cos()[:, :, None], a.sin()[:, :, None]
    x1, x2 = x[..., :HD // 2].float(), x[..., HD // 2:].float()
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(dt)


def forward(tok, pos, kc, vc, n_ctx):
    """tok, pos [B, T]; kc, vc [layers, B, KV, S, HD]; attends to positions < n_ctx."""
    B, T = tok.shape
    x = EMB[tok]
    for i, w in enumerate(LAYERS):
        h = F.rms_norm(x, (D,), w["n1"], 1e-5)
        q, k, v = (h @ w["qkv"].T).split([H * HD, KV * HD, KV * HD], -1)
        q, k = rope(q.view(B, T, H, HD), pos), rope(k.view(B, T, KV, HD), pos)
        kc[i].index_copy_(2, pos[0], k.transpose(1, 2))
        vc[i].index_copy_(2, pos[0], v.view(B, T, KV, HD).transpose(1, 2))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), kc[i][:, :, :n_ctx], vc[i][:, :, :n_ctx],
                                           is_causal=T > 1, enable_gqa=True)
        x = x + o.transpose(1, 2).reshape(B, T, H * HD) @ w["o"].T
        g, u = (F.rms_norm(x, (D,), w["n2"], 1e-5) @ w["gu"].T).chunk(2, -1)
        x = x + (F.silu(g) * u) @ w["down"].T
    return F.rms_norm(x[:, -1], (D,), NORM, 1e-5) @ OUT.T


def median_time(fn, n):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[n // 2]


def main():
    res = {}
    with torch.inference_mode():
        for T in (512, 2048, 8192):
            kc = torch.zeros(N_LAYER, 1, KV, T, HD, device=dev, dtype=dt)
            vc = torch.zeros_like(kc)
            tok = torch.randint(0, V, (1, T), device=dev)
            pos = torch.arange(T, device=dev)[None]
            t = median_time(lambda: forward(tok, pos, kc, vc, T), 5)
            res[f"prefill_T{T}_tok_s"] = T / t
            print(f"torch prefill T={T:<5d} {T / t:8.0f} tok/s", flush=True)
            del kc, vc
        ctx = 1024
        for B in (1, 8, 32, 128, 256):
            kc = torch.zeros(N_LAYER, B, KV, ctx + 1, HD, device=dev, dtype=dt)
            vc = torch.zeros_like(kc)
            tok = torch.randint(0, V, (B, 1), device=dev)
            pos = torch.full((B, 1), ctx, device=dev)
            graph = torch.cuda.CUDAGraph()
            forward(tok, pos, kc, vc, ctx + 1)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                forward(tok, pos, kc, vc, ctx + 1)
            t = median_time(graph.replay, 20)
            res[f"decode_B{B}_tok_s"] = B / t
            print(f"torch decode  B={B:<5d} {B / t:8.0f} tok/s  ({t * 1e3:.2f} ms/step)", flush=True)
            del kc, vc, graph
            torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
