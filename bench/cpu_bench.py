#!/usr/bin/env python3
"""CPU benchmark: invar against llama.cpp (llama-cpp-python) on the same GGUF files.

One invocation measures, for the default Q4_1 model and random-weight Q8_0 / F16 models of
the same SmolLM2-135M shape:
  * pp512  - prefill of a 512-token prompt, tokens/s, at 1 and 2 threads;
  * tg128  - decode of one sequence, tokens/s, at 1 and 2 threads, and its fraction of the
             memory-bandwidth bound (weight bytes per token x tokens/s / streaming-read GB/s);
  * aggregate decode at N concurrent sequences (Q4_1, all threads), total tokens/s;
  * with --ctx-tokens N: prefill of an N-token prompt and decode at that context, invar once
             per KV cache type of --kv-types (f32, f16: engine "invar" and "invar-kvf16");
  * streaming-read bandwidth (bench/stream_read.c, compiled into build-bench/) at the start
    and the end of the run, so the bound comes from the same conditions.
Each figure is the median of --reps repetitions; invar and llama.cpp repetitions are
interleaved so that background load hits both alike.  Prints a side-by-side table and writes
bench/results/cpu_<date>.json and .png.

How invar is timed (from outside, no special build): one `invar batch --max-batch N` process
per repetition reads requests in groups, and each result line is time-stamped when it
arrives on the pipe (invar flushes every result as soon as it is done).  With max-batch N
and groups of N requests, a group runs only after the previous one finished:
  W  N short prompts, max_tokens 1      warm-up (first touch of the weights)  -> t_W
  P  one 512-token prompt, max_tokens 1 (single-sequence runs only)          -> t_P
  A  N short prompts, max_tokens 1      prefill of the short prompts           -> t_A
  B  N short prompts, max_tokens 1+T, ignore_eos                                -> t_B
  prefill 512 = t_P - t_W;   decode of T tokens x N = (t_B - t_A) - (t_A - t_P or t_W)
so model loading and process start never enter a figure.  llama.cpp is driven through the
low-level API (llama_batch / llama_decode, one sequence id per concurrent sequence,
n_batch = n_ubatch = 512, flash attention on) and timed around llama_decode plus the same
greedy argmax invar does.

usage: .venv/bin/python bench/cpu_bench.py [--quick]
"""
import argparse
import ctypes
import datetime
import json
import os
import random
import select
import statistics
import subprocess
import sys
import time

import numpy as np

import llama_ctx
from bench_common import git_commit, load_average, machine_info, ratio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "build-bench")
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SHORT_PROMPT = 16     # tokens of the prompts decode starts from
PP_TOKENS = 512

# Common English words that the SmolLM2 BPE keeps as one token each after a space, so a
# prompt of n words is n tokens (checked against invar's tokenizer before use).
WORDS = ("the of and to in is was for on that with as by at from his her they this be are have it "
         "not or had but an which you were one all their there been has when who will more no if out "
         "so said what up its about into than them can only other new some could time these two may "
         "then do first any my now such like our over man me even most made after also did many "
         "before must through back years where much your way well down should because each just "
         "those people how too little state good very make world still own see men work long get "
         "here between both life being under never day same another know while last might us great "
         "old year off come since against go came right used take three").split()


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def add_single_results(results, name, engines, threads_list, ctx=None):
    """One result row per engine (engines: (name, {threads: {test: samples}})), thread count
    and test of a single-sequence run (tests named test@ctx for a long-context run)."""
    for eng, d in engines:
        for t in threads_list:
            for test, xs in d[t].items():
                if xs:
                    row = {"model": name, "engine": eng, "threads": t, "test": test if ctx is None else f"{test}@{ctx}",
                           "n_seq": 1, "tokens_per_s": xs, "median": median(xs), "best": max(xs)}
                    if ctx is not None:
                        row["ctx_tokens"] = ctx
                    results.append(row)


def median(xs):
    return statistics.median(xs) if xs else None


# ----------------------------------------------------------------------------- setup

def ensure_models(skip_random):
    models = [("Q4_1", DEFAULT_MODEL)]
    if skip_random:
        return models
    os.makedirs(os.path.join(CACHE, "models"), exist_ok=True)
    for t in ("Q8_0", "F16"):
        path = os.path.join(CACHE, "models", f"smollm2-135m-random.{t}.gguf")
        if not os.path.exists(path):
            log(f"writing {path}")
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_tiny_model.py"),
                            "--shape", "smollm2-135m", "--type", t, "--tokenizer-from", DEFAULT_MODEL,
                            "--out", path], check=True, stdout=subprocess.DEVNULL)
        models.append((t, path))
    return models


def weight_bytes_per_token(path):
    """Bytes of every weight a decode step reads: all tensors but the embedding table, plus
    the output head (which is token_embd itself when the model ties them).  The embedding
    lookup reads one row, which is noise."""
    import gguf
    r = gguf.GGUFReader(path)
    sizes = {t.name: int(t.n_bytes) for t in r.tensors}
    total = sum(v for k, v in sizes.items() if k != "token_embd.weight")
    if "output.weight" not in sizes:
        total += sizes["token_embd.weight"]
    types = sorted({t.tensor_type.name for t in r.tensors if len(t.shape) >= 2})
    return total, types


def prefill_macs_per_token(path):
    """Multiply-adds per token of a 512-token prefill: every layer matmul (the output head
    runs for the last token only) plus attention (QK and PV over, on average,
    (PP_TOKENS + 1) / 2 positions per query head)."""
    import gguf
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields[f"llama.{key}"]
        return int(f.parts[f.data[0]][0])
    mm = sum(int(t.shape[0]) * int(t.shape[1]) for t in r.tensors
             if t.name.startswith("blk.") and len(t.shape) == 2)
    hd = field("embedding_length") // field("attention.head_count")
    attn = field("block_count") * field("attention.head_count") * hd * 2 * (PP_TOKENS + 1) / 2
    return mm + attn


