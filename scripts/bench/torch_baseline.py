#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The torch baseline of `make bench`: the time for torch's own checkpoint
loader (torch.distributed checkpointing, FileSystemReader) to get rank R's
slices of every tensor into memory, against ckptfs (numpy.fromfile over
every file of the view), on the same tensors.

    torch_baseline.py load TORCH_CKPT --world W --rank R [--whole]
        rank R's rows with torch's own loader (FileSystemReader and its
        default planner's resharding read items: every overlapping saved
        chunk is torch.load-ed whole); --whole loads each tensor whole and
        slices it (what a caller without ShardedTensors does); print seconds
    torch_baseline.py view MNT
        numpy.fromfile every file of a mounted view; print seconds
    torch_baseline.py zip64 DIR
        save one uint8 tensor of 4.05 GiB (a zip64 record) with torch's
        save_state_dict; its last MiB is seeded random, the rest zeros
    torch_baseline.py zip64-check MNT
        the view (W=2, R=1) of that tensor ends with the same MiB

Debian's torch 1.13 has no multi-rank resharding loader without a process
group per rank, so torch loads each tensor whole and slices it, as every
rank of a resharding load does (torch.load of every overlapping chunk whole).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests"))


def dcp():
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch.distributed._shard.checkpoint as dcp_mod
    return dcp_mod


def slices_planner(d, world, rank):
    """torch's DefaultLoadPlanner asked for rank's rows only: its own
    _create_sharded_read_items turns each destination slice into read
    items against every overlapping saved chunk, which FileSystemReader
    serves by torch.load-ing each such chunk's record whole."""
    from torch.distributed._shard.checkpoint.planner import LoadPlan
    from torch.distributed._shard.checkpoint.planner_helpers import (
        _create_read_items, _create_sharded_read_items)
    from torch.distributed._shard.sharded_tensor.shard import Shard
    from torch.distributed._shard.metadata import ShardMetadata

    from torch.distributed._shard.checkpoint.default_planner import DefaultLoadPlanner

    class SlicePlanner(DefaultLoadPlanner):
        def create_local_plan(self):
            reqs = []
            for fqn, obj in self.state_dict.items():
                md = self.metadata.state_dict_metadata[fqn]
                if obj is None:                  # a bytes entry
                    reqs += _create_read_items(fqn, md, obj)
                    continue
                row0 = self.row0[fqn]
                off = [row0] + [0] * (obj.dim() - 1) if obj.dim() else []
                shard = Shard(obj, ShardMetadata(off, list(obj.shape), "rank:0/cpu"))
                reqs += _create_sharded_read_items(fqn, md, [shard])
            return LoadPlan(reqs)

        def lookup_tensor(self, index):
            return self.state_dict[index.fqn]

    return SlicePlanner()


def load(ckpt, world, rank, whole=False):
    import torch
    d = dcp()
    from torch.distributed._shard.checkpoint.metadata import BytesStorageMetadata
    md = d.FileSystemReader(ckpt).read_metadata()
    t0 = time.perf_counter()
    sd, row0 = {}, {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, BytesStorageMetadata):
            sd[k] = None
            continue
        shape = list(v.size)
        numel = 1
        for x in shape:
            numel *= x
        if not whole and numel != 1 and shape:
            cs = -(-shape[0] // world)
            lo = min(shape[0], rank * cs)
            shape[0] = min(shape[0], lo + cs) - lo
            row0[k] = lo
        else:
            row0[k] = 0
        sd[k] = torch.empty(shape, dtype=v.properties.dtype)
    if whole:
        d.load_state_dict(sd, d.FileSystemReader(ckpt), no_dist=True)
    else:
        p = slices_planner(d, world, rank)
        p.row0 = row0
        d.load_state_dict(sd, d.FileSystemReader(ckpt), no_dist=True, planner=p)
    out = {}
    nbytes = 0
    for k, t in sd.items():
        if not isinstance(t, torch.Tensor):
            out[k] = t
            continue
        if whole and t.numel() != 1:
            cs = -(-t.shape[0] // world)
            t = t[rank * cs:(rank + 1) * cs].clone()
        out[k] = t
        nbytes += t.numel() * t.element_size()
    dt = time.perf_counter() - t0
    print(f"{dt:.4f} {nbytes}")
    return out


def check_view(out, mnt):
    """The slices torch loaded against the files of a mounted view."""
    import torch
    bad = 0
    for k, t in out.items():
        path = os.path.join(mnt, *k.split("."))
        got = open(path, "rb").read()
        if isinstance(t, torch.Tensor):
            want = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() \
                if t.numel() else b""
            bad += got != want
    print(f"{len(out)} keys compared, {bad} differ")
    return 1 if bad else 0


def view(mnt):
    import numpy as np
    paths = []
    for d, dirs, fs in os.walk(mnt):
        if ".ckptfs" in dirs:
            dirs.remove(".ckptfs")     # view.safetensors repeats every tensor
        paths += [os.path.join(d, f) for f in fs]
    paths.sort()
    t0 = time.perf_counter()
    n = sum(np.fromfile(p, dtype="u1").nbytes for p in paths)
    print(f"{time.perf_counter() - t0:.4f} {n}")


ZIP64_NUMEL = int(4.05 * 2**30)


def zip64_tail():
    import torch
    g = torch.Generator().manual_seed(64)
    return torch.randint(0, 256, (1 << 20,), generator=g, dtype=torch.uint8)


def zip64_save(out):
    import torch
    d = dcp()
    t = torch.zeros(ZIP64_NUMEL, dtype=torch.uint8)
    t[-(1 << 20):] = zip64_tail()
    os.makedirs(out, exist_ok=True)
    d.save_state_dict({"big": t}, d.FileSystemWriter(out), no_dist=True)


def zip64_check(mnt):
    path = os.path.join(mnt, "big")
    size = os.path.getsize(path)
    want = ZIP64_NUMEL - -(-ZIP64_NUMEL // 2)
    with open(path, "rb") as f:
        f.seek(-(1 << 20), 2)
        tail = f.read()
    ok = size == want and tail == zip64_tail().numpy().tobytes()
    print("ok" if ok else f"MISMATCH size {size} want {want}")
    return 0 if ok else 1


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["load", "view", "zip64", "zip64-check"])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--rank", type=int, default=3)
    ap.add_argument("--whole", action="store_true")
    ap.add_argument("--check", help="compare the slices with this mounted view")
    a = ap.parse_args(argv)
    if a.cmd == "zip64":
        zip64_save(a.a)
    elif a.cmd == "zip64-check":
        return zip64_check(a.a)
    elif a.cmd == "load":
        out = load(a.a, a.world, a.rank, a.whole)
        if a.check:
            return check_view(out, a.check)
    else:
        view(a.a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
