"""The C reference dequantisation must match the `gguf` Python package bit for bit.

For each supported type a GGUF file is written with gguf.GGUFWriter (data quantised by
gguf.quants.quantize where the package can, plus random raw blocks with finite moderate
f16 scales; MXFP4's exponent byte takes every value), the C side dequantises it with `test_quant --dump-gguf IN OUT`, and the
float32 bits are compared with gguf.quants.dequantize.
"""
import os
from pathlib import Path
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
import gguf_mxfp4  # noqa: E402  (MXFP4, which gguf-py 0.17 lacks: its layout, in numpy)

BUILD_DIR = os.environ.get("INVAR_BUILD_DIR", str(Path(__file__).resolve().parents[2] / "build"))
BINARY = os.path.join(BUILD_DIR, "test_quant")

# Byte offsets of the f16 scale fields inside one block, per type.
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q8_0: [0],
    T.Q4_K: [0, 2],
    T.Q6_K: [208],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q5_K: [0, 2],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
    gguf_mxfp4.MXFP4: [],
}
QUANTIZABLE = {T.Q4_0, T.Q4_1, T.Q8_0, T.Q5_0, T.Q5_1}  # types gguf.quants.quantize implements


def random_blocks(rng, qtype, rows, cols):
    """Random raw blocks: every bit pattern of the quants, finite f16 scales of either sign."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scales = rng.uniform(-2.0, 2.0, size=n_blocks).astype(np.float16)
        scales[::7] = np.float16(6.1e-5) * rng.uniform(0, 1, size=scales[::7].shape)  # subnormals
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, n_blocks // rows * block_bytes)


def f16_bits_without_snan(rng, n):
    """All f16 bit patterns except signalling NaNs (numpy keeps them signalling; the C
    code, like the F16C instruction, makes them quiet)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    snan = ((bits & 0x7C00) == 0x7C00) & ((bits & 0x03FF) != 0) & ((bits & 0x0200) == 0)
    bits[snan] |= 0x0200
    return bits


def build_tensors(rng, qtype):
    """(name, array, raw_dtype) triples for one type."""
    rows, cols = 3, 512
    if qtype == T.F32:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        x.flat[:6] = [np.inf, -np.inf, -0.0, 1e-42, np.float32(3.4e38), np.nan]
        return [("f32", x, None)]
    if qtype == T.F16:
        bits = f16_bits_without_snan(rng, rows * cols).reshape(rows, cols)
        return [("f16", bits.view(np.uint8), T.F16)]
    if qtype == T.BF16:
        bits = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint16)
        return [("bf16", bits.view(np.uint8), T.BF16)]
    out = [("random_blocks", random_blocks(rng, qtype, rows, cols), qtype),
           ("random_blocks_3d", random_blocks(rng, qtype, 2 * 3, cols).reshape(2, 3, -1), qtype)]
    if qtype in QUANTIZABLE:
        x = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 10, size=(rows, 1))).astype(np.float32)
        out.append(("quantized", gguf.quants.quantize(x, qtype), qtype))
    return out


def write_gguf(path, tensors):
    w = gguf.GGUFWriter(str(path), "llama")
    for name, arr, raw_dtype in tensors:
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("qtype", [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K,
                                   T.Q5_0, T.Q5_1, T.Q2_K, T.Q3_K, T.Q5_K, T.IQ4_NL, T.IQ4_XS,
                                   gguf_mxfp4.MXFP4],
                         ids=lambda t: t.name)
def test_dequant_matches_gguf_package(tmp_path, qtype):
    if not os.access(BINARY, os.X_OK):
        pytest.skip(f"{BINARY} not built (set INVAR_BUILD_DIR)")
    rng = np.random.default_rng(1234 + int(qtype))
    src, dst = tmp_path / f"{qtype.name}.gguf", tmp_path / f"{qtype.name}.f32"
    write_gguf(src, build_tensors(rng, qtype))

    proc = subprocess.run([BINARY, "--dump-gguf", str(src), str(dst)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(dst, dtype=np.float32)

    reader = gguf.GGUFReader(str(src))
    offset = 0
    for t in reader.tensors:
        assert t.tensor_type == qtype
        want = gguf_mxfp4.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1)
        assert want.size == int(np.prod(t.shape)), t.name
        part = got[offset:offset + want.size]
        assert part.size == want.size, f"C output too short at tensor {t.name}"
        diff = np.nonzero(part.view(np.uint32) != want.view(np.uint32))[0]
        assert diff.size == 0, (f"{t.name}: {diff.size} mismatches, first at {diff[0]}: "
                                f"C {part[diff[0]]!r} vs gguf {want[diff[0]]!r}")
        offset += want.size
    assert offset == got.size
