#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ckptfs.StorageReader with torch 2.x, inside the sid chroot (run by
test_torch2.py): get_state_dict/set_state_dict round trip through
dcp.save and dcp.load(storage_reader=..., planner=...), checkpoint_id
through reset(), rank-local metadata (use_collectives=False),
read_metadata equal to FileSystemReader's, and destinations that are
strided or of another dtype, staged within staging_mb; float8 records.

    torch2_reader.py TMPDIR
"""
import os
import pickle
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "scripts"))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.default_planner import \
    DefaultLoadPlanner  # noqa: E402
from torch.distributed.checkpoint.state_dict import (  # noqa: E402
    get_state_dict, set_state_dict)

import ckptfs  # noqa: E402


def model_and_optim(seed, width=16):
    """A small model of WIDTH inputs and its Adam state after one step."""
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(width, 2 * width),
                            torch.nn.ReLU(),
                            torch.nn.Linear(2 * width, width // 2))
    o = torch.optim.Adam(m.parameters(), lr=1e-3)
    m(torch.randn(4, width)).sum().backward()
    o.step()
    return m, o


def same_state(m1, o1, m2, o2):
    for a, b in zip(m1.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for k in s1["state"]:
        for n, v in s1["state"][k].items():
            assert torch.equal(v, s2["state"][k][n]), (k, n)


def main(tmp):
    checks = 0
    m, o = model_and_optim(1)
    msd, osd = get_state_dict(m, o)
    ck = os.path.join(tmp, "ckpt")
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ck)

    # get_state_dict -> dcp.load(ckptfs, planner=) -> set_state_dict
    for how in ("storage_reader", "checkpoint_id"):
        m2, o2 = model_and_optim(2)
        msd2, osd2 = get_state_dict(m2, o2)
        sd = {"model": msd2, "optim": osd2}
        if how == "storage_reader":
            with ckptfs.StorageReader(ck, threads=2) as r:
                dcp.load(sd, storage_reader=r, planner=DefaultLoadPlanner())
        else:
            dcp.load(sd, checkpoint_id=ck,
                     storage_reader=ckptfs.StorageReader())
        set_state_dict(m2, o2, model_state_dict=sd["model"],
                       optim_state_dict=sd["optim"])
        same_state(m, o, m2, o2)
        checks += 1

    # Metadata: torch's own, field by field (the load_id aside), through
    # ckptfs's restricted unpickler: never pickle.load/loads nor
    # torch.load (test_read_metadata.py runs torch's entry points).
    want = dcp.FileSystemReader(ck).read_metadata()

    def refuse(*a, **k):
        raise AssertionError("unpickled through pickle.load(s)/torch.load")
    saved = pickle.load, pickle.loads, torch.load
    pickle.load = pickle.loads = torch.load = refuse
    try:
        r = ckptfs.StorageReader(ck)
        got = r.read_metadata()
    finally:
        pickle.load, pickle.loads, torch.load = saved
    assert got.storage_meta.load_id == r.load_id != \
        want.storage_meta.load_id
    got.storage_meta.load_id = want.storage_meta.load_id
    assert got == want
    checks += 1

    # Rank-local metadata (no .metadata): accepted and loaded.
    local = os.path.join(tmp, "local")
    dcp.save({"model": msd, "optim": osd},
             storage_writer=dcp.FileSystemWriter(local), use_collectives=False)
    assert not os.path.exists(os.path.join(local, ".metadata"))
    assert ckptfs.StorageReader.validate_checkpoint_id(local)
    m3, o3 = model_and_optim(3)
    msd3, osd3 = get_state_dict(m3, o3)
    sd = {"model": msd3, "optim": osd3}
    dcp.load(sd, storage_reader=ckptfs.StorageReader(local))
    set_state_dict(m3, o3, model_state_dict=sd["model"],
                   optim_state_dict=sd["optim"])
    same_state(m, o, m3, o3)
    checks += 1
    assert ckptfs.StorageReader.validate_checkpoint_id(ck)
    assert not ckptfs.StorageReader.validate_checkpoint_id(tmp)

    # Destinations not filled in place (transposed, float64 for float32,
    # a strided slice): staged 1 MiB at a time (w in three parts), equal
    # to FileSystemReader; the bytes item through its BytesIO.
    big = os.path.join(tmp, "big")
    g = torch.Generator().manual_seed(3)
    dcp.save({"w": torch.randn(700, 900, generator=g),
              "v": torch.randn(300, generator=g),
              "i": torch.arange(40).reshape(8, 5),
              "meta": {"k": [1, 2]}}, checkpoint_id=big)

    def dests():
        return {"w": torch.zeros(900, 700).t(),
                "v": torch.zeros(300, dtype=torch.float64),
                "i": torch.zeros(8, 10, dtype=torch.int64)[:, ::2],
                "meta": {"k": []}}
    want, got = dests(), dests()
    dcp.load(want, storage_reader=dcp.FileSystemReader(big))
    dcp.load(got, storage_reader=ckptfs.StorageReader(big, staging_mb=1))
    assert got["meta"] == want["meta"] == {"k": [1, 2]}
    for k in ("w", "v", "i"):
        assert got[k].dtype == want[k].dtype and torch.equal(got[k],
                                                             want[k]), k
    assert not got["w"].is_contiguous()
    checks += 1

    # float8, which torch 2.1+ saves through _rebuild_tensor_v3 with an
    # UntypedStorage counted in bytes ("t" strided): read in place, staged
    # into float32 1 MiB at a time, and by ckptfs.load, equal to torch's
    # own tensors bit for bit (it refused the checkpoint at open before).
    f8 = os.path.join(tmp, "f8")
    g = torch.Generator().manual_seed(8)
    src = {"e4": (torch.randn(64, 48, generator=g) * 4).to(
               torch.float8_e4m3fn),
           "e5": (torch.randn(33, 7, generator=g) * 100).to(
               torch.float8_e5m2),
           "t": torch.randn(40, 24, generator=g).to(
               torch.float8_e4m3fn).t()}
    dcp.save(src, checkpoint_id=f8)

    def raw(t):
        return t.contiguous().view(torch.uint8)
    same = {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in src.items()}
    dcp.load(same, storage_reader=ckptfs.StorageReader(f8))
    conv = {k: torch.zeros(v.shape) for k, v in src.items()}
    dcp.load(conv, storage_reader=ckptfs.StorageReader(f8, staging_mb=1))
    whole = ckptfs.load(f8)
    for k, v in src.items():
        assert torch.equal(raw(same[k]), raw(v)), k
        assert torch.equal(conv[k], v.float()), k
        assert whole[k].dtype == v.dtype and \
            torch.equal(raw(whole[k]), raw(v)), k
    checks += 1
    print(f"torch {torch.__version__}: {checks} StorageReader checks ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
