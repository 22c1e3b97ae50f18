#!/usr/bin/env python3
"""Offline serving benchmark: invar against llama.cpp with parallel sequences.

Workload: N requests (seeded) whose prompts are varied English text of a uniform token
length (default 32-256) and whose outputs are a uniform number of tokens (default 16-96,
ignore_eos so every output reaches its length), greedy.  All N requests are submitted at
t=0; at concurrency C at most C of them are decoded together and the rest queue.

Per concurrency level, both engines run the identical token ids, interleaved (invar then
llama.cpp, order swapped on every other level), and we report
  requests/s       = N / (time the last request finished)
  output tokens/s  = sum(output tokens) / (time the last request finished)
  TTFT             = time from t=0 to a request's first output token   (median, p99)
  TPOT             = (done - first token) / (output tokens - 1)         (median, p99)

invar: `invar batch --max-batch C --timing` (all requests on stdin at once); timing comes
from its per-result "timing" field, measured from the start of the batch, so model loading
is excluded.

llama.cpp: driven in-process through llama-cpp-python's low-level API the way llama-server
runs parallel slots: one context with n_seq_max = C (one KV stream per slot), a Python loop
that each step puts one decode token per active slot into a llama_batch and fills the rest
of the n_batch (512) token budget with prompt chunks of newly admitted requests (chunked
prefill), calls llama_decode once, and takes the greedy argmax of each output row.  A slot
whose request finishes is cleared (llama_memory_seq_rm) and takes the next queued request.
Model load, context creation and a short warm-up happen before t=0.  invar's budget of
tokens per step is the same 512 (--max-batch-tokens).

usage: .venv/bin/python bench/serving_bench.py [--quick] [--n N] [--concurrency 1,4,16,64]
"""
import argparse
import ctypes
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

import llama_ctx
from bench_common import git_commit, load_average, machine_info, ratio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_INVAR = os.path.join(ROOT, "build", "invar")
N_BATCH = 512   # tokens per forward step, both engines

# Prompt material: plain English sentences on assorted topics, shuffled and concatenated
# per request so that prompts differ in vocabulary and structure.
SENTENCES = [
    "The harbour was quiet that morning, and the fishing boats rocked gently against the pier.",
    "Photosynthesis converts light energy into chemical energy stored in sugars.",
    "She opened the old notebook and found a list of names she did not recognise.",
    "In 1969 the first crewed landing on the Moon was watched by hundreds of millions of people.",
    "A good bread dough needs time, warmth and a little patience before it goes into the oven.",
    "The committee postponed its decision until the auditors had finished their report.",
    "Rivers carry sediment from the mountains to the sea, building deltas over thousands of years.",
    "He tuned the guitar twice, but the third string still sounded slightly flat.",
    "Compilers translate source code into machine instructions that a processor can execute.",
    "The museum's new wing displays pottery, textiles and tools from the Bronze Age.",
    "When the train stopped between stations, the passengers looked up from their phones.",
    "Regular exercise improves sleep, mood and the health of the heart and lungs.",
    "The recipe called for two cups of flour, one egg, a pinch of salt and some milk.",
    "Volcanic islands often have fertile soil because the ash is rich in minerals.",
    "Our neighbour keeps bees, and every autumn she gives us a jar of dark honey.",
    "The treaty was signed in a small town near the border after weeks of negotiation.",
    "A hash table stores keys and values and finds an entry in constant time on average.",
    "Children in the village walked two miles to school along a muddy road.",
    "The orchestra rehearsed the symphony's slow movement until the balance was right.",
    "Wind turbines generate more electricity on the coast, where the air moves faster.",
    "Detective Morales noticed that the clock on the mantelpiece had stopped at ten past four.",
    "Interest rates rose for the third time this year, and mortgage costs followed.",
    "The glacier has retreated nearly a kilometre since the first measurements were taken.",
    "If you water tomatoes in the evening, the leaves stay wet overnight and can grow mould.",
    "The startup hired twelve engineers and moved into a converted warehouse by the canal.",
    "Ancient sailors navigated by the stars, the sun and the colour of the water.",
    "Please remember to bring your passport, a printed ticket and a warm jacket.",
    "The chess player sacrificed her queen and won the game eleven moves later.",
    "Vaccines train the immune system to recognise a pathogen before a real infection.",
    "Rain fell all afternoon, turning the market square into a shallow grey lake.",
    "The library extended its opening hours during the examination period.",
    "Migrating birds can sense the Earth's magnetic field and use it to keep their course.",
    "He apologised for the delay and explained that the bridge had been closed for repairs.",
    "Good documentation explains why a design was chosen, not only what the code does.",
    "The desert cools quickly after sunset, and the temperature can drop below freezing.",
    "A small bakery on the corner sells cinnamon rolls that sell out before nine o'clock.",
]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if xs else None


