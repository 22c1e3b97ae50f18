#!/usr/bin/env python3
"""CPU benchmark of a DeepSeek-V2-Lite-shaped deepseek2 file (MLA + 64 routed experts):
invar against llama.cpp (llama-cpp-python) in one run, on the same GGUF.

Measures, with cpu_bench.py's drivers (invar timed from outside through `invar batch`,
llama.cpp through llama_decode; the engines alternate repetition by repetition, and only
one holds the model at a time: each keeps a repacked copy of about 9 GB in anonymous
memory, and both at once leave the file no page cache on a 24 GB machine):
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
    routed experts, plus n_used / n_expert of the experts (a token's share). A dense file
    (no expert keys) reads all of them."""
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields
    arch_f = f.get("general.architecture")
    arch = bytes(arch_f.parts[-1]).decode() if arch_f else ""
    used_f, n_exp_f = f.get(f"{arch}.expert_used_count"), f.get(f"{arch}.expert_count")
    used = int(used_f.parts[-1][0]) if used_f else 1
    n_exp = int(n_exp_f.parts[-1][0]) if n_exp_f else 1
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
    ap.add_argument("--invar-base", help="another invar binary measured in the same repetitions (before/after)")
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
    exact = cb.make_prompts(invar, cb.DEFAULT_MODEL, 1234)
    stream = cb.build_probe("stream_read")
    bw = [cb.stream_bandwidth(stream, a.threads, 1024, 3)]
    results, name = [], os.path.splitext(os.path.basename(a.model))[0]
    tag = a.tag or started.strftime("%Y%m%d-%H%M")
    os.makedirs(a.out_dir, exist_ok=True)
    partial = os.path.join(a.out_dir, f"moe_{tag}.partial.json")

    def checkpoint():  # a run cut short still leaves its samples
        with open(partial, "w") as fh:
            json.dump({"load_average_start": load0, "results": results}, fh, indent=1)
    ns = [int(x) for x in a.concurrency.split(",") if x]
    binaries = [("invar", invar)] + ([("invar-base", os.path.abspath(a.invar_base))] if a.invar_base else [])
    samples = {}  # (engine, test, n_seq) -> tokens/s per repetition

    def add(engine, test, n, v):
        samples.setdefault((engine, test, n), []).append(v)
    for rep in range(a.reps):
        # invar: one process per figure set (model load untimed)
        longs = [] if a.no_pp else [exact(cb.PP_TOKENS) for _ in range(a.pp_prompts)]
        for label, exe in binaries:
            r = cb.invar_rep(exe, a.model, a.threads, 1, a.tokens, lambda: exact(cb.SHORT_PROMPT),
                             [x[0] for x in longs], None if a.no_pp else exact(cb.PP_TOKENS)[0])
            if longs:
                add(label, "pp", 1, cb.PP_TOKENS / r["pp_s"])
            add(label, "tg", 1, a.tokens / r["decode_s"])
            for n in ns:
                r = cb.invar_rep(exe, a.model, a.threads, n, a.tokens, lambda: exact(cb.SHORT_PROMPT), [])
                add(label, "agg", n, n * a.tokens / r["decode_s"])
        # llama.cpp, after invar's process has exited
        if not a.skip_llama:
            lr = cb.LlamaRunner(a.model, a.threads, 1, 1024)
            lr.prefill(exact(cb.PP_TOKENS)[1])  # warm-up
            lr.decode([exact(cb.SHORT_PROMPT)[1]], 4, 120)
            if longs:
                add("llama.cpp", "pp", 1, cb.PP_TOKENS / cb.median([lr.prefill(x[1]) for x in longs]))
            sec, steps = lr.decode([exact(cb.SHORT_PROMPT)[1]], a.tokens, a.llama_cap)
            add("llama.cpp", "tg", 1, steps / sec)
            lr.close()
            for n in ns:
                lr = cb.LlamaRunner(a.model, a.threads, n, 256)
                lr.decode([exact(cb.SHORT_PROMPT)[1] for _ in range(n)], 2, 120)  # warm-up
                sec, steps = lr.decode([exact(cb.SHORT_PROMPT)[1] for _ in range(n)], a.tokens, a.llama_cap)
                add("llama.cpp", "agg", n, n * steps / sec)
                lr.close()
        cb.log(f"  rep {rep + 1}: " + "  ".join(f"{e} {t}{'' if t != 'agg' else n} {v[-1]:.2f}"
                                               for (e, t, n), v in sorted(samples.items())))
        results[:] = [{"model": name, "engine": e, "threads": a.threads, "test": t, "n_seq": n,
                       "tokens_per_s": v, "median": cb.median(v), "best": max(v)}
                      for (e, t, n), v in samples.items()]
        checkpoint()
    bw.append(cb.stream_bandwidth(stream, a.threads, 1024, 3))
    gbps = cb.median([x for b in bw for x in b])
    load1 = load_average()
    act = active_bytes_per_token(a.model)
    rows = []
    for test, n in [("pp", 1), ("tg", 1)] + [("agg", int(x)) for x in a.concurrency.split(",") if x]:
        i = cb.find(results, engine="invar", test=test, n_seq=n)
        ll = cb.find(results, engine="llama.cpp", test=test, n_seq=n)
        label = {"pp": f"pp{cb.PP_TOKENS}", "tg": "tg x1"}.get(test, f"agg x{n}")
        base = cb.find(results, engine="invar-base", test=test, n_seq=n)
        rows.append({"test": label, "invar": i, "llama.cpp": ll, "ratio": ratio(i, ll), "invar-base": base,
                     "invar/base": ratio(i, base),
                     "invar_pct_bw": (i * act / (gbps * 1e9) if test == "tg" and i else None)})
    print(f"\n{name} ({os.path.getsize(a.model) / 1e9:.2f} GB file, {act / 1e9:.2f} GB active per token), "
          f"{a.threads} threads, medians of {a.reps}; stream read {gbps:.1f} GB/s")
    print(f"{'test':<10} {'invar':>9} {'llama.cpp':>10} {'ratio':>7} {'base':>9} {'inv/base':>8}")
    for r in rows:
        f = lambda x, s=".2f": "-" if x is None else format(x, s)  # noqa: E731
        print(f"{r['test']:<10} {f(r['invar']):>9} {f(r['llama.cpp']):>10} {f(r['ratio']):>7}"
              f" {f(r['invar-base']):>9} {f(r['invar/base']):>8}"
              + (f"   ({100 * r['invar_pct_bw']:.0f}% of the bandwidth bound)" if r["invar_pct_bw"] else ""))
    print(f"load average at start {load0}, at end {load1} on {os.cpu_count()} CPUs")
    try:
        import llama_cpp
        llama_version = llama_cpp.__version__
    except ImportError:
        llama_version = None
    out = os.path.join(a.out_dir, f"moe_{tag}.json")
    with open(out, "w") as fh:
        json.dump({"started_utc": started.isoformat(timespec="seconds"),
                   "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "machine": machine_info(), "load_average_start": load0, "load_average_end": load1,
                   "invar_commit": commit, "llama_cpp_python": llama_version, "model": a.model,
                   "model_bytes": os.path.getsize(a.model), "active_bytes_per_token": act,
                   "stream_read_gbps": bw, "settings": vars(a), "table": rows, "results": results}, fh, indent=1)
    os.remove(partial)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
