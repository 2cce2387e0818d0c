# SPDX-License-Identifier: MIT
"""Arguments (issue 19 item 8): integers through operator.index within
the C types' range, errors naming the argument, rank with ranks refused,
str/bytes/PathLike paths, NUL refused; and the C library itself refuses
world 0 and rank >= world."""
import ctypes
import os
import pathlib

import numpy as np
import pytest

import ckptfs
from ckptfs import _lib


@pytest.mark.parametrize("kw,exc,text", [
    (dict(world=2**32), ValueError, "world must be at most 4294967295, got '4294967296'"),
    (dict(world=2**32 + 1), ValueError, "world must be at most"),
    (dict(world=0), ValueError, "world must be at least 1, got 0"),
    (dict(world=2.9), TypeError, "world must be an integer, not float"),
    (dict(world="2"), TypeError, "world must be an integer, not str"),
    (dict(world=True), TypeError, "world must be an integer, not bool"),
    (dict(world=4, rank=4), ValueError, "rank 4 is out of range"),
    (dict(world=4, rank=-1), ValueError, "rank must be a whole number, got '-1'"),
    (dict(world=4, rank=1.0), TypeError, "rank must be an integer"),
    (dict(world=2, rank=1, ranks=[0]), ValueError, "give either rank or ranks, not both"),
    (dict(world=2, ranks=[]), ValueError, "ranks needs a value"),
    (dict(world=2, ranks=[0, 0]), ValueError, "rank 0 is listed twice"),
    (dict(world=2, ranks=[2]), ValueError, "rank 2 is out of range"),
    (dict(world=2, ranks="01"), TypeError, "ranks must be a list"),
    (dict(cache_mb=2**20 + 1), ValueError, "cache_mb must be between 1 and 1048576 (MiB), got 1048577"),
    (dict(cache_mb=0), ValueError, "cache_mb must be between"),
    (dict(cache_mb=1.5), TypeError, "cache_mb must be an integer"),
    (dict(threads=-1), ValueError, "threads must be a whole number"),
    (dict(threads="4"), TypeError, "threads must be an integer"),
    (dict(dtype="int8"), ValueError, "dtype must be float32 or bfloat16, got 'int8'"),
    (dict(backend="jax"), ValueError, "backend must be"),
    (dict(prefix=3), TypeError, "prefix must be a str"),
    (dict(prefix="a\0b"), ValueError, "prefix contains a NUL"),
])
def test_bad_arguments(native_ckpt, kw, exc, text):
    with pytest.raises(exc) as ei:
        ckptfs.load(native_ckpt, **kw)
    assert text in str(ei.value)
    if exc is ValueError:
        assert isinstance(ei.value, ckptfs.CheckpointError)


def test_integers_by_operator_index(native_ckpt):
    a = ckptfs.load(native_ckpt, np.int64(3), np.uint8(1), backend="numpy")
    b = ckptfs.load(native_ckpt, 3, 1, backend="numpy")
    assert a.keys() == b.keys()
    sds = ckptfs.load(native_ckpt, 3, ranks=range(3), backend="numpy")
    assert len(sds) == 3


def test_paths_str_bytes_pathlike_and_nul(native_ckpt):
    want = ckptfs.load(native_ckpt, 2, 1, backend="numpy")
    for p in (native_ckpt, os.fsencode(native_ckpt),
              pathlib.Path(native_ckpt)):
        got = ckptfs.load(p, 2, 1, backend="numpy")
        assert got.keys() == want.keys()
    with pytest.raises(ValueError, match="path contains a NUL"):
        ckptfs.load(native_ckpt + "\0/x")
    with pytest.raises(TypeError, match="path must be a str, bytes"):
        ckptfs.load(3)
    with pytest.raises(ValueError, match="layout contains a NUL"):
        ckptfs.load(native_ckpt, layout="a\0b")


def test_non_ascii_paths(tmp_path):
    from conftest import gen_native
    p = gen_native(tmp_path / "ckpt é 空", seed=3, keys=5)
    with ckptfs.open(p) as c:
        assert c.path == p
        assert c.info().keys
    bp = os.fsencode(str(tmp_path)) + b"/\xff-not-utf8"
    os.rename(p, bp)
    assert ckptfs.load(bp, backend="numpy")


def test_the_library_refuses_world_0_and_rank_ge_world(native_ckpt):
    """Without the Python checks: straight to ckpt_view_new."""
    with ckptfs.open(native_ckpt) as c:
        m = c._acquire()
        try:
            for world, rank, ranks, text in (
                    (0, 0, None, b"world must be at least 1"),
                    (4, 4, None, b"rank 4 is out of range"),
                    (2**32 - 1, 2**32 - 1, None, b"rank 4294967295 is out"),
                    (4, 0, [1, 5], b"rank 5 is out of range"),
                    (4, 0, [1, 1], b"rank 1 is given twice")):
                o = _lib.ViewOpts()
                o.world, o.rank = world, rank
                o.dtype = len(_lib.DTYPES)
                if ranks:
                    arr = (ctypes.c_uint32 * len(ranks))(*ranks)
                    o.ranks = ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint32))
                    o.nranks = len(ranks)
                v = ctypes.c_void_p()
                err = ctypes.create_string_buffer(512)
                rc = _lib.lib.ckpt_view_new(m, ctypes.byref(o),
                                            ctypes.byref(v), err, 512)
                assert rc == -22 and not v, (world, rank, rc)
                assert text in err.value, err.value
                e = _lib.last_error()
                assert e.code == 22 and e.message == err.value
        finally:
            c._release()
