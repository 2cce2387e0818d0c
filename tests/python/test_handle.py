# SPDX-License-Identifier: MIT
"""ckptfs.open: info, several loads and plans on one open checkpoint, and
close() releasing descriptors and caches at once."""
import gc
import os

import numpy as np
import pytest

import ckptfs
import reference
from conftest import open_fds


def flat(d, pre=()):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, pre + (str(k),)))
        else:
            out["/".join(pre + (str(k),))] = v
    return out


def raw(v):
    return v if isinstance(v, bytes) else np.ascontiguousarray(v).tobytes()


def test_info_matches_the_metadata(native_ckpt):
    meta = reference.load(native_ckpt)
    with ckptfs.open(native_ckpt) as c:
        info = c.info()
    assert info.format == "tensorplay-dcp" and info.origin == "native"
    sdm = meta["state_dict_metadata"]
    assert list(info.keys) == list(sdm)
    for name, e in sdm.items():
        k = info.keys[name]
        assert isinstance(k, ckptfs.KeyInfo) and k.name == name
        if e["type"] == "tensor":
            assert (k.kind, k.dtype, k.shape) == ("tensor", e["dtype"],
                                                 tuple(e["size"]))
        else:
            assert k.kind == "bytes" and k.dtype is None
    assert info.nbytes == sum(k.nbytes for k in info.keys.values())
    assert info.nfiles > 0 and info.nchunks >= len(sdm)


def test_many_loads_on_one_handle_equal_the_reference(native_ckpt):
    with ckptfs.open(native_ckpt, cache_mb=64, threads=2) as c:
        assert c.threads == 2
        for w, r in ((1, 0), (3, 2), (5, 1), (3, 2)):
            got = flat(c.load(w, r, backend="numpy"))
            exp = reference.expected(native_ckpt, w, r)
            assert set(got) == set(exp)
            for path, want in exp.items():
                assert raw(got[path]) == want, (w, r, path)
        many = c.load(4, ranks=[3, 0], backend="numpy")
        assert [set(flat(d)) for d in many] == \
            [set(reference.expected(native_ckpt, 4, r)) for r in (3, 0)]


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def test_plan_covers_each_slice(native_ckpt):
    with ckptfs.open(native_ckpt) as c:
        plan = c.plan(4, 1)
        info = c.info()
        assert plan and all(isinstance(p, ckptfs.PlanEntry) for p in plan)
        for p in plan:
            assert p.rank == 1 and p.key in info.keys
            if info.keys[p.key].kind == "tensor":
                assert sum(r.length for r in p.runs) == p.nbytes
                assert all(isinstance(r, ckptfs.PlanRun) and
                           not os.path.isabs(r.file) for r in p.runs)
        # Every rank's plans together cover each tensor once (one-element
        # tensors are every rank's).
        tot = {}
        for r in range(4):
            for p in c.plan(4, r):
                tot[p.key] = tot.get(p.key, 0) + p.nbytes
        for name, k in info.keys.items():
            if k.kind == "tensor":
                one = k.nbytes // max(1, _numel(k.shape))
                whole = 4 if _numel(k.shape) == 1 else 1
                assert tot[name] == k.nbytes * whole, name
                assert one in (1, 2, 4, 8)


def test_close_releases_fds_at_once_and_is_final(native_ckpt):
    gc.collect()
    before = open_fds()
    c = ckptfs.open(native_ckpt)
    assert open_fds() > before, "data files are open while the handle is"
    c.load(2, 0, backend="numpy")
    assert not c.closed
    c.close()
    assert c.closed
    assert open_fds() == before     # no garbage collection needed
    c.close()                       # harmless
    with pytest.raises(ckptfs.CheckpointError, match="closed"):
        c.load(1, 0)
    with pytest.raises(ckptfs.CheckpointError, match="closed"):
        c.info()
    assert "closed" in repr(c)


def test_with_block_closes_even_on_error(native_ckpt):
    before = open_fds()
    with pytest.raises(ckptfs.CheckpointError):
        with ckptfs.open(native_ckpt) as c:
            c.load(2, 5)
    assert c.closed and open_fds() == before


def test_module_load_leaves_no_fds(native_ckpt):
    before = open_fds()
    ckptfs.load(native_ckpt, 3, 1, backend="numpy")
    assert open_fds() == before


def test_key_index(native_ckpt):
    with ckptfs.open(native_ckpt) as c:
        names = list(c.info().keys)
        assert c.key_index(names[-1]) == len(names) - 1
        with pytest.raises(ckptfs.CheckpointError) as ei:
            c.key_index("no.such.key")
        assert ei.value.key == "no.such.key"


def test_loads_in_other_threads_and_close_waits_for_them(native_ckpt):
    import threading
    want = flat(ckptfs.load(native_ckpt, 3, 1, backend="numpy"))
    got, errs = [], []
    with ckptfs.open(native_ckpt) as c:
        def work():
            try:
                got.append(flat(c.load(3, 1, backend="numpy")))
            except BaseException as e:      # noqa: B902
                errs.append(e)
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        c.close()       # waits for the loads that hold the checkpoint
        for t in ts:
            t.join()
    assert len(got) + len(errs) == 4
    for e in errs:      # a load that started after close: refused
        assert isinstance(e, ckptfs.CheckpointError) and "closed" in str(e)
    for g in got:
        assert {k: raw(v) for k, v in g.items()} == \
            {k: raw(v) for k, v in want.items()}
