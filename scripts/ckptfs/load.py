# SPDX-License-Identifier: MIT
"""Loading a rank's resharded state straight from the data files, without
FUSE: :func:`load` (one call) and :meth:`ckptfs.Checkpoint.load` (on an
open checkpoint).  libckptfs's pool of threads reads only the bytes each
tensor needs, with the GIL released, into freshly allocated tensors."""
from __future__ import annotations

import ctypes as C
import errno
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import _args, _lib
from ._args import IndexCacheArg, PathArg
from ._dtypes import Arena, alloc, unpickle
from .errors import CheckpointError, from_lib
from .handle import Checkpoint

__all__ = ["load"]


def dict_key(name: str) -> Any:
    """A directory name as a dict key: decimal integers become ints
    (planner_data stored optimizer ``state`` keys as ints)."""
    try:
        i = int(name)
    except ValueError:
        return name
    return i if str(i) == name else name


class View:
    """A libckptfs view of an open checkpoint for one or more ranks,
    freed on ``__exit__``."""

    def __init__(self, ck: Checkpoint, world: object, rank: object, *,
                 ranks: Optional[Any] = None, prefix: Optional[Any] = None,
                 layout: Optional[Any] = None,
                 dtype: Optional[str] = None) -> None:
        w, r, rank_list = _args.world_rank(world, rank, ranks)
        pre = _args.prefix(prefix)
        lay_path = None if layout is None else _args.path("layout", layout)
        self.ck = ck
        self.multi = rank_list is not None
        self.m: Optional[C.c_void_p] = ck._acquire()
        self.v = C.c_void_p()
        self.lay = C.c_void_p()
        lib = _lib.lib
        err = C.create_string_buffer(4096)
        try:
            o = _lib.ViewOpts()
            o.world = w
            o.rank = r
            if rank_list is not None:
                self._ranks = (C.c_uint32 * len(rank_list))(*rank_list)
                o.ranks = C.cast(self._ranks, C.POINTER(C.c_uint32))
                o.nranks = len(rank_list)
            o.prefix = pre
            o.dtype = len(_lib.DTYPES) if dtype is None else \
                _lib.DTYPES.index(dtype)
            if lay_path is not None:
                if lib.ckpt_layout_load(lay_path, C.byref(self.lay), err,
                                        len(err)) or \
                   lib.ckpt_layout_bind(self.lay, self.m, err, len(err)):
                    raise from_lib(_lib.last_error())
                o.layout = self.lay
            if lib.ckpt_view_new(self.m, C.byref(o), C.byref(self.v), err,
                                 len(err)):
                raise from_lib(_lib.last_error())
            self.info = _lib.ViewInfo()
            lib.ckpt_view_info(self.v, C.byref(self.info))
            ni = _lib.NodeInfo()
            n = self.info.nnodes
            self.names: List[str] = [""] * n
            self.parents = [0] * n
            self.keyfiles: List[int] = []
            for i in range(1, n):
                lib.ckpt_view_node(self.v, i, C.byref(ni))
                self.names[i] = (ni.name or b"").decode("utf-8",
                                                        "surrogateescape")
                self.parents[i] = ni.parent
                if ni.type == _lib.NODE_KEY:
                    self.keyfiles.append(i)
        except BaseException:
            self.close()
            raise

    def components(self, node: int) -> List[str]:
        """Node's path from the view's root, as components."""
        out = []
        while node:
            out.append(self.names[node])
            node = self.parents[node]
        return out[::-1]

    def entries(self) -> Iterator[Tuple[int, int, Any]]:
        """(slot, node, EntryInfo) of every key file of every slot."""
        e = _lib.EntryInfo()
        for slot in range(self.info.nslots):
            for node in self.keyfiles:
                if _lib.lib.ckpt_view_entry(self.v, slot, node, C.byref(e)):
                    raise CheckpointError(f"{self.ck.path}: view node "
                                          f"{node}: no entry")
                yield slot, node, e

    def close(self) -> None:
        """Free the view and the layout; let the checkpoint go."""
        if self.v:
            _lib.lib.ckpt_view_free(self.v)
            self.v = C.c_void_p()
        if self.lay:
            _lib.lib.ckpt_layout_free(self.lay)
            self.lay = C.c_void_p()
        if self.m is not None:
            self.m = None
            self.ck._release()

    def __enter__(self) -> "View":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_batch(m_or_v: C.c_void_p, reqs: Any, n: int, threads: int,
               boxes: bool) -> None:
    """Serve n requests (ReadReq or BoxReq) with libckptfs's engine,
    cancellable with Ctrl-C; raise the library's error."""
    if not n:
        return
    fn = _lib.lib.ckpt_meta_read_boxes_opts if boxes else \
        _lib.lib.ckpt_view_read_batch_opts
    bo = _lib.BatchOpts()
    bo.threads = threads

    def call(cancel: Any) -> int:
        bo.cancel = cancel
        return int(fn(m_or_v, reqs, n, C.byref(bo), None, 0))

    rc, err = _lib.run_cancellable(call)
    if rc == -errno.ECANCELED:
        raise KeyboardInterrupt
    if rc:
        raise from_lib(err) if err is not None else \
            OSError(-rc, os.strerror(-rc))