# ----------------------------------------------------------------------------- workload

def invar_tokenize(invar, model, text):
    r = subprocess.run([invar, "tokenize", "--model", model, "--no-special", text],
                       capture_output=True, text=True, check=True)
    return [int(t) for t in r.stdout.split()]


def make_workload(args, llama_vocab_tokenize):
    """N requests with prompts of exactly the drawn token length (by invar's tokenizer)."""
    rng = random.Random(args.seed)
    reqs = []
    for i in range(args.n):
        target = rng.randint(args.prompt_min, args.prompt_max)
        out_len = rng.randint(args.output_min, args.output_max)
        order = SENTENCES[:]
        rng.shuffle(order)
        words = " ".join(order * 4).split()
        # Fit the word count with llama.cpp's tokenizer of the same vocabulary (fast,
        # in-process), then take invar's ids as the truth; trim words until within target.
        lo, hi = 1, len(words)
        while lo < hi:   # largest word count whose token count <= target
            mid = (lo + hi + 1) // 2
            if len(llama_vocab_tokenize(" ".join(words[:mid]))) <= target:
                lo = mid
            else:
                hi = mid - 1
        text = " ".join(words[:lo])
        ids = invar_tokenize(args.invar, args.model, text)
        while len(ids) > target:
            lo -= 1
            text = " ".join(words[:lo])
            ids = invar_tokenize(args.invar, args.model, text)
        reqs.append({"id": f"r{i}", "prompt": text, "ids": ids, "max_tokens": out_len})
    return reqs


# ----------------------------------------------------------------------------- invar

def run_invar(args, reqs, conc):
    lines = [json.dumps({"id": r["id"], "prompt": r["prompt"], "max_tokens": r["max_tokens"],
                         "temperature": 0, "seed": 1, "ignore_eos": True}) for r in reqs]
    cmd = [args.invar, "batch", "--model", args.model, "--max-batch", str(conc),
           "--max-batch-tokens", str(N_BATCH), "--threads", str(args.threads),
           "--kv-mem-mb", str(args.kv_mem_mb), "--timing"]
    r = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"invar batch failed ({r.returncode}): {r.stderr[-2000:]}")
    out = {}
    for line in r.stdout.splitlines():
        d = json.loads(line)
        if "error" in d:
            raise RuntimeError(f"invar request error: {d}")
        out[d["id"]] = d
    per = []
    for q in reqs:
        d = out[q["id"]]
        if d["prompt_tokens"] != len(q["ids"]):
            raise RuntimeError(f"{q['id']}: invar saw {d['prompt_tokens']} prompt tokens, expected {len(q['ids'])}")
        per.append({"id": q["id"], "n_tokens": len(d["token_ids"]),
                    "first_token_s": d["timing"]["first_token_s"], "done_s": d["timing"]["done_s"],
                    "token_ids": d["token_ids"]})
    return per


# ----------------------------------------------------------------------------- llama.cpp

