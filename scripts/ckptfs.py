# SPDX-License-Identifier: MIT
"""Load a mounted ckptfs view into the nested state dict that
``optimizer.load_state_dict`` (or FSDP's optimizer-state helpers) expects.

    import ckptfs
    sd = ckptfs.load_view("/mnt/view")                    # torch tensors
    sd = ckptfs.load_view("/mnt/view", prefix="optim")    # {"optim": {...}} only
    arr = ckptfs.load_view("/mnt/view", backend="numpy")  # numpy arrays

Tensors are memory-mapped from the view's files, never copied: torch
tensors with ``torch.from_file(path, shared=False, ...)`` (private, so
writes stay in the process), numpy arrays with ``numpy.memmap(mode="r")``.
Their dtype and shape come from the files' ``user.ckptfs.*`` extended
attributes.  Directory names become dict keys, and names that are
integers written in decimal become int keys (``planner_data`` stored
them as ints: optimizer ``state`` dicts keyed by parameter index).

Neither torch nor numpy is imported until the chosen backend needs it.
"""
import os
import warnings

__all__ = ["load_view"]

_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
             "float8_e4m3fn": 1, "float8_e5m2": 1, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
_NUMPY = {"float64": "<f8", "float32": "<f4", "float16": "<f2",
          "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1",
          "uint8": "u1", "bool": "?",
          # numpy has no bfloat16 or float8: the same-size unsigned type.
          "bfloat16": "<u2", "float8_e4m3fn": "u1", "float8_e5m2": "u1"}


def _mount_of(path):
    """The ckptfs mount point holding path, or None."""
    real = os.path.realpath(path)
    best = None
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                f = line.split()
                sep = f.index("-")
                point = f[4].encode().decode("unicode_escape")
                fstype = f[sep + 1]
                if fstype != "fuse.ckptfs":
                    continue
                if real == point or real.startswith(point.rstrip("/") + "/"):
                    if best is None or len(point) > len(best):
                        best = point
    except OSError:
        return None
    return best


def _xattr(path, name):
    try:
        return os.getxattr(path, "user.ckptfs." + name).decode()
    except OSError as e:
        raise ValueError(f"{path}: missing extended attribute "
                         f"user.ckptfs.{name} ({e.strerror}); is this a "
                         f"ckptfs view?") from None


def _shape(text):
    return tuple(int(x) for x in text.split(",")) if text else ()


def _key(name):
    try:
        i = int(name)
    except ValueError:
        return name
    return i if str(i) == name else name


def _torch_dtype(torch, name, path):
    dt = getattr(torch, name, None)
    if isinstance(dt, torch.dtype):
        return dt
    # e.g. float8 on a torch older than 2.1
    fallback = {1: torch.uint8, 2: torch.int16}[_ITEMSIZE[name]]
    warnings.warn(f"{path}: this torch has no {name}; loaded as {fallback} "
                  f"holding the raw {name} bits", stacklevel=4)
    return fallback


def _load_tensor(path, backend):
    dtype = _xattr(path, "dtype")
    shape = _shape(_xattr(path, "shape"))
    if dtype not in _ITEMSIZE:
        raise ValueError(f"{path}: unknown dtype {dtype!r}")
    numel = 1
    for d in shape:
        numel *= d
    size = os.path.getsize(path)
    if path.endswith(".npy"):                 # a --format npy mount
        import numpy as np
        arr = np.load(path, mmap_mode="r")
        if arr.shape != shape or arr.dtype.itemsize != _ITEMSIZE[dtype]:
            raise ValueError(f"{path}: .npy header says {arr.dtype}{list(arr.shape)}, "
                             f"the xattrs {dtype}{list(shape)}")
        if backend == "numpy":
            return arr
        import torch
        if arr.dtype == np.uint16:      # bfloat16 bits: torch has no uint16
            arr = arr.view(np.int16)
        with warnings.catch_warnings():  # read-only mapping: no copy
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(arr if arr.size else
                                 np.empty(shape, dtype=arr.dtype))
        return t.view(_torch_dtype(torch, dtype, path))
    if size != numel * _ITEMSIZE[dtype]:
        raise ValueError(f"{path}: {size} bytes, but dtype {dtype} x shape "
                         f"{list(shape)} needs {numel * _ITEMSIZE[dtype]}")
    if backend == "numpy":
        import numpy as np
        if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            warnings.warn(f"{path}: numpy has no {dtype}; loaded as "
                          f"{_NUMPY[dtype]} holding the raw {dtype} bits",
                          stacklevel=3)
        if numel == 0:
            return np.empty(shape, dtype=_NUMPY[dtype])
        return np.memmap(path, dtype=_NUMPY[dtype], mode="r",
                         shape=(numel,)).reshape(shape)
    import torch
    tdt = _torch_dtype(torch, dtype, path)
    if numel == 0:
        return torch.empty(shape, dtype=tdt)
    return torch.from_file(path, shared=False, size=numel,
                           dtype=tdt).view(shape)


def _load_bytes(path, trust_pickles):
    with open(path, "rb") as fh:
        data = fh.read()
    if not trust_pickles:
        return data
    import io
    import torch
    return torch.load(io.BytesIO(data), weights_only=False)


def _load_file(path, backend="torch", trust_pickles=False):
    kind = _xattr(path, "kind")
    if kind == "tensor":
        return _load_tensor(path, backend)
    if kind == "bytes":
        return _load_bytes(path, trust_pickles)
    raise ValueError(f"{path}: unknown kind {kind!r}")


def _walk(path, backend, trust_pickles):
    out = {}
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.startswith(".ckptfs"):
            continue
        if e.is_dir(follow_symlinks=False):
            out[_key(e.name)] = _walk(e.path, backend, trust_pickles)
        else:
            name = e.name
            if name.endswith(".npy") and _xattr(e.path, "kind") == "tensor":
                name = name[:-4]
            out[_key(name)] = _load_file(e.path, backend, trust_pickles)
    return out


def load_view(path, prefix=None, backend="torch", trust_pickles=False):
    """The view at ``path`` (a ckptfs mount, or a directory in one such as
    ``rank3/`` of a ``--ranks`` mount) as a nested dict.

    prefix: keep only that top-level key, like the ``optimizer_key`` of
        ``load_sharded_optimizer_state_dict`` (the result is still
        ``{prefix: {...}}``).
    backend: "torch" (tensors) or "numpy" (arrays).  numpy has no bfloat16
        or float8: those come back as the same-size unsigned type, with a
        warning naming the true dtype.
    trust_pickles: bytes entries (pickled param_groups, say) are returned as
        raw ``bytes`` unless this is True, because unpickling runs code:
        only then are they ``torch.load``-ed (``weights_only=False``).

    Tensors are memory-mapped, never copied; 0-d tensors stay 0-d and
    empty views are empty tensors of the right shape.  Raises ValueError
    naming the file when ``path`` is not a ckptfs view, an attribute is
    missing, or a file's size disagrees with its dtype and shape.
    """
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'torch' or 'numpy', not {backend!r}")
    if not os.path.isdir(path) or _mount_of(path) is None:
        raise ValueError(f"{path}: not a ckptfs mount (no fuse.ckptfs "
                         f"file system there)")
    if prefix is None:
        return _walk(path, backend, trust_pickles)
    sub = os.path.join(path, str(prefix))
    if not os.path.isdir(sub):
        raise ValueError(f"{path}: the view has no {prefix!r} subtree "
                         f"(mounted with another --prefix?)")
    return {_key(str(prefix)): _walk(sub, backend, trust_pickles)}
