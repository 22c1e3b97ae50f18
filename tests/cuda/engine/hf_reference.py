#!/usr/bin/env python3
"""invar's GPU logits against an independent reference: Hugging Face transformers' own
modeling code (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) in float32 on the GPU,
with weights dequantised by the gguf package (not by invar) from the same file.
(transformers' built-in GGUF loader rejects some of these files, e.g. SmolLM2's Q4_1 and
Qwen3 with its own head_dim, so the state dict is built here.)

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


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    return v.tobytes().decode() if v.dtype == np.uint8 else v.item() if v.size == 1 else v.tolist()


def unpermute(w, n_head):
    """GGUF llama q/k rows pair dims (2i, 2i+1); HF's rotate-half pairs (i, i + d/2)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_model(model):
    import gguf
    import torch
    import transformers
    r = gguf.GGUFReader(model)
    arch = field(r, "general.architecture")
    g = lambda k, d=None: field(r, f"{arch}.{k}", d)  # noqa: E731
    n_head, n_kv, d = g("attention.head_count"), g("attention.head_count_kv"), g("embedding_length")
    head_dim = g("attention.key_length", d // n_head)
    t = {x.name: x for x in r.tensors}
    deq = lambda name: np.asarray(gguf.quants.dequantize(t[name].data, t[name].tensor_type), np.float32)  # noqa
    vocab = t["token_embd.weight"].shape[1]
    cfg = dict(vocab_size=int(vocab), hidden_size=d, intermediate_size=g("feed_forward_length"),
               num_hidden_layers=g("block_count"), num_attention_heads=n_head, num_key_value_heads=n_kv,
               head_dim=head_dim, rms_norm_eps=g("attention.layer_norm_rms_epsilon"),
               rope_theta=g("rope.freq_base", 10000.0),
               rope_parameters={"rope_type": "default", "rope_theta": g("rope.freq_base", 10000.0)},
               max_position_embeddings=g("context_length"),
               tie_word_embeddings="output.weight" not in t, torch_dtype=torch.float32)
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
           "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)}[arch]
    config = cls[0](**cfg)
    with torch.device("cuda"):  # built on the GPU; tensors copied in one at a time (8B: 32 GB)
        m = cls[1](config).eval()
    params = dict(m.named_parameters())
    loaded = set()

    def put(hname, gname, fix=None):
        w = deq(gname)
        if fix is not None:
            w = fix(w)
        with torch.no_grad():
            params[hname].copy_(torch.from_numpy(np.ascontiguousarray(w)))
        loaded.add(hname)

    put("model.embed_tokens.weight", "token_embd.weight")
    put("model.norm.weight", "output_norm.weight")
    if "output.weight" in t:
        put("lm_head.weight", "output.weight")
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    for i in range(config.num_hidden_layers):
        for gname, hname in names.items():
            for kind in ("weight", "bias"):
                key = f"blk.{i}.{gname}.{kind}"
                if key not in t:
                    continue
                fix = None
                if arch == "llama" and gname in ("attn_q", "attn_k"):
                    heads = n_head if gname == "attn_q" else n_kv
                    fix = lambda w, h=heads: unpermute(w, h)  # noqa: E731
                put(f"model.layers.{i}.{hname}.{kind}", key, fix)
    if config.tie_word_embeddings:
        m.tie_weights()
        loaded.add("lm_head.weight")
    missing = [k for k in params if k not in loaded]
    if missing:
        raise RuntimeError(f"weights not in the file: {missing[:4]}")
    return m


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
