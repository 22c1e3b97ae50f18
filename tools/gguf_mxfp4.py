"""MXFP4 (ggml type 39) for gguf-py versions that lack it (0.17 has no such type id).

Importing this module makes gguf.GGMLQuantizationType.MXFP4 exist (registered into the
enum when the installed gguf-py has none, with its block size in GGML_QUANT_SIZES), so
GGUFWriter can write MXFP4 tensors and GGUFReader can read them. `dequantize` is
gguf.quants.dequantize plus MXFP4, written from the block layout: a byte e (E8M0 scale)
and 16 bytes of FP4 (E2M1) nibbles, element j the low nibble of byte j, element j+16 the
high one; value = fp4 * 2^(e-127), with ggml's reading of e (no NaN code).
"""
from __future__ import annotations

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

MXFP4_ID = 39
BLOCK_ELEMS, BLOCK_BYTES = 32, 17


def _register() -> QT:
    if hasattr(QT, "MXFP4"):
        return QT.MXFP4
    member = int.__new__(QT, MXFP4_ID)
    member._name_, member._value_ = "MXFP4", MXFP4_ID
    QT._value2member_map_[MXFP4_ID] = member
    QT._member_map_["MXFP4"] = member
    QT._member_names_.append("MXFP4")
    gguf.GGML_QUANT_SIZES[member] = (BLOCK_ELEMS, BLOCK_BYTES)
    return member


MXFP4 = _register()

# FP4 values doubled (integers); the scale below carries the 1/2.
_VALUES2 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _half_scale(e: np.ndarray) -> np.ndarray:
    """2^(e-128) as float32 (subnormal for e < 2), as ggml computes it."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32)
    return bits.view(np.float32)


def dequantize_mxfp4(data: np.ndarray) -> np.ndarray:
    data = np.asarray(data, dtype=np.uint8)
    rows = data.shape[:-1]
    b = data.reshape(-1, BLOCK_BYTES)
    qs = b[:, 1:]
    q = _VALUES2[np.concatenate([qs & 0x0F, qs >> 4], axis=1)]
    with np.errstate(over="ignore"):  # e = 255 with |fp4| >= 2 is inf, as in ggml
        y = q * _half_scale(b[:, 0])[:, None]
    return y.astype(np.float32).reshape(*rows, data.shape[-1] // BLOCK_BYTES * BLOCK_ELEMS)


def dequantize(data: np.ndarray, qtype) -> np.ndarray:
    if int(qtype) == MXFP4_ID:
        return dequantize_mxfp4(data)
    return gguf.quants.dequantize(data, qtype)


def random_mxfp4(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Valid MXFP4 blocks of roughly the given std (the doubled FP4 values' std is ~5.4)."""
    nb = rows * cols // BLOCK_ELEMS
    e = np.clip(np.rint(np.log2(std / 5.4)) + 128 + rng.integers(-1, 2, size=nb), 0, 254).astype(np.uint8)
    qs = rng.integers(0, 256, size=(nb, 16), dtype=np.uint8)
    return np.concatenate([e[:, None], qs], axis=1).reshape(rows, -1)
