# SPDX-License-Identifier: MIT
"""dtype names to torch and numpy types, and fresh tensors or arrays to
read into.  torch and numpy are imported here only when called."""
from __future__ import annotations

import io
import warnings
from typing import Any, List, Optional, Tuple

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


HUGE_PAGE = 2 << 20
#: The most bytes of tensors one mapping of an Arena holds (a larger
#: tensor gets a mapping of its own): what one tensor kept alive can keep.
SLAB = 64 << 20
ALIGN = 64      # torch's CPU allocator's alignment


class Arena:
    """Memory for the tensors (or arrays) one load allocates, on
    transparent huge pages: filling fresh memory faults it in, and 4 KiB
    faults cost more than the copies (a first load of 134 MB: 34,000 of
    them, most of its CPU time); 2 MiB pages take 512 times fewer.

    The sizes are laid out in order into anonymous private mappings of at
    most SLAB bytes (a larger size gets one of its own), each 2 MiB-aligned
    and advised MADV_HUGEPAGE (a no-op where THP is off).  Each tensor is
    a view with a storage of exactly its own bytes (torch.save of one
    saves only it); a mapping is unmapped when every tensor in it is gone.
    Such storages cannot be resized."""

    def __init__(self, sizes: List[int]) -> None:
        self._maps: List[Tuple[Any, int]] = []    # (mmap, first offset)
        self._where: List[Tuple[int, int]] = []   # (map, offset) by size
        group: List[int] = []
        used = 0
        for n in sizes:
            if group and used + n > SLAB:
                self._add(group, used)
                group, used = [], 0
            group.append(n)
            used += (n + ALIGN - 1) // ALIGN * ALIGN
        if group:
            self._add(group, used)
        self._next = 0

    def _add(self, group: List[int], used: int) -> None:
        import ctypes as C
        import mmap
        huge = used >= HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE")
        extra = HUGE_PAGE - mmap.PAGESIZE if huge else 0
        mm = mmap.mmap(-1, max(used + extra, 1),
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
        view = C.c_char.from_buffer(mm)
        addr = C.addressof(view)
        del view                    # no export left: only the tensors'
        first = (-addr) % HUGE_PAGE if huge else 0
        if huge:
            mm.madvise(mmap.MADV_HUGEPAGE, first, used)
        k = len(self._maps)
        self._maps.append((mm, first))
        off = first
        for n in group:
            self._where.append((k, off))
            off += (n + ALIGN - 1) // ALIGN * ALIGN

    def take(self) -> Tuple[Any, int]:
        """The mapping and offset of the next size, in order."""
        k, off = self._where[self._next]
        self._next += 1
        return self._maps[k][0], off


def alloc(backend: str, dtype: str, shape: Tuple[int, ...],
          where: str, arena: Optional[Arena] = None,
          nbytes: int = 0) -> Tuple[Any, int]:
    """A fresh tensor (backend "torch") or array ("numpy") and the address
    of its memory: nbytes of arena's next place (its sizes were the
    tensors' in this order), or allocated alone when arena is None."""
    if backend == "numpy":
        import numpy as np
        dt = np.dtype(numpy_dtype(dtype, where, 5))
        if arena is None or not nbytes:
            if arena is not None:
                arena.take()
            a = np.empty(shape, dtype=dt)
        else:
            mm, off = arena.take()
            a = np.frombuffer(mm, dtype=dt, count=nbytes // dt.itemsize,
                              offset=off).reshape(shape)
        return a, int(a.ctypes.data)
    import torch
    tdt = torch_dtype(dtype, where, 5)
    if arena is None or not nbytes:
        if arena is not None:
            arena.take()
        t = torch.empty(shape, dtype=tdt)
    else:
        mm, off = arena.take()
        t = torch.frombuffer(mm, dtype=tdt,
                             count=nbytes // ITEMSIZE[dtype],
                             offset=off).view(shape)
    return t, int(t.data_ptr())


def unpickle(data: bytes) -> Any:
    """torch.load of a bytes entry (runs pickled code: trust_pickles)."""
    import torch
    return torch.load(io.BytesIO(data), weights_only=False)
