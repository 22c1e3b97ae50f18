#!/usr/bin/env python3
"""Writes the seed corpus for tests/fuzz/fuzz_safetensors.c: small valid safetensors files
(each dtype invar takes, scalars, empty tensors, metadata, several tensors, as the
`safetensors` package writes them) plus hostile variants (overlapping or out-of-range
offsets, sizes that disagree with the shape, other dtypes, huge header lengths, duplicate
names, bad JSON).

Usage: tools/make_safetensors_corpus.py [OUT_DIR]   (default tests/fuzz/corpus/safetensors)
Deterministic; standard library only (the valid files follow the format's own rules:
u64 header length, JSON header padded with spaces to 8 bytes, data sorted by offset).
"""
import json
import os
import struct
import sys

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "U8": 1}


def pack(header: dict, data: bytes, pad: bool = True) -> bytes:
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def tensors(specs, meta=None):
    """specs: [(name, dtype, shape)] laid out back to back; data bytes count up."""
    header, off = {}, 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape in specs:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    return header, bytes(i % 251 for i in range(off))


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fuzz",
                                                              "corpus", "safetensors")
    os.makedirs(out, exist_ok=True)
    files = {}
    h, d = tensors([("model.embed_tokens.weight", "F32", [8, 4]), ("model.norm.weight", "F32", [4])],
                   meta={"format": "pt"})
    files["valid_f32"] = pack(h, d)
    h, d = tensors([("a", "F32", [3, 2]), ("b", "BF16", [5]), ("c", "F16", [2, 2]), ("s", "BF16", [])])
    files["valid_mixed"] = pack(h, d)
    h, d = tensors([("e", "F32", [0, 3]), ("w", "F16", [1, 1, 2, 2])])
    files["valid_empty_4d"] = pack(h, d)
    files["valid_no_tensors"] = pack({}, b"")
    h, d = tensors([("x", "F32", [4])])
    files["unpadded"] = pack(h, d, pad=False)  # data offset 8 + 57: misaligned for F32
    h, d = tensors([("a", "F32", [2]), ("b", "F32", [2])])
    h["b"]["data_offsets"] = [4, 12]
    files["overlap"] = pack(h, d)
    h, d = tensors([("a", "F32", [2])])
    h["a"]["data_offsets"] = [0, 64]
    files["past_end"] = pack(h, d)
    h, d = tensors([("a", "F32", [3])])
    h["a"]["shape"] = [4]
    files["size_mismatch"] = pack(h, d)
    h, d = tensors([("a", "I64", [2])])
    files["dtype_i64"] = pack(h, d)
    h, d = tensors([("a", "F64", [2])])
    files["dtype_f64"] = pack(h, d)
    files["huge_header_len"] = struct.pack("<Q", 1 << 62) + b"{}"
    files["header_past_end"] = struct.pack("<Q", 4096) + b"{}      "
    files["bad_json"] = struct.pack("<Q", 8) + b'{"a":[1,'
    files["not_object"] = struct.pack("<Q", 8) + b"[1,2,3] "
    files["dup_names"] = (struct.pack("<Q", 120) +
                          b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                          b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'.ljust(120) + bytes(8))
    h, d = tensors([("a", "F32", [2])])
    h["a"]["data_offsets"] = [0.5, 8]
    files["float_offset"] = pack(h, d)
    for name, blob in files.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
