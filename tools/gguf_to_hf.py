#!/usr/bin/env python3
"""Convert a GGUF model (Llama, Qwen2, Qwen3, Qwen3-MoE; byte-level BPE tokenizer) into a Hugging
Face model directory, for testing invar's `--model DIR` path against its GGUF path.

Writes config.json, model.safetensors (or --shards N files plus
model.safetensors.index.json), tokenizer.json, tokenizer_config.json and
generation_config.json with the `safetensors` and `tokenizers` packages.  Weights are
dequantised (gguf.quants) and stored as --dtype (F32, F16 or BF16); Llama's q/k rows go
back from GGUF's interleaved rotary pairs to HF's rotate-half order. qwen3moe becomes
model_type qwen3_moe: the router ffn_gate_inp is mlp.gate, and each 3-D expert stack
ffn_{gate,up,down}_exps [n_expert][rows][cols] is split into one matrix per expert,
mlp.experts.E.{gate,up,down}_proj, as transformers writes Qwen3-MoE checkpoints.

--gguf-out PATH also writes a GGUF whose tensors hold exactly the stored values (same
dtype, GGUF layout) and whose metadata is the source's: invar must give the same logits
bit for bit from both.

--llama3-rope FACTOR,LOW,HIGH,ORIG (Llama only) gives the directory Llama-3.1 rope scaling
(config.json rope_scaling: rope_type llama3, factor, low_freq_factor, high_freq_factor,
original_max_position_embeddings) and the --gguf-out GGUF the rope_freqs.weight tensor a GGUF
converter writes for it, computed in double and stored as F32 (llama3_rope_factors). A
source GGUF that already has rope_freqs.weight needs this option (its parameters are not in
the GGUF).

Usage:
  python tools/gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype BF16] [--shards N] [--gguf-out PATH]
                             [--llama3-rope FACTOR,LOW,HIGH,ORIG]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
import safetensors
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

ARCH_CLASS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
              "qwen3moe": "Qwen3MoeForCausalLM"}
MODEL_TYPE = {"qwen3moe": "qwen3_moe"}  # else the GGUF architecture name
DTYPES = {"F32": (QT.F32, "float32"), "F16": (QT.F16, "float16"), "BF16": (QT.BF16, "bfloat16")}
TOKTYPE_CONTROL, TOKTYPE_USER_DEFINED, TOKTYPE_UNUSED = 3, 4, 5

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")

GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
}
# 3-D expert stacks: one HF matrix per expert
EXPERT_NAMES = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj",
                "ffn_down_exps.weight": "down_proj"}


def hf_name(name: str) -> str:
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    blk, layer, rest = name.split(".", 2)
    assert blk == "blk", name
    return f"model.layers.{layer}.{LAYER_NAMES[rest]}"


class Meta:
    def __init__(self, reader: gguf.GGUFReader):
        self.reader = reader
        self.arch = self.get("general.architecture")

    def get(self, key, default=None):
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def hp(self, suffix, default=None):
        return self.get(f"{self.arch}.{suffix}", default)


def stored_bytes(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values -> the bytes of dtype, same shape with the last axis in bytes. BF16
    rounds to nearest even with quiet NaNs (ggml's and gguf.quants' rule), in one pass."""
    v = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "F32":
        out = v
    elif dtype == "F16":
        out = v.astype(np.float16)
    else:
        n = v.view(np.uint32)
        n = np.where((n & 0x7fffffff) > 0x7f800000, (n & np.uint32(0xffff0000)) | np.uint32(64 << 16), n)
        out = ((n.astype(np.uint64) + (0x7fff + ((n >> 16) & 1))) >> 16).astype(np.uint16)
    return out.view(np.uint8).reshape(*values.shape[:-1], -1)


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF's Llama q/k rows (pairs (2i, 2i+1) per head) -> HF's (i, i + head_dim/2)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rope_theta: float, n_rot: int, rope: dict) -> np.ndarray:
    """Llama-3.1 rope scaling as per-frequency divisors (GGUF's rope_freqs.weight): in double,
    from the float32 values invar reads, in the order src/model/rope_table.c computes them."""
    f32 = lambda x: float(np.float32(x))  # noqa: E731
    base = f32(rope_theta)
    factor, lo, hi = f32(rope["factor"]), f32(rope["low_freq_factor"]), f32(rope["high_freq_factor"])
    ctx = float(rope["original_max_position_embeddings"])
    out = []
    for i in range(n_rot // 2):
        wavelen = 2.0 * math.pi / base ** (-2.0 * i / n_rot)
        if wavelen < ctx / hi:
            out.append(1.0)
        elif wavelen > ctx / lo:
            out.append(factor)
        else:
            smooth = (ctx / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def convert_weights(meta: Meta, dtype: str):
    """([(gguf name, gguf-layout bytes array)], [(hf name, hf-layout bytes array, logical shape)]),
    and the embedding's rows."""
    n_head, n_head_kv = meta.hp("attention.head_count"), meta.hp("attention.head_count_kv")
    gg, hf_out, n_vocab = [], [], None
    for t in meta.reader.tensors:
        if t.name == "rope_freqs.weight":
            continue  # not a Hugging Face weight: config.json's rope_scaling says it (write_gguf adds it back)
        # A plain copy first: gguf.quants over the reader's memmap is many times slower.
        values = gguf.quants.dequantize(np.array(t.data), t.tensor_type)  # logical shape, rows first
        raw = stored_bytes(values, dtype)
        gg.append((t.name, raw))
        if t.name == "token_embd.weight":
            n_vocab = values.shape[0]
        _, layer, rest = (t.name.split(".", 2) + ["", ""])[:3]
        if rest in EXPERT_NAMES:  # values [n_expert][rows][cols]
            for e in range(values.shape[0]):
                hf_out.append((f"model.layers.{layer}.mlp.experts.{e}.{EXPERT_NAMES[rest]}.weight",
                               np.ascontiguousarray(raw[e]), values.shape[1:]))
            continue
        hf = raw
        if meta.arch == "llama" and t.name.endswith((".attn_q.weight", ".attn_k.weight")):
            hf = unpermute(raw, n_head if ".attn_q." in t.name else n_head_kv)
        hf_out.append((hf_name(t.name), np.ascontiguousarray(hf), values.shape))
    return gg, hf_out, n_vocab


def write_safetensors(out_dir: str, tensors, dtype: str, shards: int) -> None:
    st_dtype = DTYPES[dtype][1]
    arrays = {hf: (arr, shape) for hf, arr, shape in tensors}  # kept alive while serialising
    entries = {hf: safetensors.TensorSpec(dtype=st_dtype, shape=list(shape), data_ptr=arr.ctypes.data,
                                                 data_len=arr.nbytes)
               for hf, (arr, shape) in arrays.items()}
    names = sorted(entries)
    if shards <= 1:
        safetensors.serialize_file(entries, os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
        return
    weight_map, total = {}, 0
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: entries[n] for n in names[k::shards]}
        safetensors.serialize_file(part, os.path.join(out_dir, fname), {"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += arrays[n][0].nbytes
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def pre_tokenizer(pre: str):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in ("gpt2", "default"):
        return byte_level
    if pre in ("smollm", "starcoder", "refact"):
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    regex = {"llama3": LLAMA3_REGEX, "llama-bpe": LLAMA3_REGEX, "qwen2": QWEN2_REGEX}.get(pre)
    if regex is None:
        raise SystemExit(f"no tokenizer.json pre-tokenizer for GGUF pre '{pre}'")
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])


def write_tokenizer(meta: Meta, out_dir: str) -> dict:
    tokens = meta.get("tokenizer.ggml.tokens")
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges")]
    pre = meta.get("tokenizer.ggml.pre", "gpt2")
    vocab = {}
    for i, (text, ty) in enumerate(zip(tokens, types)):
        if ty != TOKTYPE_UNUSED:
            vocab[text] = i
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=False,
                               unk_token=tokens[unk_id] if unk_id is not None else None,
                               ignore_merges=pre in ("llama3", "llama-bpe")))
    tok.pre_tokenizer = pre_tokenizer(pre)
    tok.decoder = decoders.ByteLevel()
    bos_id, eos_id = meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    if add_bos and bos_id is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{tokens[bos_id]} $A", pair=f"{tokens[bos_id]} $A $B",
                                                           special_tokens=[(tokens[bos_id], bos_id)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, ty in enumerate(types) if ty == TOKTYPE_CONTROL])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i, ty in enumerate(types) if ty == TOKTYPE_USER_DEFINED])
    tok.save(os.path.join(out_dir, "tokenizer.json"))

    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": add_bos,
           "model_max_length": int(meta.hp("context_length", 2048))}
    if bos_id is not None:
        cfg["bos_token"] = tokens[bos_id]
    if eos_id is not None:
        cfg["eos_token"] = tokens[eos_id]
    if meta.get("tokenizer.chat_template") is not None:
        cfg["chat_template"] = meta.get("tokenizer.chat_template")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    gen = {k: v for k, v in (("bos_token_id", bos_id), ("eos_token_id", eos_id)) if v is not None}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    return gen