class LlamaServer:
    """Continuous batching over llama.cpp's low-level API, one slot per parallel sequence."""

    def __init__(self, model, threads):
        self.L, self.model = llama_ctx.load_model(model)
        self.vocab = self.L.llama_model_get_vocab(self.model)
        self.n_vocab = llama_ctx.n_vocab(self.L, self.model)
        self.threads = threads

    def tokenize(self, text):
        b = text.encode()
        buf = (self.L.llama_token * (len(b) + 8))()
        n = self.L.llama_tokenize(self.vocab, b, len(b), buf, len(buf), False, False)
        if n < 0:
            raise RuntimeError("llama_tokenize buffer too small")
        return list(buf[:n])

    def close(self):
        self.L.llama_model_free(self.model)

    def run(self, reqs, conc, n_ctx_seq, cap_s):
        """Serve reqs (all queued at t=0) with conc slots.  Returns per-request timings of
        those finished within cap_s seconds (llama.cpp's spinning worker threads can crawl
        on an oversubscribed machine)."""
        L = self.L
        # one KV stream per slot, as llama-server with -np
        ctx = llama_ctx.new_context(L, self.model, self.threads, n_ctx_seq * conc, N_BATCH, conc)
        mem = L.llama_get_memory(ctx)
        batch = L.llama_batch_init(N_BATCH, 0, 1)
        try:
            # Warm-up outside the timed region: one short prompt through every code path.
            self._fill(batch, [(t, i, 0, i == 7) for i, t in enumerate(reqs[0]["ids"][:8])])
            self._decode(ctx, batch, 1)
            L.llama_memory_clear(mem, True)
            return self._serve(ctx, mem, batch, reqs, conc, cap_s)
        finally:
            L.llama_batch_free(batch)
            L.llama_free(ctx)

    @staticmethod
    def _fill(batch, entries):
        llama_ctx.fill_batch(batch, entries)

    def _decode(self, ctx, batch, n_out):
        if self.L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        p = self.L.llama_get_logits(ctx)   # output rows in batch order
        logits = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)),
                                       shape=(n_out, self.n_vocab))
        return logits.argmax(axis=1)

    def _serve(self, ctx, mem, batch, reqs, conc, cap_s):
        queue = list(range(len(reqs)))
        slots = [None] * conc       # per slot: dict(req, fed, out, first, last)
        results = [None] * len(reqs)
        t0 = time.perf_counter()
        while queue or any(slots):
            if time.perf_counter() - t0 > cap_s:
                break
            for s in range(conc):    # admit queued requests into free slots
                if slots[s] is None and queue:
                    slots[s] = {"req": queue.pop(0), "fed": 0, "out": []}
            entries, owners = [], []
            # Decode tokens first (one per generating slot), then prompt chunks.
            for s, st in enumerate(slots):
                if st and st["out"]:
                    ids = reqs[st["req"]]["ids"]
                    entries.append((st["out"][-1], len(ids) + len(st["out"]) - 1, s, True))
                    owners.append(s)
            for s, st in enumerate(slots):
                if st and not st["out"] and len(entries) < N_BATCH:
                    ids = reqs[st["req"]]["ids"]
                    take = min(N_BATCH - len(entries), len(ids) - st["fed"])
                    for k in range(st["fed"], st["fed"] + take):
                        last = k == len(ids) - 1
                        entries.append((ids[k], k, s, last))
                        if last:
                            owners.append(s)
                    st["fed"] += take
            self._fill(batch, entries)
            toks = self._decode(ctx, batch, len(owners))
            now = time.perf_counter() - t0
            for s, tok in zip(owners, toks):
                st = slots[s]
                if not st["out"]:
                    st["first"] = now
                st["out"].append(int(tok))
                r = reqs[st["req"]]
                if len(st["out"]) >= r["max_tokens"]:
                    results[st["req"]] = {"id": r["id"], "n_tokens": len(st["out"]),
                                          "first_token_s": st["first"], "done_s": now,
                                          "token_ids": st["out"]}
                    self.L.llama_memory_seq_rm(mem, s, -1, -1)
                    slots[s] = None
        return [r for r in results if r is not None]


# ----------------------------------------------------------------------------- metrics

