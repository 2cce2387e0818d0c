# SPDX-License-Identifier: MIT
"""Loading a mounted view (``ckptfs mount``) as the nested state dict:
:func:`load_view`.  Each file's dtype and shape come from its
``user.ckptfs.*`` extended attributes."""
from __future__ import annotations

import ctypes as C
import os
import re
import warnings
from typing import Any, Dict, Optional

from . import _args
from ._args import PathArg
from ._dtypes import ITEMSIZE, numpy_dtype, torch_dtype, unpickle
from .errors import CheckpointError, ReadError
from .load import dict_key

__all__ = ["load_view"]

_OCTAL = re.compile(rb"\\([0-7]{3})")


def mount_of(path: PathArg) -> Optional[bytes]:
    """The ckptfs mount point holding path (bytes), or None.  Mount points
    in /proc/self/mountinfo escape space, tab, newline and backslash as
    octal (``\\040``); any other byte, UTF-8 or not, is as it is."""
    real = os.path.realpath(os.fsencode(os.fspath(path)))
    best: Optional[bytes] = None
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        f = line.split(b" ")
        try:
            sep = f.index(b"-")
        except ValueError:
            continue
        if len(f) <= sep + 1 or f[sep + 1] != b"fuse.ckptfs":
            continue
        point = _OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), f[4])
        if real == point or real.startswith(point.rstrip(b"/") + b"/"):
            if best is None or len(point) > len(best):
                best = point
    return best


def _xattr(path: str, name: str) -> str:
    try:
        return os.getxattr(path, "user.ckptfs." + name).decode()
    except OSError as e:
        raise CheckpointError(f"{path}: missing extended attribute "
                              f"user.ckptfs.{name} ({e.strerror}); is this "
                              f"a ckptfs view?", code=e.errno or 0,
                              path=path) from None


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",")) if text else ()


def _read_into(path: str, dst: Any, nbytes: int, offset: int = 0) -> None:
    """nbytes of path at offset into the memory at address dst, with
    read(): an error is a ReadError naming the file, never a SIGBUS."""
    if not nbytes:
        return
    mv = memoryview((C.c_char * nbytes).from_address(dst)).cast("B")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        done = 0
        while done < nbytes:
            try:
                n = os.preadv(fd, [mv[done:]], offset + done)
            except OSError as e:
                raise ReadError(f"{path}: offset {offset + done}: "
                                f"{e.strerror}", code=e.errno or 5,
                                path=path, offset=offset + done) from None
            if n == 0:
                raise ReadError(f"{path}: ends at {offset + done} bytes, "
                                f"{offset + nbytes} expected", path=path,
                                offset=offset + done)
            done += n
    finally:
        os.close(fd)


def _load_tensor(path: str, backend: str, mmap: bool) -> Any:
    dtype = _xattr(path, "dtype")
    shape = _shape(_xattr(path, "shape"))
    if dtype not in ITEMSIZE:
        raise CheckpointError(f"{path}: unknown dtype {dtype!r}", path=path)
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * ITEMSIZE[dtype]
    size = os.path.getsize(path)
    if path.endswith(".npy"):               # a --format npy mount
        return _load_npy(path, dtype, shape, nbytes, backend, mmap)
    if size != nbytes:
        raise CheckpointError(f"{path}: {size} bytes, but dtype {dtype} x "
                              f"shape {list(shape)} needs {nbytes}",
                              path=path)
    if backend == "numpy":
        import numpy as np
        npdt = numpy_dtype(dtype, path, 5)
        if not numel:
            return np.empty(shape, dtype=npdt)
        if mmap:
            return np.memmap(path, dtype=npdt, mode="r",
                             shape=(numel,)).reshape(shape)
        a = np.empty(shape, dtype=npdt)
        _read_into(path, a.ctypes.data, nbytes)
        return a
    import torch
    tdt = torch_dtype(dtype, path, 5)
    if not numel:
        return torch.empty(shape, dtype=tdt)
    if not mmap:
        t = torch.empty(shape, dtype=tdt)
        _read_into(path, t.data_ptr(), nbytes)
        return t
    return torch.from_file(path, shared=False, size=numel,
                           dtype=tdt).view(shape)


