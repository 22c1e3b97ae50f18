"""Chart of the CUDA benchmark: invariant GEMM vs cuBLAS, row kernels vs torch, attention vs
torch SDPA. Usage: plot.py DIR  (reads DIR/cuda_bench.json and, if present, DIR/cuda_torch.json;
writes DIR/cuda_bench.png)"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

d = sys.argv[1]
b = json.load(open(os.path.join(d, "cuda_bench.json")))
tp = os.path.join(d, "cuda_torch.json")
t = json.load(open(tp)) if os.path.exists(tp) else None

fig, ax = plt.subplots(1, 4, figsize=(24, 6))
c = b.get("ceilings", {})
fig.suptitle(f"invar CUDA backend on {b['device']} - copy ceiling {c.get('copy_GBps', 0):.0f} GB/s, "
             f"cuBLAS 8192^3 {c.get('cublas_8192_TFLOPs', 0):.0f} TFLOP/s")

if "gemm" in b:
    shapes = sorted({(g["N"], g["K"]) for g in b["gemm"]})
    for n, k in shapes:
        pts = [g for g in b["gemm"] if g["N"] == n and g["K"] == k]
        ax[0].plot([g["M"] for g in pts], [g["ratio"] for g in pts], "o-", label=f"N={n} K={k}")
    ax[0].axhline(0.9, color="k", ls="--", lw=1, label="goal 0.9")
    ax[0].set_xscale("log", base=2)
    ax[0].set_xlabel("M (tokens)")
    ax[0].set_ylabel("speed vs cuBLAS (cuBLAS time / invar time)")
    ax[0].set_title(f"invariant GEMM / cuBLAS (geomean {b.get('gemm_geomean_ratio', 0):.2f})")
    ax[0].legend(fontsize=8)

if "rows" in b:
    kernels = sorted({r["kernel"] for r in b["rows"]})
    for i, kname in enumerate(kernels):
        pts = [r for r in b["rows"] if r["kernel"] == kname]
        col = f"C{i}"
        ax[1].plot([r["M"] for r in pts], [r["GBps"] for r in pts], "o-", color=col, label=f"invar {kname}")
        if "b2b_GBps" in pts[0]:
            ax[1].plot([r["M"] for r in pts], [r["b2b_GBps"] for r in pts], "--", color=col, lw=1)
        if t:
            tt = [r for r in t["rows"] if r["kernel"] == kname]
            ax[1].plot([r["M"] for r in tt], [r["GBps"] for r in tt], "x:", color=col)
    if c.get("copy_GBps"):
        ax[1].axhline(0.85 * c["copy_GBps"], color="k", ls="--", lw=1, label="85% of copy")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("M (rows)")
    ax[1].set_ylabel("GB/s (fewest bytes / time)")
    ax[1].set_title("row kernels: invar cold (solid), invar back-to-back (dashed), torch cold (dotted)")
    ax[1].legend(fontsize=7)

if "attention" in b:
    dec = [a for a in b["attention"] if a["kind"] == "decode"]
    lab = [f"B{a['B']}\nctx{a['ctx'] // 1024}k" for a in dec]
    xs = range(len(dec))
    ax[2].bar([x - 0.2 for x in xs], [a["us"] for a in dec], 0.4, label="invar")
    if t:
        td = {(a["B"], a["ctx"]): a["us"] for a in t["attention"] if a["kind"] == "decode"}
        ax[2].bar([x + 0.2 for x in xs], [td.get((a["B"], a["ctx"]), 0) for a in dec], 0.4, label="torch SDPA")
    ax[2].set_xticks(list(xs))
    ax[2].set_xticklabels(lab, fontsize=7)
    ax[2].set_yscale("log")
    ax[2].set_ylabel("us")
    ax[2].set_title("paged decode attention")
    ax[2].legend()
    pre = [a for a in b["attention"] if a["kind"] == "prefill"]
    ax[3].plot([a["L"] for a in pre], [a["us"] for a in pre], "o-", label="invar")
    if t:
        tp_ = [a for a in t["attention"] if a["kind"] == "prefill"]
        ax[3].plot([a["L"] for a in tp_], [a["us"] for a in tp_], "x-", label="torch SDPA (flash)")
    ax[3].set_xscale("log", base=2)
    ax[3].set_yscale("log")
    ax[3].set_xlabel("prefill length")
    ax[3].set_ylabel("us")
    ax[3].set_title("causal prefill attention")
    ax[3].legend()

fig.tight_layout()
fig.savefig(os.path.join(d, "cuda_bench.png"), dpi=90)
print("wrote", os.path.join(d, "cuda_bench.png"))
