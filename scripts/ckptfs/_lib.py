# SPDX-License-Identifier: MIT
"""libckptfs through ctypes: the structs of ``core/ckptfs.h`` mirrored,
the library found and checked against them at load, and the one way this
package calls a long-running read (:func:`run_cancellable`).

The library is, in this order: the file ``CKPTFS_LIB`` names; the copy
shipped inside this package (``libckptfs.so.0`` beside this module: ``pip
install`` builds it, ``make install`` links the installed one there);
``libckptfs.so.0`` as the dynamic linker finds it.  Whichever it is, its
ABI version and the size and field offsets of every struct mirrored here
must match, or importing ckptfs raises :class:`ImportError` naming both
versions: a mismatched library would otherwise corrupt memory silently.
"""
from __future__ import annotations

import ctypes as C
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

#: The ABI of core/ckptfs.h this module mirrors (CKPT_ABI_VERSION).
ABI_VERSION = 8
MAX_DIMS = 16
NONE = 0xFFFFFFFF
NO_OFFSET = 0xFFFFFFFFFFFFFFFF
ERROR_TEXT = 4096

DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn",
          "float8_e5m2", "int64", "int32", "int16", "int8", "uint8", "bool")
KIND_TENSOR, KIND_BYTES = 0, 1
FILES_FOLLOW_SYMLINKS, FILES_RAISE_NOFILE, FILES_HUGE_PAGES = 1, 2, 4
FILES_DIRECT_IO = 8
S3_NO_RETRIES = 0xFFFFFFFF     # CKPT_S3_NO_RETRIES
NODE_DIR, NODE_KEY, NODE_META = 0, 1, 2
ORIGINS = ("native", "torch", "torch-index", "torch-rank-local",
           "safetensors", "safetensors-dcp-sharded", "torch-index-cache")

U64N = C.c_uint64 * MAX_DIMS
ReportFn = C.CFUNCTYPE(None, C.c_void_p, C.c_char_p)
RunFn = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p)


class S3Opts(C.Structure):
    """struct ckpt_s3_opts."""
    _fields_ = [("endpoint", C.c_char_p), ("region", C.c_char_p),
                ("profile", C.c_char_p), ("access_key", C.c_char_p),
                ("secret_key", C.c_char_p), ("session_token", C.c_char_p),
                ("parallel", C.c_uint32), ("part_bytes", C.c_uint64),
                ("merge_gap", C.c_uint64), ("retries", C.c_uint32),
                ("timeout_ms", C.c_uint32),
                ("credentials_file", C.c_char_p),
                ("config_file", C.c_char_p),
                ("no_sign_request", C.c_bool),
                ("connect_timeout_ms", C.c_uint32),
                ("low_speed_limit", C.c_uint32),
                ("low_speed_time", C.c_uint32),
                ("open_deadline_ms", C.c_uint32),
                ("read_deadline_ms", C.c_uint32),
                ("list_max_keys", C.c_uint32),
                ("ca_bundle", C.c_char_p),
                ("addressing_style", C.c_char_p),
                ("az_endpoint", C.c_char_p), ("az_anonymous", C.c_bool)]


class IoStats(C.Structure):
    """struct ckpt_io_stats."""
    _fields_ = [("bytes_fetched", C.c_uint64),
                ("bytes_delivered", C.c_uint64),
                ("requests", C.c_uint64), ("retries", C.c_uint64),
                ("connects", C.c_uint64),
                ("open_gets", C.c_uint64), ("open_heads", C.c_uint64),
                ("open_lists", C.c_uint64),
                ("open_bytes_fetched", C.c_uint64),
                ("open_bytes_delivered", C.c_uint64),
                ("read_gets", C.c_uint64), ("read_heads", C.c_uint64),
                ("read_lists", C.c_uint64),
                ("read_bytes_fetched", C.c_uint64),
                ("read_bytes_delivered", C.c_uint64),
                ("side_bytes_peak", C.c_uint64)]


class OpenOpts(C.Structure):
    """struct ckpt_open_opts."""
    _fields_ = [("index", C.c_char_p), ("follow_symlinks", C.c_bool),
                ("cache_bytes", C.c_uint64), ("s3", C.POINTER(S3Opts)),
                ("index_cache", C.c_char_p)]


class Error(C.Structure):
    """struct ckpt_error."""
    _fields_ = [("code", C.c_int), ("offset", C.c_uint64),
                ("path", C.c_char * ERROR_TEXT),
                ("key", C.c_char * ERROR_TEXT),
                ("message", C.c_char * ERROR_TEXT)]