def _load_npy(path: str, dtype: str, shape: tuple[int, ...], nbytes: int,
              backend: str, mmap: bool) -> Any:
    """A file of a ``--format npy`` mount: mapped by numpy (or read)."""
    import numpy as np
    arr = np.load(path, mmap_mode="r")
    if arr.shape != shape or arr.dtype.itemsize != ITEMSIZE[dtype]:
        raise CheckpointError(f"{path}: .npy header says {arr.dtype}"
                              f"{list(arr.shape)}, the xattrs {dtype}"
                              f"{list(shape)}", path=path)
    if not mmap or not arr.size:
        a = np.empty(shape, dtype=arr.dtype)
        _read_into(path, a.ctypes.data, nbytes, getattr(arr, "offset", 0))
        arr = a
    if backend == "numpy":
        return arr
    import torch
    if arr.dtype == np.uint16:      # bfloat16 bits: torch has no uint16
        arr = arr.view(np.int16)
    with warnings.catch_warnings():     # read-only mapping: no copy
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(arr)
    return t.view(torch_dtype(dtype, path, 5))


def _load_file(path: str, backend: str, trust_pickles: bool,
               mmap: bool) -> Any:
    kind = _xattr(path, "kind")
    if kind == "tensor":
        return _load_tensor(path, backend, mmap)
    if kind == "bytes":
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as e:
            raise ReadError(f"{path}: {e.strerror}", code=e.errno or 5,
                            path=path) from None
        return unpickle(data) if trust_pickles else data
    raise CheckpointError(f"{path}: unknown kind {kind!r}", path=path)


def _walk(path: str, backend: str, trust_pickles: bool,
          mmap: bool) -> Dict[Any, Any]:
    out: Dict[Any, Any] = {}
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.startswith(".ckptfs"):
            continue
        if e.is_dir(follow_symlinks=False):
            out[dict_key(e.name)] = _walk(e.path, backend, trust_pickles,
                                          mmap)
        else:
            name = e.name
            if name.endswith(".npy") and _xattr(e.path, "kind") == "tensor":
                name = name[:-4]
            out[dict_key(name)] = _load_file(e.path, backend, trust_pickles,
                                             mmap)
    return out


def load_view(path: PathArg, prefix: Optional[str] = None,
              backend: str = "torch", trust_pickles: bool = False, *,
              mmap: bool = True) -> Dict[Any, Any]:
    """The view at ``path`` (a ckptfs mount, or a directory in one such as
    ``rank3/`` of a ``--ranks`` mount) as a nested dict of tensors.

    prefix: keep only that top-level key, like the ``optimizer_key`` of
        ``load_sharded_optimizer_state_dict`` (the result is still
        ``{prefix: {...}}``).
    backend: ``"torch"`` (tensors) or ``"numpy"`` (arrays).  numpy has no
        bfloat16 or float8: those come back as the same-size unsigned
        type, with a warning naming the true dtype.
    trust_pickles: bytes entries (pickled param_groups, say) are returned
        as raw ``bytes`` unless this is True, because unpickling runs
        code: only then are they ``torch.load``-ed.
    mmap: True (the default) memory-maps each file, never copying it (a
        private mapping: writes stay in the process).  A read that fails
        in the daemon (a data file truncated since mounting, a ``-o
        verify`` mismatch, a zstd record over the cache cap) then kills
        the process with SIGBUS when the tensor is touched.  False reads
        every file with ``read()`` into fresh memory, so such a failure
        is a ReadError (an OSError) naming the file; use it for
        checkpoints you do not trust, or whenever the memory is there.

    Raises CheckpointError naming the file when ``path`` is not a ckptfs
    view, an attribute is missing, or a file's size disagrees with its
    dtype and shape.
    """
    _args.choice("backend", backend, ("torch", "numpy"))
    p = os.fsdecode(_args.path("path", path))
    pre_b = _args.prefix(prefix)     # before the mount: as the CLI checks
    if not os.path.isdir(p) or mount_of(p) is None:
        raise CheckpointError(f"{p}: not a ckptfs mount (no fuse.ckptfs "
                              f"file system there)", path=p)
    if prefix is None:
        return _walk(p, backend, trust_pickles, mmap)
    pre = os.fsdecode(pre_b or b"")
    sub = os.path.join(p, pre)
    if not os.path.isdir(sub):
        raise CheckpointError(f"{p}: the view has no {pre!r} subtree "
                              f"(mounted with another --prefix?)", path=p)
    return {dict_key(pre): _walk(sub, backend, trust_pickles, mmap)}
