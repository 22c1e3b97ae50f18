#!/usr/bin/env python3
"""What each optimisation moved: several invar builds measured side by side.

Builds the given commits (each in its own git worktree under build-bench/history/, with
the same CMake options as scripts/build.sh) or takes ready binaries, then measures them
with the same method as cpu_bench.py (bench/README.md), the builds alternating inside every
repetition so that load changes on a shared machine hit all of them alike:

  pp512   prefill of a 512-token prompt, tokens/s, at each --threads count
  tg      decode of one sequence, tokens/s, at each --threads count
  agg xN  N sequences decoded together, total tokens/s, at the largest thread count

Prints a table of medians (and each build's ratio to the first), writes
bench/results/history_<tag>.json with every sample.

  .venv/bin/python bench/history_bench.py --commit f19d3ab --commit HEAD
  .venv/bin/python bench/history_bench.py --binary old=/tmp/invar-old --binary new=build/invar
  .venv/bin/python bench/history_bench.py --model build-bench/models/smollm2-135m-random.F16.gguf ...
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

import cpu_bench as cb
from bench_common import git_commit, load_average, machine_info

HIST = os.path.join(cb.CACHE, "history")


def build_commit(rev):
    """Binary of commit `rev`, built once into build-bench/history/<sha>/."""
    sha = subprocess.run(["git", "-C", cb.ROOT, "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    src, out = os.path.join(HIST, sha, "src"), os.path.join(HIST, sha, "build")
    exe = os.path.join(out, "invar")
    if os.access(exe, os.X_OK):
        return sha, exe
    if not os.path.isdir(src):
        os.makedirs(os.path.dirname(src), exist_ok=True)
        subprocess.run(["git", "-C", cb.ROOT, "worktree", "add", "--detach", src, sha], check=True,
                       stdout=subprocess.DEVNULL)
    cb.log(f"building {sha} ...")
    subprocess.run(["cmake", "-S", src, "-B", out, "-DCMAKE_BUILD_TYPE=Release", "-DINVAR_CUDA=OFF",
                    "-DINVAR_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", out, "-j2", "--target", "invar_cli"], check=True,
                   stdout=subprocess.DEVNULL)
    return sha, exe


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commit", action="append", default=[], help="a commit to build and measure (repeat)")
    ap.add_argument("--binary", action="append", default=[], metavar="LABEL=PATH",
                    help="a ready invar binary (repeat)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64, help="decoded tokens per sequence")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--concurrency", default="16,64")
    ap.add_argument("--out-dir", default=os.path.join(cb.ROOT, "bench", "results"))
    ap.add_argument("--model", default=cb.DEFAULT_MODEL,
                    help="GGUF file (default: the Q4_1 model; the random Q8_0/F16 files of cpu_bench live in "
                         "build-bench/models/)")
    ap.add_argument("--no-pp", action="store_true", help="skip pp512 (decode figures only)")
    ap.add_argument("--stream", action="store_true",
                    help="also measure streaming-read bandwidth (1 GiB, at start and end) and show each "
                         "tg median as a fraction of the bound weight bytes per token / bandwidth")
    ap.add_argument("--tag")
    args = ap.parse_args()
    builds = [build_commit(c) for c in args.commit]
    builds += [tuple(b.split("=", 1)) for b in args.binary]
    if len(builds) < 1:
        sys.exit("give --commit or --binary at least once")
    threads = sorted(int(t) for t in args.threads.split(","))
    ns = [int(n) for n in args.concurrency.split(",") if n]   # --concurrency "": no aggregate runs
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = load_average()
    exact = cb.make_prompts(builds[0][1], cb.DEFAULT_MODEL, 99)
    short = [exact(cb.SHORT_PROMPT) for _ in range(64)]
    pool = iter(())

    def next_short():
        nonlocal pool
        try:
            return next(pool)
        except StopIteration:
            pool = iter(short)
            return next(pool)

    tests = [] if args.no_pp else [(f"pp512 {t} thr", "pp", t, 1) for t in threads]
    tests += [(f"tg {t} thr", "tg", t, 1) for t in threads]
    bw_samples = {t: [] for t in threads}
    if args.stream:
        stream = cb.build_probe("stream_read")
        for t in threads:
            bw_samples[t] += cb.stream_bandwidth(stream, t, 1024, 3)
    tests += [(f"agg x{n} {threads[-1]} thr", "agg", threads[-1], n) for n in ns]
    samples = {label: {name: [] for name, *_ in tests} for label, _ in builds}
    for rep in range(args.reps):
        long_text, warm_text = exact(cb.PP_TOKENS)[0], exact(cb.PP_TOKENS)[0]
        for name, kind, t, n in tests:
            for label, exe in builds:   # the builds alternate inside each repetition
                r = cb.invar_rep(exe, args.model, t, n, args.tokens, next_short,
                                 [long_text] if kind == "pp" else [], warm_text if kind == "pp" else None)
                v = cb.PP_TOKENS / r["pp_s"] if kind == "pp" else n * args.tokens / r["decode_s"]
                samples[label][name].append(v)
        cb.log(f"rep {rep + 1}/{args.reps} done")
    bound = {}
    if args.stream:
        for t in threads:
            bw_samples[t] += cb.stream_bandwidth(stream, t, 1024, 3)
        wb = cb.weight_bytes_per_token(args.model)[0]
        bound = {f"tg {t} thr": cb.median(bw_samples[t]) * 1e9 / wb for t in threads}
        print("streaming read (1 GiB, median of start and end): "
              + ", ".join(f"{t} thr {cb.median(v):.2f} GB/s" for t, v in bw_samples.items())
              + f"; weights per token {wb / 1e6:.1f} MB; decode bound "
              + ", ".join(f"{k} {v:.1f} tok/s" for k, v in bound.items()))
    base = builds[0][0]
    med = {label: {name: cb.median(xs) for name, xs in d.items()} for label, d in samples.items()}
    print(f"{'build':14}" + "".join(f"{name:>{24 if bound else 18}}" for name, *_ in tests))
    for label, _ in builds:
        cells = []
        for name, *_ in tests:
            m, b = med[label][name], med[base][name]
            cells.append(f"{m:9.1f} ({m / b:4.2f}x)" + (f" {100 * m / bound[name]:3.0f}%bw" if name in bound else ""))
        print(f"{label:14}" + "".join(f"{c:>{24 if bound else 18}}" for c in cells))
    tag = args.tag or started.strftime("%Y%m%d-%H%M")
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"history_{tag}.json")
    with open(path, "w") as f:
        json.dump({"started": started.isoformat(), "load_average_start": load0, "load_average_end": load_average(),
                   "machine": machine_info(), "commit": git_commit(), "model": args.model,
                   "settings": vars(args), "builds": [{"label": lb, "binary": exe} for lb, exe in builds],
                   "median_tokens_per_s": med, "samples": samples,
                   "stream_read_gbps_samples": bw_samples if args.stream else None,
                   "decode_bound_tokens_per_s": bound or None}, f, indent=1)
    print(f"\nwrote {os.path.relpath(path, cb.ROOT)}")


if __name__ == "__main__":
    main()
