# SPDX-License-Identifier: MIT
"""Load a rank's resharded state into the nested state dict that
``optimizer.load_state_dict`` (or FSDP's optimizer-state helpers) expects,
from a ckptfs mount or straight from the checkpoint's data files.

    import ckptfs
    # From a mount: tensors memory-mapped from the view's files.
    sd = ckptfs.load_view("/mnt/view")                    # torch tensors
    sd = ckptfs.load_view("/mnt/view", prefix="optim")    # {"optim": {...}} only
    arr = ckptfs.load_view("/mnt/view", backend="numpy")  # numpy arrays

    # Without a mount: libckptfs reads only the needed bytes of the data
    # files, with a pool of threads, into freshly allocated tensors.
    sd = ckptfs.load("ckpt/", world=8, rank=3)
    sds = ckptfs.load("ckpt/", world=8, ranks=[0, 1, 2, 3])   # one dict per rank

    # torch.distributed.checkpoint, any world size and mesh:
    dcp.load(state_dict, storage_reader=ckptfs.StorageReader("ckpt/"))

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

__all__ = ["load_view", "load", "StorageReader"]

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


# ------------------------------------------------------------------ libckptfs
# The direct path: libckptfs through ctypes.  The structures below mirror
# core/ckptfs.h, which only uses plain C types for this purpose.

_lib = None
_INSTALLED_LIB = None       # set by `make install` to LIBDIR/libckptfs.so.0
_MAX_DIMS = 16
_DTYPES = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn",
           "float8_e5m2", "int64", "int32", "int16", "int8", "uint8", "bool"]
_KIND_BYTES = 1
_NODE_DIR, _NODE_KEY = 0, 1
_NONE = 0xFFFFFFFF


def _structs():
    import ctypes as C
    U64N = C.c_uint64 * _MAX_DIMS

    class OpenOpts(C.Structure):
        # s3: struct ckpt_s3_opts *, NULL (the AWS environment and files)
        _fields_ = [("index", C.c_char_p), ("follow_symlinks", C.c_bool),
                    ("cache_bytes", C.c_uint64), ("s3", C.c_void_p)]

    class ViewOpts(C.Structure):
        _fields_ = [("world", C.c_uint32), ("rank", C.c_uint32),
                    ("ranks", C.POINTER(C.c_uint32)), ("nranks", C.c_uint32),
                    ("prefix", C.c_char_p), ("layout", C.c_void_p),
                    ("dtype", C.c_int), ("verify", C.c_bool),
                    ("npy", C.c_bool), ("meta_dir", C.c_bool),
                    ("source", C.c_char_p), ("layout_path", C.c_char_p),
                    ("report", C.c_void_p)]

    class ViewInfo(C.Structure):
        _fields_ = [("world", C.c_uint32), ("nslots", C.c_uint32),
                    ("multi", C.c_bool), ("nnodes", C.c_uint32),
                    ("nfiles", C.c_uint32), ("total_bytes", C.c_uint64),
                    ("npy", C.c_bool), ("dtype", C.c_int)]

    class NodeInfo(C.Structure):
        _fields_ = [("type", C.c_int), ("parent", C.c_uint32),
                    ("name", C.c_char_p), ("name_len", C.c_uint32),
                    ("key", C.c_uint32), ("nchildren", C.c_uint32),
                    ("nsubdirs", C.c_uint32)]

    class EntryInfo(C.Structure):
        _fields_ = [("key", C.c_uint32), ("fqn", C.c_char_p),
                    ("kind", C.c_int), ("dtype", C.c_int),
                    ("saved_dtype", C.c_int), ("ndim", C.c_uint),
                    ("shape", U64N), ("global_shape", U64N),
                    ("offsets", U64N), ("size", C.c_uint64),
                    ("header", C.c_uint64), ("nchunks", C.c_uint32)]

    class KeyInfo(C.Structure):
        _fields_ = [("fqn", C.c_char_p), ("kind", C.c_int),
                    ("dtype", C.c_int), ("ndim", C.c_uint),
                    ("shape", U64N), ("numel", C.c_uint64),
                    ("nbytes", C.c_uint64), ("chunk_first", C.c_uint32),
                    ("nchunks", C.c_uint32)]

    class ChunkInfo(C.Structure):
        _fields_ = [("key", C.c_uint32), ("ndim", C.c_uint),
                    ("offsets", U64N), ("sizes", U64N),
                    ("has_record", C.c_bool), ("file", C.c_uint32),
                    ("path", C.c_char_p), ("foff", C.c_uint64),
                    ("len", C.c_uint64), ("strided", C.c_bool),
                    ("checksum", C.c_char_p),
                    ("stored_checksum", C.c_uint64),
                    ("transforms", C.c_char_p),
                    ("decoded_len", C.c_uint64)]

    class MetaInfo(C.Structure):
        _fields_ = [("dir", C.c_char_p), ("meta_path", C.c_char_p),
                    ("format", C.c_char_p), ("version", C.c_uint64),
                    ("origin", C.c_int), ("nkeys", C.c_uint32),
                    ("nchunks", C.c_uint32), ("nfiles", C.c_uint32),
                    ("mtime_sec", C.c_int64), ("mtime_nsec", C.c_long)]

    class ReadReq(C.Structure):
        _fields_ = [("slot", C.c_uint32), ("node", C.c_uint32),
                    ("off", C.c_uint64), ("len", C.c_uint64),
                    ("dst", C.c_void_p)]

    class BoxReq(C.Structure):
        _fields_ = [("key", C.c_uint32), ("off", U64N), ("size", U64N),
                    ("dst", C.c_void_p)]

    return dict(OpenOpts=OpenOpts, ViewOpts=ViewOpts, ViewInfo=ViewInfo, NodeInfo=NodeInfo,
                EntryInfo=EntryInfo, KeyInfo=KeyInfo, ChunkInfo=ChunkInfo,
                MetaInfo=MetaInfo, ReadReq=ReadReq, BoxReq=BoxReq)


def _library():
    """libckptfs: where CKPTFS_LIB points, next to this module, in the
    build tree beside it, or where the dynamic linker finds it."""
    global _lib
    if _lib is not None:
        return _lib
    import ctypes as C
    here = os.path.dirname(os.path.abspath(__file__))
    cands = []
    if os.environ.get("CKPTFS_LIB"):
        cands.append(os.environ["CKPTFS_LIB"])
    cands += [os.path.join(here, "libckptfs.so.0"),
              os.path.join(here, "libckptfs.so"),
              os.path.join(here, "..", "build", "libckptfs.so")]
    if _INSTALLED_LIB:
        cands.append(_INSTALLED_LIB)
    cands.append("libckptfs.so.0")
    errors = []
    for c in cands:
        if os.sep in c and not os.path.exists(c):
            continue
        try:
            lib = C.CDLL(c)
            break
        except OSError as e:
            errors.append(f"{c}: {e}")
    else:
        raise OSError("libckptfs not found (set CKPTFS_LIB, or make install): "
                      + "; ".join(errors or cands))
    S = _structs()
    P = C.POINTER
    vp, cp, sz = C.c_void_p, C.c_char_p, C.c_size_t
    sig = {
        "ckpt_version": (cp, []),
        "ckpt_meta_open_opts": (C.c_int, [cp, P(S["OpenOpts"]), P(vp), cp,
                                          sz]),
        "ckpt_meta_free": (None, [vp]),
        "ckpt_files_open": (C.c_int, [vp, C.c_uint, C.c_uint32, cp, sz]),
        "ckpt_meta_info": (None, [vp, P(S["MetaInfo"])]),
        "ckpt_meta_key": (C.c_int, [vp, C.c_uint32, P(S["KeyInfo"])]),
        "ckpt_meta_chunk": (C.c_int, [vp, C.c_uint32, P(S["ChunkInfo"])]),
        "ckpt_meta_find_key": (C.c_int, [vp, cp, P(C.c_uint32)]),
        "ckpt_layout_load": (C.c_int, [cp, P(vp), cp, sz]),
        "ckpt_layout_bind": (C.c_int, [vp, vp, cp, sz]),
        "ckpt_layout_free": (None, [vp]),
        "ckpt_view_new": (C.c_int, [vp, P(S["ViewOpts"]), P(vp), cp, sz]),
        "ckpt_view_free": (None, [vp]),
        "ckpt_view_info": (None, [vp, P(S["ViewInfo"])]),
        "ckpt_view_slot_rank": (C.c_uint32, [vp, C.c_uint32]),
        "ckpt_view_node": (C.c_int, [vp, C.c_uint32, P(S["NodeInfo"])]),
        "ckpt_view_entry": (C.c_int, [vp, C.c_uint32, C.c_uint32,
                                      P(S["EntryInfo"])]),
        "ckpt_view_read_batch": (C.c_int, [vp, P(S["ReadReq"]), sz,
                                           C.c_uint, cp, sz]),
        "ckpt_meta_read_boxes": (C.c_int, [vp, P(S["BoxReq"]), sz,
                                           C.c_uint, cp, sz]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    lib.S = S
    _lib = lib
    return lib


def _err(buf):
    return buf.value.decode(errors="replace")


class _Checkpoint:
    """An open libckptfs checkpoint (meta), data files open."""

    def __init__(self, path, cache_mb=None):
        import ctypes as C
        self.lib = lib = _library()
        self.path = os.fspath(path)
        self.err = C.create_string_buffer(2048)
        self.m = C.c_void_p()
        oo = lib.S["OpenOpts"]()
        if cache_mb is not None:
            if int(cache_mb) < 1:
                raise ValueError(f"cache_mb must be at least 1, got {cache_mb}")
            oo.cache_bytes = int(cache_mb) << 20
        if lib.ckpt_meta_open_opts(self.path.encode(), C.byref(oo),
                                   C.byref(self.m), self.err, len(self.err)):
            raise ValueError(_err(self.err))
        if lib.ckpt_files_open(self.m, 0, 0, self.err, len(self.err)):
            msg = _err(self.err)
            self.close()
            raise ValueError(msg)

    def close(self):
        if getattr(self, "m", None):
            self.lib.ckpt_meta_free(self.m)
            self.m = None

    def __del__(self):
        self.close()


def _torch_empty(torch, dtype, shape, where):
    return torch.empty(shape, dtype=_torch_dtype(torch, dtype, where))


def _alloc(backend, dtype, shape, where):
    """A fresh tensor/array and its data pointer."""
    if backend == "numpy":
        import numpy as np
        if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            warnings.warn(f"{where}: numpy has no {dtype}; loaded as "
                          f"{_NUMPY[dtype]} holding the raw {dtype} bits",
                          stacklevel=4)
        a = np.empty(shape, dtype=_NUMPY[dtype])
        return a, a.ctypes.data
    import torch
    t = _torch_empty(torch, dtype, shape, where)
    return t, t.data_ptr()


def load(ckpt, world=1, rank=0, *, ranks=None, prefix=None, layout=None,
         dtype=None, backend="torch", threads=None, trust_pickles=False,
         cache_mb=None):
    """The view rank ``rank`` of a world of ``world`` sees of checkpoint
    directory ``ckpt``, as the nested dict ``load_view`` gives for a mount
    made with the same options, but read straight from the data files by
    libckptfs (no FUSE): every tensor is freshly allocated and filled by a
    pool of ``threads`` threads (default: one per CPU), reading only the
    bytes it needs, with the GIL released.

    ranks: a list of ranks instead of ``rank``: returns a list of dicts,
        one per rank, read in one pass.
    prefix, layout, dtype: as ``--prefix``, ``--layout FILE`` and
        ``--dtype float32|bfloat16`` of ``ckptfs mount``.
    backend, trust_pickles: as for ``load_view``.
    cache_mb: as ``-o cache_mb``: memory for decoded zstd records, and the
        most one may decode to (default 1024).

    Raises ValueError naming the file, the key and the problem for a bad
    checkpoint or option (the mount's messages), OSError (EIO) when a data
    file cannot give the bytes (truncated since opening, say).
    """
    import ctypes as C
    import errno
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'torch' or 'numpy', not {backend!r}")
    if dtype not in (None, "float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, not {dtype!r}")
    world = int(world)
    rank_list = None if ranks is None else [int(r) for r in ranks]
    if world < 1:
        raise ValueError(f"world must be at least 1, got {world}")
    for r in (rank_list if rank_list is not None else [int(rank)]):
        if not 0 <= r < world:
            raise ValueError(f"rank {r} is out of range: need 0 <= rank < "
                             f"world ({world})")
    if rank_list is not None and (not rank_list or
                                  len(set(rank_list)) != len(rank_list)):
        raise ValueError(f"ranks must be distinct and not empty, got {ranks}")
    ck = _Checkpoint(ckpt, cache_mb)
    lib, S = ck.lib, ck.lib.S
    lay = C.c_void_p()
    v = C.c_void_p()
    try:
        o = S["ViewOpts"]()
        o.world = world
        o.rank = int(rank) if rank_list is None else 0
        if rank_list is not None:
            arr = (C.c_uint32 * len(rank_list))(*rank_list)
            o.ranks = C.cast(arr, C.POINTER(C.c_uint32))
            o.nranks = len(rank_list)
        o.prefix = None if prefix is None else str(prefix).encode()
        o.dtype = len(_DTYPES) if dtype is None else _DTYPES.index(dtype)
        if layout is not None:
            if lib.ckpt_layout_load(os.fspath(layout).encode(),
                                    C.byref(lay), ck.err, len(ck.err)) or \
               lib.ckpt_layout_bind(lay, ck.m, ck.err, len(ck.err)):
                raise ValueError(_err(ck.err))
            o.layout = lay
        if lib.ckpt_view_new(ck.m, C.byref(o), C.byref(v), ck.err,
                             len(ck.err)):
            raise ValueError(_err(ck.err))
        vi = S["ViewInfo"]()
        lib.ckpt_view_info(v, C.byref(vi))
        # The tree: every node's path components, once.
        ni = S["NodeInfo"]()
        names, parents, keyfile = [None] * vi.nnodes, [0] * vi.nnodes, []
        for i in range(1, vi.nnodes):
            lib.ckpt_view_node(v, i, C.byref(ni))
            names[i] = ni.name.decode("utf-8", "surrogateescape")
            parents[i] = ni.parent
            if ni.type == _NODE_KEY:
                keyfile.append(i)

        def comps(i):
            out = []
            while i:
                out.append(names[i])
                i = parents[i]
            return out[::-1]

        paths = {i: comps(i) for i in keyfile}
        outs, reqs, keep = [], [], []
        e = S["EntryInfo"]()
        for slot in range(vi.nslots):
            root = {}
            for i in keyfile:
                if lib.ckpt_view_entry(v, slot, i, C.byref(e)):
                    raise ValueError(f"{ckpt}: node {i}: no entry")
                where = f"{ckpt}: key '{e.fqn.decode()}'"
                if e.kind == _KIND_BYTES:
                    buf = bytearray(e.size)
                    obj = buf
                    ptr = (C.addressof((C.c_char * len(buf)).from_buffer(buf))
                           if len(buf) else None)
                else:
                    shape = tuple(e.shape[d] for d in range(e.ndim))
                    obj, ptr = _alloc(backend, _DTYPES[e.dtype], shape, where)
                if e.size:
                    reqs.append((slot, i, e.size, ptr))
                keep.append(obj)
                d = root
                cs = paths[i]
                for c in cs[:-1]:
                    d = d.setdefault(_key(c), {})
                d[_key(cs[-1])] = obj
            outs.append(root)
        arr = (S["ReadReq"] * max(len(reqs), 1))()
        for k, (slot, node, size, ptr) in enumerate(reqs):
            arr[k].slot, arr[k].node, arr[k].off = slot, node, 0
            arr[k].len, arr[k].dst = size, ptr
        # ctypes releases the GIL for the call.
        if lib.ckpt_view_read_batch(v, arr, len(reqs), int(threads or 0),
                                    ck.err, len(ck.err)):
            msg = _err(ck.err)
            if "lie past" in msg or "no key" in msg:
                raise ValueError(msg)
            raise OSError(errno.EIO, msg)
    finally:
        if v:
            lib.ckpt_view_free(v)
        if lay:
            lib.ckpt_layout_free(lay)
        ck.close()

    def finish(d):
        for k, x in d.items():
            if isinstance(x, dict):
                finish(x)
            elif isinstance(x, bytearray):
                d[k] = _unpickle(bytes(x)) if trust_pickles else bytes(x)
        return d

    outs = [finish(d) for d in outs]
    return outs if rank_list is not None else outs[0]


def _unpickle(data):
    import io
    import torch
    return torch.load(io.BytesIO(data), weights_only=False)


# ------------------------------------------------------------ StorageReader
def __getattr__(name):
    # Built on first use, so `import ckptfs` does not import torch.
    if name == "StorageReader":
        cls = _make_storage_reader()
        globals()["StorageReader"] = cls
        return cls
    raise AttributeError(f"module 'ckptfs' has no attribute {name!r}")


def _dcp():
    """torch's distributed-checkpoint API: torch.distributed.checkpoint
    (torch >= 2), else torch 1.13's torch.distributed._shard.checkpoint
    (importable on Python 3.11 with torch_dcp_compat's import hook)."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import metadata as md
        from torch.distributed.checkpoint.planner import LoadItemType
        return dcp, md, LoadItemType
    except ImportError:
        pass
    try:
        import torch_dcp_compat
    except ImportError:
        sys_path = os.path.dirname(os.path.abspath(__file__))
        import sys
        sys.path.insert(0, sys_path)
        import torch_dcp_compat
    torch_dcp_compat.install()
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.checkpoint import metadata as md
    from torch.distributed._shard.checkpoint.planner import LoadItemType
    return dcp, md, LoadItemType


def _make_storage_reader():
    import ctypes as C
    import errno
    import io
    import pickle
    import torch
    from torch.futures import Future
    dcp, md, LoadItemType = _dcp()
    try:
        TensorProperties = md.TensorProperties
    except AttributeError:
        from torch.distributed._shard.sharded_tensor.metadata import \
            TensorProperties

    class StorageReader(dcp.StorageReader):
        """A torch.distributed.checkpoint StorageReader over libckptfs:
        ``dcp.load(sd, storage_reader=ckptfs.StorageReader(path))`` (torch
        1.13: ``load_state_dict``) fills any state dict, of any world size
        and mesh, planned by torch's own planner, reading for each
        ReadItem only the bytes it needs, straight into the destination
        tensor when it is contiguous (torch's FileSystemReader torch.loads
        every overlapping saved chunk whole).  Works on every checkpoint
        ckptfs mounts.  threads: libckptfs's pool (default: CPUs).
        cache_mb: memory for decoded zstd records (default 1024)."""

        def __init__(self, path, threads=None, cache_mb=None):
            super().__init__()
            self.path = os.fspath(path)
            self.threads = int(threads or 0)
            self.cache_mb = cache_mb
            self._ck = None
            self._keys = {}

        # torch >= 2.2
        def reset(self, checkpoint_id=None):
            if checkpoint_id is not None:
                self.path = os.fspath(checkpoint_id)
            self._close()

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id):
            return os.path.isfile(os.path.join(os.fspath(checkpoint_id),
                                               ".metadata"))

        def _close(self):
            if self._ck is not None:
                self._ck.close()
            self._ck = None
            self._keys = {}

        def _open(self):
            if self._ck is None:
                self._ck = _Checkpoint(self.path, self.cache_mb)
            return self._ck

        def read_metadata(self):
            mpath = os.path.join(self.path, ".metadata")
            try:
                with open(mpath, "rb") as fh:
                    head = fh.read(1)
                    if head == b"\x80":     # torch's own pickled Metadata,
                        fh.seek(0)          # as FileSystemReader reads it
                        return pickle.load(fh)
            except FileNotFoundError:
                pass    # rank-local __R.metadata files: libckptfs merges them
            return self._native_metadata()

        def _native_metadata(self):
            ck = self._open()
            lib, S = ck.lib, ck.lib.S
            mi, ki, ci = S["MetaInfo"](), S["KeyInfo"](), S["ChunkInfo"]()
            lib.ckpt_meta_info(ck.m, C.byref(mi))
            sdm = {}
            for k in range(mi.nkeys):
                lib.ckpt_meta_key(ck.m, k, C.byref(ki))
                fqn = ki.fqn.decode()
                if ki.kind == _KIND_BYTES:
                    sdm[fqn] = md.BytesStorageMetadata()
                    continue
                chunks = []
                for c in range(ki.chunk_first, ki.chunk_first + ki.nchunks):
                    lib.ckpt_meta_chunk(ck.m, c, C.byref(ci))
                    chunks.append(md.ChunkStorageMetadata(
                        offsets=torch.Size(ci.offsets[:ci.ndim]),
                        sizes=torch.Size(ci.sizes[:ci.ndim])))
                props = TensorProperties(
                    dtype=_torch_dtype(torch, _DTYPES[ki.dtype], fqn))
                sdm[fqn] = md.TensorStorageMetadata(
                    properties=props, size=torch.Size(ki.shape[:ki.ndim]),
                    chunks=chunks)
            return md.Metadata(state_dict_metadata=sdm)

        def set_up_storage_reader(self, metadata, is_coordinator, *a, **kw):
            self.metadata = metadata
            self._open()

        init = set_up_storage_reader     # torch 1.13's name

        def prepare_local_plan(self, plan):
            return plan

        def prepare_global_plan(self, plans):
            return plans

        def _key(self, fqn):
            k = self._keys.get(fqn)
            if k is None:
                ck = self._open()
                idx = C.c_uint32()
                if ck.lib.ckpt_meta_find_key(ck.m, fqn.encode(),
                                             C.byref(idx)):
                    raise ValueError(f"{self.path}: no key '{fqn}' in the "
                                     f"checkpoint")
                ki = ck.lib.S["KeyInfo"]()
                ck.lib.ckpt_meta_key(ck.m, idx.value, C.byref(ki))
                k = self._keys[fqn] = (idx.value, ki.kind, ki.dtype,
                                       ki.nbytes)
            return k

        def read_data(self, plan, planner):
            ck = self._open()
            S = ck.lib.S
            items = plan.items
            reqs = (S["BoxReq"] * max(len(items), 1))()
            post = []
            n = 0
            for it in items:
                key, kind, dt, nbytes = self._key(it.storage_index.fqn)
                r = reqs[n]
                r.key = key
                if it.type == LoadItemType.BYTE_IO:
                    buf = bytearray(nbytes)
                    if nbytes:
                        r.dst = C.addressof(
                            (C.c_char * nbytes).from_buffer(buf))
                        n += 1
                    post.append((it, buf, None, None))
                    continue
                target = planner.resolve_tensor(it).detach()
                base = it.storage_index.offset
                for d, (o, so, ln) in enumerate(zip(base, it.storage_offsets,
                                                    it.lengths)):
                    r.off[d] = o + so
                    r.size[d] = ln
                saved = _torch_dtype(torch, _DTYPES[dt], it.storage_index.fqn)
                if (target.device.type == "cpu" and target.dtype == saved
                        and target.is_contiguous()
                        and tuple(target.shape) == tuple(it.lengths)):
                    dst = target
                else:
                    dst = torch.empty(tuple(it.lengths), dtype=saved)
                if dst.numel():
                    r.dst = dst.data_ptr()
                    n += 1
                post.append((it, None, target, dst))
            if n and ck.lib.ckpt_meta_read_boxes(ck.m, reqs, n, self.threads,
                                                 ck.err, len(ck.err)):
                msg = _err(ck.err)
                raise (ValueError(msg) if "outside the shape" in msg
                       else OSError(errno.EIO, msg))
            for it, buf, target, dst in post:
                if buf is not None:
                    planner.load_bytes(it, io.BytesIO(bytes(buf)))
                else:
                    if dst is not target:
                        target.copy_(dst)
                    planner.commit_tensor(it, target)
            fut = Future()
            fut.set_result(None)
            return fut

    return StorageReader