def load_from(ck: Checkpoint, world: object = None, rank: object = None, *,
              ranks: Optional[Any] = None, prefix: Optional[Any] = None,
              layout: Optional[Any] = None, dtype: Optional[str] = None,
              backend: str = "torch", threads: Optional[int] = None,
              trust_pickles: bool = False, huge_pages: bool = True) -> Any:
    """:meth:`Checkpoint.load`'s body."""
    _args.choice("backend", backend, ("torch", "numpy"))
    _args.choice("dtype", dtype, (None, "float32", "bfloat16"))
    nthreads = _args.threads(threads) or ck.threads
    with View(ck, world, rank, ranks=ranks, prefix=prefix, layout=layout,
              dtype=dtype) as v:
        paths = {i: v.components(i) for i in v.keyfiles}
        outs: List[Dict[Any, Any]] = []
        # (dict, name, slot, node, bytes, dtype, shape, fqn) of tensors
        tensors: List[Tuple[Dict[Any, Any], Any, int, int, int, str,
                            Tuple[int, ...], Optional[bytes]]] = []
        todo: List[Tuple[int, int, int, int]] = []
        blobs: List[Tuple[Dict[Any, Any], Any, bytearray]] = []
        root: Dict[Any, Any] = {}
        last_slot = -1
        dtypes = _lib.DTYPES
        for slot, node, e in v.entries():
            if slot != last_slot:
                root = {}
                outs.append(root)
                last_slot = slot
            d = root
            cs = paths[node]
            for comp in cs[:-1]:
                d = d.setdefault(dict_key(comp), {})
            name = dict_key(cs[-1])
            if e.kind == _lib.KIND_BYTES:
                buf = bytearray(e.size)
                ptr = C.addressof((C.c_char * len(buf)).from_buffer(buf)) \
                    if len(buf) else 0
                blobs.append((d, name, buf))
                d[name] = buf
                if e.size:
                    todo.append((slot, node, int(e.size), ptr))
            else:
                d[name] = None      # its place in the dict's order
                tensors.append((d, name, slot, node, int(e.size),
                                dtypes[e.dtype], tuple(e.shape[:e.ndim]),
                                e.fqn))
        arena = Arena([t[4] for t in tensors]) if huge_pages else None
        keep = [b for _, _, b in blobs]
        for d, name, slot, node, size, dt, shape, fqn in tensors:
            where = f"{ck.path}: key '{(fqn or b'').decode()}'"
            obj, ptr = alloc(backend, dt, shape, where, arena, size)
            if size:
                todo.append((slot, node, size, ptr))
            keep.append(obj)
            d[name] = obj
        reqs = (_lib.ReadReq * max(len(todo), 1))()
        for k, (slot, node, size, ptr) in enumerate(todo):
            r = reqs[k]
            r.slot, r.node, r.off, r.len, r.dst = slot, node, 0, size, ptr
        read_batch(v.v, reqs, len(todo), nthreads, boxes=False)
    for d, name, buf in blobs:
        d[name] = unpickle(bytes(buf)) if trust_pickles else bytes(buf)
    return outs if v.multi else outs[0]


