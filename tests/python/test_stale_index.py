# SPDX-License-Identifier: MIT
"""Issue 26 item 1: a .distcp rewritten in place so that one record's
tensor bytes start 64 bytes later (tests/zip_shift.py), with its length,
the file's size and .metadata kept and its mtime restored by `touch -r`.
An index computed before (the node-local cache, a .ckptfs-index, --index
FILE) must then give the right values or a clear error, never other
bytes.  Expected tensors come from the generator's own seeded torch
tensors (gen_torch_ckpt.full_tensor), not from ckptfs."""
import errno
import json
import os
import shutil
import subprocess

import pytest

from conftest import CKPTFS, PY, ROOT, run_py
from test_index_cache import OPEN, open_once
import zip_shift

pytest.importorskip("torch")

MOVED = "is not where the index says"

# Load rank 0 of 1 without the cache and report the error it raises.
FAIL = r"""
import json, sys
import ckptfs
try:
    with ckptfs.open(sys.argv[1], index_cache=False) as c:
        c.load(1, 0)
    print(json.dumps({"error": None}))
except ckptfs.Error as e:
    print(json.dumps({"error": str(e), "type": type(e).__name__}))
"""


@pytest.fixture
def ckpt(torch_ckpts, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(os.path.join(torch_ckpts, "per_rank"), dst)
    return str(dst)


def shift_in_place(ckpt, tmp_path):
    """The issue's rewrite of __0_0.distcp: same inode, size, .metadata,
    and mtime (touch -r a copy taken before)."""
    path = os.path.join(ckpt, "__0_0.distcp")
    ref = str(tmp_path / "mtime-ref")
    shutil.copy2(path, ref)
    before = os.stat(path)
    zip_shift.shift_record(path)
    subprocess.run(["touch", "-r", ref, path], check=True)
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == \
        (before.st_ino, before.st_size, before.st_mtime_ns)
    return path


def test_default_cache_reindexes_a_record_moved_in_place(ckpt, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    base = {k: v for k, v in os.environ.items() if k != "CKPTFS_INDEX_CACHE"}
    base["PYTHONPATH"] = os.path.join(ROOT, "scripts")

    def load():
        p = subprocess.run([PY, "-c", OPEN, ckpt, "-", "-", ROOT],
                           env={**base, **env}, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout.splitlines()[-1])
        assert r["checked"] >= 8 and r["bad"] == [], r
        return r

    assert load()["origin"] == "torch"
    assert load()["origin"] == "torch-index-cache"
    shift_in_place(ckpt, tmp_path)
    r = load()     # values checked against the generator's tensors
    assert r["origin"] == "torch", r
    assert any("stale" in w and "__0_0.distcp" in w
               for w in r["warnings"]), r
    assert load()["origin"] == "torch-index-cache"


def test_explicit_cache_dir_and_cat(ckpt, tmp_path):
    cache = str(tmp_path / "cache")
    open_once(ckpt, cache)
    shift_in_place(ckpt, tmp_path)
    assert open_once(ckpt, cache)["origin"] == "torch"


def test_ckptfs_index_file_refuses_a_moved_record(ckpt, tmp_path):
    subprocess.run([CKPTFS, "index", ckpt], check=True,
                   capture_output=True)
    open_once(ckpt, "off")          # the index is good before
    shift_in_place(ckpt, tmp_path)
    r = json.loads(run_py(FAIL, ckpt).stdout.splitlines()[-1])
    assert r["error"] and MOVED in r["error"], r
    assert "__0_0.distcp" in r["error"] and r["type"] == "ReadError", r
    # ckptfs cat: the key moved fails, naming the file and the key
    p = subprocess.run([CKPTFS, "ls", ckpt], capture_output=True,
                       text=True, check=True)
    keys = [ln.split("\t")[0] for ln in p.stdout.splitlines()[1:]]
    failed = []
    for k in keys:
        p = subprocess.run([CKPTFS, "cat", ckpt, k, "--world", "1",
                            "--rank", "0"], capture_output=True)
        if p.returncode:
            assert MOVED.encode() in p.stderr, p.stderr
            failed.append(k)
    assert len(failed) == 1, failed


def test_mount_with_index_file_gives_eio(ckpt, tmp_path, mount):
    idx = str(tmp_path / "ckpt.idx")
    subprocess.run([CKPTFS, "index", ckpt, "-o", idx], check=True,
                   capture_output=True)
    shift_in_place(ckpt, tmp_path)
    m = mount(ckpt, tmp_path / "mnt", "--index", idx)
    eio = []
    for d, _, files in os.walk(m.mnt):
        for f in files:
            try:
                with open(os.path.join(d, f), "rb") as fh:
                    fh.read()
            except OSError as e:
                assert e.errno == errno.EIO, e
                eio.append(f)
    assert len(eio) >= 1, eio
    m.close()
    assert MOVED in open(m.mnt + ".log").read()
