#!/usr/bin/env python3
"""Writes the seed corpus for tests/fuzz/fuzz_gguf.c: small valid GGUF files that cover
every metadata type, arrays (incl. nested), alignment and each tensor type, plus slightly
broken variants (truncations, bad counts/lengths/types/offsets, duplicates).

Usage: tools/make_gguf_corpus.py [OUT_DIR]   (default tests/fuzz/corpus/gguf)
Deterministic; no dependencies beyond the standard library. Each file stays < 8 KiB.
"""
import os
import random
import struct
import sys

# Metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
# ggml tensor types: id -> (block elements, block bytes)
TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
         "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
              U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    """Encodes a value (without its type tag). Arrays: v = (elem_type, [items])."""
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR_FMT[vtype], v)


def kv(key, vtype, v):
    return gstr(key) + struct.pack("<I", vtype) + value(vtype, v)


def f16_block_field(x):
    return struct.pack("<e", x)


def tensor_data(rng, tname, n_elems):
    """Valid-looking data for n_elems elements: finite f16 scales, random quants."""
    tid, be, bb = TYPES[tname]
    out = bytearray()
    for _ in range(n_elems // be):
        if tname == "F32":
            out += struct.pack("<f", rng.uniform(-2, 2))
        elif tname in ("F16",):
            out += struct.pack("<e", rng.uniform(-2, 2))
        elif tname == "BF16":
            out += struct.pack("<f", rng.uniform(-2, 2))[2:]
        else:
            blk = bytearray(rng.getrandbits(8) for _ in range(bb))
            offs = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q8_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}[tname]
            for o in offs:
                blk[o:o + 2] = f16_block_field(rng.uniform(-1, 1))
            out += blk
    return bytes(out)


def gguf_file(kvs, tensors, version=3, alignment=32, rng=None, n_tensors=None, n_kv=None):
    """kvs: list of encoded kv bytes. tensors: list of (name, type name, ne list).
    Data offsets are laid out aligned, in order; the file ends at the last tensor's end."""
    rng = rng or random.Random(0)
    header = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                   len(kvs) if n_kv is None else n_kv)
    infos, blobs, off = b"", [], 0
    for name, tname, ne in tensors:
        n = 1
        for d in ne:
            n *= d
        data = tensor_data(rng, tname, n)
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", TYPES[tname][0], off)
        blobs.append(data)
        off += (len(data) + alignment - 1) // alignment * alignment
    body = header + b"".join(kvs) + infos
    body += b"\0" * (-len(body) % alignment)
    for i, data in enumerate(blobs):
        body += data
        if i + 1 < len(blobs):
            body += b"\0" * (-len(body) % alignment)
    return body


