#!/usr/bin/env python3
"""Chart of the end-to-end GPU benchmark: invar (invariant and its cuBLAS mode) against the
PyTorch fast path, prefill and decode tokens/s, with the one-sequence memory bound.
Usage: plot.py ENGINE.json TORCH.json OUT.png"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Bytes one decode step must read: every layer's matrices and the output head, bf16.
D, FF, H, KV, HD, V, L = 4096, 14336, 32, 8, 128, 128256, 32
WEIGHT_BYTES = 2 * (L * (D * (H + 2 * KV) * HD + H * HD * D + 3 * D * FF) + V * D)


def main():
    inv_all, torch_r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    series = {"invar (invariant)": inv_all["invariant"], "invar (cuBLAS mode)": inv_all["cublas"],
              "PyTorch fast path": torch_r}
    bound = inv_all["copy_GBps"] * 1e9 / WEIGHT_BYTES
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for k, (name, r) in enumerate(series.items()):
        ts = [512, 2048, 8192]
        a.bar([i + 0.27 * (k - 1) for i in range(3)], [r[f"prefill_T{t}_tok_s"] for t in ts], 0.27, label=name)
        bs = [1, 8, 32, 128, 256]
        b.plot(bs, [r[f"decode_B{x}_tok_s"] for x in bs], "o-", label=name)
    a.set_xticks(range(3), ["512", "2048", "8192"])
    a.set_xlabel("prompt tokens")
    a.set_ylabel("prefill tokens/s")
    a.legend()
    b.axhline(bound, ls="--", c="gray", label=f"B=1 memory bound ({bound:.0f})")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("sequences (context 1024)")
    b.set_ylabel("decode tokens/s")
    b.legend()
    fig.suptitle("Llama-3-8B shape, bf16, one H200: end to end")
    fig.tight_layout()
    fig.savefig(sys.argv[3], dpi=110)
    print(f"weights read per decode step {WEIGHT_BYTES / 1e9:.2f} GB, bound {bound:.0f} tok/s")


if __name__ == "__main__":
    main()