def load(ckpt: PathArg, world: Optional[int] = None,
         rank: Optional[int] = None, *,
         ranks: Optional[Any] = None, prefix: Optional[str] = None,
         layout: Optional[PathArg] = None, dtype: Optional[str] = None,
         backend: str = "torch", threads: Optional[int] = None,
         trust_pickles: bool = False,
         cache_mb: Optional[int] = None, huge_pages: bool = True,
         index_cache: IndexCacheArg = None, direct_io: bool = False,
         **s3: Any) -> Any:
    """The view rank ``rank`` of a world of ``world`` sees of checkpoint
    directory ``ckpt``, as the nested dict :func:`ckptfs.load_view` gives
    for a mount made with the same options, read straight from the data
    files by libckptfs: every tensor freshly allocated, filled by a pool
    of ``threads`` threads (default: this process's share of the CPUs,
    CPUs / ``LOCAL_WORLD_SIZE`` or its MPI and Slurm equivalents)
    reading only the bytes it needs.  Opens
    and closes the checkpoint: to load several times, use
    :func:`ckptfs.open`.

    world, rank: integers, 1 <= world < 2**32, 0 <= rank < world; as
        ``ckptfs mount`` refuses --world without --rank (and --rank without
        --world), a world above 1 needs a rank (or ranks), and a rank needs
        a world.  Neither: the whole checkpoint (world 1, rank 0).
    ranks: a list of ranks instead of ``rank``: returns a list of dicts,
        one per rank, read in one pass.
    prefix, layout, dtype: as ``--prefix``, ``--layout FILE`` and
        ``--dtype float32|bfloat16`` of ``ckptfs mount``.
    backend: ``"torch"`` (tensors) or ``"numpy"`` (arrays; bfloat16 and
        float8 as same-size unsigned integers holding the bits, with a
        warning).
    trust_pickles: bytes entries come back as ``bytes`` unless True (then
        ``torch.load``-ed: runs pickled code).
    cache_mb: as ``-o cache_mb``: memory for decoded zstd records.
    index_cache: the node-local index cache directory, as for
        :func:`ckptfs.open` (default ``CKPTFS_INDEX_CACHE``, else
        ``$XDG_CACHE_HOME/ckptfs``, else ``~/.cache/ckptfs``; False: none).
    direct_io: cold ranges read with O_DIRECT, as for :func:`ckptfs.open`.
    s3_endpoint, s3_region, ... s3_timeout_ms: for ``ckpt`` =
        ``s3://bucket/prefix``, as for :func:`ckptfs.open`.
    huge_pages: the tensors live in a few anonymous mappings on
        transparent huge pages (2 MiB faults instead of 4 KiB: a first load
        spends most of its time faulting in fresh memory otherwise), each
        with a storage of exactly its own bytes, not resizable; a mapping
        (at most 64 MiB of tensors, or one larger tensor) is freed when
        all of its tensors are.  False: each tensor is a plain
        ``torch.empty`` (``numpy.empty``).

    Raises CheckpointError (a ValueError) naming the file, key and problem
    for a bad checkpoint or argument value, TypeError for an argument of
    the wrong type, ReadError (an OSError, errno EIO) naming the file,
    offset and key when a data file cannot give the bytes, and
    KeyboardInterrupt on Ctrl-C, acted on within a piece of a few MiB per
    thread; every byte and descriptor is freed either way.
    """
    # Checked before the checkpoint is opened: a bad argument is reported
    # as such, not as whatever opening finds first.
    _args.choice("backend", backend, ("torch", "numpy"))
    _args.choice("dtype", dtype, (None, "float32", "bfloat16"))
    if ranks is not None and not isinstance(ranks, (str, bytes)):
        ranks = list(ranks)
    _args.world_rank(world, rank, ranks)
    _args.prefix(prefix)
    _args.s3_only(_args.path("path", ckpt), _args.s3_options(s3))
    _args.index_cache(index_cache)
    with Checkpoint(ckpt, cache_mb=cache_mb, threads=threads,
                    index_cache=index_cache, direct_io=direct_io,
                    **s3) as ck:
        return load_from(ck, world, rank, ranks=ranks, prefix=prefix,
                         layout=layout, dtype=dtype, backend=backend,
                         threads=threads, trust_pickles=trust_pickles,
                         huge_pages=huge_pages)
