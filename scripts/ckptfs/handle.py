# SPDX-License-Identifier: MIT
"""An open checkpoint: :func:`open` gives a :class:`Checkpoint` whose
parsed metadata, data-file descriptors and decoded-record cache are kept
between loads and released at once by :meth:`Checkpoint.close` (or the
``with`` block's end)."""
from __future__ import annotations

import ctypes as C
import errno
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from . import _args, _lib
from ._args import IndexCacheArg, PathArg
from .errors import CheckpointError, from_code, from_lib

__all__ = ["Checkpoint", "CheckpointInfo", "KeyInfo", "PlanEntry", "PlanRun",
           "open"]

_ERRLEN = 4096


@dataclass(frozen=True)
class KeyInfo:
    """One key of a checkpoint.

    Attributes:
        name: the key (FQN), e.g. ``"optim.state.layer1.weight.exp_avg"``.
        kind: ``"tensor"`` or ``"bytes"`` (a blob such as pickled
            param_groups).
        dtype: the saved dtype name (``"float32"``, ``"bfloat16"``, ...),
            None for bytes.
        shape: the global shape (``()`` for a 0-d tensor or bytes).
        nbytes: bytes of the global tensor, or of the blob.
        nchunks: saved chunks (shards) it is stored in.
    """

    name: str
    kind: str
    dtype: Optional[str]
    shape: Tuple[int, ...]
    nbytes: int
    nchunks: int


@dataclass(frozen=True)
class CheckpointInfo:
    """What :meth:`Checkpoint.info` tells about a checkpoint.

    Attributes:
        path: the checkpoint as opened.
        format: its format, as ``ckptfs info`` names it (``"torch-dcp"``,
            ``"tensorplay-dcp"``, ``"safetensors"``, ...).
        origin: where its metadata came from (``"native"``, ``"torch"``,
            ``"torch-index"``, ``"torch-rank-local"``, ``"safetensors"``,
            ``"safetensors-dcp-sharded"``).
        keys: every key by name, in metadata order.
        nbytes: bytes of every key together.
        nchunks: saved chunks of every key together.
        nfiles: data files.
    """

    path: str
    format: str
    origin: str
    keys: Dict[str, KeyInfo] = field(repr=False)
    nbytes: int
    nchunks: int
    nfiles: int


@dataclass(frozen=True)
class PlanRun:
    """One run of a read plan: ``length`` bytes of data file ``file`` at
    ``offset`` (of its decoded bytes when ``decoded``: a zstd record)."""

    file: str
    offset: int
    length: int
    decoded: bool


@dataclass(frozen=True)
class PlanEntry:
    """What one rank reads for one key: its slice (``offsets`` and
    ``shape`` in the global tensor) and the runs of data-file bytes that
    fill it, in order."""

    rank: int
    key: str
    path: str
    shape: Tuple[int, ...]
    offsets: Tuple[int, ...]
    nbytes: int
    runs: List[PlanRun]


def _text(b: Optional[bytes]) -> str:
    return "" if b is None else b.decode("utf-8", "surrogateescape")