def llama_like(rng):
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"tok{i}" for i in range(40)] + ["Ġthe", "é", ""]
    kvs = [
        kv("general.architecture", STR, "llama"),
        kv("general.name", STR, "tiny"),
        kv("llama.block_count", U32, 1),
        kv("llama.context_length", U32, 64),
        kv("llama.embedding_length", U32, 32),
        kv("llama.feed_forward_length", U32, 64),
        kv("llama.attention.head_count", U32, 4),
        kv("llama.attention.head_count_kv", U32, 2),
        kv("llama.rope.freq_base", F32, 10000.0),
        kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        kv("tokenizer.ggml.model", STR, "gpt2"),
        kv("tokenizer.ggml.pre", STR, "smollm"),
        kv("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        kv("tokenizer.ggml.token_type", ARR, (I32, [1] * len(tokens))),
        kv("tokenizer.ggml.merges", ARR, (STR, ["t o", "to k", "Ġ t"])),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
        kv("tokenizer.chat_template", STR, "{% for m in messages %}{{ m['content'] }}{% endfor %}"),
        kv("general.file_type", U32, 3),
    ]
    tensors = [("token_embd.weight", "Q8_0", [32, len(tokens)]), ("blk.0.attn_norm.weight", "F32", [32]),
               ("blk.0.attn_q.weight", "Q4_1", [32, 32]), ("output_norm.weight", "F32", [32])]
    return gguf_file(kvs, tensors, rng=rng)


def all_scalars():
    return [kv("u8", U8, 200), kv("i8", I8, -5), kv("u16", U16, 65000), kv("i16", I16, -300),
            kv("u32", U32, 4000000000), kv("i32", I32, -70000), kv("f32", F32, 1.5), kv("bool", BOOL, 1),
            kv("str", STR, "hello"), kv("u64", U64, 2**64 - 1), kv("i64", I64, -2**63), kv("f64", F64, 0.25)]


def arrays():
    return [kv("a.u32", ARR, (U32, [7, 8, 9])), kv("a.str", ARR, (STR, ["alpha", "", "gamma"])),
            kv("a.empty", ARR, (F32, [])), kv("a.bool", ARR, (BOOL, [1, 0, 1])),
            kv("a.f64", ARR, (F64, [-1.0, 3.0])), kv("a.i64", ARR, (I64, [-1, 2**62])),
            kv("a.nested", ARR, (ARR, [(I16, [1, 2]), (STR, ["x"]), (ARR, [(U8, [1])])]))]


def each_type_tensors():
    return [("f32", "F32", [8, 2]), ("f16", "F16", [4]), ("bf16", "BF16", [2, 2, 2, 2]),
            ("q8_0", "Q8_0", [32, 2]), ("q4_0", "Q4_0", [64]), ("q4_1", "Q4_1", [32, 3]),
            ("q4_k", "Q4_K", [256]), ("q6_k", "Q6_K", [256, 2]), ("q5_0", "Q5_0", [32])]


def tensor_info(name, ne, type_id, offset):
    return gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + \
        struct.pack("<IQ", type_id, offset)


def raw(n_tensors, kvs, infos, data=b"", version=3, pad=32):
    body = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs) + b"".join(infos)
    return body + b"\0" * (-len(body) % pad) + data


