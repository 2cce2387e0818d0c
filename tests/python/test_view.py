# SPDX-License-Identifier: MIT
"""load_view of a mount: the same dict as load, memory-mapped or read
(mmap=False: a failed read is a ReadError, not SIGBUS), mount points of
any name, and its errors."""
import os
import shutil

import numpy as np
import pytest

import ckptfs
from ckptfs.view import mount_of
from conftest import run_py


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            same(a[k], b[k])
        elif isinstance(a[k], bytes):
            assert a[k] == b[k]
        else:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
            assert np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_load_view_equals_load_both_modes(native_ckpt, tmp_path, mount,
                                          backend):
    m = mount(native_ckpt, tmp_path / "mnt", "--world", "3", "--rank", "2")
    want = ckptfs.load(native_ckpt, 3, 2, backend=backend)
    for mm in (True, False):
        got = ckptfs.load_view(m.mnt, backend=backend, mmap=mm)
        if backend == "torch":
            conv = {}

            def np_(d):
                return {k: np_(v) if isinstance(v, dict) else
                        (v if isinstance(v, bytes) else
                         v.view(__import__("torch").int16).numpy()
                         if str(v.dtype) == "torch.bfloat16" else
                         v.view(__import__("torch").uint8).numpy()
                         if "float8" in str(v.dtype) else v.numpy())
                        for k, v in d.items()}
            conv = np_(got), np_(want)
            same(*conv)
        else:
            same(got, want)


def test_npy_mount_both_modes(native_ckpt, tmp_path, mount):
    m = mount(native_ckpt, tmp_path / "mnt", "--world", "2", "--rank", "1",
              "--format", "npy")
    a = ckptfs.load_view(m.mnt, backend="numpy")
    b = ckptfs.load_view(m.mnt, backend="numpy", mmap=False)
    same(a, b)
    same(b, ckptfs.load(native_ckpt, 2, 1, backend="numpy"))


READ_ALL = """
import sys, ckptfs
def touch(d):
    for v in d.values():
        touch(v) if isinstance(v, dict) else bytes(memoryview(v).cast("B"))
try:
    touch(ckptfs.load_view(sys.argv[1], backend="numpy",
                           mmap=sys.argv[2] == "1"))
    print("read all")
except OSError as e:
    print("OSError", type(e).__name__, e.errno, e.path)
"""


def test_mmap_false_turns_eio_into_read_error(fresh_ckpt, tmp_path, mount):
    ck = str(tmp_path / "cut")
    shutil.copytree(fresh_ckpt, ck)
    m = mount(ck, tmp_path / "mnt", "--world", "1", "--rank", "0")
    for f in os.listdir(ck):
        if f.endswith(".distcp"):
            os.truncate(os.path.join(ck, f), 16)
    p = run_py(READ_ALL, m.mnt, "0", check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("OSError ReadError 5 " + m.mnt + "/"), p.stdout
    # The mapped mode: the process dies of SIGBUS on the first bad page.
    p = run_py(READ_ALL, m.mnt, "1", check=False)
    assert p.returncode == -7, (p.returncode, p.stdout, p.stderr[-500:])


def test_mount_points_of_any_name(native_ckpt, tmp_path, mount):
    odd = tmp_path / "mnt é 空\tx\\y"
    m = mount(native_ckpt, odd, "--world", "2", "--rank", "0")
    assert mount_of(m.mnt) == os.fsencode(m.mnt)
    assert mount_of(os.path.join(m.mnt, "optim")) == os.fsencode(m.mnt)
    assert ckptfs.load_view(m.mnt, backend="numpy")
    assert mount_of(str(tmp_path)) is None


def test_errors(native_ckpt, tmp_path, mount):
    with pytest.raises(ckptfs.CheckpointError, match="not a ckptfs mount"):
        ckptfs.load_view(str(tmp_path))
    m = mount(native_ckpt, tmp_path / "mnt", "--world", "2", "--rank", "0")
    with pytest.raises(ValueError, match="no 'nope' subtree"):
        ckptfs.load_view(m.mnt, prefix="nope")
    with pytest.raises(ValueError, match="backend must be"):
        ckptfs.load_view(m.mnt, backend="jax")
    got = ckptfs.load_view(m.mnt, prefix="optim", backend="numpy")
    assert list(got) == ["optim"]
