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
    torch_baseline.py direct TORCH_CKPT --world W --rank R [--threads N]
        ckptfs.load of rank R in this fresh process; print seconds, bytes
    torch_baseline.py rawpread TORCH_CKPT --world W --rank R
        the same tensors allocated and the same bytes pread into them, in
        a fresh process (the first-load baseline); print seconds, bytes
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
from gen_torch_ckpt import free_port, join_group  # noqa: E402


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


class Cold:
    """--cold: drop the page cache once everything is imported, and count
    the bytes the checkpoint's block device then reads (root only)."""

    def __init__(self, path, on):
        self.on = on
        if not on:
            return
        st = os.stat(path)
        self.stat = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat"
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        self.start = self.sectors()

    def sectors(self):
        with open(self.stat) as fh:
            return int(fh.read().split()[2]) * 512

    def report(self):
        return f" {self.sectors() - self.start}" if self.on else ""


def load(ckpt, world, rank, whole=False, cold=False):
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
    c = Cold(ckpt, cold)
    if cold:
        t0 = time.perf_counter()
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
    print(f"{dt:.4f} {nbytes}{c.report()}")
    return out


def direct(ckpt, world, rank, cold=False, threads=None, direct_io=False):
    """ckptfs.load: rank's view read straight from the data files (with
    direct_io: cold ranges with O_DIRECT)."""
    import torch  # noqa: F401  (imported before timing)
    import ckptfs
    if cold:    # every code path once, so only data is read cold
        ckptfs.load(ckpt, world, (rank + 1) % world, threads=threads)
    c = Cold(ckpt, cold)
    t0 = time.perf_counter()
    sd = ckptfs.load(ckpt, world, rank, threads=threads, direct_io=direct_io)
    dt = time.perf_counter() - t0
    n = 0
    stack = [sd]
    while stack:
        for v in stack.pop().values():
            if isinstance(v, dict):
                stack.append(v)
            else:
                n += v.numel() * v.element_size() if hasattr(v, "numel") else len(v)
    print(f"{dt:.4f} {n}{c.report()}")


def rawpread(ckpt, world, rank):
    """The baseline of `direct`, in a fresh process like it: allocate the
    tensors ckptfs.load returns (torch.empty, each key file's shape and
    dtype) and pread into them the bytes they hold (the plan's runs, in
    order), one thread.  The plan is made before the clock starts."""
    import ctypes
    import torch
    import ckptfs
    with ckptfs.open(ckpt) as c:
        keys = c.info().keys
        plan = c.plan(world, rank)
    todo, fds = [], {}
    for e in plan:
        k = keys[e.key]
        if k.kind != "tensor":
            continue
        runs = []
        for r in e.runs:
            path = os.path.join(ckpt, r.file)
            if path not in fds:
                fds[path] = os.open(path, os.O_RDONLY)
            runs.append((fds[path], r.offset, r.length))
        todo.append((e.shape, getattr(torch, k.dtype), e.nbytes, runs))
    t0 = time.perf_counter()
    n, keep = 0, []
    for shape, dtype, nbytes, runs in todo:
        t = torch.empty(shape, dtype=dtype)
        keep.append(t)
        if not nbytes:
            continue
        mv = memoryview((ctypes.c_char * nbytes).from_address(
            t.data_ptr())).cast("B")
        at = 0
        for fd, off, ln in runs:
            got = 0
            while got < ln:
                k = os.preadv(fd, [mv[at + got:at + ln]], off + got)
                if k <= 0:
                    raise OSError(f"short read at {off + got}")
                got += k
            at += ln
        n += at
    dt = time.perf_counter() - t0
    print(f"{dt:.4f} {n}")


