# SPDX-License-Identifier: MIT
"""ckptfs.StorageReader with Debian's torch 1.13 (torch 2.14 in the sid
chroot: test_torch2.py): Metadata from libckptfs's parse, never a pickle;
validate_checkpoint_id for every layout; no sys.path or import-hook
changes; torch's load_state_dict with a planner= equal to
FileSystemReader; threads per process; close."""
import os
import pickle
import subprocess

import pytest

from conftest import PY, ROOT, gen_native, open_fds, run_py

torch = pytest.importorskip("torch")

# torch 1.13's torch.distributed._shard cannot be imported on Python 3.11
# without this test helper's import hook; ckptfs itself never installs one.
HOOK = "import torch_dcp_compat; torch_dcp_compat.install()\n"
COMPAT = os.path.join(ROOT, "scripts")


def reader_env():
    return {"PYTHONPATH": os.path.join(ROOT, "scripts") + os.pathsep +
            os.path.join(ROOT, "tests")}


@pytest.fixture(scope="module")
def ckptfs_torch():
    """ckptfs.torch, with the test helper's hook installed first."""
    import sys
    sys.path.insert(0, COMPAT)
    import torch_dcp_compat
    torch_dcp_compat.install()
    import ckptfs.torch
    return ckptfs.torch


def test_import_ckptfs_changes_no_path_and_no_import_hook():
    p = run_py("""
import sys
import ckptfs
assert "torch" not in sys.modules and "numpy" not in sys.modules
""")
    # torch 1.13's torch.distributed._shard adds a temporary directory to
    # sys.path, and six a meta_path finder: import them first, compare.
    p = run_py(HOOK + """
import sys
import torch.distributed._shard.checkpoint
path, hooks = list(sys.path), list(sys.meta_path)
import ckptfs
R = ckptfs.StorageReader
assert sys.path == path, (sys.path, path)
assert sys.meta_path == hooks, (sys.meta_path, hooks)
print("ok", R.__module__)
""")
    assert p.stdout.split() == ["ok", "ckptfs.torch"]


def test_without_the_hook_the_import_error_says_why():
    p = run_py("import ckptfs\nckptfs.StorageReader", check=False)
    assert p.returncode != 0
    assert "ImportError: ckptfs.StorageReader: torch" in p.stderr
    assert "cannot be imported on this Python" in p.stderr


def test_read_metadata_is_the_c_parse_never_a_pickle(ckptfs_torch,
                                                     torch_ckpts,
                                                     monkeypatch):
    import torch.distributed._shard.checkpoint as dcp
    for layout in ("per_item", "per_rank"):
        ck = os.path.join(torch_ckpts, layout)
        want = dcp.FileSystemReader(ck).read_metadata()

        def refuse(*a, **k):
            raise AssertionError("unpickled a checkpoint file")
        with monkeypatch.context() as mp:
            mp.setattr(pickle, "load", refuse)
            mp.setattr(pickle, "loads", refuse)
            mp.setattr(pickle, "Unpickler", refuse)
            mp.setattr(torch, "load", refuse)
            with ckptfs_torch.StorageReader(ck) as r:
                got = r.read_metadata()
        a, b = want.state_dict_metadata, got.state_dict_metadata
        assert list(a) == list(b)
        for k in a:
            assert type(a[k]) is type(b[k]), k
            if hasattr(a[k], "size"):
                assert a[k].size == b[k].size
                assert a[k].properties.dtype == b[k].properties.dtype
                ca = sorted((tuple(c.offsets), tuple(c.sizes))
                            for c in a[k].chunks)
                cb = sorted((tuple(c.offsets), tuple(c.sizes))
                            for c in b[k].chunks)
                assert ca == cb, k


