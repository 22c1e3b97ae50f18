#!/usr/bin/env python3
"""Write a Llama-3-8B-shaped GGUF (32 layers, 4096 wide, 32 query / 8 KV heads of 128,
FFN 14336, vocabulary 128256, separate output head) with random bf16 weights, for the GPU
end-to-end benchmark. Speed does not depend on the values, so they are cheap random bf16
patterns of magnitude 2^-7..2^-6 with random signs (no NaN, no subnormal); norms are 1.
The tokenizer is the source model's, padded with unused control tokens to the vocabulary.

Usage: make_bench_model.py --out PATH [--tokenizer-from GGUF] [--layers N]
"""
import argparse
import os
import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_model import DEFAULT_TOKENIZER_MODEL, tokenizer_fields  # noqa: E402

D, F, H, KV, HD, V = 4096, 14336, 32, 8, 128, 128256


def random_bf16(rng, rows, cols):
    x = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint16)
    return (x & np.uint16(0x807F)) | np.uint16(0x3C00)


def padded_tokenizer(src, n_vocab):
    out = []
    for key, val, vtype, sub in tokenizer_fields(src):
        if key == "tokenizer.ggml.tokens":
            val = list(val) + [f"<|invar_pad_{i}|>" for i in range(n_vocab - len(val))]
        elif key == "tokenizer.ggml.token_type":
            val = list(val) + [3] * (n_vocab - len(val))
        elif key == "tokenizer.ggml.scores":
            val = list(val) + [0.0] * (n_vocab - len(val))
        out.append((key, val, vtype, sub))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-from", default=DEFAULT_TOKENIZER_MODEL)
    ap.add_argument("--layers", type=int, default=32)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("invar-bench-llama3-8b-shape-bf16")
    w.add_context_length(16384)  # Llama-3-8B has 8192; an 8192-token prefill needs one more
    w.add_embedding_length(D)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HD)
    w.add_vocab_size(V)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    for key, val, vtype, sub in padded_tokenizer(a.tokenizer_from, V):
        w.add_key_value(key, val, vtype, sub_type=sub)
    ones = np.ones(D, dtype=np.float32)
    w.add_tensor("token_embd.weight", random_bf16(rng, V, D), raw_dtype=QT.BF16)
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", random_bf16(rng, H * HD, D), raw_dtype=QT.BF16)
        w.add_tensor(p + "attn_k.weight", random_bf16(rng, KV * HD, D), raw_dtype=QT.BF16)
        w.add_tensor(p + "attn_v.weight", random_bf16(rng, KV * HD, D), raw_dtype=QT.BF16)
        w.add_tensor(p + "attn_output.weight", random_bf16(rng, D, H * HD), raw_dtype=QT.BF16)
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", random_bf16(rng, F, D), raw_dtype=QT.BF16)
        w.add_tensor(p + "ffn_up.weight", random_bf16(rng, F, D), raw_dtype=QT.BF16)
        w.add_tensor(p + "ffn_down.weight", random_bf16(rng, D, F), raw_dtype=QT.BF16)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", random_bf16(rng, V, D), raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: {os.path.getsize(a.out) / 1e9:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