def metrics(per, n_total):
    if not per:
        return {"completed": 0, "n_requests": n_total}
    end = max(p["done_s"] for p in per)
    ttft = [p["first_token_s"] for p in per]
    tpot = [(p["done_s"] - p["first_token_s"]) / (p["n_tokens"] - 1) for p in per if p["n_tokens"] > 1]
    return {
        "n_requests": n_total, "completed": len(per), "makespan_s": end,
        "requests_per_s": len(per) / end,
        "output_tokens_per_s": sum(p["n_tokens"] for p in per) / end,
        "output_tokens": sum(p["n_tokens"] for p in per),
        "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
        "tpot_p50_s": pct(tpot, 50), "tpot_p99_s": pct(tpot, 99),
    }


def agreement(a, b):
    """Fraction of requests whose greedy outputs are identical, and the mean fraction of
    tokens matching before the first divergence (both engines run the same ids; small
    numeric differences legitimately make greedy paths split)."""
    bi = {p["id"]: p["token_ids"] for p in b}
    same, prefix = 0, []
    for p in a:
        if p["id"] not in bi:
            continue
        x, y = p["token_ids"], bi[p["id"]]
        same += x == y
        k = 0
        while k < min(len(x), len(y)) and x[k] == y[k]:
            k += 1
        prefix.append(k / max(len(x), 1))
    n = len(prefix)
    return {"compared": n, "identical": same, "mean_common_prefix": sum(prefix) / n if n else None}


# ----------------------------------------------------------------------------- report


def fmt(x, scale=1.0, spec=".2f"):
    return "-" if x is None else format(x * scale, spec)


def print_table(levels):
    hdr = (f"{'C':>3} {'engine':<9} {'done':>5} {'req/s':>7} {'out tok/s':>9} {'TTFT p50':>9} "
           f"{'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9}   (TTFT s, TPOT ms)")
    print(hdr)
    print("-" * len(hdr))
    for lv in levels:
        for eng in ("invar", "llama.cpp"):
            m = lv[eng]
            print(f"{lv['concurrency']:>3} {eng:<9} {m['completed']:>2}/{m['n_requests']:<2} "
                  f"{fmt(m.get('requests_per_s')):>7} {fmt(m.get('output_tokens_per_s'), spec='.1f'):>9} "
                  f"{fmt(m.get('ttft_p50_s')):>9} {fmt(m.get('ttft_p99_s')):>9} "
                  f"{fmt(m.get('tpot_p50_s'), 1e3, '.1f'):>9} {fmt(m.get('tpot_p99_s'), 1e3, '.1f'):>9}")
        r = lv["ratios"]
        print(f"{'':>3} {'ratio':<9} {'':>5} {fmt(r['requests_per_s']):>7} "
              f"{fmt(r['output_tokens_per_s']):>9} {fmt(r['ttft_p50']):>9} {fmt(r['ttft_p99']):>9} "
              f"{fmt(r['tpot_p50']):>9} {fmt(r['tpot_p99']):>9}   (throughput: invar/llama; latency: llama/invar)")


