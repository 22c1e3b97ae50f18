"""Turning a trainer's tensors (numpy arrays, torch tensors) into invar_tensor records."""

from __future__ import annotations

import ctypes
from typing import Any, List, Mapping, Tuple

import numpy as np

from . import _lib


def _as_array(name: str, value: Any) -> Tuple[np.ndarray, int]:
    """(contiguous array, ggml type id): float32 -> F32, float16 -> F16, torch bfloat16 -> BF16
    (its bits as uint16); other float arrays are converted to float32."""
    if hasattr(value, "detach") and hasattr(value, "dtype"):  # a torch tensor, without importing torch
        t = value.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":
            import torch

            return np.ascontiguousarray(t.view(torch.int16).numpy().view(np.uint16)), _lib.GGML_BF16
        value = t.numpy()
    a = np.asarray(value)
    if a.dtype == np.float16:
        return np.ascontiguousarray(a), _lib.GGML_F16
    if a.dtype == np.float32:
        return np.ascontiguousarray(a), _lib.GGML_F32
    if np.issubdtype(a.dtype, np.floating):
        return np.ascontiguousarray(a, dtype=np.float32), _lib.GGML_F32
    raise TypeError(f"{name}: weights must be float32, float16 or bfloat16, got {a.dtype}")


def tensor_records(weights: Mapping[str, Any]) -> "tuple[ctypes.Array, List[Any]]":
    """invar_tensor records for weights (name -> array in numpy's axis order, e.g. [out, in] for
    a matrix), and the objects that must stay alive while the C call runs."""
    keep: List[Any] = []
    recs = (_lib.Tensor * max(1, len(weights)))()
    for i, (name, value) in enumerate(weights.items()):
        a, ggml_type = _as_array(name, value)
        if not 1 <= a.ndim <= 4:
            raise ValueError(f"{name}: {a.ndim} dimensions (1 to 4 allowed)")
        nb = name.encode()
        keep += [a, nb]
        recs[i].name = nb
        recs[i].type = ggml_type
        recs[i].n_dims = a.ndim
        for d, n in enumerate(reversed(a.shape)):  # GGUF's ne[0] is numpy's last axis
            recs[i].ne[d] = n
        for d in range(a.ndim, 4):
            recs[i].ne[d] = 1
        recs[i].data = a.ctypes.data
        recs[i].n_bytes = a.nbytes
    return recs, keep