class Checkpoint:
    """An open checkpoint (see :func:`open`).  Thread-safe: loads on one
    handle may run in several threads at once; :meth:`close` waits for
    them."""

    def __init__(self, path: PathArg, *, cache_mb: Optional[int] = None,
                 threads: Optional[int] = None,
                 follow_symlinks: bool = False,
                 index_cache: IndexCacheArg = None,
                 direct_io: bool = False, **s3: Any) -> None:
        self._bpath = _args.path("path", path)
        s3given = _args.s3_options(s3)
        _args.s3_only(self._bpath, s3given)
        s3opts = _s3_struct(s3given)
        icache = _args.index_cache(index_cache)
        # never a SAS token that a blob URL carries (_bpath keeps it)
        self.path: str = os.fsdecode(_args.shown(self._bpath))
        cache = _args.cache_mb(cache_mb)
        self.threads: int = _args.threads(threads) or \
            _args.default_threads(self._bpath)
        self._lock = threading.Condition()
        self._busy = 0
        self._m: Optional[C.c_void_p] = None
        err = C.create_string_buffer(_ERRLEN)
        oo = _lib.OpenOpts()
        oo.follow_symlinks = bool(follow_symlinks)
        if cache is not None:
            oo.cache_bytes = cache << 20
        if s3opts is not None:
            oo.s3 = C.pointer(s3opts)
        oo.index_cache = icache
        lib = _lib.lib
        # Loads put the tensors they allocate on huge pages themselves
        # (_dtypes.Arena); a StorageReader fills the caller's tensors,
        # which are left alone: the library is not asked to advise any
        # destination.  RLIMIT_NOFILE is never raised: the library takes a
        # share of it.
        flags = _lib.FILES_FOLLOW_SYMLINKS if follow_symlinks else 0
        if direct_io:
            flags |= _lib.FILES_DIRECT_IO
        m = C.c_void_p()
        opened: List[bool] = []

        def call(cancel: Any) -> int:
            # Both, cancellable with Ctrl-C (S3 requests, the listing, the
            # index pass, the index cache's lock wait).
            rc = int(lib.ckpt_meta_open_opts(self._bpath, C.byref(oo),
                                             C.byref(m), err, len(err)))
            if rc:
                return rc
            opened.append(True)
            return int(lib.ckpt_files_open(m, flags, 0, err, len(err)))

        try:
            rc, e = _lib.run_cancellable(call)
        except BaseException:
            if opened:
                lib.ckpt_meta_free(m)
            raise
        if rc:
            if opened:
                lib.ckpt_meta_free(m)
            if rc == -errno.ECANCELED:
                raise KeyboardInterrupt
            raise from_lib(e if e is not None else _lib.last_error(),
                           opened=None if opened else self.path)
        warning = lib.ckpt_meta_warning(m)
        if warning:
            warnings.warn(f"ckptfs: {_text(warning)}", stacklevel=3)
        self._m = m
        self._keys: Optional[Dict[str, int]] = None

    def io_stats(self) -> Dict[str, int]:
        """What this handle's reads fetched so far, all threads: a dict
        of ``bytes_fetched`` (from the disk or the server, merge gaps and
        retries included), ``bytes_delivered``, ``requests`` (preads, or
        HTTP requests), ``retries`` and ``connects`` (new connections
        made: after a warm-up, none; docs/s3-trust.md) (totals), then the same split in
        two phases: ``open_gets``, ``open_heads``, ``open_lists``,
        ``open_bytes_fetched``, ``open_bytes_delivered`` (until the open
        returned) and ``read_gets`` ... ``read_bytes_delivered`` (since:
        a record located lazily by a read counts as read).  GETs, HEADs
        and LISTs are an object store's HTTP requests, retries included
        (0 for a local directory); ``side_bytes_peak``: the most bytes
        read batches held at once in buffers of their own for joined
        reads (a lazy open's zip structures, and data that could not be
        fetched straight into its destination)."""
        st = _lib.IoStats()
        m = self._acquire()
        try:
            _lib.lib.ckpt_meta_io_stats(m, C.byref(st))
        finally:
            self._release()
        return {name: int(getattr(st, name)) for name, _ in st._fields_}

    # -- lifetime ----------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._m is None

    def close(self) -> None:
        """Close the data files and free the parsed metadata and the
        decoded-record cache now, after any load still running on this
        handle.  Closing twice is harmless."""
        with self._lock:
            while self._busy:
                self._lock.wait()
            m, self._m = self._m, None
        if m is not None:
            _lib.lib.ckpt_meta_free(m)

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        m = getattr(self, "_m", None)
        if m is not None:
            _lib.lib.ckpt_meta_free(m)
            self._m = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<ckptfs.Checkpoint {self.path!r} {state}>"

    def _acquire(self) -> C.c_void_p:
        with self._lock:
            if self._m is None:
                raise CheckpointError(f"{self.path}: the checkpoint is "
                                      f"closed", path=self.path)
            self._busy += 1
            return self._m

    def _release(self) -> None:
        with self._lock:
            self._busy -= 1
            self._lock.notify_all()

    # -- facts -------------------------------------------------------
    def _key_info(self, m: C.c_void_p, k: int) -> KeyInfo:
        ki = _lib.KeyInfo()
        _lib.lib.ckpt_meta_key(m, k, C.byref(ki))
        tensor = ki.kind == _lib.KIND_TENSOR
        return KeyInfo(name=_text(ki.fqn),
                       kind="tensor" if tensor else "bytes",
                       dtype=_lib.DTYPES[ki.dtype] if tensor else None,
                       shape=tuple(ki.shape[:ki.ndim]) if tensor else (),
                       nbytes=int(ki.nbytes), nchunks=int(ki.nchunks))

    def info(self) -> CheckpointInfo:
        """The checkpoint's format and keys (dtype, shape, bytes of each)."""
        m = self._acquire()
        try:
            mi = _lib.MetaInfo()
            _lib.lib.ckpt_meta_info(m, C.byref(mi))
            keys = {}
            for k in range(mi.nkeys):
                ki = self._key_info(m, k)
                keys[ki.name] = ki
            origin = _lib.ORIGINS[mi.origin] \
                if 0 <= mi.origin < len(_lib.ORIGINS) else str(mi.origin)
            return CheckpointInfo(
                path=self.path, format=_text(mi.format), origin=origin,
                keys=keys, nbytes=sum(k.nbytes for k in keys.values()),
                nchunks=int(mi.nchunks), nfiles=int(mi.nfiles))
        finally:
            self._release()

    def key_index(self, name: str) -> int:
        """The index of key ``name`` (CheckpointError when there is none)."""
        keys = self._keys
        if keys is None:
            m = self._acquire()
            try:
                mi = _lib.MetaInfo()
                _lib.lib.ckpt_meta_info(m, C.byref(mi))
                ki = _lib.KeyInfo()
                keys = {}
                for k in range(mi.nkeys):
                    _lib.lib.ckpt_meta_key(m, k, C.byref(ki))
                    keys[_text(ki.fqn)] = k
            finally:
                self._release()
            self._keys = keys
        try:
            return keys[name]
        except KeyError:
            raise CheckpointError(f"{self.path}: no key '{name}' in the "
                                  f"checkpoint", path=self.path,
                                  key=name) from None

    # -- reading -----------------------------------------------------
    def load(self, world: Optional[int] = None, rank: Optional[int] = None,
             *,
             ranks: Optional[Iterable[int]] = None,
             prefix: Optional[str] = None,
             layout: Optional[PathArg] = None, dtype: Optional[str] = None,
             backend: str = "torch", threads: Optional[int] = None,
             trust_pickles: bool = False, huge_pages: bool = True) -> Any:
        """What :func:`ckptfs.load` returns, read from this open checkpoint
        (see there); may be called any number of times."""
        from .load import load_from
        return load_from(self, world, rank, ranks=ranks, prefix=prefix,
                         layout=layout, dtype=dtype, backend=backend,
                         threads=threads, trust_pickles=trust_pickles,
                         huge_pages=huge_pages)

    def plan(self, world: Optional[int] = None,
             rank: Optional[int] = None, *,
             ranks: Optional[Iterable[int]] = None,
             prefix: Optional[str] = None,
             layout: Optional[PathArg] = None) -> List[PlanEntry]:
        """The read plan of rank ``rank`` (or of each of ``ranks``) of a
        world of ``world``: for each key file of the view, its slice and
        the runs of data-file bytes that fill it, without reading any of
        the data.  A PyTorch checkpoint opened lazily has the records
        the plan needs located first (their zip headers read), and a
        record that cannot be located raises :class:`ReadError` naming
        its file and key, as a read of it would."""
        from .load import View
        out: List[PlanEntry] = []
        with View(self, world, rank, ranks=ranks, prefix=prefix,
                  layout=layout) as v:
            files: Dict[int, str] = {}

            def file_name(fi: int) -> str:
                if fi not in files:
                    p = C.c_char_p()
                    size = C.c_uint64()
                    _lib.lib.ckpt_meta_file(v.m, fi, C.byref(p),
                                            C.byref(size))
                    files[fi] = _text(p.value)
                return files[fi]

            for slot, node, e in v.entries():
                runs: List[PlanRun] = []

                def one(ctx: Any, run: Any) -> int:
                    r = C.cast(run, C.POINTER(_lib.ReadRun)).contents
                    runs.append(PlanRun(file_name(r.file), int(r.foff),
                                        int(r.len), bool(r.decoded)))
                    return 0
                cb = _lib.RunFn(one)
                size = e.size - e.header
                # A lazily opened PyTorch checkpoint: the plan locates
                # the records first, as a read would; one that cannot be
                # located is the read's error, not an empty plan.
                rc = _lib.lib.ckpt_view_plan(v.v, slot, node, 0, size, cb,
                                             None) \
                    if e.kind == _lib.KIND_TENSOR and size else 0
                if rc == -errno.EIO:    # the reason (file, key) just set
                    raise from_lib(_lib.last_error())
                if rc:
                    raise from_code(-rc, os.strerror(-rc),
                                    key=_text(e.fqn))
                out.append(PlanEntry(
                    rank=int(_lib.lib.ckpt_view_slot_rank(v.v, slot)),
                    key=_text(e.fqn), path="/".join(v.components(node)),
                    shape=tuple(e.shape[:e.ndim]),
                    offsets=tuple(e.offsets[:e.ndim]), nbytes=int(size),
                    runs=runs))
        return out