def plot(path, levels, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cs = [lv["concurrency"] for lv in levels]
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    colours = {"invar": "tab:blue", "llama.cpp": "tab:orange"}

    def series(eng, key, scale=1.0):
        return [lv[eng].get(key) * scale if lv[eng].get(key) is not None else np.nan for lv in levels]
    panels = [(ax[0, 0], "requests/s (higher is better)", [("requests_per_s", "-", "")]),
              (ax[0, 1], "output tokens/s (higher is better)", [("output_tokens_per_s", "-", "")]),
              (ax[1, 0], "time to first token, s (lower is better)",
               [("ttft_p50_s", "-", " p50"), ("ttft_p99_s", "--", " p99")]),
              (ax[1, 1], "time per output token, ms (lower is better)",
               [("tpot_p50_s", "-", " p50"), ("tpot_p99_s", "--", " p99")])]
    for a, name, keys in panels:
        for eng in ("invar", "llama.cpp"):
            for key, style, suffix in keys:
                scale = 1e3 if key.startswith("tpot") else 1.0
                a.plot(cs, series(eng, key, scale), style, marker="o", color=colours[eng],
                       label=eng + suffix)
        if keys[0][0] in ("requests_per_s", "output_tokens_per_s"):
            for lv in levels:   # flag levels cut short by the time cap
                for eng in ("invar", "llama.cpp"):
                    m = lv[eng]
                    if m["completed"] < m["n_requests"] and m.get(keys[0][0]) is not None:
                        a.annotate(f"{m['completed']}/{m['n_requests']} done", (lv["concurrency"], m[keys[0][0]]),
                                   textcoords="offset points", xytext=(4, 6), fontsize=7, color=colours[eng])
        a.set_xscale("log", base=2)
        a.set_xticks(cs)
        a.set_xticklabels([str(c) for c in cs])
        a.set_xlabel("concurrency (parallel sequences)")
        a.set_title(name, fontsize=10)
        if "tokens/s" not in name and "requests" not in name:
            a.set_yscale("log")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="24 requests, concurrency 1,4,16")
    ap.add_argument("--n", type=int, default=None, help="requests (default 64; 24 with --quick)")
    ap.add_argument("--concurrency", default=None, help="comma list (default 1,4,16,64, limited by N)")
    ap.add_argument("--prompt-min", type=int, default=32)
    ap.add_argument("--prompt-max", type=int, default=256)
    ap.add_argument("--output-min", type=int, default=16)
    ap.add_argument("--output-max", type=int, default=96)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--threads", type=int, default=2, help="threads for both engines")
    ap.add_argument("--llama-threads", type=int, default=None, help="llama.cpp threads (default: --threads)")
    ap.add_argument("--kv-mem-mb", type=int, default=2048, help="invar KV budget (no preemption at 64x352)")
    ap.add_argument("--llama-cap-s", type=float, default=240.0,
                    help="stop a llama.cpp level after this many seconds (report finished requests)")
    ap.add_argument("--invar", default=DEFAULT_INVAR)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--tag", default=None, help="result file suffix (default: UTC date-time)")
    ap.add_argument("--replot", metavar="JSON", help="redraw the PNG of an earlier result and exit")
    args = ap.parse_args()
    if args.replot:
        d = json.load(open(args.replot))
        w, st = d["workload"], d["settings"]
        plot(args.replot[:-5] + ".png", d["levels"],
             f"Offline serving, {w['n_requests']} requests, prompts {w['prompt_tokens']['distribution']} tok, "
             f"outputs {w['output_tokens']['distribution']} tok, {d['model']},\n"
             f"threads invar {st['threads']} / llama.cpp {st.get('llama_threads', st['threads'])}, "
             f"shared 2-core VM (load {d['load_average_start'][0]:.1f})")
        print_table(d["levels"])
        return
    if args.n is None:
        args.n = 24 if args.quick else 64
    levels_c = [int(c) for c in (args.concurrency or "1,4,16,64").split(",")]
    levels_c = sorted({min(c, args.n) for c in levels_c})

    started = datetime.datetime.now(datetime.timezone.utc)
    tag = args.tag or started.strftime("%Y%m%d-%H%M")
    import llama_cpp
    if args.llama_threads is None:
        args.llama_threads = args.threads
    server = LlamaServer(args.model, args.llama_threads)
    log(f"making {args.n} prompts ...")
    reqs = make_workload(args, server.tokenize)
    plens = [len(r["ids"]) for r in reqs]
    olens = [r["max_tokens"] for r in reqs]
    log(f"prompt tokens {min(plens)}-{max(plens)} (mean {np.mean(plens):.0f}), "
        f"output tokens {min(olens)}-{max(olens)} (mean {np.mean(olens):.0f})")
    n_ctx_seq = ((args.prompt_max + args.output_max + 1 + 255) // 256) * 256

    levels, first = [], {}
    load_start = load_average()
    for i, c in enumerate(levels_c):
        order = ["invar", "llama.cpp"] if i % 2 == 0 else ["llama.cpp", "invar"]
        lv = {"concurrency": c}
        per = {}
        for eng in order:
            la = load_average()[0]
            t = time.perf_counter()
            if eng == "invar":
                per[eng] = run_invar(args, reqs, c)
            else:
                per[eng] = server.run(reqs, c, n_ctx_seq, args.llama_cap_s)
            lv[eng] = metrics(per[eng], len(reqs))
            lv[eng]["load_average_1m_before"] = la
            lv[eng]["wall_s"] = time.perf_counter() - t
            log(f"C={c} {eng}: {lv[eng]['completed']}/{len(reqs)} done, "
                f"{fmt(lv[eng].get('output_tokens_per_s'), spec='.1f')} out tok/s, load {la:.2f}")
        a, b = lv["invar"], lv["llama.cpp"]
        lv["ratios"] = {
            "requests_per_s": ratio(a.get("requests_per_s"), b.get("requests_per_s")),
            "output_tokens_per_s": ratio(a.get("output_tokens_per_s"), b.get("output_tokens_per_s")),
            "ttft_p50": ratio(b.get("ttft_p50_s"), a.get("ttft_p50_s")),
            "ttft_p99": ratio(b.get("ttft_p99_s"), a.get("ttft_p99_s")),
            "tpot_p50": ratio(b.get("tpot_p50_s"), a.get("tpot_p50_s")),
            "tpot_p99": ratio(b.get("tpot_p99_s"), a.get("tpot_p99_s")),
        }
        lv["greedy_agreement"] = agreement(per["invar"], per["llama.cpp"])
        # Batch invariance: does each engine produce the same tokens as at the first level?
        for eng in per:
            first.setdefault(eng, per[eng])
        lv["same_tokens_as_first_level"] = {eng: agreement(per[eng], first[eng]) for eng in per}
        lv["per_request"] = {eng: [{k: p[k] for k in ("id", "n_tokens", "first_token_s", "done_s")}
                                   for p in per[eng]] for eng in per}
        levels.append(lv)
    server.close()

    print_table(levels)
    finished = datetime.datetime.now(datetime.timezone.utc)
    out = {
        "started_utc": started.isoformat(), "finished_utc": finished.isoformat(),
        "machine": machine_info(), "load_average_start": load_start, "load_average_end": load_average(),
        "invar_commit": git_commit(), "invar_binary": args.invar, "model": os.path.basename(args.model),
        "llama_cpp_python": llama_cpp.__version__,
        "workload": {"n_requests": args.n, "seed": args.seed,
                     "prompt_tokens": {"distribution": f"uniform {args.prompt_min}-{args.prompt_max}",
                                       "min": min(plens), "max": max(plens), "mean": float(np.mean(plens))},
                     "output_tokens": {"distribution": f"uniform {args.output_min}-{args.output_max}",
                                       "min": min(olens), "max": max(olens), "mean": float(np.mean(olens))},
                     "arrival": "all requests queued at t=0 (offline)", "sampling": "greedy, ignore_eos",
                     "requests": [{"id": r["id"], "prompt_tokens": len(r["ids"]), "max_tokens": r["max_tokens"]}
                                  for r in reqs]},
        "settings": {"threads": args.threads, "llama_threads": args.llama_threads,
                     "invar": f"invar batch --max-batch C --max-batch-tokens {N_BATCH} --kv-mem-mb {args.kv_mem_mb} --timing",
                     "llama_cpp": (f"low-level API, continuous batching in Python: n_seq_max=C, n_batch=n_ubatch={N_BATCH}, "
                                   f"n_ctx={n_ctx_seq}*C, kv_unified off, flash_attn on, chunked prefill, greedy argmax; "
                                   "parallel slots as llama-server -np C (not the single-slot high-level server)"),
                     "llama_cap_s": args.llama_cap_s,
                     "order": "per level both engines, invar first on even levels, llama.cpp first on odd"},
        "levels": levels,
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    base = os.path.join(ROOT, "bench", "results", f"serving_{tag}")
    with open(base + ".json", "w") as f:
        json.dump(out, f, indent=1)
    plot(base + ".png", levels,
         f"Offline serving, {args.n} requests, prompts {args.prompt_min}-{args.prompt_max} tok, "
         f"outputs {args.output_min}-{args.output_max} tok, {os.path.basename(args.model)},\n"
         f"threads invar {args.threads} / llama.cpp {args.llama_threads}, shared 2-core VM (load {load_start[0]:.1f})")
    log(f"wrote {base}.json and {base}.png")


if __name__ == "__main__":
    main()
