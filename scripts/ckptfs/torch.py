# SPDX-License-Identifier: MIT
"""A ``torch.distributed.checkpoint`` StorageReader over libckptfs:
:class:`StorageReader`.  Importing this module imports torch;
``import ckptfs`` does not (``ckptfs.StorageReader`` imports it on first
use)."""
from __future__ import annotations

import ctypes as C
import importlib
import io
import os
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.futures import Future

from . import _args, _lib
from ._args import PathArg
from ._dtypes import torch_dtype
from .handle import Checkpoint
from .load import read_batch

__all__ = ["StorageReader", "dcp_modules"]


def dcp_modules() -> Tuple[ModuleType, ModuleType, ModuleType]:
    """torch's distributed-checkpoint package, its ``metadata`` and its
    ``planner`` modules: ``torch.distributed.checkpoint`` (torch >= 2),
    else torch 1.13's ``torch.distributed._shard.checkpoint``.

    On Python 3.11, torch 1.13's ``torch.distributed._shard`` cannot be
    imported at all (a dataclass field with a mutable default, which 3.11
    refuses): this raises ImportError saying so.  ckptfs never patches
    torch; make that module importable first (for instance with an import
    hook that compiles it with ``default_factory``, as the project's
    ``scripts/torch_dcp_compat.py`` does for its tests)."""
    for base in ("torch.distributed.checkpoint",
                 "torch.distributed._shard.checkpoint"):
        try:
            return (importlib.import_module(base),
                    importlib.import_module(base + ".metadata"),
                    importlib.import_module(base + ".planner"))
        except ModuleNotFoundError:
            continue
        except ValueError as e:     # torch 1.13 on Python 3.11
            raise ImportError(
                f"ckptfs.StorageReader: torch {torch.__version__}'s {base} "
                f"cannot be imported on this Python ({e}); make it "
                f"importable first (see ckptfs.torch.dcp_modules)") from e
    raise ImportError(f"torch {torch.__version__} has no distributed "
                      f"checkpointing")


_dcp, _md, _planner = dcp_modules()


def _tensor_properties() -> Any:
    try:
        return _md.TensorProperties
    except AttributeError:      # torch 1.13
        return importlib.import_module(
            "torch.distributed._shard.sharded_tensor.metadata"
        ).TensorProperties


_TensorProperties = _tensor_properties()
_BYTE_IO = _planner.LoadItemType.BYTE_IO
_Base: Any = _dcp.StorageReader