def test_validate_checkpoint_id_accepts_every_layout(ckptfs_torch, tmp_path,
                                                    torch_ckpts, native_ckpt):
    R = ckptfs_torch.StorageReader
    st = tmp_path / "st"
    subprocess.check_call([PY, os.path.join(ROOT, "tests",
                                            "make_safetensors.py"), "ok",
                           str(st)], stdout=subprocess.DEVNULL)
    local = tmp_path / "local"
    local.mkdir()
    (local / "__0.metadata").write_bytes(b"")
    (local / "__0_0.distcp").write_bytes(b"")
    for ok in (native_ckpt, os.path.join(torch_ckpts, "per_item"),
               os.fsencode(os.path.join(torch_ckpts, "per_rank")), str(st),
               str(local), "s3://bucket/run1"):
        assert R.validate_checkpoint_id(ok), ok
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "x.bin").write_bytes(b"")
    for bad in (str(junk), str(tmp_path / "none"), native_ckpt +
                "/.metadata", 3, "a\0b", "s3://"):
        assert not R.validate_checkpoint_id(bad), bad


@pytest.mark.parametrize("layout", ["per_item", "per_rank"])
def test_load_state_dict_with_a_planner_equals_filesystem_reader(
        ckptfs_torch, torch_ckpts, layout):
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.checkpoint.default_planner import \
        DefaultLoadPlanner
    ck = os.path.join(torch_ckpts, layout)
    md = dcp.FileSystemReader(ck).read_metadata()

    def fresh():
        sd = {}
        for k, v in md.state_dict_metadata.items():
            if hasattr(v, "size"):
                sd[k] = torch.full(tuple(v.size), 7,
                                   dtype=v.properties.dtype)
            else:
                import io
                sd[k] = io.BytesIO()
        return sd
    want, got = fresh(), fresh()
    dcp.load_state_dict(want, dcp.FileSystemReader(ck), no_dist=True,
                        planner=DefaultLoadPlanner())
    before = open_fds()
    with ckptfs_torch.StorageReader(ck, threads=2) as r:
        dcp.load_state_dict(got, r, no_dist=True,
                            planner=DefaultLoadPlanner())
        assert open_fds() > before
    assert open_fds() == before
    n = 0
    for k in want:
        a, b = want[k], got[k]
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b), k
            n += 1
        else:
            assert a == b, k    # the objects torch.load-ed by the planner
    assert n >= 10


def test_a_native_checkpoint_through_load_state_dict(ckptfs_torch,
                                                     native_ckpt):
    import reference
    import numpy as np
    import torch.distributed._shard.checkpoint as dcp
    from ckptfs._dtypes import torch_dtype
    meta = reference.load(native_ckpt)
    exp = reference.expected(native_ckpt, 1, 0)
    sd, paths = {}, {}
    for fqn, e in meta["state_dict_metadata"].items():
        if e["type"] == "tensor":
            sd[fqn] = torch.zeros(e["size"], dtype=torch_dtype(e["dtype"],
                                                               fqn))
            paths[fqn] = "/".join(reference.view_path(fqn, meta))
    dcp.load_state_dict(sd, ckptfs_torch.StorageReader(native_ckpt),
                        no_dist=True)
    for fqn, t in sd.items():
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        assert np.asarray(t.numpy()).tobytes() == exp[paths[fqn]], fqn


def test_threads_are_a_per_process_share_of_the_cpus(ckptfs_torch):
    code = HOOK + """
import os, ckptfs
print(len(os.sched_getaffinity(0)), ckptfs.StorageReader("x").threads,
      ckptfs.StorageReader("x", threads=3).threads)
"""
    for local in ("1", "2", "64"):
        p = run_py(code, env={"LOCAL_WORLD_SIZE": local,
                              "PYTHONPATH": reader_env()["PYTHONPATH"] +
                              os.pathsep + COMPAT})
        cpus, dflt, three = map(int, p.stdout.split())
        assert dflt == max(1, cpus // int(local)) and three == 3


def test_reset_takes_the_checkpoint_id(ckptfs_torch, native_ckpt, tmp_path):
    r = ckptfs_torch.StorageReader()
    with pytest.raises(ValueError, match="no checkpoint path"):
        r.read_metadata()
    r.reset(native_ckpt)
    assert r.read_metadata().state_dict_metadata
    other = gen_native(tmp_path / "o", seed=2, keys=4)
    r.reset(other)
    assert len(r.read_metadata().state_dict_metadata) < 10
    r.close()
