"""PyTorch timings on the same device and shapes as bench_cuda's row-kernel and attention
sections (torch eager ops, scaled_dot_product_attention), for side-by-side comparison.
Same method as bench_cuda: median of CUDA-event timings, each after an L2 flush that reads
512 MiB (clean lines only). Usage: torch_ref.py OUT.json"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = "cuda"
bf = torch.bfloat16
out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": [], "attention": []}


flush = torch.ones(512 << 20, dtype=torch.uint8, device=dev)


def t_us(fn, reps=20):
    fn()
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        flush.max()  # reads the whole buffer
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    return ts[len(ts) // 2] * 1e3


Ms = [1, 8, 32, 128, 512, 1024, 2048, 4096, 8192]
D, FF, V, HR = 4096, 14336, 128256, 40
x = torch.randn(8192, D, device=dev, dtype=bf)
res = torch.randn(8192, D, device=dev, dtype=bf)
w = torch.randn(D, device=dev, dtype=bf)
gu = torch.randn(8192, 2 * FF, device=dev, dtype=bf)
qk = torch.randn(8192, HR, 128, device=dev, dtype=bf)
table = torch.randn(V, D, device=dev, dtype=bf)
ids = torch.randint(0, V, (8192,), device=dev)
logits = torch.randn(8192, V, device=dev, dtype=torch.float32) * 8
inv_freq = 500000.0 ** (-torch.arange(0, 64, device=dev, dtype=torch.float32) / 64)
pos = torch.randint(0, 32768, (8192,), device=dev)


def rope(t, p):
    ang = p[:, None].float() * inv_freq[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    a, b = t[..., :64].float(), t[..., 64:].float()
    return torch.cat([a * c - b * s, a * s + b * c], -1).to(bf)


def norm_res(m):
    r = x[:m] + res[:m]
    return F.rms_norm(r, (D,), w, 1e-5), r


def sample(m):
    p = torch.softmax(logits[:m] / 0.8, -1)
    tok = torch.multinomial(p, 1)
    return tok, torch.log_softmax(logits[:m], -1).gather(1, tok)


cases = {
    "rmsnorm_residual_4096": (lambda m: norm_res(m), lambda m: 4.0 * m * D * 2),
    "silu_mul_14336": (lambda m: F.silu(gu[:m, :FF]) * gu[:m, FF:], lambda m: 3.0 * m * FF * 2),
    "rope_q32k8_128": (lambda m: rope(qk[:m], pos[:m]), lambda m: 2.0 * m * HR * 128 * 2),
    "embed_4096": (lambda m: F.embedding(ids[:m], table), lambda m: 2.0 * m * D * 2),
    "log_softmax_128256": (lambda m: torch.log_softmax(logits[:m], -1), lambda m: 2.0 * m * V * 4),
    "sample_128256": (lambda m: sample(m), lambda m: 1.0 * m * V * 4),
}
# TORCH_REF_SECTIONS=attn: the attention cases alone (a device call about attention).
only_attn = os.environ.get("TORCH_REF_SECTIONS", "") == "attn"
for name, (fn, nbytes) in ([] if only_attn else cases.items()):
    for m in Ms:
        us = t_us(lambda: fn(m))
        out["rows"].append({"kernel": name, "M": m, "us": us, "GBps": nbytes(m) / us / 1e3})
        print(f"torch {name:24s} M={m:5d} {us:9.1f} us {nbytes(m) / us / 1e3:7.0f} GB/s", flush=True)
del x, res, gu, qk, table, logits  # (made above whatever the sections)
torch.cuda.empty_cache()

HQ, HKV, HD = 32, 8, 128
dec = [(1, 1024), (1, 8192), (1, 32768), (16, 4096), (16, 32768), (64, 4096), (64, 16384), (256, 1024), (256, 4096)]
for b, ctx in dec:
    q = torch.randn(b, HQ, 1, HD, device=dev, dtype=bf)
    k = torch.randn(b, HKV, ctx, HD, device=dev, dtype=bf)
    v = torch.randn(b, HKV, ctx, HD, device=dev, dtype=bf)
    us = t_us(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    tb = b * ctx * HKV * HD * 2 * 2 / us / 1e6
    out["attention"].append({"kind": "decode", "B": b, "ctx": ctx, "us": us, "kv_TBps": tb})
    print(f"torch sdpa decode B={b:3d} ctx={ctx:6d}: {us:9.1f} us {tb:.2f} TB/s", flush=True)
    del q, k, v
for L in [512, 1024, 2048, 4096, 8192, 16384]:
    q = torch.randn(1, HQ, L, HD, device=dev, dtype=bf)
    k = torch.randn(1, HKV, L, HD, device=dev, dtype=bf)
    v = torch.randn(1, HKV, L, HD, device=dev, dtype=bf)
    us = t_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    fl = 4.0 * HQ * HD * L * (L + 1) / 2
    out["attention"].append({"kind": "prefill", "L": L, "us": us, "TFLOPs": fl / us / 1e6})
    print(f"torch sdpa prefill L={L:5d}: {us:9.1f} us {fl / us / 1e6:.1f} TFLOP/s", flush=True)
    # Each backend on its own (the "best backend"): K and V repeated to the query
    # heads where a backend takes no grouped-query input (not timed: made before).
    kr, vr = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)
    for bname in ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"]:
        try:
            with sdpa_kernel(getattr(SDPBackend, bname)):
                bus = t_us(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True))
        except Exception as e:  # a backend this build or shape lacks
            print(f"torch sdpa prefill L={L:5d} {bname}: unavailable ({type(e).__name__})", flush=True)
            continue
        out["attention"].append({"kind": "prefill", "L": L, "backend": bname, "us": bus, "TFLOPs": fl / bus / 1e6})
        print(f"torch sdpa prefill L={L:5d} {bname:20s}: {bus:9.1f} us {fl / bus / 1e6:.1f} TFLOP/s", flush=True)
    del q, k, v, kr, vr

with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