class MetaInfo(C.Structure):
    """struct ckpt_meta_info."""
    _fields_ = [("dir", C.c_char_p), ("meta_path", C.c_char_p),
                ("format", C.c_char_p), ("version", C.c_uint64),
                ("origin", C.c_int), ("nkeys", C.c_uint32),
                ("nchunks", C.c_uint32), ("nfiles", C.c_uint32),
                ("mtime_sec", C.c_int64), ("mtime_nsec", C.c_long)]


class KeyInfo(C.Structure):
    """struct ckpt_key_info."""
    _fields_ = [("fqn", C.c_char_p), ("kind", C.c_int),
                ("dtype", C.c_int), ("ndim", C.c_uint),
                ("shape", U64N), ("numel", C.c_uint64),
                ("nbytes", C.c_uint64), ("chunk_first", C.c_uint32),
                ("nchunks", C.c_uint32)]


class ChunkInfo(C.Structure):
    """struct ckpt_chunk_info."""
    _fields_ = [("key", C.c_uint32), ("ndim", C.c_uint),
                ("offsets", U64N), ("sizes", U64N),
                ("has_record", C.c_bool), ("file", C.c_uint32),
                ("path", C.c_char_p), ("foff", C.c_uint64),
                ("len", C.c_uint64), ("strided", C.c_bool),
                ("checksum", C.c_char_p), ("stored_checksum", C.c_uint64),
                ("transforms", C.c_char_p), ("decoded_len", C.c_uint64)]


class ViewOpts(C.Structure):
    """struct ckpt_view_opts."""
    _fields_ = [("world", C.c_uint32), ("rank", C.c_uint32),
                ("ranks", C.POINTER(C.c_uint32)), ("nranks", C.c_uint32),
                ("prefix", C.c_char_p), ("layout", C.c_void_p),
                ("dtype", C.c_int), ("verify", C.c_bool),
                ("npy", C.c_bool), ("meta_dir", C.c_bool),
                ("source", C.c_char_p), ("layout_path", C.c_char_p),
                ("report", ReportFn), ("report_ctx", C.c_void_p)]


class ViewInfo(C.Structure):
    """struct ckpt_view_info."""
    _fields_ = [("world", C.c_uint32), ("nslots", C.c_uint32),
                ("multi", C.c_bool), ("nnodes", C.c_uint32),
                ("nfiles", C.c_uint32), ("total_bytes", C.c_uint64),
                ("npy", C.c_bool), ("dtype", C.c_int)]


class NodeInfo(C.Structure):
    """struct ckpt_node_info."""
    _fields_ = [("type", C.c_int), ("parent", C.c_uint32),
                ("name", C.c_char_p), ("name_len", C.c_uint32),
                ("key", C.c_uint32), ("nchildren", C.c_uint32),
                ("nsubdirs", C.c_uint32)]


class EntryInfo(C.Structure):
    """struct ckpt_entry_info."""
    _fields_ = [("key", C.c_uint32), ("fqn", C.c_char_p),
                ("kind", C.c_int), ("dtype", C.c_int),
                ("saved_dtype", C.c_int), ("ndim", C.c_uint),
                ("shape", U64N), ("global_shape", U64N),
                ("offsets", U64N), ("size", C.c_uint64),
                ("header", C.c_uint64), ("nchunks", C.c_uint32)]


class ReadRun(C.Structure):
    """struct ckpt_read_run."""
    _fields_ = [("chunk", C.c_uint32), ("file", C.c_uint32),
                ("foff", C.c_uint64), ("len", C.c_uint64),
                ("decoded", C.c_bool)]


class ReadReq(C.Structure):
    """struct ckpt_read_req."""
    _fields_ = [("slot", C.c_uint32), ("node", C.c_uint32),
                ("off", C.c_uint64), ("len", C.c_uint64),
                ("dst", C.c_void_p)]


class BoxReq(C.Structure):
    """struct ckpt_box_req."""
    _fields_ = [("key", C.c_uint32), ("off", U64N), ("size", U64N),
                ("dst", C.c_void_p)]


class BatchOpts(C.Structure):
    """struct ckpt_batch_opts."""
    _fields_ = [("threads", C.c_uint), ("cancel", C.POINTER(C.c_int))]


#: Every struct mirrored here, by its C name: checked at load.
STRUCTS: Dict[str, Type[C.Structure]] = {
    "ckpt_s3_opts": S3Opts, "ckpt_open_opts": OpenOpts,
    "ckpt_io_stats": IoStats,
    "ckpt_error": Error, "ckpt_meta_info": MetaInfo,
    "ckpt_key_info": KeyInfo, "ckpt_chunk_info": ChunkInfo,
    "ckpt_view_opts": ViewOpts, "ckpt_view_info": ViewInfo,
    "ckpt_node_info": NodeInfo, "ckpt_entry_info": EntryInfo,
    "ckpt_read_run": ReadRun, "ckpt_read_req": ReadReq,
    "ckpt_box_req": BoxReq, "ckpt_batch_opts": BatchOpts,
}

