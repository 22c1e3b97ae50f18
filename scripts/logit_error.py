#!/usr/bin/env python3
"""Logit error of invar and llama.cpp against the exact float64 numpy reference.

Greedy agreement between two engines is a noisy proxy for numerical quality (one
near-tie flips a whole continuation).  This script measures the error directly:
for a few natural token sequences it takes the full logits at every position from
  * ref:   tools/reference_forward.py in float64, weights dequantised exactly,
           activations NOT rounded (emulate_engine=False): the exact answer;
  * invar: `invar logits --tokens ... --out F` (float32 [T][n_vocab]);
  * llama: llama.cpp through llama-cpp-python's low-level API, the whole sequence
           in one llama_decode with an output row requested for every position,
           flash attention on, as bench/cpu_bench.py runs it;
  * emul:  (optional, --emulated) the reference with emulate_engine=True, i.e. int8
           per-block activations and f16 K/V as llama.cpp-style engines round them:
           how much error that rounding alone explains.
Both engines get the same token ids: the chat-templated prompt (tokenised by
invar) followed by the reference's own greedy continuation, so the text is natural
and no engine's choices shape the sequences.

Metrics of each engine against ref, pooled over every position of every sequence:
  rms_raw     RMS of (engine - ref) over all logits;
  rms_centred the same after subtracting each row's mean from both rows (a constant
              shift of a row leaves the softmax unchanged);
  max_abs     largest |engine - ref|;
  kl          mean over positions of KL(softmax(ref) || softmax(engine)), in nats;
  rms_pw      sqrt(mean over positions of the variance of (engine - ref) under ref's
              softmax): the error where the probability mass is, in logit units;
  top1        fraction of positions whose argmax equals ref's argmax.
The same pooled over the reply positions only (from the last prompt token on: the
system prompt of the chat template repeats in every sequence).
Also invar vs llama.cpp (same metrics, llama.cpp as the "reference").

  python scripts/logit_error.py [--n-prompts 8] [--n-gen 24] [--emulated]
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# One BLAS thread for the reference: the machine's 2 cores are shared.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "bench"))
import llama_ctx  # noqa: E402  (the llama.cpp set-up the benchmarks use)
import reference_forward as rf  # noqa: E402

DEFAULT_MODEL = str(REPO / "models/SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_INVAR = str(REPO / "build/invar")


def load_sequences(model: str, invar: str, prompts: str, n_prompts: int, n_gen: int):
    """[(id, token ids, n_prompt_tokens)]: templated prompt + reference greedy tokens."""
    tok_eos = rf.load_tokenizer(model).eos_id
    out = []
    with open(prompts, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()][:n_prompts]
    for p in rows:
        text = p["prompt"] if "prompt" in p else rf.render_chat(model, p["messages"])
        r = subprocess.run([invar, "tokenize", "--model", model, text],
                           capture_output=True, text=True, check=True)
        ids = [int(x) for x in r.stdout.split()]
        gen = rf.greedy(model, ids, n_gen, eos=tok_eos)
        out.append((str(p["id"]), ids + gen, len(ids)))
    return out


def invar_logits(invar: str, model: str, ids, threads: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "logits.f32")
        subprocess.run([invar, "logits", "--model", model, "--threads", str(threads),
                        "--tokens", ",".join(map(str, ids)), "--out", f],
                       check=True, capture_output=True)
        return np.fromfile(f, dtype="<f4").reshape(len(ids), -1)


class LlamaLogits:
    """A llama.cpp context that returns the logits of every position of a sequence."""

    def __init__(self, model: str, threads: int, n_ctx: int):
        self.L, self.model = llama_ctx.load_model(model)
        self.ctx = llama_ctx.new_context(self.L, self.model, threads, n_ctx, n_ctx, 1)
        self.n_vocab = llama_ctx.n_vocab(self.L, self.model)
        self.n_ctx = n_ctx
        self.batch = self.L.llama_batch_init(n_ctx, 0, 1)

    def __call__(self, ids) -> np.ndarray:
        L, b = self.L, self.batch
        if len(ids) > self.n_ctx:
            raise ValueError("sequence longer than the llama.cpp context")
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        llama_ctx.fill_batch(b, [(t, i, 0, True) for i, t in enumerate(ids)])
        if L.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        p = ctypes.cast(L.llama_get_logits(self.ctx), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(p, shape=(len(ids), self.n_vocab)).copy()

    def close(self):
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def error_sums(eng: np.ndarray, ref: np.ndarray) -> dict:
    """Additive pieces of the metrics (so sequences can be pooled exactly)."""
    e, r = eng.astype(np.float64), ref.astype(np.float64)
    d = e - r
    dc = d - d.mean(axis=1, keepdims=True)  # (e - mean e) - (r - mean r)
    lr, le = _log_softmax(r), _log_softmax(e)
    pr = np.exp(lr)
    kl = (pr * (lr - le)).sum(axis=1)
    # Variance of d under ref's softmax: the error where the probability mass is
    # (KL ~ half of it for small errors), in logit units.
    var_p = (pr * (d - (pr * d).sum(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return {"n_pos": d.shape[0], "n_val": d.size, "sq_raw": float((d * d).sum()),
            "sq_centred": float((dc * dc).sum()), "max_abs": float(np.abs(d).max()),
            "var_p_sum": float(var_p.sum()),
            "kl_sum": float(kl.sum()), "kl_max": float(kl.max()),
            "top1_same": int((e.argmax(axis=1) == r.argmax(axis=1)).sum())}


def pool(parts: list[dict]) -> dict:
    n_val = sum(p["n_val"] for p in parts)
    n_pos = sum(p["n_pos"] for p in parts)
    return {"positions": n_pos,
            "rms_raw": (sum(p["sq_raw"] for p in parts) / n_val) ** 0.5,
            "rms_centred": (sum(p["sq_centred"] for p in parts) / n_val) ** 0.5,
            "max_abs": max(p["max_abs"] for p in parts),
            "rms_pw": (sum(p["var_p_sum"] for p in parts) / n_pos) ** 0.5,
            "kl": sum(p["kl_sum"] for p in parts) / n_pos,
            "kl_max": max(p["kl_max"] for p in parts),
            "top1": sum(p["top1_same"] for p in parts) / n_pos}


def kl_ratio_ci(a: list[dict], b: list[dict], n_boot: int = 2000) -> list[float]:
    """90% bootstrap interval of pooled-KL(a) / pooled-KL(b), resampling whole sequences
    (positions inside one sequence are not independent)."""
    ka = np.array([p["kl_sum"] for p in a])
    kb = np.array([p["kl_sum"] for p in b])
    idx = np.random.default_rng(0).integers(0, len(ka), size=(n_boot, len(ka)))
    ratios = ka[idx].sum(axis=1) / kb[idx].sum(axis=1)
    return [float(np.percentile(ratios, 5)), float(np.percentile(ratios, 95))]


def _git(*args) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                          text=True).stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--invar", default=DEFAULT_INVAR, help="invar binary (copied before use)")
    ap.add_argument("--prompts", default=str(REPO / "tests/data/prompts.jsonl"))
    ap.add_argument("--n-prompts", type=int, default=8)
    ap.add_argument("--n-gen", type=int, default=24, help="reference greedy tokens per prompt")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--invar-threads", type=int, default=1)
    ap.add_argument("--emulated", action="store_true",
                    help="also score the reference with int8 activation / f16 KV rounding")
    ap.add_argument("--out", help="JSON path (default bench/results/logit_error_<UTC>.json)")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M")
    out_path = a.out or str(REPO / f"bench/results/logit_error_{stamp}.json")

    # Snapshot the binary: the shared build dir may be rebuilt while this runs.
    tmp = tempfile.mkdtemp(prefix="logerr-")
    invar = os.path.join(tmp, "invar")
    with open(a.invar, "rb") as src, open(invar, "wb") as dst:
        blob = src.read()
        dst.write(blob)
    os.chmod(invar, 0o755)
    invar_sha = hashlib.sha256(blob).hexdigest()[:16]

    t0 = time.perf_counter()
    seqs = load_sequences(a.model, invar, a.prompts, a.n_prompts, a.n_gen)
    t_seq = time.perf_counter() - t0
    llama = LlamaLogits(a.model, a.threads, n_ctx=max(256, max(len(s[1]) for s in seqs)))
    pairs = [("invar", "ref"), ("llama", "ref"), ("invar", "llama")]
    if a.emulated:
        pairs.append(("emul", "ref"))
    parts = {f"{x}_vs_{y}": [] for x, y in pairs}
    parts_reply = {f"{x}_vs_{y}": [] for x, y in pairs}
    per_seq, secs = [], {"ref": 0.0, "invar": 0.0, "llama": 0.0, "emul": 0.0}
    tok = rf.load_tokenizer(a.model)
    for sid, ids, n_prompt in seqs:
        lg = {}
        for name, fn in (("ref", lambda: rf.logits(a.model, ids)),
                         ("invar", lambda: invar_logits(invar, a.model, ids, a.invar_threads)),
                         ("llama", lambda: llama(ids)),
                         ("emul", lambda: rf.logits(a.model, ids, emulate_engine=True))):
            if name == "emul" and not a.emulated:
                continue
            t0 = time.perf_counter()
            lg[name] = fn()
            secs[name] += time.perf_counter() - t0
        if not per_seq:  # scale of the logits themselves, to read the errors against
            ref_scale = float(np.std(lg["ref"] - lg["ref"].mean(axis=1, keepdims=True)))
        row = {"id": sid, "tokens": len(ids), "prompt_tokens": n_prompt,
               "continuation": tok.decode(ids[n_prompt:])}
        for x, y in pairs:
            s = error_sums(lg[x], lg[y])
            parts[f"{x}_vs_{y}"].append(s)
            row[f"{x}_vs_{y}"] = pool([s])
            # Rows from the last prompt token on predict the reply: the natural-text part
            # (the chat template's system prompt is the same in every sequence).
            parts_reply[f"{x}_vs_{y}"].append(
                error_sums(lg[x][n_prompt - 1:], lg[y][n_prompt - 1:]))
            row[f"{x}_vs_{y}_reply"] = pool(parts_reply[f"{x}_vs_{y}"][-1:])
        per_seq.append(row)
    llama.close()
    os.remove(invar)
    os.rmdir(tmp)
    overall = {k: pool(v) for k, v in parts.items()}
    reply = {k: pool(v) for k, v in parts_reply.items()}
    overall["invar_lower_rms_centred_sequences"] = sum(
        r["invar_vs_ref"]["rms_centred"] < r["llama_vs_ref"]["rms_centred"] for r in per_seq)
    overall["invar_lower_kl_sequences"] = sum(
        r["invar_vs_ref"]["kl"] < r["llama_vs_ref"]["kl"] for r in per_seq)
    reply["invar_lower_kl_sequences"] = sum(
        a["kl_sum"] < b["kl_sum"] for a, b in zip(parts_reply["invar_vs_ref"],
                                                  parts_reply["llama_vs_ref"]))
    reply["kl_ratio_invar_over_llama_ci90"] = kl_ratio_ci(parts_reply["invar_vs_ref"],
                                                         parts_reply["llama_vs_ref"])

    import llama_cpp
    result = {
        "settings": {"model": os.path.relpath(a.model, REPO), "n_prompts": len(seqs),
                     "n_gen": a.n_gen, "prompts": os.path.relpath(a.prompts, REPO),
                     "sequences": "invar-tokenised chat template + reference float64 greedy",
                     "reference": "tools/reference_forward.py float64, emulate_engine=False",
                     "llama_threads": a.threads, "llama_flash_attn": True,
                     "invar_threads": a.invar_threads, "emulated": a.emulated},
        "versions": {"commit": _git("rev-parse", "--short", "HEAD"),
                     "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
                     "invar_binary": a.invar, "invar_sha256_16": invar_sha,
                     "llama_cpp_python": llama_cpp.__version__},
        "ref_logit_std_first_sequence": ref_scale,
        "seconds": {"sequences": round(t_seq, 1), **{k: round(v, 1) for k, v in secs.items()},
                    "total": round(time.perf_counter() - t_start, 1)},
        "overall": overall, "reply_positions": reply, "per_sequence": per_seq}
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)

    print(f"{len(seqs)} sequences, {overall['invar_vs_ref']['positions']} positions; "
          f"ref centred logit std {ref_scale:.2f}")
    for title, table in (("all positions", overall), ("reply positions only", reply)):
        print(f"{title} ({table['invar_vs_ref']['positions']}):")
        print(f"  {'pair':16} {'rms_raw':>8} {'rms_ctr':>8} {'rms_pw':>8} {'max_abs':>8} "
              f"{'KL mean':>9} {'KL max':>9} {'top1':>6}")
        for k in parts:
            o = table[k]
            print(f"  {k:16} {o['rms_raw']:8.4f} {o['rms_centred']:8.4f} {o['rms_pw']:8.4f} "
                  f"{o['max_abs']:8.4f} {o['kl']:9.2e} {o['kl_max']:9.2e} {o['top1']:6.3f}")
    print(f"invar has the lower centred RMS on {overall['invar_lower_rms_centred_sequences']}"
          f"/{len(seqs)} sequences, lower KL on {overall['invar_lower_kl_sequences']}/{len(seqs)}"
          f" (all positions; the shared system prompt counts in every one)")
    lo, hi = reply["kl_ratio_invar_over_llama_ci90"]
    print(f"reply positions: invar lower KL on {reply['invar_lower_kl_sequences']}/{len(seqs)}"
          f" sequences; KL ratio invar/llama {reply['invar_vs_ref']['kl'] / reply['llama_vs_ref']['kl']:.2f}"
          f" (90% bootstrap over sequences {lo:.2f}-{hi:.2f})")
    print(f"seconds: {result['seconds']}  -> {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
