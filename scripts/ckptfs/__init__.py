# SPDX-License-Identifier: MIT
"""ckptfs: a rank's resharded slice of every tensor of a distributed-
training checkpoint, as the nested state dict a training job loads.

    import ckptfs
    # Straight from the data files (libckptfs, no mount):
    sd = ckptfs.load("ckpt/", world=8, rank=3)
    with ckptfs.open("ckpt/") as c:            # one parse, many loads
        print(c.info().format)
        sds = [c.load(8, r) for r in range(8)]
    # torch.distributed.checkpoint, any world size and mesh:
    dcp.load(state_dict, storage_reader=ckptfs.StorageReader("ckpt/"))
    # From a ckptfs mount:
    sd = ckptfs.load_view("/mnt/view")

``import ckptfs`` loads libckptfs (checking its ABI: a mismatch is an
ImportError naming both versions) and imports neither torch nor numpy;
``ckptfs.StorageReader`` imports torch on first use.
"""
from __future__ import annotations

from typing import Any

from . import _lib
from .errors import (CheckpointError, Error, NotFoundError,
                     PermissionDeniedError, ReadError)
from .handle import (Checkpoint, CheckpointInfo, KeyInfo, PlanEntry, PlanRun,
                     open)
from .load import load
from .view import load_view

#: The version of libckptfs this package runs on: ``ckptfs --version``
#: of the same build (both from the Makefile's VERSION).
__version__: str = _lib.lib.version

__all__ = ["__version__", "open", "load", "load_view", "StorageReader",
           "Checkpoint", "CheckpointInfo", "KeyInfo", "PlanEntry",
           "PlanRun", "Error", "CheckpointError", "ReadError",
           "NotFoundError", "PermissionDeniedError"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that `import ckptfs` imports no torch.
    if name == "StorageReader":
        from .torch import StorageReader
        globals()["StorageReader"] = StorageReader
        return StorageReader
    raise AttributeError(f"module 'ckptfs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"StorageReader"})
