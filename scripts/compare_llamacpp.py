#!/usr/bin/env python3
"""Greedy generations of invar vs llama.cpp (llama-cpp-python) on a prompt set.

For every prompt in tests/data/prompts.jsonl (objects with "id" and either
"messages" [{role, content}] or an already templated "prompt"), the chat
template stored in the GGUF is rendered with jinja2 (as transformers'
apply_chat_template does) and both engines generate N tokens greedily:
  * llama.cpp: the text tokenised by llama.cpp itself with special=True (BOS only
    if the model asks for one), then argmax decoding on its logits, n_threads=2.
  * invar: `invar batch --model M` fed JSONL {"id","prompt","max_tokens",
    "temperature":0}; results {"id","token_ids","logprobs","text","finish_reason"}.
Both stop after N tokens or at an end-of-generation token (which is kept).

Reported per prompt: identical token sequence or the first divergence position,
the matched-prefix length, and the largest |logprob difference| over the matched
prefix; overall: exact-match rate and mean matched-prefix length.  With
--explain, each divergence is scored by the exact numpy reference
(tools/reference_forward.py): which engine's token it prefers and by how much.  A table goes
to stdout and a JSON summary to --out.

  python scripts/compare_llamacpp.py --out /tmp/cmp.json [--n-tokens 32] [--explain]
  python scripts/compare_llamacpp.py --only-llamacpp --out /tmp/llama.json

Needs: pip install -r requirements-llama.txt (builds llama.cpp, several minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import reference_forward as rf  # noqa: E402  (render_chat: the GGUF chat template)

DEFAULT_MODEL = os.environ.get("INVAR_MODEL", str(REPO / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
DEFAULT_BIN = os.environ.get(
    "INVAR_BIN", os.path.join(os.environ.get("INVAR_BUILD_DIR", str(REPO / "build")), "invar"))


def load_prompts(path: str, model: str, limit: int | None) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            p = json.loads(line)
            if "prompt" in p:
                text = p["prompt"]
            else:
                text = rf.render_chat(model, p["messages"])
            out.append({"id": str(p["id"]), "text": text})
    return out[:limit] if limit else out


# ------------------------------------------------------------------ llama.cpp

def run_llamacpp(model: str, prompts: list[dict], n_tokens: int, threads: int,
                 n_ctx: int) -> list[dict]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_threads=threads,
                          n_threads_batch=threads, logits_all=False, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llm.n_vocab()
    results = []
    try:
        for p in prompts:
            t0 = time.time()
            llm.reset()
            ids = llm.tokenize(p["text"].encode("utf-8"), add_bos=True, special=True)
            if len(ids) + n_tokens > n_ctx:
                raise SystemExit(f"prompt {p['id']}: {len(ids)} tokens + {n_tokens} exceed --n-ctx {n_ctx}")
            llm.eval(ids)
            out, lps, finish = [], [], "length"
            for _ in range(n_tokens):
                ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
                logits = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float64)
                nxt = int(np.argmax(logits))
                m = logits.max()
                lps.append(float(logits[nxt] - m - np.log(np.exp(logits - m).sum())))
                out.append(nxt)
                if llama_cpp.llama_vocab_is_eog(vocab, nxt):
                    finish = "stop"
                    break
                llm.eval([nxt])
            text = llm.detokenize(out, special=False).decode("utf-8", errors="replace")
            results.append({"id": p["id"], "prompt_tokens": len(ids), "prompt_ids": ids,
                            "token_ids": out,
                            "logprobs": lps, "text": text, "finish_reason": finish,
                            "seconds": round(time.time() - t0, 3)})
    finally:
        llm.close()
    return results


# ------------------------------------------------------------------ invar

def run_invar(invar_bin: str, model: str, prompts: list[dict], n_tokens: int,
              extra: list[str]) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as d:
        req, res = os.path.join(d, "requests.jsonl"), os.path.join(d, "results.jsonl")
        with open(req, "w", encoding="utf-8") as f:
            for p in prompts:
                f.write(json.dumps({"id": p["id"], "prompt": p["text"],
                                    "max_tokens": n_tokens, "temperature": 0}) + "\n")
        cmd = [invar_bin, "batch", "--model", model, "--input", req, "--output", res, *extra]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode not in (0, 1):  # 1 = some requests failed: reported per prompt
            raise SystemExit(f"{' '.join(cmd)} failed with {r.returncode}:\n{r.stderr[-3000:]}")
        with open(res, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return {str(row.get("id")): row for row in rows}


# ------------------------------------------------------------------ comparison

def compare_one(ll: dict, inv: dict | None) -> dict:
    row = {"id": ll["id"], "llama_tokens": len(ll["token_ids"]),
           "llama_prompt_tokens": ll["prompt_tokens"], "llama_text": ll["text"]}
    if inv is None or "error" in inv:
        row.update(identical=False, first_divergence=0, matched_prefix=0,
                   invar_error=(inv or {}).get("error", "no result"))
        return row
    a, b = ll["token_ids"], inv.get("token_ids", [])
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    identical = a == b
    lp_a, lp_b = ll["logprobs"][:k], (inv.get("logprobs") or [])[:k]
    max_lp = max((abs(x - y) for x, y in zip(lp_a, lp_b)), default=0.0)
    row.update(identical=identical, first_divergence=None if identical else k, matched_prefix=k,
               invar_tokens=len(b), invar_prompt_tokens=inv.get("prompt_tokens"),
               max_abs_logprob_diff=round(max_lp, 6), invar_text=inv.get("text", ""),
               invar_finish=inv.get("finish_reason"))
    return row


def explain_divergence(model: str, ll: dict, inv: dict, k: int) -> dict:
    """At the first divergence, ask the numpy reference (exact arithmetic) which of the two
    tokens is really ahead and by how much: a gap of a few hundredths of a logit is a
    near-tie that int8 activation rounding may legitimately flip either way."""
    ids = list(ll["prompt_ids"]) + list(ll["token_ids"][:k])
    row = rf.logits(model, ids, np.float32)[-1]
    a, b = ll["token_ids"][k], inv["token_ids"][k]
    top = int(np.argmax(row))
    return {"ref_top": top, "ref_prefers": "llama.cpp" if top == a else "invar" if top == b else "neither",
            "ref_gap_llama_minus_invar": round(float(row[a] - row[b]), 4)}


def snippet(s: str, n: int = 40) -> str:
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[:n - 1] + "…"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--prompts", default=str(REPO / "tests/data/prompts.jsonl"))
    ap.add_argument("--n-tokens", type=int, default=32, help="greedy tokens per prompt")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--n-ctx", type=int, default=1024, help="llama.cpp context size")
    ap.add_argument("--invar-bin", default=DEFAULT_BIN)
    ap.add_argument("--invar-arg", action="append", default=[],
                    help="extra argument for `invar batch` (repeatable)")
    ap.add_argument("--only-llamacpp", action="store_true", help="skip invar")
    ap.add_argument("--explain", action="store_true",
                    help="at each divergence, score both tokens with tools/reference_forward.py")
    ap.add_argument("--out", required=True, help="JSON summary path")
    a = ap.parse_args(argv)

    prompts = load_prompts(a.prompts, a.model, a.limit)
    if len({p["id"] for p in prompts}) != len(prompts):
        raise SystemExit("prompt ids must be unique")
    import llama_cpp
    t0 = time.time()
    ll = run_llamacpp(a.model, prompts, a.n_tokens, a.threads, a.n_ctx)
    t_ll = time.time() - t0
    summary = {"model": a.model, "n_prompts": len(prompts), "n_tokens": a.n_tokens,
               "llama_cpp_python": llama_cpp.__version__, "llama_cpp_seconds": round(t_ll, 2)}

    if a.only_llamacpp:
        print(f"{'id':24} {'prompt':>6} {'gen':>4} {'finish':6}  text")
        for r in ll:
            print(f"{r['id']:24} {r['prompt_tokens']:6d} {len(r['token_ids']):4d} "
                  f"{r['finish_reason']:6}  {snippet(r['text'], 60)}")
        summary["llama_cpp"] = ll
    else:
        t0 = time.time()
        inv = run_invar(a.invar_bin, a.model, prompts, a.n_tokens, a.invar_arg)
        summary["invar_seconds"] = round(time.time() - t0, 2)
        rows = [compare_one(r, inv.get(r["id"])) for r in ll]
        if a.explain:
            for r, row in zip(ll, rows):
                k = row["first_divergence"]
                if k is not None and k < min(len(r["token_ids"]), row.get("invar_tokens", 0)):
                    row.update(explain_divergence(a.model, r, inv[r["id"]], k))
        print(f"{'id':24} {'match':5} {'div@':>4} {'prefix':>6} {'len L/I':>7} {'prompt L/I':>10} "
              f"{'max|dlp|':>8}  llama.cpp text")
        for r in rows:
            div = "-" if r["first_divergence"] is None else str(r["first_divergence"])
            lens = f"{r['llama_tokens']}/{r.get('invar_tokens', '?')}"
            plen = f"{r['llama_prompt_tokens']}/{r.get('invar_prompt_tokens', '?')}"
            print(f"{r['id']:24} {'yes' if r['identical'] else 'NO':5} {div:>4} {r['matched_prefix']:6d} "
                  f"{lens:>7} {plen:>10} {r.get('max_abs_logprob_diff', float('nan')):8.4f}  "
                  f"{snippet(r['llama_text'])}")
            if "ref_prefers" in r:
                print(f"    at {r['first_divergence']}: reference prefers {r['ref_prefers']}, "
                      f"logit(llama.cpp's) - logit(invar's) = {r['ref_gap_llama_minus_invar']:+.4f}")
            if r.get("invar_error"):
                print(f"    invar error: {r['invar_error']}")
        n = len(rows)
        explained = [r for r in rows if "ref_prefers" in r]
        if explained:
            summary["divergences_reference_prefers"] = {
                who: sum(r["ref_prefers"] == who for r in explained)
                for who in ("llama.cpp", "invar", "neither")}
            summary["divergence_max_abs_ref_gap"] = max(
                abs(r["ref_gap_llama_minus_invar"]) for r in explained)
        summary.update(
            exact_match_rate=sum(r["identical"] for r in rows) / n,
            mean_matched_prefix=sum(r["matched_prefix"] for r in rows) / n,
            mean_llama_tokens=sum(r["llama_tokens"] for r in rows) / n,
            prompt_token_mismatches=[r["id"] for r in rows
                                     if r.get("invar_prompt_tokens") not in (None, r["llama_prompt_tokens"])],
            per_prompt=rows)
        print(f"\nexact match: {summary['exact_match_rate']:.1%} of {n} prompts; mean matched prefix "
              f"{summary['mean_matched_prefix']:.1f} of {summary['mean_llama_tokens']:.1f} tokens; "
              f"prompt-length mismatches: {len(summary['prompt_token_mismatches'])}")
        if explained:
            print(f"at divergences the reference prefers: {summary['divergences_reference_prefers']}; "
                  f"largest |reference gap| between the two choices: "
                  f"{summary['divergence_max_abs_ref_gap']:.4f} logits")
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
    print(f"summary written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
