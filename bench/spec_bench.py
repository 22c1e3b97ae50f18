#!/usr/bin/env python3
"""Speculative decoding benchmark (CPU): speed-up of prompt-lookup speculation over plain
decoding, with acceptance rate and tokens per sequence forward, at 1, 4 and 16 concurrent
sequences, on workloads whose output repeats the prompt (edit, summarise, code) and on free
generation, greedy, default model.

Each measurement is one run of build/spec_bench (bench/spec_bench.c: decode tokens per
second after every sequence has its first token, so prefill is left out); plain and
speculative runs are interleaved, --reps times, and the median taken, so background load hits
both alike.  The speed-up is given per second of wall time and per second of the process's
CPU time: with one thread on a shared machine (other jobs' load) CPU time is the steadier
measure of what the run costs, and on an idle machine the two agree.  Every
pair is also checked to give bit-identical output (a hash of all token ids and logprobs).
Writes bench/results/spec_<date>.json and .png.

usage: cmake --build build --target spec_bench
       .venv/bin/python bench/spec_bench.py [--reps 3] [--max-tokens 128] [--threads 1]
       [--device cuda --binary build-cuda/spec_bench]   (the GPU engine; speed-up per wall second)
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import git_commit, load_average, machine_info  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ["edit", "summarise", "code", "free"]


def run_one(binary, model, workload, n, mode, k, max_tokens, threads, device="cpu"):
    env = dict(os.environ, SPEC_BENCH_DEVICE=device)
    out = subprocess.run([binary, model, workload, str(n), mode, str(k), str(max_tokens), str(threads)],
                         capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "spec_bench"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seqs", default="1,4,16")
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: the GPU engine (the speed-up is then per wall second: CPU time is the host's)")
    a = ap.parse_args()
    seqs = [int(x) for x in a.seqs.split(",")]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    out = a.out or os.path.join(ROOT, "bench", "results", f"spec_{a.device}_{stamp}" if a.device != "cpu" else f"spec_{stamp}")
    rows = []
    load_before = load_average()
    for w in WORKLOADS:
        for n in seqs:
            plain, spec = [], []
            for _ in range(a.reps):
                plain.append(run_one(a.binary, a.model, w, n, "off", a.k, a.max_tokens, a.threads, a.device))
                spec.append(run_one(a.binary, a.model, w, n, "ngram", a.k, a.max_tokens, a.threads, a.device))
            identical = all(p["output_hash"] == s["output_hash"] for p in plain for s in spec)
            tp = statistics.median(p["tokens_per_s"] for p in plain)
            ts = statistics.median(s["tokens_per_s"] for s in spec)
            cp = statistics.median(p["tokens_per_cpu_s"] for p in plain)
            cs = statistics.median(s["tokens_per_cpu_s"] for s in spec)
            row = {"workload": w, "n_seqs": n, "plain_tokens_per_s": tp, "spec_tokens_per_s": ts,
                   "speedup_wall": ts / tp if tp else None, "plain_tokens_per_cpu_s": cp,
                   "spec_tokens_per_cpu_s": cs,
                   "speedup": (ts / tp if tp else None) if a.device == "cuda" else (cs / cp if cp else None),
                   "acceptance": spec[0]["acceptance"],
                   "tokens_per_seq_forward": spec[0]["tokens_per_seq_forward"],
                   "decode_tokens": spec[0]["decode_tokens"], "bit_identical": identical,
                   "plain_samples": [p["tokens_per_s"] for p in plain],
                   "spec_samples": [s["tokens_per_s"] for s in spec],
                   "plain_cpu_samples": [p["tokens_per_cpu_s"] for p in plain],
                   "spec_cpu_samples": [s["tokens_per_cpu_s"] for s in spec]}
            rows.append(row)
            unit, vp, vs = ("tok/s", tp, ts) if a.device == "cuda" else ("tok/cpu-s", cp, cs)
            print(f"{w:10s} n={n:2d}  plain {vp:7.1f} {unit}  spec {vs:7.1f} {unit}  x{row['speedup']:.2f}  "
                  f"(wall x{row['speedup_wall']:.2f})  "
                  f"accept {row['acceptance']:.2f}  tok/fwd {row['tokens_per_seq_forward']:.2f}  "
                  f"identical={identical}", flush=True)
    result = {"what": f"prompt-lookup speculative decoding vs plain decoding, {a.device.upper()}, greedy",
              "device": a.device,
              "model": os.path.basename(a.model), "k": a.k, "max_tokens": a.max_tokens, "threads": a.threads,
              "reps": a.reps, "commit": git_commit(), "machine": machine_info(),
              "load_average_before": load_before, "load_average_after": load_average(), "rows": rows}
    with open(out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(result, out + ".png")
    print("wrote", out + ".json", out + ".png")


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    seqs = sorted({r["n_seqs"] for r in result["rows"]})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(seqs)
    for j, n in enumerate(seqs):
        sp = [next(r["speedup"] for r in result["rows"] if r["workload"] == w and r["n_seqs"] == n) for w in WORKLOADS]
        tf = [next(r["tokens_per_seq_forward"] for r in result["rows"] if r["workload"] == w and r["n_seqs"] == n)
              for w in WORKLOADS]
        xs = [i + (j - (len(seqs) - 1) / 2) * width for i in range(len(WORKLOADS))]
        axes[0].bar(xs, sp, width, label=f"{n} seq")
        axes[1].bar(xs, tf, width, label=f"{n} seq")
    per = "wall second" if result.get("device") == "cuda" else "CPU-second"
    for ax, title in ((axes[0], f"decode speed-up vs plain (per {per})"),
                      (axes[1], "tokens per sequence forward")):
        ax.set_xticks(range(len(WORKLOADS)))
        ax.set_xticklabels(WORKLOADS)
        ax.set_title(title)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.legend()
    axes[0].axhline(1.5, color="green", lw=0.8, ls="--")
    axes[0].axhline(0.95, color="red", lw=0.8, ls="--")
    where = "H200" if result.get("device") == "cuda" else f"{result['threads']} thread(s)"
    fig.suptitle(f"invar speculative decoding (prompt lookup, K={result['k']}), {result['model']}, "
                 f"{where}, output bit-identical to plain")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