def align1_tensor(tname, ne, odd):
    """general.alignment 1 and one tensor placed at an odd (or, odd=False, 4-aligned) file
    offset: alignment 1 is legal, a block read at an odd address is not."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv("general.alignment", U32, 1)
    end = len(head) + len(tensor_info("t", ne, TYPES[tname][0], 0))
    off = (1 - end % 2) if odd else (-end % 4)
    n = 1
    for d in ne:
        n *= d
    return head + tensor_info("t", ne, TYPES[tname][0], off) + b"\0" * off + tensor_data(random.Random(0), tname, n)


def corpus():
    rng = random.Random(1234)
    c = {}
    c["valid_header_only"] = raw(0, [], [])
    c["valid_v2_minimal"] = gguf_file([kv("general.architecture", STR, "llama")],
                                      [("w", "F32", [4])], version=2, rng=rng)
    c["valid_all_scalars"] = gguf_file(all_scalars(), [], rng=rng)
    c["valid_arrays"] = gguf_file(arrays(), [], rng=rng)
    c["valid_align64"] = gguf_file([kv("general.alignment", U32, 64)], [("a", "F32", [3]), ("b", "Q8_0", [32])],
                                   alignment=64, rng=rng)
    c["valid_each_type"] = gguf_file([kv("general.architecture", STR, "test")], each_type_tensors(), rng=rng)
    c["valid_llama_like"] = llama_like(rng)
    c["valid_empty_key"] = gguf_file([kv("", U8, 1)], [("x", "F16", [2, 3])], rng=rng)

    full = c["valid_each_type"]
    for frac in (0.1, 0.3, 0.5, 0.7, 0.95):
        c[f"broken_truncated_{int(frac * 100)}"] = full[:int(len(full) * frac)]
    c["broken_truncated_last_byte"] = full[:-1]
    c["broken_bad_magic"] = b"GGUX" + full[4:]
    c["broken_version1"] = raw(0, [kv("k", U8, 1)], [], version=1)
    c["broken_big_endian"] = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    c["broken_huge_kv_count"] = b"GGUF" + struct.pack("<IQQ", 3, 0, 2**64 - 1) + kv("k", U8, 1)
    c["broken_huge_tensor_count"] = b"GGUF" + struct.pack("<IQQ", 3, 2**62, 0) + b"\0" * 64
    c["broken_huge_string"] = raw(0, [gstr("s") + struct.pack("<IQ", STR, 2**62) + b"abc"], [])
    c["broken_huge_array"] = raw(0, [gstr("a") + struct.pack("<IIQ", ARR, U64, 2**61) + b"\0" * 16], [])
    c["broken_huge_string_array"] = raw(0, [gstr("a") + struct.pack("<IIQ", ARR, STR, 2**40) + gstr("x")], [])
    c["broken_unknown_value_type"] = raw(0, [gstr("k") + struct.pack("<II", 13, 0)], [])
    c["broken_deep_nesting"] = raw(0, [gstr("d") + struct.pack("<I", ARR) +
                                       struct.pack("<IQ", ARR, 1) * 12 + struct.pack("<IQ", U8, 0)], [])
    c["broken_dup_key"] = raw(0, [kv("dup", U8, 1), kv("dup", U32, 2)], [])
    c["broken_key_nul"] = raw(0, [kv(b"a\0b", U8, 1)], [])
    c["broken_alignment_3"] = raw(0, [kv("general.alignment", U32, 3)], [])
    c["broken_alignment_0"] = raw(0, [kv("general.alignment", U32, 0)], [])
    c["broken_alignment_str"] = raw(0, [kv("general.alignment", STR, "32")], [])
    c["broken_alignment_1_odd_q8_0"] = align1_tensor("Q8_0", [32, 2], odd=True)
    c["valid_alignment_1_even_q8_0"] = align1_tensor("Q8_0", [32, 2], odd=False)
    f32x4 = struct.pack("<4f", 1, 2, 3, 4)
    c["broken_ndims5"] = raw(1, [], [tensor_info("t", [4, 1, 1, 1, 1], 0, 0)], f32x4)
    c["broken_unknown_type"] = raw(1, [], [tensor_info("t", [4], 4, 0)], f32x4)
    c["broken_block_multiple"] = raw(1, [], [tensor_info("t", [48], 3, 0)], b"\0" * 40)
    c["broken_ne_zero"] = raw(1, [], [tensor_info("t", [4, 0], 0, 0)], f32x4)
    c["broken_ne_overflow"] = raw(1, [], [tensor_info("t", [2**20] * 4, 0, 0)], f32x4)
    c["broken_misaligned_offset"] = raw(1, [], [tensor_info("t", [4], 0, 4)], f32x4 * 2)
    c["broken_past_end"] = raw(1, [], [tensor_info("t", [8], 0, 0)], f32x4)
    c["broken_huge_offset"] = raw(1, [], [tensor_info("t", [4], 0, 2**64 - 32)], f32x4)
    c["broken_dup_tensor"] = raw(2, [], [tensor_info("w", [4], 0, 0), tensor_info("w", [4], 0, 32)], f32x4 * 4)
    c["valid_overlapping_tensors"] = raw(2, [], [tensor_info("a", [4], 0, 0), tensor_info("b", [2], 0, 0)], f32x4)
    return c


def main():
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fuzz", "corpus", "gguf")
    out = os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else default)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".gguf"):
            os.remove(os.path.join(out, f))
    total = 0
    for name, data in corpus().items():
        assert len(data) < 8192, (name, len(data))
        with open(os.path.join(out, name + ".gguf"), "wb") as fh:
            fh.write(data)
        total += len(data)
    assert total < 200 * 1024, total
    print(f"wrote {len(corpus())} files, {total} bytes, to {out}")


if __name__ == "__main__":
    main()