def _layout_markers(path: str) -> bool:
    """Whether directory path holds a checkpoint layout ckptfs opens:
    ``.metadata`` (torch DCP or native), rank-local ``__R.metadata``
    files, or ``.safetensors`` files."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    for n in names:
        if n == ".metadata" or n.endswith(".safetensors"):
            return True
        if n.startswith("__") and n.endswith(".metadata") and \
                n[2:-9].isdigit():
            return True
    return False


class StorageReader(_Base):  # type: ignore[misc]
    """A ``torch.distributed.checkpoint.StorageReader`` over libckptfs.

    ``dcp.load(state_dict, storage_reader=ckptfs.StorageReader(path))``
    (torch 1.13: ``load_state_dict``) fills any state dict, of any world
    size and mesh, planned by torch's own planner (the default one, or
    the ``planner=`` given), reading for each ReadItem only the bytes it
    needs, straight into the destination tensor when it is a contiguous
    CPU tensor of the saved dtype.  Works on every checkpoint ckptfs
    opens: torch DCP (one ``.metadata`` or rank-local ``__R.metadata``
    files), safetensors, native.  The metadata comes from libckptfs's
    strict parse (its own unpickler for torch's ``.metadata``): no pickle
    is ever loaded.

    path: the checkpoint directory (or None, then torch's
        ``checkpoint_id`` through :meth:`reset`).
    threads: libckptfs's read pool (default: this process's share of the
        CPUs, CPUs / ``LOCAL_WORLD_SIZE``).
    cache_mb: memory for decoded zstd records (default 1024).
    s3_endpoint, s3_region, ... s3_timeout_ms: for an ``s3://`` path, as
        for :func:`ckptfs.open`.

    The open checkpoint (fds, caches) is kept from ``read_metadata`` on;
    :meth:`close` (or a ``with`` block) releases it at once.
    """

    def __init__(self, path: Optional[PathArg] = None,
                 threads: Optional[int] = None,
                 cache_mb: Optional[int] = None, **s3: Any) -> None:
        super().__init__()
        _args.s3_options(s3)          # checked now, not at first use
        self.s3: Dict[str, Any] = dict(s3)
        self.path: Optional[str] = None if path is None else \
            os.fsdecode(_args.path("path", path))
        self._threads_arg = _args.threads(threads)
        self.threads: int = self._threads_arg or \
            _args.default_threads(None if path is None else
                                  _args.path("path", path))
        self.cache_mb = _args.cache_mb(cache_mb)
        self._ck: Optional[Checkpoint] = None
        self._keys: Dict[str, Tuple[int, int, Any, int]] = {}
        self.metadata: Any = None

    # -- lifetime ----------------------------------------------------
    def reset(self, checkpoint_id: Optional[PathArg] = None) -> None:
        """Start over (torch >= 2.2 calls it before each load), on
        ``checkpoint_id`` when given."""
        if checkpoint_id is not None:
            self.path = os.fsdecode(_args.path("checkpoint_id",
                                               checkpoint_id))
        self.close()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        """Whether checkpoint_id is a checkpoint ckptfs opens: a directory
        of a layout it reads (``.metadata``, rank-local ``__R.metadata``,
        ``*.safetensors``), or an object-store root ``s3://bucket[/prefix]``
        (what is there is checked when it is opened)."""
        try:
            p = os.fsdecode(_args.path("checkpoint_id", checkpoint_id))
        except (TypeError, ValueError):
            return False
        if p.startswith("s3://") and len(p) > 5:
            return True
        return os.path.isdir(p) and _layout_markers(p)

    def close(self) -> None:
        """Release the open checkpoint's fds and caches now."""
        if self._ck is not None:
            self._ck.close()
        self._ck = None
        self._keys = {}

    def __enter__(self) -> "StorageReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> Checkpoint:
        if self._ck is None:
            if self.path is None:
                raise ValueError("ckptfs.StorageReader: no checkpoint path "
                                 "(give one, or a checkpoint_id)")
            if self._threads_arg is None:   # the path may have changed
                self.threads = _args.default_threads(os.fsencode(self.path))
            self._ck = Checkpoint(self.path, cache_mb=self.cache_mb,
                                  threads=self.threads,
                                  **self.s3)
        return self._ck

    # -- torch's StorageReader API -----------------------------------
    def read_metadata(self) -> Any:
        """torch's ``Metadata``, built from libckptfs's parse."""
        ck = self._open()
        m = ck._acquire()
        try:
            mi, ki, ci = _lib.MetaInfo(), _lib.KeyInfo(), _lib.ChunkInfo()
            lib = _lib.lib
            lib.ckpt_meta_info(m, C.byref(mi))
            sdm: Dict[str, Any] = {}
            for k in range(mi.nkeys):
                lib.ckpt_meta_key(m, k, C.byref(ki))
                fqn = ki.fqn.decode("utf-8", "surrogateescape")
                if ki.kind == _lib.KIND_BYTES:
                    sdm[fqn] = _md.BytesStorageMetadata()
                    continue
                chunks = []
                for c in range(ki.chunk_first, ki.chunk_first + ki.nchunks):
                    lib.ckpt_meta_chunk(m, c, C.byref(ci))
                    chunks.append(_md.ChunkStorageMetadata(
                        offsets=torch.Size(ci.offsets[:ci.ndim]),
                        sizes=torch.Size(ci.sizes[:ci.ndim])))
                props = _TensorProperties(
                    dtype=torch_dtype(_lib.DTYPES[ki.dtype], fqn))
                sdm[fqn] = _md.TensorStorageMetadata(
                    properties=props, size=torch.Size(ki.shape[:ki.ndim]),
                    chunks=chunks)
        finally:
            ck._release()
        return _md.Metadata(state_dict_metadata=sdm)

    def set_up_storage_reader(self, metadata: Any, is_coordinator: bool,
                              *args: Any, **kwargs: Any) -> None:
        """Keep metadata; open the checkpoint."""
        self.metadata = metadata
        self._open()

    init = set_up_storage_reader     # torch 1.13's name

    def prepare_local_plan(self, plan: Any) -> Any:
        """The plan as torch's planner made it."""
        return plan

    def prepare_global_plan(self, plans: List[Any]) -> List[Any]:
        """The plans as torch's planner made them."""
        return plans

    def _key(self, fqn: str) -> Tuple[int, int, Any, int]:
        k = self._keys.get(fqn)
        if k is None:
            ck = self._open()
            idx = ck.key_index(fqn)
            m = ck._acquire()
            try:
                ki = _lib.KeyInfo()
                _lib.lib.ckpt_meta_key(m, idx, C.byref(ki))
            finally:
                ck._release()
            saved = torch_dtype(_lib.DTYPES[ki.dtype], fqn) \
                if ki.kind == _lib.KIND_TENSOR else None
            k = self._keys[fqn] = (idx, int(ki.kind), saved, int(ki.nbytes))
        return k

    def read_data(self, plan: Any, planner: Any) -> Any:
        """Read every item of plan: each tensor item as one box of its
        saved tensor, all in one libckptfs batch (cancellable with
        Ctrl-C), then hand them to the planner."""
        ck = self._open()
        items = plan.items
        reqs = (_lib.BoxReq * max(len(items), 1))()
        post: List[Tuple[Any, Optional[bytearray], Any, Any]] = []
        n = 0
        for it in items:
            key, kind, saved, nbytes = self._key(it.storage_index.fqn)
            r = reqs[n]
            r.key = key
            if it.type == _BYTE_IO:
                buf = bytearray(nbytes)
                if nbytes:
                    r.dst = C.addressof((C.c_char * nbytes).from_buffer(buf))
                    n += 1
                post.append((it, buf, None, None))
                continue
            target = planner.resolve_tensor(it).detach()
            base = it.storage_index.offset
            lengths = tuple(it.lengths)
            for d, (o, so, ln) in enumerate(zip(base, it.storage_offsets,
                                                lengths)):
                r.off[d] = o + so
                r.size[d] = ln
            if (target.device.type == "cpu" and target.dtype == saved and
                    target.is_contiguous() and
                    tuple(target.shape) == lengths):
                dst = target
            else:
                dst = torch.empty(lengths, dtype=saved)
            if dst.numel():
                r.dst = dst.data_ptr()
                n += 1
            post.append((it, None, target, dst))
        m = ck._acquire()
        try:
            read_batch(m, reqs, n, self.threads, boxes=True)
        finally:
            ck._release()
        for it, blob, target, dst in post:
            if blob is not None:
                planner.load_bytes(it, io.BytesIO(bytes(blob)))
            else:
                if dst is not target:
                    target.copy_(dst)
                planner.commit_tensor(it, target)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut
