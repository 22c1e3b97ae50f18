#!/usr/bin/env python3
"""GPU logits against the CPU engine's on the same file, for models transformers' dense
classes cannot check (qwen3moe, deepseek2): `invar logits --device cuda` and `--device cpu`
on two token sequences; prints the centred relative RMS error and the top-1 agreement and
fails above TOLERANCE (the GPU runs bf16 weights and activations, the CPU its own quantised
numerics and a float32 router, so a near-tie can route a token to another expert: a loose
bound that catches layout errors, which give errors near 1, not rounding). The top-1 token
must agree on every decisive row: one whose CPU top-2 gap exceeds DECISIVE times that row's
centred RMS difference between the engines, so the differences seen cannot reorder them (on
random-weight files many rows are near-ties: at the full DeepSeek-V2-Lite shape 69 of 88 rows
agreed with a relative error of 0.084, where a layout error gives errors near 1). Also, on the GPU,
the same sequence fed in chunks of 7 tokens (--chunk 7) must give the unchunked logits bit
for bit (prefill vs chunked prefill through the MoE and MLA paths).

Usage: cpu_gpu_logits.py INVAR_BIN OUT.json MODEL.gguf [MODEL.gguf ...]
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

TOLERANCE = 0.25
DECISIVE = 4.0


def logits(invar_bin, model, ids, device, workdir, chunk=0):
    out = os.path.join(workdir, f"logits-{device}-{chunk}.f32")
    cmd = [invar_bin, "logits", "--device", device, "--model", model, "--tokens", ",".join(map(str, ids)),
           "--out", out]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    subprocess.run(cmd, check=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


def main():
    invar_bin, out_json, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    rng = np.random.default_rng(7)
    results, failed = [], False
    with tempfile.TemporaryDirectory() as wd:
        for model in models:
            seqs = [rng.integers(0, 1000, 48).tolist(), ([11, 22, 33, 44] * 10)]
            num = den = 0.0
            top1 = rows = chunk_diff = decisive = decisive_bad = 0
            for ids in seqs:
                g = logits(invar_bin, model, ids, "cuda", wd).astype(np.float64)
                c = logits(invar_bin, model, ids, "cpu", wd).astype(np.float64)
                gc = logits(invar_bin, model, ids, "cuda", wd, chunk=7)
                chunk_diff += int(np.sum(np.any(gc.view(np.uint32) != g.astype(np.float32).view(np.uint32), axis=1)))
                gd = g - g.mean(axis=1, keepdims=True)
                cd = c - c.mean(axis=1, keepdims=True)
                num += float(np.sum((gd - cd) ** 2))
                den += float(np.sum(cd ** 2))
                agree = g.argmax(axis=1) == c.argmax(axis=1)
                top1 += int(np.sum(agree))
                rows += len(ids)
                top2 = np.sort(c, axis=1)[:, -2:]
                row_err = np.sqrt(np.mean((gd - cd) ** 2, axis=1))
                dec = (top2[:, 1] - top2[:, 0]) > DECISIVE * row_err
                decisive += int(np.sum(dec))
                decisive_bad += int(np.sum(dec & ~agree))
            rel = (num / den) ** 0.5
            ok = rel < TOLERANCE and decisive_bad == 0 and chunk_diff == 0
            failed |= not ok
            print(f"{os.path.basename(model)}: GPU vs CPU centred rel. error {rel:.4f}, top-1 {top1}/{rows}, "
                  f"decisive rows differing {decisive_bad}/{decisive}; chunked GPU rows differing {chunk_diff} "
                  f"{'ok' if ok else 'FAILED'}", flush=True)
            results.append({"model": model, "rel_err": rel, "top1": top1, "rows": rows, "decisive": decisive,
                            "decisive_differ": decisive_bad, "chunk_rows_differ": chunk_diff})
    with open(out_json, "w") as f:
        json.dump({"tolerance": TOLERANCE, "results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