def _resume_worker(rank, world, port, ckpt, reader, mnt, q):
    d = dcp()
    import torch
    import torch.distributed as dist
    from torch.distributed._shard import sharded_tensor as st_mod
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    from torch.distributed._shard.checkpoint.metadata import BytesStorageMetadata
    import ckptfs
    join_group(port, rank, world)
    md = d.FileSystemReader(ckpt).read_metadata()
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu"
                                                for r in range(world)])
    sd = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, BytesStorageMetadata):
            sd[k] = None
        elif v.size.numel() == 1 or not len(v.size):
            sd[k] = torch.empty(v.size, dtype=v.properties.dtype)
        else:
            sd[k] = st_mod.empty(spec, *v.size, dtype=v.properties.dtype)
    dist.barrier()
    t0 = time.perf_counter()
    if reader == "fs":
        d.load_state_dict(sd, d.FileSystemReader(ckpt))
    elif reader == "ckptfs":
        d.load_state_dict(sd, ckptfs.StorageReader(ckpt, threads=1))
    else:   # a reader of a --ranks mount: its rank's files into memory
        view(os.path.join(mnt, f"rank{rank}"), quiet=True)
    dt = time.perf_counter() - t0
    dist.barrier()
    total = time.perf_counter() - t0
    q.put((rank, dt, total))
    dist.destroy_process_group()


def resume(ckpt, world, reader, mnt=None):
    """world gloo processes resume from ckpt (saved by fewer ranks): torch's
    load_state_dict into Shard(0) ShardedTensors with FileSystemReader or
    ckptfs.StorageReader, or each reading its rank of a --ranks mount.
    Prints the wall time until the last rank is done."""
    import torch.multiprocessing as tmp
    ctx = tmp.get_context("spawn")
    q = ctx.SimpleQueue()
    tmp.start_processes(_resume_worker, args=(world, free_port(), ckpt,
                                              reader, mnt, q),
                        nprocs=world, join=True, start_method="spawn")
    res = [q.get() for _ in range(world)]
    print(f"{max(r[2] for r in res):.4f}")


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


def view(mnt, quiet=False, cold=False):
    import numpy as np
    paths = []
    for d, dirs, fs in os.walk(mnt):
        if ".ckptfs" in dirs:
            dirs.remove(".ckptfs")     # view.safetensors repeats every tensor
        paths += [os.path.join(d, f) for f in fs]
    paths.sort()
    c = Cold(mnt, False)
    if cold:
        c = Cold(cold, True)    # the checkpoint's device
    t0 = time.perf_counter()
    n = sum(np.fromfile(p, dtype="u1").nbytes for p in paths)
    if not quiet:
        print(f"{time.perf_counter() - t0:.4f} {n}{c.report()}")


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
    ap.add_argument("cmd", choices=["load", "view", "direct", "rawpread", "resume",
                                    "zip64", "zip64-check"])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--rank", type=int, default=3)
    ap.add_argument("--whole", action="store_true")
    ap.add_argument("--check", help="compare the slices with this mounted view")
    ap.add_argument("--cold", action="store_true",
                    help="drop the page cache first; print device bytes read")
    ap.add_argument("--ckpt", help="view --cold: the checkpoint (its device)")
    ap.add_argument("--reader", choices=["fs", "ckptfs", "mount"])
    ap.add_argument("--threads", type=int)
    ap.add_argument("--direct-io", action="store_true",
                    help="direct: ckptfs.load(direct_io=True)")
    a = ap.parse_args(argv)
    if a.cmd == "zip64":
        zip64_save(a.a)
    elif a.cmd == "zip64-check":
        return zip64_check(a.a)
    elif a.cmd == "rawpread":
        rawpread(a.a, a.world, a.rank)
    elif a.cmd == "direct":
        direct(a.a, a.world, a.rank, a.cold, a.threads, a.direct_io)
    elif a.cmd == "resume":
        resume(a.a, a.world, a.reader, a.b)
    elif a.cmd == "load":
        out = load(a.a, a.world, a.rank, a.whole, a.cold)
        if a.check:
            return check_view(out, a.check)
    else:
        view(a.a, cold=a.ckpt if a.cold else False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
