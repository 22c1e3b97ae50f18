#!/usr/bin/env python3
"""invar's GPU logits against an independent reference: Hugging Face transformers loading
the same GGUF file (its own dequantiser and modeling code), run in float32 on the GPU.

For each model, two token sequences (random ids, and a repeating pattern) go through
`invar logits --device cuda` and through transformers; the script prints the centred
relative RMS error of the logits, the top-1 agreement and the mean KL(ref || invar) per
position, and fails if the error exceeds the tolerance. invar runs bf16 weights and
activations, so the bound is a bf16 one (the error of bf16 rounding through the layers),
far below what a wrong layout, RoPE pairing or norm would give (errors near 1).

Usage: hf_reference.py INVAR_BIN OUT.json MODEL.gguf [MODEL.gguf ...]
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

TOLERANCE = 0.05  # centred relative RMS error of the logits


def invar_logits(invar_bin, model, ids, workdir):
    out = os.path.join(workdir, "logits.f32")
    subprocess.run([invar_bin, "logits", "--device", "cuda", "--model", model, "--tokens",
                    ",".join(map(str, ids)), "--out", out], check=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


def hf_model(model):
    import torch
    from transformers import AutoModelForCausalLM
    d, f = os.path.split(os.path.abspath(model))
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    return m.to("cuda").eval()


def compare(ref, got):
    rc = ref - ref.mean(axis=1, keepdims=True)
    gc = got[:, :ref.shape[1]] - got[:, :ref.shape[1]].mean(axis=1, keepdims=True)
    rel = float(np.sqrt(((rc - gc) ** 2).sum() / (rc ** 2).sum()))
    top1 = float((ref.argmax(1) == got.argmax(1)).mean())
    lr = ref - ref.max(1, keepdims=True)
    lr = lr - np.log(np.exp(lr).sum(1, keepdims=True))
    lg = got - got.max(1, keepdims=True)
    lg = lg - np.log(np.exp(lg).sum(1, keepdims=True))
    kl = float((np.exp(lr) * (lr - lg)).sum(1).mean())
    return rel, top1, kl


def main():
    import torch
    invar_bin, out_json, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    rng = np.random.default_rng(7)
    results, failed = [], 0
    with tempfile.TemporaryDirectory() as work:
        for model in models:
            try:
                hf = hf_model(model)
            except Exception as e:  # noqa: BLE001 - report which loader failed and go on
                print(f"{model}: transformers could not load it: {e}")
                results.append({"model": model, "error": str(e)})
                failed += 1
                continue
            V = hf.config.vocab_size
            seqs = [rng.integers(0, V, 200).tolist(), [(7 * i) % 1000 + 1 for i in range(96)]]
            for ids in seqs:
                got = invar_logits(invar_bin, model, ids, work)
                with torch.no_grad():
                    ref = hf(torch.tensor([ids], device="cuda")).logits[0].float().cpu().numpy()
                rel, top1, kl = compare(ref.astype(np.float64), got.astype(np.float64))
                ok = rel < TOLERANCE
                failed += not ok
                print(f"{os.path.basename(model):40s} n={len(ids):4d} rel {rel:.4f} top1 {top1:.3f} "
                      f"KL {kl:.2e} {'ok' if ok else 'FAILED'}")
                results.append({"model": model, "n": len(ids), "rel_error": rel, "top1": top1, "kl": kl,
                                "tolerance": TOLERANCE, "ok": ok})
            del hf
            torch.cuda.empty_cache()
    with open(out_json, "w") as f:
        json.dump(results, f, indent=1)
    print(f"hf_reference: {failed} failure(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