def write_config(meta: Meta, out_dir: str, dtype: str, tied: bool, n_vocab: int, ids: dict,
                 llama3_rope: dict | None = None) -> None:
    n_embd, n_head = meta.hp("embedding_length"), meta.hp("attention.head_count")
    cfg = {
        "architectures": [ARCH_CLASS[meta.arch]], "model_type": MODEL_TYPE.get(meta.arch, meta.arch),
        "hidden_size": n_embd, "intermediate_size": meta.hp("feed_forward_length"),
        "num_hidden_layers": meta.hp("block_count"), "num_attention_heads": n_head,
        "num_key_value_heads": meta.hp("attention.head_count_kv", n_head),
        "head_dim": meta.hp("attention.key_length", n_embd // n_head),
        "max_position_embeddings": meta.hp("context_length", 2048),
        "rms_norm_eps": float(meta.hp("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(meta.hp("rope.freq_base", 10000.0)),
        "rope_scaling": {"rope_type": "llama3", **llama3_rope} if llama3_rope else None,
        "hidden_act": "silu", "tie_word_embeddings": tied, "vocab_size": n_vocab,
        "torch_dtype": DTYPES[dtype][1], **ids,
    }
    if meta.arch in ("llama", "qwen3", "qwen3moe"):
        cfg["attention_bias"] = False
    if meta.arch in ("qwen2", "qwen3", "qwen3moe"):
        cfg["use_sliding_window"] = False
    if meta.arch == "qwen3moe":
        if cfg["intermediate_size"] is None:
            del cfg["intermediate_size"]  # no dense layer uses it
        cfg.update(num_experts=meta.hp("expert_count"), num_experts_per_tok=meta.hp("expert_used_count"),
                   moe_intermediate_size=meta.hp("expert_feed_forward_length"),
                   # absent from a GGUF: llama.cpp and invar normalise; transformers' default is false
                   norm_topk_prob=bool(meta.hp("expert_weights_norm", True)),
                   decoder_sparse_step=1, mlp_only_layers=[],
                   output_router_logits=False, router_aux_loss_coef=0.001)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def write_gguf(meta: Meta, path: str, tensors, dtype: str, rope_freqs: np.ndarray | None = None) -> None:
    """The source's metadata with tensors holding exactly the stored values (and rope_freqs)."""
    w = gguf.GGUFWriter(path, meta.arch)
    for key, field in meta.reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub_type=sub)
    w.add_file_type({"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                     "BF16": gguf.LlamaFileType.MOSTLY_BF16}[dtype])
    for name, raw in tensors:
        w.add_tensor(name, raw, raw_dtype=DTYPES[dtype][0])
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs, raw_dtype=QT.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert(src: str, out_dir: str, dtype: str = "BF16", shards: int = 1, gguf_out: str | None = None,
            llama3_rope: dict | None = None) -> str:
    meta = Meta(gguf.GGUFReader(src))
    if meta.arch not in ARCH_CLASS:
        raise SystemExit(f"unsupported architecture {meta.arch}")
    if llama3_rope and meta.arch != "llama":
        raise SystemExit("--llama3-rope is for llama models")
    if not llama3_rope and any(t.name == "rope_freqs.weight" for t in meta.reader.tensors):
        raise SystemExit("the source has rope_freqs.weight (Llama-3.1 rope scaling): pass --llama3-rope "
                         "FACTOR,LOW,HIGH,ORIG with the model's rope_scaling")
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise SystemExit("only byte-level BPE (gpt2) tokenizers convert")
    os.makedirs(out_dir, exist_ok=True)
    tensors, hf_tensors, n_vocab = convert_weights(meta, dtype)
    names = {t[0] for t in tensors}
    write_safetensors(out_dir, hf_tensors, dtype, shards)
    ids = write_tokenizer(meta, out_dir)
    write_config(meta, out_dir, dtype, "output.weight" not in names, n_vocab, ids, llama3_rope)
    if gguf_out:
        freqs = None
        if llama3_rope:
            n_rot = meta.hp("rope.dimension_count") or meta.hp("attention.key_length") or \
                meta.hp("embedding_length") // meta.hp("attention.head_count")
            freqs = llama3_rope_factors(meta.hp("rope.freq_base", 10000.0), n_rot, llama3_rope)
        write_gguf(meta, gguf_out, tensors, dtype, freqs)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="BF16")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--gguf-out", default=None)
    ap.add_argument("--llama3-rope", default=None, metavar="FACTOR,LOW,HIGH,ORIG")
    a = ap.parse_args(argv)
    rope = None
    if a.llama3_rope:
        f, lo, hi, ctx = a.llama3_rope.split(",")
        rope = {"factor": float(f), "low_freq_factor": float(lo), "high_freq_factor": float(hi),
                "original_max_position_embeddings": int(ctx)}
    convert(a.src, a.out_dir, a.dtype, a.shards, a.gguf_out, rope)
    return 0


if __name__ == "__main__":
    sys.exit(main())
