#!/usr/bin/env python3
"""invar's logits against llama.cpp's (llama-cpp-python) on the benchmark-sized deepseek2
file (bench/moe_bench.py writes it): every position of a short prompt, both engines fed the
same token ids, llama.cpp with the whole prompt in one llama_decode (flash attention on).

Prints per position the largest |difference|, the RMS difference relative to the RMS of
llama.cpp's logits, and whether the argmax agrees; exits non-zero when a relative RMS
exceeds --tol (default 0.10: both engines round activations to 8 bits per block, but
differently, and the random weights of 27 layers amplify it) or an argmax differs where
llama.cpp's top two are further apart than 0.5.

usage: /tmp/venv-llama/bin/python bench/moe_logits_check.py [--model PATH] [--text "..."]
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import llama_ctx
from moe_bench import DEFAULT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT)
    ap.add_argument("--invar", default=os.path.join(ROOT, "build", "invar"))
    ap.add_argument("--text", default=" the cat sat on the mat and the dog ran after it")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--out", help="JSON summary path")
    a = ap.parse_args()
    ids = [int(x) for x in subprocess.run([a.invar, "tokenize", "--model", a.model, a.text], check=True,
                                          capture_output=True, text=True).stdout.split()]
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "logits.bin")
        subprocess.run([a.invar, "logits", "--model", a.model, "--tokens", ",".join(map(str, ids)), "--out", f,
                        "--threads", str(a.threads)], check=True)
        inv = np.fromfile(f, dtype=np.float32)
    L, model = llama_ctx.load_model(a.model)
    nv = llama_ctx.n_vocab(L, model)
    inv = inv.reshape(len(ids), nv)
    ctx = llama_ctx.new_context(L, model, a.threads, 512, 512, 1)
    batch = L.llama_batch_init(512, 0, 1)
    llama_ctx.fill_batch(batch, [(t, i, 0, True) for i, t in enumerate(ids)])
    if L.llama_decode(ctx, batch) != 0:
        sys.exit("llama_decode failed")
    p = L.llama_get_logits(ctx)
    ref = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)), shape=(len(ids), nv)).copy()
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    rows, ok = [], True
    for i in range(len(ids)):
        diff = inv[i].astype(np.float64) - ref[i]
        rel = float(np.sqrt(np.mean(diff ** 2)) / np.sqrt(np.mean(ref[i].astype(np.float64) ** 2)))
        top2 = np.sort(ref[i])[-2:]
        same = int(np.argmax(inv[i])) == int(np.argmax(ref[i]))
        clear = float(top2[1] - top2[0]) > 0.5
        ok &= rel <= a.tol and (same or not clear)
        rows.append({"pos": i, "max_abs": float(np.abs(diff).max()), "rel_rms": rel, "argmax_same": same,
                     "llama_top_gap": float(top2[1] - top2[0]), "ref_rms": float(np.sqrt(np.mean(ref[i] ** 2)))})
        print(f"pos {i:2d}: max|d| {rows[-1]['max_abs']:.4f}  rel rms {rel:.4f}  argmax "
              f"{'same' if same else 'DIFFERENT'} (llama.cpp top-2 gap {rows[-1]['llama_top_gap']:.3f})")
    worst = max(r["rel_rms"] for r in rows)
    print(f"{len(ids)} positions, worst relative RMS {worst:.4f} (tolerance {a.tol}), "
          f"argmax agrees at {sum(r['argmax_same'] for r in rows)}/{len(ids)}: {'PASS' if ok else 'FAIL'}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"model": a.model, "tokens": ids, "tol": a.tol, "pass": bool(ok), "rows": rows}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