def build_probe(name, quiet=False):
    """bench/<name>.c compiled into build-bench/ for this machine (-march=native); quiet:
    the compiler's messages kept back (an optional probe the host cannot build)."""
    exe = os.path.join(CACHE, name)
    src = os.path.join(ROOT, "bench", f"{name}.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run(["cc", "-O3", "-march=native", "-pthread", src, "-o", exe], check=True,
                       capture_output=quiet)
    return exe


def fma_peak(exe, threads, reps):
    """Aggregate float32 FMA throughput, GMAC/s per repetition (bench/fma_peak.c; the
    same interface: bench/int8_peak.c, int8 dot products)."""
    out = subprocess.run([exe, str(threads), str(reps)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["gmacs"]


def optional_probe(name):
    """bench/<name>.c built and run once, or None where the compiler, CPU or kernel lacks
    what it needs: int8_peak AVX-512 VNNI or AVX2; amx_peak AMX-INT8 (reported beside the
    vpdpbusd peak: invar's kernels do not use AMX)."""
    try:
        exe = build_probe(name, quiet=True)
        fma_peak(exe, 1, 1)
        return exe
    except (subprocess.CalledProcessError, OSError):
        return None


def stream_bandwidth(exe, threads, size_mib, reps):
    out = subprocess.run([exe, str(size_mib), str(threads), str(reps)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["gbps"]


def make_prompts(invar, model, seed):
    """Distinct word prompts of exactly SHORT_PROMPT and PP_TOKENS tokens (by invar's
    tokenizer, which matches llama.cpp's for this vocabulary: the ids are passed to
    llama.cpp as they are)."""
    rng = random.Random(seed)

    def text(n):
        return "".join(" " + rng.choice(WORDS) for _ in range(n))

    def ids(t):
        out = subprocess.run([invar, "tokenize", "--model", model, t], check=True,
                             capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def exact(n):
        for _ in range(20):
            t = text(n)
            tok = ids(t)
            if len(tok) == n:
                return t, tok
        raise RuntimeError(f"could not build a {n}-token prompt")
    return exact


# ----------------------------------------------------------------------------- invar

def run_timed(cmd, stdin_text):
    """Run cmd, feed stdin_text, return [(json_result, arrival_seconds)] for every line."""
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(stdin_text.encode())
    p.stdin.close()
    fd = p.stdout.fileno()
    buf, lines = b"", []
    while True:
        select.select([fd], [], [])
        chunk = os.read(fd, 1 << 20)
        now = time.perf_counter()
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            lines.append((json.loads(line), now))
    err = p.stderr.read().decode(errors="replace")
    if p.wait() != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err}")
    return lines


def invar_rep(invar, model, threads, n_seq, dec_tokens, short, long_prompts, long_warm=None):
    """One process: warm-up, [pp512 x len(long_prompts),] prefill group, decode group.
    Returns seconds: pp_s (median over the long prompts, timed one after another),
    prefill_short_s, decode_s.  long_warm, one more 512-token prompt, joins the warm-up so
    that no timed prefill pays the first touch of the activation buffers and KV pages
    (llama.cpp's runner warms up the same way)."""
    long_prompts = long_prompts or []
    if isinstance(long_prompts, str):
        long_prompts = [long_prompts]
    reqs = []

    def group(tag, n, max_tokens, prompt_fn):
        for i in range(n):
            reqs.append({"id": f"{tag}{i}", "prompt": prompt_fn(), "max_tokens": max_tokens,
                         "ignore_eos": True})
    group("W", n_seq, 1, lambda: short()[0])
    if long_warm is not None:
        group("W", 1, 1, lambda: long_warm)
    for i, lp in enumerate(long_prompts):
        reqs.append({"id": f"P{i}", "prompt": lp, "max_tokens": 1})
    group("A", n_seq, 1, lambda: short()[0])
    group("B", n_seq, 1 + dec_tokens, lambda: short()[0])
    cmd = [invar, "batch", "--model", model, "--threads", str(threads), "--max-batch", str(n_seq),
           "--max-batch-tokens", str(max(PP_TOKENS, n_seq))]
    lines = run_timed(cmd, "".join(json.dumps(r) + "\n" for r in reqs))
    done, at = {}, {}
    for res, t in lines:
        if "error" in res:
            raise RuntimeError(f"invar request failed: {res}")
        tag = res["id"][0]
        done[tag] = max(done.get(tag, 0.0), t)
        at[res["id"]] = t
        if tag == "B" and len(res["token_ids"]) != 1 + dec_tokens:
            raise RuntimeError(f"invar stopped early: {len(res['token_ids'])} tokens")
        if tag == "P" and res["prompt_tokens"] != PP_TOKENS:
            raise RuntimeError("pp prompt has the wrong length")
    before_a = done["P"] if long_prompts else done["W"]
    prefill_short = done["A"] - before_a
    out = {"decode_s": (done["B"] - done["A"]) - prefill_short, "prefill_short_s": prefill_short}
    if long_prompts:
        ends = [done["W"]] + [at[f"P{i}"] for i in range(len(long_prompts))]
        out["pp_all_s"] = [b - a for a, b in zip(ends, ends[1:])]
        out["pp_s"] = median(out["pp_all_s"])
    return out


def invar_ctx_rep(invar, model, threads, dec_tokens, short, long_prompt, kv_mb, kv_type="f32"):
    """Long context, one process: a short warm-up request, then one long prompt of
    len(long_prompt) tokens that decodes dec_tokens more.  Timed by invar's own --timing
    (first token = end of the prefill, done = last token), so the long prefill is paid once
    and never subtracted from a decode figure.  Returns (prefill_s, decode_s)."""
    reqs = [{"id": "W0", "prompt": short()[0], "max_tokens": 1, "ignore_eos": True},
            {"id": "L0", "prompt": long_prompt, "max_tokens": 1 + dec_tokens, "ignore_eos": True}]
    cmd = [invar, "batch", "--model", model, "--threads", str(threads), "--max-batch", "1",
           "--max-batch-tokens", str(PP_TOKENS), "--kv-mem-mb", str(kv_mb), "--kv-type", kv_type, "--timing"]
    res = {r["id"]: r for r, _ in run_timed(cmd, "".join(json.dumps(r) + "\n" for r in reqs))}
    if any("error" in r for r in res.values()):
        raise RuntimeError(f"invar request failed: {res}")
    w, l = res["W0"]["timing"], res["L0"]["timing"]
    if len(res["L0"]["token_ids"]) != 1 + dec_tokens:
        raise RuntimeError(f"invar stopped early: {len(res['L0']['token_ids'])} tokens")
    return l["first_token_s"] - w["done_s"], l["done_s"] - l["first_token_s"]


# ----------------------------------------------------------------------------- llama.cpp

class LlamaRunner:
    """llama.cpp with a context of n_seq sequences, each in its own KV stream (kv_unified
    off, as llama-batched-bench does)."""

    _models = {}  # path -> [L, model, contexts using it]: one copy per file, however many contexts

    def __init__(self, path, threads, n_seq, n_ctx_seq, kv_unified=False):
        if path not in LlamaRunner._models:
            LlamaRunner._models[path] = [*llama_ctx.load_model(path), 0]
        entry = LlamaRunner._models[path]
        entry[2] += 1
        self.path = path
        self.L, self.model = entry[0], entry[1]
        n_batch = max(PP_TOKENS, n_seq)
        self.ctx = llama_ctx.new_context(self.L, self.model, threads, n_ctx_seq * n_seq, n_batch, n_seq,
                                         kv_unified)
        self.n_vocab = llama_ctx.n_vocab(self.L, self.model)
        self.n_seq = n_seq
        self.batch = self.L.llama_batch_init(n_batch, 0, n_seq)

    def close(self):
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        entry = LlamaRunner._models[self.path]
        entry[2] -= 1
        if entry[2] == 0:   # the last context of this file: an 8B model's copy is 5-9 GB
            L.llama_model_free(self.model)
            del LlamaRunner._models[self.path]

    def _fill(self, entries):
        llama_ctx.fill_batch(self.batch, entries)

    def _decode_argmax(self, n_out):
        if self.L.llama_decode(self.ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        p = self.L.llama_get_logits(self.ctx)
        logits = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)),
                                       shape=(n_out, self.n_vocab))
        return logits.argmax(axis=1)

    def clear(self):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def prefill(self, ids):
        """Seconds for one prompt of len(ids) tokens in one llama_decode, plus its argmax."""
        self.clear()
        self._fill([(t, i, 0, i == len(ids) - 1) for i, t in enumerate(ids)])
        t0 = time.perf_counter()
        self._decode_argmax(1)
        return time.perf_counter() - t0

    def prefill_decode(self, ids, n_tokens, cap_s):
        """Long context: the prompt in n_batch-token llama_decode calls (timed, as invar
        chunks it by --max-batch-tokens), then greedy single-token steps at that context.
        Returns (prefill seconds, decode seconds, decode steps)."""
        self.clear()
        nb = max(PP_TOKENS, self.n_seq)
        t0 = time.perf_counter()
        for i in range(0, len(ids), nb):
            chunk = ids[i:i + nb]
            self._fill([(t, i + j, 0, i + j == len(ids) - 1) for j, t in enumerate(chunk)])
            if i + nb < len(ids):
                if self.L.llama_decode(self.ctx, self.batch) != 0:
                    raise RuntimeError("llama_decode failed")
            else:
                last = int(self._decode_argmax(1)[0])
        pp_s = time.perf_counter() - t0
        pos, steps = len(ids), 0
        t0 = time.perf_counter()
        while steps < n_tokens:
            self._fill([(last, pos, 0, True)])
            last = int(self._decode_argmax(1)[0])
            pos += 1
            steps += 1
            if time.perf_counter() - t0 > cap_s:
                break
        return pp_s, time.perf_counter() - t0, steps

    def decode(self, prompts, n_tokens, cap_s):
        """Prefill one prompt per sequence (untimed, packed into n_batch-sized calls), then
        greedy steps with every sequence in each llama_decode, n_tokens of them or as many
        as fit in cap_s seconds (llama.cpp's spinning threads can slow to a crawl when the
        machine is oversubscribed).  Returns (seconds, steps) of the decode steps."""
        self.clear()
        n = len(prompts)
        last = [0] * n
        entries, owners = [], []
        cap = max(PP_TOKENS, n)

        def flush():
            if entries:
                self._fill(entries)
                out = self._decode_argmax(len(owners))
                for s, tok in zip(owners, out):
                    last[s] = int(tok)
                entries.clear()
                owners.clear()
        for s, ids in enumerate(prompts):
            if len(entries) + len(ids) > cap:
                flush()
            entries.extend((t, i, s, i == len(ids) - 1) for i, t in enumerate(ids))
            owners.append(s)
        flush()
        pos = [len(p) for p in prompts]
        t0 = time.perf_counter()
        steps = 0
        while steps < n_tokens:
            self._fill([(last[s], pos[s], s, True) for s in range(n)])
            nxt = self._decode_argmax(n)
            for s in range(n):
                last[s] = int(nxt[s])
                pos[s] += 1
            steps += 1
            if time.perf_counter() - t0 > cap_s:
                break
        return time.perf_counter() - t0, steps


# ----------------------------------------------------------------------------- runs

def bench_single(args, invar, name, path, threads_list, exact, results):
    """pp512 and single-sequence decode at every thread count, invar and llama.cpp
    interleaved rep by rep and thread count by thread count (so the thread-scaling ratio
    of each repetition compares runs minutes apart, not a whole section apart).  Each pp
    figure is the median of --pp-prompts prompts timed one after another in one process."""
    inv = {t: {"pp": [], "tg": []} for t in threads_list}
    lla = {t: {"pp": [], "tg": []} for t in threads_list}
    llama = {}
    if not args.skip_llama:
        for t in threads_list:
            llama[t] = LlamaRunner(path, t, 1, 1024)
            # warm-up: first touch, graph (a short prompt with --no-pp: an 8B-sized 512-token
            # prefill takes minutes on 2 cores and warms nothing decode uses)
            llama[t].prefill(exact(SHORT_PROMPT if args.no_pp else PP_TOKENS)[1])
            llama[t].decode([exact(SHORT_PROMPT)[1]], 4, 60)
    for rep in range(args.reps):
        for t in threads_list:
            longs = [] if args.no_pp else [exact(PP_TOKENS) for _ in range(args.pp_prompts)]
            r = invar_rep(invar, path, t, 1, args.tokens, lambda: exact(SHORT_PROMPT), [x[0] for x in longs],
                          None if args.cold_prefill or args.no_pp else exact(PP_TOKENS)[0])
            if longs:
                inv[t]["pp"].append(PP_TOKENS / r["pp_s"])
            inv[t]["tg"].append(args.tokens / r["decode_s"])
            line = (f"  {name} t={t} rep {rep + 1}: invar pp {inv[t]['pp'][-1] if longs else 0:.1f} "
                    f"tg {inv[t]['tg'][-1]:.1f}")
            if llama:
                if longs:
                    lla[t]["pp"].append(PP_TOKENS / median([llama[t].prefill(x[1]) for x in longs]))
                sec, steps = llama[t].decode([exact(SHORT_PROMPT)[1]], args.tokens, args.llama_cap)
                lla[t]["tg"].append(steps / sec)
                line += f" | llama.cpp pp {lla[t]['pp'][-1] if longs else 0:.1f} tg {lla[t]['tg'][-1]:.1f}"
            log(line)
    for r in llama.values():
        r.close()
    add_single_results(results, name, [("invar", inv), ("llama.cpp", lla)], threads_list)


def kv_bytes_per_position(path, elem_bytes):
    """K and V bytes one cached position takes over all layers (invar: float32, 4;
    llama.cpp's default cache: f16, 2); a decode step at context c reads c of them."""
    import gguf
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields[f"llama.{key}"]
        return int(f.parts[f.data[0]][0])
    n_head = field("attention.head_count")
    kv = field("attention.head_count_kv") if "llama.attention.head_count_kv" in r.fields else n_head
    hd = field("key_length") if "llama.key_length" in r.fields else field("embedding_length") // n_head
    return field("block_count") * 2 * kv * hd * elem_bytes


# invar's KV cache types (--kv-types): element bytes and the engine name of their rows.
KV_TYPES = {"f32": (4, "invar"), "f16": (2, "invar-kvf16")}


def bench_ctx(args, invar, name, path, threads_list, exact, results):
    """Long context (--ctx-tokens N): prefill of an N-token prompt and decode of --tokens
    more at that context, every thread count, invar (once per --kv-types cache type) and
    llama.cpp interleaved."""
    n = args.ctx_tokens
    kv_types = args.kv_types.split(",")
    kv_mb = int(kv_bytes_per_position(path, 4) * (n + args.tokens + 64) / (1 << 20)) + 64
    invs = {kt: {t: {"pp": [], "tg": []} for t in threads_list} for kt in kv_types}
    lla = {t: {"pp": [], "tg": []} for t in threads_list}
    llama = {}
    if not args.skip_llama:
        for t in threads_list:
            llama[t] = LlamaRunner(path, t, 1, n + args.tokens + 64)
            llama[t].prefill(exact(SHORT_PROMPT)[1])                  # warm-up: first touch, graph
    for rep in range(args.reps):
        for t in threads_list:
            lp = exact(n)
            line = f"  {name} ctx {n} t={t} rep {rep + 1}:"
            for kt, inv in invs.items():
                pp_s, dec_s = invar_ctx_rep(invar, path, t, args.tokens, lambda: exact(SHORT_PROMPT), lp[0], kv_mb, kt)
                inv[t]["pp"].append(n / pp_s)
                inv[t]["tg"].append(args.tokens / dec_s)
                line += f" invar kv {kt} pp {inv[t]['pp'][-1]:.1f} tg {inv[t]['tg'][-1]:.2f}"
            if llama:
                pp_s, dec_s, steps = llama[t].prefill_decode(exact(n)[1], args.tokens, args.llama_cap)
                lla[t]["pp"].append(n / pp_s)
                lla[t]["tg"].append(steps / dec_s)
                line += f" | llama.cpp pp {lla[t]['pp'][-1]:.1f} tg {lla[t]['tg'][-1]:.2f}"
            log(line)
    for r in llama.values():
        r.close()
    engines = [(KV_TYPES[kt][1], d) for kt, d in invs.items()] + [("llama.cpp", lla)]
    add_single_results(results, name, engines, threads_list, ctx=n)


def bench_aggregate(args, invar, name, path, threads, n_seq, exact, results):
    inv, lla = [], []
    llama = None
    if not args.skip_llama:
        llama = LlamaRunner(path, threads, n_seq, 256)
        llama.decode([exact(SHORT_PROMPT)[1] for _ in range(n_seq)], 2, 60)   # warm-up
    for rep in range(args.reps):
        r = invar_rep(invar, path, threads, n_seq, args.tokens, lambda: exact(SHORT_PROMPT), [])
        inv.append(n_seq * args.tokens / r["decode_s"])
        if llama:
            prompts = [exact(SHORT_PROMPT)[1] for _ in range(n_seq)]
            sec, steps = llama.decode(prompts, args.tokens, args.llama_cap)
            lla.append(n_seq * steps / sec)
        log(f"  {name} N={n_seq} rep {rep + 1}: invar {inv[-1]:.1f}"
            + (f" | llama.cpp {lla[-1]:.1f}" if llama else "") + " tok/s")
    if llama:
        llama.close()
    for eng, xs in (("invar", inv), ("llama.cpp", lla)):
        if xs:
            results.append({"model": name, "engine": eng, "threads": threads, "test": "agg",
                            "n_seq": n_seq, "tokens_per_s": xs, "median": median(xs), "best": max(xs)})


def find(results, **kw):
    for r in results:
        if all(r.get(k) == v for k, v in kw.items()):
            return r["median"]
    return None


# ----------------------------------------------------------------------------- report

def paired_scaling(results, engine, model, t1, t2, test="pp"):
    """Median over repetitions of pp(t2) / pp(t1); the thread counts of one repetition run
    back to back, so each ratio compares like conditions."""
    a = next((r["tokens_per_s"] for r in results if r["engine"] == engine and r["model"] == model
              and r["test"] == test and r["threads"] == t1), None)
    b = next((r["tokens_per_s"] for r in results if r["engine"] == engine and r["model"] == model
              and r["test"] == test and r["threads"] == t2), None)
    if not a or not b:
        return None
    return median([y / x for x, y in zip(a, b)])


def summarise(results, models, bw, threads_list, ns, fma=None, macs=None, int8=None):
    """Table rows and the goal checks of the issue."""
    rows, goals = [], []
    tmax = max(threads_list)
    fma, macs, int8 = fma or {}, macs or {}, int8 or {}
    for name, _, wb, types in models:
        float_model = not any(ty.startswith("Q") for ty in types)
        for test in ("pp", "tg"):
            for t in threads_list:
                a = find(results, model=name, engine="invar", threads=t, test=test)
                b = find(results, model=name, engine="llama.cpp", threads=t, test=test)
                row = {"model": name, "test": f"{'pp512' if test == 'pp' else 'tg'}", "threads": t,
                       "invar": a, "llama.cpp": b, "ratio": ratio(a, b)}
                if test == "tg":
                    row["invar_bw_fraction"] = a * wb / (bw[t] * 1e9) if a else None
                    row["llama_bw_fraction"] = b * wb / (bw[t] * 1e9) if b else None
                elif float_model and t in fma and name in macs:
                    # Float weights: every multiply-add is a float32 FMA, so the FMA peak
                    # bounds prefill (quantised types use int8 dot products instead).
                    bound = fma[t] * 1e9 / macs[name]
                    row["fma_bound"] = bound
                    row["invar_fma_fraction"] = a / bound if a else None
                    row["llama_fma_fraction"] = b / bound if b else None
                elif not float_model and t in int8 and name in macs:
                    # Quantised weights: the matmuls' multiply-adds are int8 dot products
                    # (vpdpbusd), so the int8 peak bounds their prefill.
                    bound = int8[t] * 1e9 / macs[name]
                    row["int8_bound"] = bound
                    row["invar_int8_fraction"] = a / bound if a else None
                    row["llama_int8_fraction"] = b / bound if b else None
                if a is not None or b is not None:  # --ctx-only leaves the short-context rows empty
                    rows.append(row)
    for name, path, wb, _ in models:
        for test in sorted({r["test"] for r in results if r["model"] == name and "@" in r["test"]}, reverse=True):
            c = int(test.split("@")[1])
            for t in threads_list:
                a = find(results, model=name, engine="invar", threads=t, test=test)
                b = find(results, model=name, engine="llama.cpp", threads=t, test=test)
                row = {"model": name, "test": f"pp{c}" if test.startswith("pp") else f"tg @{c}", "threads": t,
                       "invar": a, "llama.cpp": b, "ratio": ratio(a, b)}
                h = find(results, model=name, engine="invar-kvf16", threads=t, test=test)
                if h is not None:  # the f16 KV cache (--kv-types): its figure and f16/f32
                    row["invar_kvf16"], row["kvf16_over_f32"] = h, ratio(h, a)
                if test.startswith("tg"):
                    # Each engine's own bytes per step: the weights plus its KV cache at c
                    # positions (invar float32, llama.cpp f16).
                    inv_b = wb + c * kv_bytes_per_position(path, 4)
                    lla_b = wb + c * kv_bytes_per_position(path, 2)
                    row["invar_bytes_per_token"], row["llama_bytes_per_token"] = inv_b, lla_b
                    row["invar_bw_fraction"] = a * inv_b / (bw[t] * 1e9) if a else None
                    row["llama_bw_fraction"] = b * lla_b / (bw[t] * 1e9) if b else None
                rows.append(row)
    for n in ns:
        a = find(results, model="Q4_1", engine="invar", threads=tmax, test="agg", n_seq=n)
        b = find(results, model="Q4_1", engine="llama.cpp", threads=tmax, test="agg", n_seq=n)
        rows.append({"model": "Q4_1", "test": f"agg x{n}", "threads": tmax, "invar": a,
                     "llama.cpp": b, "ratio": ratio(a, b)})

    def goal(text, value, target, ok, **extra):
        goals.append({"goal": text, "value": value, "target": target,
                      "met": bool(ok) if value is not None else None, **extra})
    for name, _, _, _ in models:
        tg = next((r for r in rows if r["model"] == name and r["test"] == "tg" and r["threads"] == tmax), None)
        if tg is None or tg["invar"] is None:
            continue
        f = tg["invar_bw_fraction"]
        goal(f"{name} decode >= 90% of bandwidth bound", f, 0.9, f is not None and f >= 0.9)
        goal(f"{name} decode ahead of llama.cpp", tg["ratio"], 1.0, tg["ratio"] and tg["ratio"] > 1.0)
    for name, _, _, _ in models:
        pp = next((r for r in rows if r["model"] == name and r["test"] == "pp512" and r["threads"] == tmax), None)
        if pp is None or pp["invar"] is None:
            continue
        extra = {}
        if pp.get("fma_bound") and pp["llama.cpp"]:
            extra["target_over_fma_bound"] = 2 * pp["llama.cpp"] / pp["fma_bound"]
        goal(f"{name} pp512 >= 2x llama.cpp", pp["ratio"], 2.0, pp["ratio"] and pp["ratio"] >= 2.0, **extra)
        f = pp.get("invar_int8_fraction")
        if f is not None:
            goal(f"{name} pp512 >= 50% of the int8 dot-product peak", f, 0.5, f >= 0.5)
    for n in (16, 64):
        r = next((r for r in rows if r["test"] == f"agg x{n}"), None)
        if r:
            goal(f"aggregate decode x{n} >= 3x llama.cpp", r["ratio"], 3.0, r["ratio"] and r["ratio"] >= 3.0)
    a16 = find(results, model="Q4_1", engine="invar", test="agg", n_seq=16)
    a64 = find(results, model="Q4_1", engine="invar", test="agg", n_seq=64)
    if a16 and a64:
        goal("invar aggregate decode grows from x16 to x64", a64 / a16, 1.0, a64 > a16)
    if 1 in threads_list and 2 in threads_list:
        for name, _, _, _ in models:
            sc = paired_scaling(results, "invar", name, 1, 2)
            if sc is not None:
                goal(f"{name} invar pp512 scaling 1 -> 2 threads >= 1.8x", sc, 1.8, sc >= 1.8,
                     llama_cpp=paired_scaling(results, "llama.cpp", name, 1, 2),
                     machine_fma=ratio(fma.get(2), fma.get(1)))
            for test in sorted({r["test"] for r in results if r["model"] == name and r["test"].startswith("pp@")}):
                sc = paired_scaling(results, "invar", name, 1, 2, test)
                goal(f"{name} invar prefill of {test[3:]} scaling 1 -> 2 threads >= 1.8x", sc, 1.8,
                     sc is not None and sc >= 1.8, llama_cpp=paired_scaling(results, "llama.cpp", name, 1, 2, test),
                     machine_fma=ratio(fma.get(2), fma.get(1)))
    return rows, goals


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def print_table(rows, goals, bw, models, fma=None, macs=None, int8=None):
    fma, macs, int8 = fma or {}, macs or {}, int8 or {}
    print()
    print("weights read per decoded token: " + ", ".join(f"{n} {wb / 1e6:.1f} MB" for n, _, wb, _ in models))
    print("streaming read (1 GiB, median): " + ", ".join(f"{t} thr {g:.2f} GB/s" for t, g in sorted(bw.items())))
    if fma:
        print("float32 FMA peak (median): " + ", ".join(f"{t} thr {g:.1f} GMAC/s" for t, g in sorted(fma.items()))
              + "; prefill multiply-adds per token: "
              + ", ".join(f"{n} {m / 1e6:.1f} M" for n, m in macs.items()))
    if int8:
        print("int8 dot-product peak (vpdpbusd, median): "
              + ", ".join(f"{t} thr {g:.1f} GMAC/s" for t, g in sorted(int8.items())))
    print()
    print(f"{'model':6} {'test':9} {'thr':>3} {'invar tok/s':>12} {'llama.cpp':>10} {'ratio':>6} "
          f"{'invar %bw':>9} {'llama %bw':>9} {'invar %peak':>11} {'llama %peak':>11}")

    def pct(x):
        return fmt(x * 100 if x else None, ".0f")
    for r in rows:
        print(f"{r['model']:6} {r['test']:9} {r['threads']:>3} {fmt(r['invar']):>12} {fmt(r['llama.cpp']):>10} "
              f"{fmt(r['ratio'], '.2f'):>6} {pct(r.get('invar_bw_fraction')):>9} "
              f"{pct(r.get('llama_bw_fraction')):>9} "
              f"{pct(r.get('invar_fma_fraction', r.get('invar_int8_fraction'))):>11} "
              f"{pct(r.get('llama_fma_fraction', r.get('llama_int8_fraction'))):>11}"
              + (f"  invar kv f16 {fmt(r['invar_kvf16'])} (f16/f32 {fmt(r['kvf16_over_f32'], '.2f')})"
                 if r.get("invar_kvf16") is not None else ""))
    print("(%bw: decode against the streaming-read bound; %peak: prefill against the float32 FMA "
          "peak (float weights) or the int8 dot-product peak (quantised weights))")
    print()
    for g in goals:
        mark = {True: "MET ", False: "MISS", None: "n/a "}[g["met"]]
        extra = ""
        if "llama_cpp" in g:
            extra = f"; llama.cpp {fmt(g['llama_cpp'], '.2f')}, FMA probe {fmt(g['machine_fma'], '.2f')}"
        if "target_over_fma_bound" in g:
            extra = f"; the target is {g['target_over_fma_bound'] * 100:.0f}% of the FMA bound"
        print(f"[{mark}] {g['goal']}: {fmt(g['value'], '.2f')} (target {g['target']}{extra})")


def plot(path, rows, models, bw, ns, threads_list):
    """Draws the PNG; returns False (nothing drawn) where matplotlib is not installed, e.g.
    in a private llama.cpp venv: the JSON holds every figure."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tmax = max(threads_list)
    fig, ax = plt.subplots(1, 4, figsize=(20, 4.6))
    names = [m[0] for m in models]
    x = np.arange(len(names))
    # One bar per (thread count, engine): the 1-thread pair is the one least hurt by
    # other load on a shared machine, so both are shown.
    series = [(t, eng) for t in threads_list for eng in ("invar", "llama.cpp")]
    w = 0.8 / len(series)
    colors = {"invar": ("#9ecae1", "#1f77b4"), "llama.cpp": ("#fdd0a2", "#ff7f0e")}
    for k, (test, title) in enumerate((("pp512", "prefill pp512"), ("tg", "decode, 1 sequence"))):
        for j, (t, eng) in enumerate(series):
            ys = [next((r[eng] for r in rows if r["model"] == n and r["test"] == test and r["threads"] == t), None) or 0
                  for n in names]
            shade = colors[eng][min(threads_list.index(t), 1) if len(threads_list) > 1 else 1]
            ax[k].bar(x - 0.4 + w * (j + 0.5), ys, w, color=shade, label=f"{eng}, {t} thr")
        if test == "pp512":
            for t in threads_list:
                bound = [next((r.get("fma_bound") for r in rows if r["model"] == n and r["test"] == test
                               and r["threads"] == t), None) for n in names]
                if any(bound):
                    ax[k].scatter(x, [b or np.nan for b in bound], marker="_", s=900,
                                  color="k" if t == tmax else "grey", label=f"FMA bound (float weights), {t} thr")
        if test == "tg":
            for t in threads_list:
                bound = [bw[t] * 1e9 / wb for _, _, wb, _ in models]
                ax[k].scatter(x, bound, marker="_", s=900, color="k" if t == tmax else "grey",
                              label=f"DRAM bound, {t} thr")
        ax[k].set_xticks(x, names)
        ax[k].set_ylabel("tokens/s")
        ax[k].set_title(title)
        ax[k].legend(fontsize=7)
    inv = [next((r["invar"] for r in rows if r["test"] == f"agg x{n}"), None) for n in ns]
    lla = [next((r["llama.cpp"] for r in rows if r["test"] == f"agg x{n}"), None) for n in ns]
    ax[2].plot(ns, inv, "o-", label="invar")
    if any(lla):
        ax[2].plot(ns, lla, "s-", label="llama.cpp")
    ax[2].set_xscale("log", base=2)
    ax[2].set_xticks(ns, [str(n) for n in ns])
    ax[2].set_xlabel("concurrent sequences")
    ax[2].set_ylabel("total tokens/s")
    ax[2].set_title(f"aggregate decode, Q4_1 ({tmax} threads)")
    ax[2].legend(fontsize=8)
    for eng, mk in (("invar", "o-"), ("llama.cpp", "s-")):
        ys = [next((r[eng] for r in rows if r["model"] == "Q4_1" and r["test"] == "pp512" and r["threads"] == t), None)
              for t in threads_list]
        if all(ys):
            ax[3].plot(threads_list, ys, mk, label=eng)
    ax[3].set_xticks(threads_list)
    ax[3].set_xlabel("threads")
    ax[3].set_ylabel("tokens/s")
    ax[3].set_title("prefill pp512 thread scaling, Q4_1")
    ax[3].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 repetitions, 32 decode tokens, N in 1,16,64")
    ap.add_argument("--reps", type=int, help="repetitions per measurement (default 5, 3 with --quick)")
    ap.add_argument("--tokens", type=int, help="decoded tokens per sequence (default 128, 32 with --quick)")
    ap.add_argument("--threads", default="1,2", help="thread counts for pp/tg (default 1,2)")
    ap.add_argument("--concurrency", help="aggregate decode sequence counts (default 1,4,16,64)")
    ap.add_argument("--invar", default=os.path.join(ROOT, "build", "invar"), help="invar binary")
    ap.add_argument("--llama-cap", type=float, default=20.0,
                    help="seconds after which a llama.cpp decode measurement stops early (default 20)")
    ap.add_argument("--pp-prompts", type=int, default=3,
                    help="512-token prompts timed per repetition, median taken (default 3)")
    ap.add_argument("--cold-prefill", action="store_true",
                    help="time invar's first 512-token prefill of the process (no long warm-up)")
    ap.add_argument("--skip-llama", action="store_true", help="measure invar only")
    ap.add_argument("--skip-random", action="store_true", help="only the default Q4_1 model")
    ap.add_argument("--models", help="comma-separated subset of Q4_1,Q8_0,F16 (default: all)")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                    help="one more GGUF to measure (repeatable), e.g. a file of "
                         "tools/make_tiny_model.py --shape smollm2-1.7b --type Q4_K_M")
    ap.add_argument("--no-pp", action="store_true",
                    help="skip pp512 (single-sequence decode only: a quick decode measurement)")
    ap.add_argument("--ctx-tokens", type=int, default=0, metavar="N",
                    help="also measure long context: prefill of an N-token prompt and decode of "
                         "--tokens more at that context (e.g. 4096)")
    ap.add_argument("--kv-types", default="f32", metavar="f32,f16",
                    help="with --ctx-tokens: invar's KV cache types to measure (default f32)")
    ap.add_argument("--ctx-only", action="store_true",
                    help="with --ctx-tokens: skip the pp512 / short-context decode runs")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--tag", help="file name suffix (default: UTC date and time)")
    ap.add_argument("--replot", metavar="JSON", help="only redraw the PNG of a saved result file")
    args = ap.parse_args()
    if args.replot:
        with open(args.replot) as f:
            d = json.load(f)
        st = d["settings"]
        models = [(m["name"], m["path"], m["weight_bytes_per_token"], m["matmul_types"]) for m in d["models"]]
        bw = {int(k): v for k, v in d["stream_read_gbps"]["1GiB_median"].items()}
        plot(os.path.splitext(args.replot)[0] + ".png", d["table"], models, bw, st["concurrency"], st["threads"])
        return
    args.reps = args.reps or (3 if args.quick else 5)
    args.tokens = args.tokens or (32 if args.quick else 128)
    threads_list = sorted(int(t) for t in args.threads.split(","))
    if any(k not in KV_TYPES for k in args.kv_types.split(",")):
        sys.exit(f"--kv-types takes a comma-separated subset of {','.join(KV_TYPES)}")
    ns = [int(n) for n in (args.concurrency or ("1,16,64" if args.quick else "1,4,16,64")).split(",")]
    invar = os.path.abspath(args.invar)
    if not os.access(invar, os.X_OK):
        sys.exit(f"no invar binary at {invar} (cmake --build build)")

    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = load_average()
    commit = git_commit()   # now: the shared tree may move on during the run
    chosen = set(args.models.split(",")) if args.models else None
    extra = [tuple(m.split("=", 1)) for m in args.model]
    if any(len(m) != 2 for m in extra):
        sys.exit("--model takes NAME=PATH")
    models = [(n, p, *weight_bytes_per_token(p)) for n, p in ensure_models(args.skip_random) + extra
              if chosen is None or n in chosen or (n, p) in extra]
    stream, fma, i8 = build_probe("stream_read"), build_probe("fma_peak"), optional_probe("int8_peak")
    macs = {n: prefill_macs_per_token(p) for n, p, _, _ in models}
    exact = make_prompts(invar, DEFAULT_MODEL, 1234)
    prompt_cache = {n: [exact(n) for _ in range(64 * 3 + 8)] for n in (SHORT_PROMPT,)}
    pools = {n: iter(v) for n, v in prompt_cache.items()}

    def exact_cycled(n):
        # Short prompts come from a pre-tokenised pool; long ones are built on demand.
        if n in prompt_cache:
            try:
                return next(pools[n])
            except StopIteration:
                pools[n] = iter(prompt_cache[n])
                return next(pools[n])
        return exact(n)

    bw_samples = {t: [] for t in threads_list}
    log("streaming-read bandwidth ...")
    for t in threads_list:
        bw_samples[t] += stream_bandwidth(stream, t, 1024, args.reps)
    cache_bw = {t: median(stream_bandwidth(stream, t, 96, 10)) for t in threads_list}
    fma_samples = {t: fma_peak(fma, t, 3) for t in threads_list}
    int8_samples = {t: fma_peak(i8, t, 3) for t in threads_list} if i8 else {}
    amx = optional_probe("amx_peak")
    amx_samples = {t: fma_peak(amx, t, 3) for t in threads_list} if amx else {}

    results = []
    tag = args.tag or started.strftime("%Y%m%d-%H%M")
    os.makedirs(args.out_dir, exist_ok=True)
    partial = os.path.join(args.out_dir, f"cpu_{tag}.partial.json")

    def checkpoint():
        # A long run on a busy machine may be cut short: keep what is measured so far.
        with open(partial, "w") as f:
            json.dump({"bw_samples": bw_samples, "results": results}, f, indent=1)
    tmax = max(threads_list)
    # The default model first, aggregate decode included, then the other weight types.
    for name, path, wb, _ in models:
        log(f"{name}: pp{PP_TOKENS} + tg{args.tokens}, threads " + ", ".join(map(str, threads_list)))
        if not args.ctx_only:
            bench_single(args, invar, name, path, threads_list, exact_cycled, results)
            checkpoint()
        if args.ctx_tokens:
            log(f"{name}: prefill of {args.ctx_tokens} tokens + tg{args.tokens} at that context")
            bench_ctx(args, invar, name, path, threads_list, exact_cycled, results)
            checkpoint()
        if name != "Q4_1":
            continue
        for n in ns:
            if n == 1:
                for eng in ("invar", "llama.cpp"):
                    src = next((r for r in results if r["model"] == "Q4_1" and r["engine"] == eng
                                and r["threads"] == tmax and r["test"] == "tg"), None)
                    if src is not None:
                        results.append({**src, "test": "agg", "n_seq": 1})
                continue
            log(f"Q4_1: aggregate decode, {n} sequences")
            bench_aggregate(args, invar, "Q4_1", DEFAULT_MODEL, tmax, n, exact_cycled, results)
            checkpoint()

    log("streaming-read bandwidth again ...")
    for t in threads_list:
        bw_samples[t] += stream_bandwidth(stream, t, 1024, args.reps)
        fma_samples[t] += fma_peak(fma, t, 3)
        if i8:
            int8_samples[t] += fma_peak(i8, t, 3)
        if amx:
            amx_samples[t] += fma_peak(amx, t, 3)
    bw = {t: median(v) for t, v in bw_samples.items()}
    fma_med = {t: median(v) for t, v in fma_samples.items()}
    int8_med = {t: median(v) for t, v in int8_samples.items()}
    amx_med = {t: median(v) for t, v in amx_samples.items()}
    rows, goals = summarise(results, models, bw, threads_list, ns, fma_med, macs, int8_med)
    print_table(rows, goals, bw, models, fma_med, macs, int8_med)
    if amx_med:
        print("AMX-INT8 tile peak (tdpbssd, median; not what %peak is against): "
              + ", ".join(f"{t} thr {g:.1f} GMAC/s" for t, g in sorted(amx_med.items())))
    print(f"\n(96 MiB read, fits the last-level cache: "
          + ", ".join(f"{t} thr {g:.2f} GB/s" for t, g in sorted(cache_bw.items())) + ")")
    load1 = load_average()
    print(f"load average at start {load0}, at end {load1} on {os.cpu_count()} CPUs")

    try:
        import llama_cpp
        llama_version = llama_cpp.__version__
    except ImportError:  # --skip-llama without the binding installed
        llama_version = None
    report = {
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(), "load_average_start": load0, "load_average_end": load1,
        "invar_commit": commit, "invar_binary": invar, "llama_cpp_python": llama_version,
        "settings": {"reps": args.reps, "ctx_tokens": args.ctx_tokens, "kv_types": args.kv_types, "ctx_only": args.ctx_only, "decode_tokens": args.tokens, "pp_tokens": PP_TOKENS,
                     "short_prompt_tokens": SHORT_PROMPT, "threads": threads_list, "concurrency": ns,
                     "llama_cpp": "n_batch=n_ubatch=512 (>= N), flash_attn on, kv_unified off, greedy argmax",
                     "llama_decode_cap_s": args.llama_cap},
        "models": [{"name": n, "path": os.path.relpath(p, ROOT), "weight_bytes_per_token": wb, "matmul_types": ty}
                   for n, p, wb, ty in models],
        "stream_read_gbps": {"1GiB_samples": bw_samples, "1GiB_median": bw, "96MiB_median": cache_bw},
        "fma_peak_gmacs": {"samples": fma_samples, "median": fma_med},
        "int8_peak_gmacs": {"samples": int8_samples, "median": int8_med},
        "amx_int8_peak_gmacs": {"samples": amx_samples, "median": amx_med},
        "prefill_macs_per_token": macs,
        "results": results, "table": rows, "goals": goals,
    }
    jpath = os.path.join(args.out_dir, f"cpu_{tag}.json")
    with open(jpath, "w") as f:
        json.dump(report, f, indent=1)
    ppath = os.path.join(args.out_dir, f"cpu_{tag}.png")
    drawn = plot(ppath, rows, models, bw, ns, threads_list)
    os.remove(partial)
    print(f"\nwrote {os.path.relpath(jpath, ROOT)}"
          + (f" and {os.path.relpath(ppath, ROOT)}" if drawn else " (no PNG: matplotlib not installed)"))


if __name__ == "__main__":
    main()
