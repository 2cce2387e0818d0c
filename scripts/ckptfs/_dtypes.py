# SPDX-License-Identifier: MIT
"""dtype names to torch and numpy types, and fresh tensors or arrays to
read into.  torch and numpy are imported here only when called."""
from __future__ import annotations

import io
import warnings
from typing import Any, Tuple

ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
            "float8_e4m3fn": 1, "float8_e5m2": 1, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
NUMPY = {"float64": "<f8", "float32": "<f4", "float16": "<f2",
         "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1",
         "uint8": "u1", "bool": "?",
         # numpy has no bfloat16 or float8: the same-size unsigned type.
         "bfloat16": "<u2", "float8_e4m3fn": "u1", "float8_e5m2": "u1"}
NO_NUMPY = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def torch_dtype(name: str, where: str, stacklevel: int = 4) -> Any:
    """The torch dtype called name; on a torch without it (float8 before
    torch 2.1) the same-size integer type, with a warning naming where."""
    import torch
    dt = getattr(torch, name, None)
    if isinstance(dt, torch.dtype):
        return dt
    fallback = {1: torch.uint8, 2: torch.int16}[ITEMSIZE[name]]
    warnings.warn(f"{where}: this torch has no {name}; loaded as {fallback} "
                  f"holding the raw {name} bits", stacklevel=stacklevel)
    return fallback


def numpy_dtype(name: str, where: str, stacklevel: int = 4) -> str:
    """The numpy dtype string for name, warning when numpy lacks it."""
    if name in NO_NUMPY:
        warnings.warn(f"{where}: numpy has no {name}; loaded as "
                      f"{NUMPY[name]} holding the raw {name} bits",
                      stacklevel=stacklevel)
    return NUMPY[name]


def alloc(backend: str, dtype: str, shape: Tuple[int, ...],
          where: str) -> Tuple[Any, int]:
    """A fresh tensor (backend "torch") or array ("numpy") and the address
    of its memory."""
    if backend == "numpy":
        import numpy as np
        a = np.empty(shape, dtype=numpy_dtype(dtype, where, 5))
        return a, int(a.ctypes.data)
    import torch
    t = torch.empty(shape, dtype=torch_dtype(dtype, where, 5))
    return t, int(t.data_ptr())


def unpickle(data: bytes) -> Any:
    """torch.load of a bytes entry (runs pickled code: trust_pickles)."""
    import torch
    return torch.load(io.BytesIO(data), weights_only=False)