_P = C.POINTER
_vp, _cp, _sz, _int, _u32 = C.c_void_p, C.c_char_p, C.c_size_t, C.c_int, \
    C.c_uint32
#: name: (restype, argtypes) of every function this package calls.
SIGNATURES: Dict[str, Tuple[Any, List[Any]]] = {
    "ckpt_version": (_cp, []),
    "ckpt_meta_open_opts": (_int, [_cp, _P(OpenOpts), _P(_vp), _cp, _sz]),
    "ckpt_meta_free": (None, [_vp]),
    "ckpt_object_read": (_int, [_cp, _cp, _P(OpenOpts), _P(_vp),
                                _P(_sz), _cp, _sz]),
    "ckpt_object_free": (None, [_vp]),
    "ckpt_meta_cancel": (None, [_vp]),
    "ckpt_thread_cancel_set": (_vp, [_vp]),
    "ckpt_meta_io_stats": (None, [_vp, _P(IoStats)]),
    "ckpt_files_open": (_int, [_vp, C.c_uint, _u32, _cp, _sz]),
    "ckpt_meta_info": (None, [_vp, _P(MetaInfo)]),
    "ckpt_meta_warning": (_cp, [_vp]),
    "ckpt_meta_key": (_int, [_vp, _u32, _P(KeyInfo)]),
    "ckpt_meta_chunk": (_int, [_vp, _u32, _P(ChunkInfo)]),
    "ckpt_meta_file": (_int, [_vp, _u32, _P(_cp), _P(C.c_uint64)]),
    "ckpt_meta_find_key": (_int, [_vp, _cp, _P(_u32)]),
    "ckpt_layout_load": (_int, [_cp, _P(_vp), _cp, _sz]),
    "ckpt_layout_bind": (_int, [_vp, _vp, _cp, _sz]),
    "ckpt_layout_free": (None, [_vp]),
    "ckpt_view_new": (_int, [_vp, _P(ViewOpts), _P(_vp), _cp, _sz]),
    "ckpt_view_free": (None, [_vp]),
    "ckpt_view_info": (None, [_vp, _P(ViewInfo)]),
    "ckpt_view_slot_rank": (_u32, [_vp, _u32]),
    "ckpt_view_node": (_int, [_vp, _u32, _P(NodeInfo)]),
    "ckpt_view_entry": (_int, [_vp, _u32, _u32, _P(EntryInfo)]),
    "ckpt_view_plan": (_int, [_vp, _u32, _u32, C.c_uint64, C.c_uint64,
                              RunFn, _vp]),
    "ckpt_view_read_batch_opts": (_int, [_vp, _P(ReadReq), _sz,
                                         _P(BatchOpts), _cp, _sz]),
    "ckpt_meta_read_boxes_opts": (_int, [_vp, _P(BoxReq), _sz,
                                         _P(BatchOpts), _cp, _sz]),
    "ckpt_last_error_get": (None, [_P(Error)]),
}


class Lib:
    """The loaded library: its ctypes functions as attributes (``ckpt_*``),
    where it was found, and its version."""

    def __init__(self, cdll: C.CDLL, path: str) -> None:
        self.cdll = cdll
        self.path = path
        for name, (res, args) in SIGNATURES.items():
            fn = getattr(cdll, name)
            fn.restype = res
            fn.argtypes = args
            # An attribute of its own: a lookup through __getattr__ cost
            # more than some of the calls (read_metadata makes hundreds).
            setattr(self, name, fn)
        self.version: str = cdll.ckpt_version().decode()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cdll, name)


def candidates() -> List[str]:
    """Where the library is looked for, in order (see the module doc)."""
    env = os.environ.get("CKPTFS_LIB")
    if env:
        return [env]    # asked for explicitly: that one or none
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "libckptfs.so.0"), "libckptfs.so.0"]


def _mismatch(path: str, version: str, why: str) -> ImportError:
    return ImportError(
        f"ckptfs: the library {path} (libckptfs {version}) does not match "
        f"this Python package (built for libckptfs ABI {ABI_VERSION}): "
        f"{why}; install them together (pip install, or make install), or "
        f"point CKPTFS_LIB at a matching libckptfs.so")


