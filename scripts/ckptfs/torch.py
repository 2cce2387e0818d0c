# SPDX-License-Identifier: MIT
"""A ``torch.distributed.checkpoint`` StorageReader over libckptfs:
:class:`StorageReader`.  Importing this module imports torch;
``import ckptfs`` does not (``ckptfs.StorageReader`` imports it on first
use)."""
from __future__ import annotations

import ctypes as C
import importlib
import io
import itertools
import os
import uuid
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.futures import Future

from . import _args, _coop, _lib, _torch_meta
from ._args import IndexCacheArg, PathArg
from ._dtypes import ITEMSIZE, torch_dtype
from .handle import Checkpoint, _s3_struct
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
    CPU tensor of the saved dtype; any other destination (strided, of
    another dtype, on a GPU) is filled through host staging buffers of at
    most ``staging_mb`` at a time.  Works on every checkpoint ckptfs
    opens: torch DCP (one ``.metadata`` or rank-local ``__R.metadata``
    files), safetensors, native.

    :meth:`read_metadata` returns torch's own ``Metadata``, as
    ``FileSystemReader`` does (``planner_data``, ``storage_data``,
    ``storage_meta`` with this reader's ``load_id``, ``version``), from
    ``.metadata`` alone: it is unpickled by a restricted unpickler that
    admits only torch's metadata classes (a hostile ``.metadata`` naming
    any other global is refused, nothing of it run).  The reads use
    libckptfs's strict parse (its own unpickler).  A checkpoint without a
    pickled ``.metadata`` (rank-local, safetensors, native) gets a
    ``Metadata`` built from that parse (``state_dict_metadata`` only).

    path: the checkpoint directory (or None, then torch's
        ``checkpoint_id`` through :meth:`reset`).
    threads: libckptfs's read pool (default: this process's share of the
        CPUs: CPUs / the job's processes on this node, ``LOCAL_WORLD_SIZE``
        or its MPI and Slurm equivalents).
    cache_mb: memory for decoded zstd records (default 1024).
    s3_endpoint, s3_region, ... s3_timeout_ms: for an ``s3://`` path, as
        for :func:`ckptfs.open`.
    staging_mb: host memory for the bytes that cannot be read in place
        (strided, converted or GPU destinations; bytes items), in MiB
        (default 64): ReadItems are read in batches whose staging stays
        within it, and an item larger than it in parts.
    index_cache: the node-local index cache directory, as for
        :func:`ckptfs.open`: of the ranks of a node resuming from a torch
        checkpoint without a ``.ckptfs-index``, one indexes it and the
        others reuse its index (default ``CKPTFS_INDEX_CACHE``, else
        ``$XDG_CACHE_HOME/ckptfs``, else ``~/.cache/ckptfs``; False: none).
    direct_io: cold ranges read with O_DIRECT, as for :func:`ckptfs.open`
        (a resume from an IOPS-bound device; default False).
    cooperative: when the job's process group is up and several ranks'
        plans ask for the same saved box (DDP, HSDP replicas, replicated
        norms, ``param_groups``), one rank reads it and sends it to the
        others over the job's ``torch.distributed`` (default True; used
        only when every rank's reader is cooperative; see
        ``ckptfs._coop``).  False: every rank reads all it needs itself.

    The checkpoint is opened (data files indexed, fds, caches) at the
    first read, not by ``read_metadata``, and kept until :meth:`close`
    (or a ``with`` block's end) releases it.

    load_id: this reader's id, as ``FileSystemReader``'s: a fresh uuid4
        string at construction and at each :meth:`reset`, set as
        ``storage_meta.load_id`` of the metadata it returns.
    """

    def __init__(self, path: Optional[PathArg] = None,
                 threads: Optional[int] = None,
                 cache_mb: Optional[int] = None,
                 staging_mb: Optional[int] = None,
                 index_cache: IndexCacheArg = None,
                 direct_io: bool = False, cooperative: bool = True,
                 **s3: Any) -> None:
        super().__init__()
        for name, v in (("direct_io", direct_io),
                        ("cooperative", cooperative)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool, got "
                                f"{type(v).__name__}")
        self.direct_io: bool = direct_io
        self.cooperative: bool = cooperative
        s3given = _args.s3_options(s3)  # checked now, not at first use
        if path is not None:
            _args.s3_only(_args.path("path", path), s3given)
        _args.index_cache(index_cache)
        self.index_cache: IndexCacheArg = index_cache
        self.s3: Dict[str, Any] = dict(s3)
        self.path: Optional[str] = None if path is None else \
            os.fsdecode(_args.path("path", path))
        self._threads_arg = _args.threads(threads)
        self.threads: int = self._threads_arg or \
            _args.default_threads(None if path is None else
                                  _args.path("path", path))
        self.cache_mb = _args.cache_mb(cache_mb)
        self.staging_mb: int = STAGING_MB if staging_mb is None else \
            _args.integer("staging_mb", staging_mb, 1, _args.U64_MAX >> 20)
        self._ck: Optional[Checkpoint] = None
        self._last_stats: Optional[Dict[str, int]] = None
        self._keys: Dict[str, _Key] = {}
        self.metadata: Any = None
        self.load_id: str = str(uuid.uuid4())

    # -- lifetime ----------------------------------------------------
    def reset(self, checkpoint_id: Optional[PathArg] = None) -> None:
        """Start over (torch >= 2.2 calls it before each load), on
        ``checkpoint_id`` when given."""
        if checkpoint_id is not None:
            self.path = os.fsdecode(_args.path("checkpoint_id",
                                               checkpoint_id))
        self.close()
        self._last_stats = None
        self.load_id = str(uuid.uuid4())

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
        if _args.is_remote(os.fsencode(p)) and len(p.split("://", 1)[1]):
            return True
        return os.path.isdir(p) and _layout_markers(p)

    def close(self) -> None:
        """Release the open checkpoint's fds and caches now."""
        if self._ck is not None:
            self._last_stats = self._ck.io_stats()
            self._ck.close()
        self._ck = None
        self._keys = {}

    def io_stats(self) -> Dict[str, int]:
        """This rank's requests to the store and bytes, for the open
        checkpoint (or the last one, once closed; zeros before the first
        open, and again after :meth:`reset`): :meth:`Checkpoint.io_stats`,
        whose ``open_*`` counters are those of the open (``.metadata``,
        the index of a torch checkpoint, the listing) and ``read_*`` those
        of the reads.  Bytes received from other ranks by a cooperative
        read are not fetched, so they count in neither; nor does
        :meth:`read_metadata`'s own read of ``.metadata`` (the open, at
        the first read, reads it again)."""
        if self._ck is not None:
            return self._ck.io_stats()
        if self._last_stats is not None:
            return dict(self._last_stats)
        return {name: 0 for name, _ in _lib.IoStats._fields_}

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
                                  index_cache=self.index_cache,
                                  direct_io=self.direct_io,
                                  **self.s3)
        return self._ck

    # -- torch's StorageReader API -----------------------------------
    def read_metadata(self) -> Any:
        """torch's ``Metadata`` as ``FileSystemReader.read_metadata``
        returns it, from ``.metadata`` alone (see the class doc); records
        stored with a transform other than zstd are refused here, naming
        it.  Without a pickled ``.metadata``: built from libckptfs's
        parse."""
        if self.path is None:
            raise ValueError("ckptfs.StorageReader: no checkpoint path "
                             "(give one, or a checkpoint_id)")
        raw = _torch_meta.read_object(
            self.path, ".metadata",
            s3=_s3_struct(_args.s3_options(dict(self.s3))))
        if raw is None or not _torch_meta.is_pickle(raw):
            return self._parsed_metadata()
        where = self.path.rstrip("/") + "/.metadata"
        md = _torch_meta.load_metadata(raw, where, _md.Metadata)
        _torch_meta.check_transforms(md, where)
        storage_meta = getattr(_md, "StorageMeta", None)  # torch >= 2.4
        if storage_meta is not None:
            if getattr(md, "storage_meta", None) is None:
                md.storage_meta = storage_meta()
            md.storage_meta.load_id = self.load_id
        return md

    def _parsed_metadata(self) -> Any:
        """torch's ``Metadata`` (its state_dict_metadata), built from
        libckptfs's parse: checkpoints without a pickled .metadata."""
        ck = self._open()
        m = ck._acquire()
        try:
            lib = _lib.lib
            mi, ki, ci = _lib.MetaInfo(), _lib.KeyInfo(), _lib.ChunkInfo()
            pki, pci = C.byref(ki), C.byref(ci)
            key_at, chunk_at = lib.ckpt_meta_key, lib.ckpt_meta_chunk
            size, chunk_md = torch.Size, _md.ChunkStorageMetadata
            lib.ckpt_meta_info(m, C.byref(mi))
            sdm: Dict[str, Any] = {}
            keys: Dict[str, _Key] = {}
            for k in range(mi.nkeys):
                key_at(m, k, pki)
                fqn = ki.fqn.decode("utf-8", "surrogateescape")
                if ki.kind == _lib.KIND_BYTES:
                    sdm[fqn] = _md.BytesStorageMetadata()
                    keys[fqn] = (k, None, int(ki.nbytes), 1)
                    continue
                nd = ki.ndim
                chunks = []
                for c in range(ki.chunk_first, ki.chunk_first + ki.nchunks):
                    chunk_at(m, c, pci)
                    chunks.append(chunk_md(offsets=size(ci.offsets[:nd]),
                                           sizes=size(ci.sizes[:nd])))
                dt = _saved_dtype(ki.dtype, fqn)
                keys[fqn] = (k, dt, int(ki.nbytes),
                             ITEMSIZE[_lib.DTYPES[ki.dtype]])
                sdm[fqn] = _md.TensorStorageMetadata(
                    properties=_TensorProperties(dtype=dt),
                    size=size(ki.shape[:nd]), chunks=chunks)
        finally:
            ck._release()
        self._keys = keys
        return _md.Metadata(state_dict_metadata=sdm)

    def set_up_storage_reader(self, metadata: Any, is_coordinator: bool,
                              *args: Any, **kwargs: Any) -> None:
        """Keep metadata; open the checkpoint."""
        self.metadata = metadata
        self._open()

    init = set_up_storage_reader     # torch 1.13's name

    def prepare_local_plan(self, plan: Any) -> Any:
        """The plan as torch's planner made it, marked with this rank
        when cooperative reads may apply."""
        return _coop.local_mark(plan, self.cooperative)

    def prepare_global_plan(self, plans: List[Any]) -> List[Any]:
        """The plans as torch's planner made them, with each shared box
        given one owner rank when every rank's reader is cooperative."""
        if not self.cooperative:
            return plans
        return _coop.global_plan(plans, _BYTE_IO, self._sizes,
                                 self.staging_mb << 20)

    def _sizes(self, fqn: str) -> Tuple[int, int]:
        """(item size, or 0 for a bytes entry; the entry's bytes)."""
        _, saved, nbytes, isz = self._key(fqn)
        return (0 if saved is None else isz, nbytes)

    def _key(self, fqn: str) -> _Key:
        """(index, saved torch dtype or None for bytes, bytes, item size)
        of key fqn."""
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
            if ki.kind == _lib.KIND_TENSOR:
                dt = _saved_dtype(ki.dtype, fqn)
                k = (idx, dt, int(ki.nbytes),
                     ITEMSIZE[_lib.DTYPES[ki.dtype]])
            else:
                k = (idx, None, int(ki.nbytes), 1)
            self._keys[fqn] = k
        return k

    def read_data(self, plan: Any, planner: Any) -> Any:
        """Read plan's items: those this rank alone needs itself (see
        _read_items), then, when the plan carries cooperative parts, the
        shared boxes in rounds: the parts this rank owns from the store,
        sent to the ranks that need them, the others received."""
        coop = _coop.parts_of(plan)
        if coop is None or not _coop._dist_up():
            self._read_items(plan.items, planner)
        else:
            import torch.distributed as dist
            ex = _coop.Exchange(dist.get_rank(), coop[0], _BYTE_IO,
                                self._read_parts,
                                lambda f: self._key(f)[1], coop[1])
            shared = ex.boxes()
            mine: List[Any] = []
            boxes: Dict[Any, List[Tuple[Any, Any]]] = {}
            for it in plan.items:
                b = _coop.box_of(it, _BYTE_IO)
                if b not in shared:
                    mine.append(it)
                    continue
                t = None if it.type == _BYTE_IO else \
                    planner.resolve_tensor(it).detach()
                boxes.setdefault(b, []).append((it, t))
            try:
                self._read_items(mine, planner)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: B902 - raised by ex.run
                # the peers still get this rank's statuses: no hang
                ex._fail(e)
            ex.run(boxes, planner)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _read_parts(self, todo: List[Tuple[Any, Any, Any, Any]]) -> None:
        """Read boxes (fqn, offsets, lengths), rows [a, z) of dim 0 or
        whole (a None), or bytes entries (offsets None), each into its
        contiguous CPU tensor buf: (box, a, z, buf) each."""
        reqs = (_lib.BoxReq * max(len(todo), 1))()
        n = 0
        for (fqn, off, lengths, ), a, z, buf in todo:
            if not buf.numel():
                continue
            r = reqs[n]
            r.key = self._key(fqn)[0]
            if off is not None and len(off):
                o, ln = list(off), list(lengths)
                if a is not None:
                    o[0] += a
                    ln[0] = z - a
                r.off[:len(o)] = o
                r.size[:len(ln)] = ln
            r.dst = buf.data_ptr()
            n += 1
        ck = self._open()
        m = ck._acquire()
        try:
            read_batch(m, reqs, n, self.threads, boxes=True)
        finally:
            ck._release()

    def _read_items(self, items: List[Any], planner: Any) -> None:
        """Read every item of items, each tensor item as one box of its
        saved tensor, in libckptfs batches (cancellable with Ctrl-C):
        straight into its destination when that is a contiguous CPU
        tensor of the saved dtype, else into staging buffers copied into
        it after their batch; a batch ends before its staging would pass
        staging_mb.  Bytes items reach the planner as io.BytesIO objects
        read in place."""
        budget = self.staging_mb << 20
        # The staging buffer is no larger than what the plan's tensor
        # items could stage (aligned), whatever the budget: staging_mb of
        # a TB for a small plan must not ask the allocator for a TB.
        most = 0
        for it in items:
            if it.type != _BYTE_IO:
                n = self._key(it.storage_index.fqn)[3]
                for x in it.lengths:
                    n *= x
                most += n + 63
        batch = _Batch(self._open(), self.threads, min(budget, most))
        cpu = torch.device("cpu")
        for it in items:
            key, saved, nbytes, isz = self._key(it.storage_index.fqn)
            if it.type == _BYTE_IO:
                batch.room(nbytes, budget, planner)
                batch.add_bytes(it, key, nbytes)
                continue
            target = planner.resolve_tensor(it).detach()
            off = [o + so for o, so in zip(it.storage_index.offset,
                                           it.storage_offsets)]
            lengths = list(it.lengths)
            if (target.dtype == saved and target.device == cpu and
                    target.is_contiguous() and
                    list(target.shape) == lengths):
                batch.add(key, off, lengths,
                          target.data_ptr() if target.numel() else 0,
                          (_COMMIT, it, target))
                continue
            parts = _parts(lengths, isz, budget) \
                if list(target.shape) == lengths else [([0] * len(lengths),
                                                        lengths)]
            last = len(parts) - 1
            for i, (poff, plen) in enumerate(parts):
                n = isz
                for x in plen:
                    n *= x
                batch.room(n, budget, planner)
                stage = batch.stage(n, saved, plen)
                dest = target if len(parts) == 1 else target[tuple(
                    slice(a, a + b) for a, b in zip(poff, plen))]
                batch.add(key, [a + b for a, b in zip(off, poff)], plen,
                          stage.data_ptr() if n else 0,
                          (_STAGED, it, target, dest, stage, i == last),
                          staged=n)
        batch.run(planner)


