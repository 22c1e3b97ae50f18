#!/usr/bin/env python3
"""CPU benchmark of a DeepSeek-V2-Lite-shaped deepseek2 file (MLA + 64 routed experts):
invar against llama.cpp (llama-cpp-python) in one run, on the same GGUF.

Measures, with cpu_bench.py's drivers (invar timed from outside through `invar batch`,
llama.cpp through llama_decode; the engines alternate repetition by repetition):
  * pp512  - prefill of a 512-token prompt, tokens/s;
  * tg     - decode of one sequence after a 16-token prompt, tokens/s, and its fraction of
             the bandwidth bound on the active weights (the non-expert tensors, the output
             head, and k/E of the routed experts) at the streaming-read bandwidth;
  * agg xN - N sequences decoded together (N = 16, 64 by default), total tokens/s.
Medians of --reps; writes bench/results/moe_<tag>.json with every sample, the load average
before and after, and the same-run ratios invar / llama.cpp.

The model is written on first use (tools/make_tiny_model.py --shape deepseek-v2-lite, about
8.5 GB; --model PATH to use another file).  Benchmark only: far too big for CI.

usage: .venv/bin/python bench/moe_bench.py [--reps 3] [--tokens 16] [--concurrency 16,64]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import cpu_bench as cb
from bench_common import git_commit, load_average, machine_info, ratio

DEFAULT = os.path.join(cb.CACHE, "models", "dsv2lite-Q4_K.gguf")


def ensure_model(path):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cb.log(f"writing {path} (several minutes)")
    subprocess.run([sys.executable, os.path.join(cb.ROOT, "tools", "make_tiny_model.py"), "--arch", "deepseek2",
                    "--shape", "deepseek-v2-lite", "--type", "Q4_K", "--embd-type", "Q6_K", "--separate-output",
                    "--tokenizer-from", cb.DEFAULT_MODEL, "--out", path], check=True)


def active_bytes_per_token(path):
    """Weight bytes one decode step reads: every tensor but the embedding table and the
    routed experts, plus n_used / n_expert of the experts (a token's share)."""
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields
    used = int(f["deepseek2.expert_used_count"].parts[-1][0])
    n_exp = int(f["deepseek2.expert_count"].parts[-1][0])
    total = 0.0
    for t in r.tensors:
        if t.name == "token_embd.weight":
            continue
        total += int(t.n_bytes) * (used / n_exp if "_exps." in t.name else 1.0)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT)
    ap.add_argument("--invar", default=os.path.join(cb.ROOT, "build", "invar"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16, help="decoded tokens per sequence")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="16,64", help="aggregate decode sequence counts")
    ap.add_argument("--pp-prompts", type=int, default=1)
    ap.add_argument("--llama-cap", type=float, default=120.0)
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--no-pp", action="store_true")
    ap.add_argument("--tag")
    ap.add_argument("--out-dir", default=os.path.join(cb.ROOT, "bench", "results"))
    a = ap.parse_args()
    ensure_model(a.model)
    invar = os.path.abspath(a.invar)
    started = datetime.datetime.now(datetime.timezone.utc)
    load0, commit = load_average(), git_commit()
    args = SimpleNamespace(reps=a.reps, tokens=a.tokens, no_pp=a.no_pp, pp_prompts=a.pp_prompts,
                           cold_prefill=False, skip_llama=a.skip_llama, llama_cap=a.llama_cap)
    exact = cb.make_prompts(invar, cb.DEFAULT_MODEL, 1234)
    stream = cb.build_probe("stream_read")
    bw = [cb.stream_bandwidth(stream, a.threads, 1024, 3)]
    results, name = [], "dsv2lite-Q4_K"
    cb.log(f"{name}: pp{cb.PP_TOKENS} + tg{a.tokens}, {a.threads} threads")
    cb.bench_single(args, invar, name, a.model, [a.threads], exact, results)
    for n in [int(x) for x in a.concurrency.split(",") if x]:
        cb.log(f"{name}: aggregate decode, {n} sequences")
        cb.bench_aggregate(args, invar, name, a.model, a.threads, n, exact, results)
    bw.append(cb.stream_bandwidth(stream, a.threads, 1024, 3))
    gbps = cb.median([x for b in bw for x in b])
    load1 = load_average()
    act = active_bytes_per_token(a.model)
    rows = []
    for test, n in [("pp", 1), ("tg", 1)] + [("agg", int(x)) for x in a.concurrency.split(",") if x]:
        i = cb.find(results, engine="invar", test=test, n_seq=n)
        ll = cb.find(results, engine="llama.cpp", test=test, n_seq=n)
        label = {"pp": f"pp{cb.PP_TOKENS}", "tg": "tg x1"}.get(test, f"agg x{n}")
        rows.append({"test": label, "invar": i, "llama.cpp": ll, "ratio": ratio(i, ll),
                     "invar_pct_bw": (i * act / (gbps * 1e9) if test == "tg" and i else None)})
    print(f"\n{name} ({os.path.getsize(a.model) / 1e9:.2f} GB file, {act / 1e9:.2f} GB active per token), "
          f"{a.threads} threads, medians of {a.reps}; stream read {gbps:.1f} GB/s")
    print(f"{'test':<10} {'invar':>9} {'llama.cpp':>10} {'ratio':>7}")
    for r in rows:
        f = lambda x, s=".2f": "-" if x is None else format(x, s)  # noqa: E731
        print(f"{r['test']:<10} {f(r['invar']):>9} {f(r['llama.cpp']):>10} {f(r['ratio']):>7}"
              + (f"   ({100 * r['invar_pct_bw']:.0f}% of the bandwidth bound)" if r["invar_pct_bw"] else ""))
    print(f"load average at start {load0}, at end {load1} on {os.cpu_count()} CPUs")
    try:
        import llama_cpp
        llama_version = llama_cpp.__version__
    except ImportError:
        llama_version = None
    tag = a.tag or started.strftime("%Y%m%d-%H%M")
    os.makedirs(a.out_dir, exist_ok=True)
    out = os.path.join(a.out_dir, f"moe_{tag}.json")
    with open(out, "w") as fh:
        json.dump({"started_utc": started.isoformat(timespec="seconds"),
                   "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "machine": machine_info(), "load_average_start": load0, "load_average_end": load1,
                   "invar_commit": commit, "llama_cpp_python": llama_version, "model": a.model,
                   "model_bytes": os.path.getsize(a.model), "active_bytes_per_token": act,
                   "stream_read_gbps": bw, "settings": vars(a), "table": rows, "results": results}, fh, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