def _s3_struct(given: Dict[str, Union[bytes, int]]) -> Optional[Any]:
    """struct ckpt_s3_opts for the checked S3 keyword arguments, or None
    when none was given (the AWS environment and files)."""
    if not given:
        return None
    o = _lib.S3Opts()
    for name, v in given.items():
        field = {"s3_part_size": "part_bytes"}.get(
            name, name if name.startswith("az_") else name[3:])
        if name == "s3_retries" and v == 0:
            v = _lib.S3_NO_RETRIES
        setattr(o, field, v)
    return o


def open(path: PathArg, *, cache_mb: Optional[int] = None,
         threads: Optional[int] = None,
         follow_symlinks: bool = False, index_cache: IndexCacheArg = None,
         direct_io: bool = False, **s3: Any) -> Checkpoint:
    """Open checkpoint directory ``path`` (any format ckptfs mounts), or
    an object-store prefix ``s3://bucket/prefix``: parse and validate its
    metadata and check its data files.

    cache_mb: memory for decoded zstd records, and the most one may
        decode to (default 1024), as ``-o cache_mb``.
    threads: the read pool of every load on this handle (default: this
        process's share of the CPUs: CPUs / the job's processes on this
        node, ``LOCAL_WORLD_SIZE`` or its MPI and Slurm equivalents).
    follow_symlinks: data files may lead outside the directory.
    index_cache: where this node keeps the indexes of PyTorch DCP
        checkpoints that have no ``.ckptfs-index``, so that of the
        processes opening one at once, one indexes it and the others
        wait and reuse its index (a directory path; default: the
        environment's ``CKPTFS_INDEX_CACHE``, else
        ``$XDG_CACHE_HOME/ckptfs``, else ``~/.cache/ckptfs``; False, or
        ``CKPTFS_INDEX_CACHE`` set empty: no cache).  A stale or
        damaged cached index, or a directory not the user's own, is
        ignored with a warning, never an error.
    direct_io: a range of 256 KiB or more of which no page is in the
        page cache is read with O_DIRECT, in the device's largest
        requests (its ``max_sectors_kb``), through a buffer on huge
        pages; for a cold load from a device that counts requests (an
        IOPS-bound disk or volume).  Those bytes are not cached: other
        processes reading the same bytes read the device again.
    s3_endpoint, s3_region, s3_profile, s3_credentials_file,
    s3_config_file (str), s3_parallel (GETs in flight), s3_part_size,
    s3_merge_gap (bytes), s3_retries (0: none), s3_timeout_ms (to the
    first byte), s3_connect_timeout_ms, s3_low_speed_limit (bytes/s),
    s3_low_speed_time (s), s3_open_deadline_ms, s3_read_deadline_ms,
    s3_list_max_keys (docs/s3-trust.md), s3_addressing_style ("auto",
    "virtual" or "path"; docs/s3.md): for an
        ``s3://`` checkpoint, the mount's ``-o`` keys of the same names;
        None or absent: ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
        ``AWS_PROFILE``, ``~/.aws`` files..., then the defaults (16
        GETs, 8 MiB parts, 256 KiB gap, 5 retries, 10 s to the first byte; see docs/s3-trust.md).  Credentials
        come from the chain the AWS SDKs walk (environment, web identity,
        the AWS files' profile, container credentials, EC2 instance
        metadata), never from arguments; ``s3_no_sign_request=True``
        sends unsigned requests (public buckets), and finding no
        credentials without it is an error.

    Use it as a context manager (``with ckptfs.open(p) as c:``) or call
    ``close()``: that releases the file descriptors and caches at once.
    Raises CheckpointError naming the file, key and problem for a bad
    checkpoint."""
    return Checkpoint(path, cache_mb=cache_mb, threads=threads,
                      follow_symlinks=follow_symlinks,
                      index_cache=index_cache, direct_io=direct_io, **s3)


PathOrCheckpoint = Union[PathArg, Checkpoint]