#: The default staging budget of a StorageReader, in MiB (staging_mb).
STAGING_MB = 64

# (index, saved torch dtype or None for bytes, bytes, item size) of a key
_Key = Tuple[int, Any, int, int]
_COMMIT, _STAGED, _BYTES = 0, 1, 2
_DTYPES: Dict[int, Any] = {}


def _saved_dtype(code: int, fqn: str) -> Any:
    """The torch dtype of libckptfs dtype code (torch_dtype's fallback,
    with its warning naming fqn, where this torch lacks it)."""
    dt = _DTYPES.get(code)
    if dt is None:
        dt = torch_dtype(_lib.DTYPES[code], fqn)
        if getattr(torch, _lib.DTYPES[code], None) is dt:
            _DTYPES[code] = dt
    return dt


def _parts(lengths: List[int], isz: int, budget: int
           ) -> List[Tuple[List[int], List[int]]]:
    """A box of lengths (items of isz bytes) as boxes of at most budget
    bytes each (offsets inside it, lengths), in order: whole when it
    fits, else cut along the outermost dim whose inner slab fits (one
    index of each dim outside it at a time).  E.g. [1000, 300] float32
    and 1 MiB: 873 rows of 1,200 bytes per part, 2 parts."""
    inner, d = isz, len(lengths)
    while d > 0 and inner * lengths[d - 1] <= budget:
        d -= 1
        inner *= lengths[d]
    if d == 0:
        return [([0] * len(lengths), list(lengths))]
    cut = d - 1                 # the dim cut, in steps of rows indices
    rows = max(1, budget // inner)
    out: List[Tuple[List[int], List[int]]] = []
    for outer in itertools.product(*(range(n) for n in lengths[:cut])):
        for a in range(0, lengths[cut], rows):
            b = min(lengths[cut], a + rows)
            out.append((list(outer) + [a] + [0] * (len(lengths) - d),
                        [1] * cut + [b - a] + list(lengths[d:])))
    return out


class _Batch:
    """ReadItems read together: their box requests, what to do with each
    once read, and the staging bytes they hold: views of one buffer of at
    most the budget, reused by every batch (its pages are touched only as
    far as a batch reaches), and the bytes items' own buffers."""

    def __init__(self, ck: Checkpoint, threads: int, size: int) -> None:
        self.ck = ck
        self.size = size        # of buf, made at the first stage()
        self.threads = threads
        self.reqs: List[Tuple[int, List[int], List[int], int]] = []
        self.post: List[Tuple[Any, ...]] = []
        self.staged = 0         # bytes toward the budget
        self.used = 0           # of buf
        self.buf: Any = None

    def stage(self, n: int, dtype: Any, shape: List[int]) -> Any:
        """A staging tensor of shape and dtype (n bytes, at most the
        budget) from the buffer, or of its own when the buffer's rest
        cannot hold it (room() ran the batch first unless staging n more
        bytes fit the budget: only alignment leaves it short)."""
        at = (self.used + 63) & ~63
        if self.buf is None:
            self.buf = torch.empty(self.size, dtype=torch.uint8)
        if at + n > self.buf.numel():
            return torch.empty(shape, dtype=dtype)
        self.used = at + n
        return self.buf[at:at + n].view(dtype).view(shape)

    def add(self, key: int, off: List[int], size: List[int], dst: int,
            post: Tuple[Any, ...], staged: int = 0) -> None:
        """One box of key (read when dst is not 0: an empty box has no
        bytes), and what follows its read."""
        if dst:
            self.reqs.append((key, off, size, dst))
        self.post.append(post)
        self.staged += staged

    def add_bytes(self, it: Any, key: int, nbytes: int) -> None:
        """Bytes item it: read into a fresh io.BytesIO's own buffer."""
        bio = io.BytesIO()
        view = None
        dst = 0
        if nbytes:
            bio.seek(nbytes - 1)
            bio.write(b"\0")       # sizes its buffer, the only write
            bio.seek(0)
            view = bio.getbuffer()  # pins the buffer while it is read
            c = C.c_char.from_buffer(view)
            dst = C.addressof(c)
            del c
        self.add(key, [], [], dst, (_BYTES, it, bio, view), staged=nbytes)

    def room(self, n: int, budget: int, planner: Any) -> None:
        """Run the batch first when staging n more bytes would pass
        budget (a batch holds at least one item)."""
        if self.staged and self.staged + n > budget:
            self.run(planner)

    def run(self, planner: Any) -> None:
        """Read the batch's boxes, then copy, commit or hand each item to
        the planner, in order; start over empty."""
        reqs = (_lib.BoxReq * max(len(self.reqs), 1))()
        for r, (key, off, size, dst) in zip(reqs, self.reqs):
            r.key = key
            n = len(off)
            if n:
                r.off[:n] = off
                r.size[:n] = size
            r.dst = dst
        m = self.ck._acquire()
        try:
            read_batch(m, reqs, len(self.reqs), self.threads, boxes=True)
        finally:
            self.ck._release()
        post, self.post, self.reqs = self.post, [], []
        self.staged = self.used = 0
        for p in post:
            if p[0] == _COMMIT:
                planner.commit_tensor(p[1], p[2])
            elif p[0] == _STAGED:
                _, it, target, dest, stage, last = p
                dest.copy_(stage)
                if last:
                    planner.commit_tensor(it, target)
            else:
                _, it, bio, view = p
                if view is not None:
                    view.release()
                planner.load_bytes(it, bio)