def check_abi(cdll: C.CDLL, path: str) -> None:
    """Raise ImportError unless cdll's ABI is the one mirrored here: its
    ABI version, and every mirrored struct's size and field offsets."""
    try:
        abi_version = cdll.ckpt_abi_version
        ver = cdll.ckpt_version
    except AttributeError:
        raise _mismatch(path, "older than ABI 1", "it exports no "
                        "ckpt_abi_version") from None
    abi_version.restype = C.c_uint
    abi_version.argtypes = []
    ver.restype = C.c_char_p
    ver.argtypes = []
    version = (ver() or b"?").decode(errors="replace")
    got = abi_version()
    if got != ABI_VERSION:
        raise _mismatch(path, version, f"its ABI version is {got}, this "
                        f"package's is {ABI_VERSION}")
    size = cdll.ckpt_abi_struct_size
    size.restype = C.c_size_t
    size.argtypes = [C.c_char_p]
    offset = cdll.ckpt_abi_field_offset
    offset.restype = C.c_long
    offset.argtypes = [C.c_char_p, C.c_char_p]
    for name, cls in STRUCTS.items():
        want = C.sizeof(cls)
        have = size(name.encode())
        if have != want:
            raise _mismatch(path, version, f"struct {name} has {have} bytes "
                            f"there, {want} here (ABI {got} both)")
        for field in cls._fields_:
            fname = field[0]
            here = getattr(cls, fname).offset
            there = offset(name.encode(), fname.encode())
            if there != here:
                raise _mismatch(path, version, f"struct {name}: field "
                                f"{fname} at offset {there} there, {here} "
                                f"here")


def load_library() -> Lib:
    """Find, load and check libckptfs (see the module doc)."""
    errors = []
    for cand in candidates():
        if os.sep in cand and not os.path.exists(cand):
            errors.append(f"{cand}: no such file")
            continue
        try:
            cdll = C.CDLL(cand)
        except OSError as e:
            errors.append(f"{cand}: {e}")
            continue
        check_abi(cdll, cand)
        return Lib(cdll, cand)
    raise ImportError("ckptfs: libckptfs not found (reinstall the package, "
                      "make install, or set CKPTFS_LIB): " + "; ".join(errors))


lib = load_library()


def last_error() -> Error:
    """The calling thread's last libckptfs failure (ckpt_last_error_get)."""
    e = Error()
    lib.ckpt_last_error_get(C.byref(e))
    return e


def _join(t: threading.Thread) -> None:
    """Join t, which has done its work and is only returning."""
    while True:
        try:
            t.join()
            return
        except KeyboardInterrupt:
            pass


def run_cancellable(call: Callable[["C._Pointer[C.c_int]"], int]
                    ) -> Tuple[int, Optional[Error]]:
    """Run ``call(cancel)``, one or more libckptfs calls (an open, a batch
    read given the cancel flag), so that Ctrl-C is acted on at once: the
    flag is the calling thread's cancel flag (ckpt_thread_cancel_set)
    while it runs, which every wait of the library polls (HTTP transfers,
    retries, the index cache's lock, the index pass).  In the main
    thread, the call runs in a worker thread while the main thread waits;
    a KeyboardInterrupt (or any exception a signal handler raises) sets
    the flag, waits for the library to stop (well under a second: see
    docs/cancel.md) and is raised again.  Returns the call's result and,
    when it failed, its error as the library recorded it."""
    flag = C.c_int(0)
    ptr = C.pointer(flag)

    def flagged() -> int:
        old = lib.ckpt_thread_cancel_set(ptr)
        try:
            return call(ptr)
        finally:
            lib.ckpt_thread_cancel_set(old)

    if threading.current_thread() is not threading.main_thread():
        rc = flagged()
        return rc, (last_error() if rc else None)
    out: List[Any] = []
    done = threading.Event()

    def work() -> None:
        try:
            rc = flagged()
            out.append((rc, last_error() if rc else None))
        except BaseException as e:   # noqa: B902 - handed to the caller
            out.append(e)
        finally:
            done.set()

    # Waiting on an Event, not Thread.join(): on Python 3.11, a
    # KeyboardInterrupt inside join() can mark a running thread stopped
    # (threading's bpo-45274 handling), and the memory the engine is
    # filling must not be freed before it has stopped.
    t = threading.Thread(target=work, name="ckptfs-read", daemon=True)
    t.start()
    try:
        while not done.wait(0.25):
            pass
    except BaseException:
        flag.value = 1
        while not done.is_set():
            try:
                done.wait()
            except KeyboardInterrupt:
                pass    # stopping already
        _join(t)
        raise
    _join(t)
    res = out[0]
    if isinstance(res, BaseException):
        raise res
    rc, err = res
    return int(rc), err
