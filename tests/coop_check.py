#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Cooperative reads of ckptfs.StorageReader against torch's own
FileSystemReader, on torch 1.13 (Debian 12) or >= 2 (the sid chroot).

    coop_check.py gen OUT
        One process saves a state dict of plain tensors (float32,
        bfloat16, float64, int64, 0-d, one-element, empty, a 3 MiB one
        larger than the 1 MiB staging budget the loads use) and a bytes
        entry with torch's FileSystemWriter.
    coop_check.py load CKPT W ddp|hsdp on|off
        W gloo ranks dcp.load it, ddp: every rank the whole state, into
        plain tensors (one float64 destination for a float32 key, one
        transposed, non-contiguous destination); hsdp (torch >= 2): into
        DTensors on a (2, W/2) mesh with (Replicate(), Shard(0)).  Each
        rank loads with FileSystemReader and with ckptfs.StorageReader
        (cooperative on or off, staging_mb=1); every tensor and bytes
        entry must be equal.  Prints the bytes StorageReader fetched on
        all ranks together against the checkpoint's unique bytes (the
        saved tensors' and entries' bytes), and exits 1 on a difference
        or, with on, when the ranks fetched more than 1.05x the unique
        bytes.
    coop_check.py load CKPT W ddp|hsdp on|off --s3 ROOT
        The same, StorageReader reading s3://bucket/prefix ROOT (an upload
        of CKPT; the endpoint from AWS_ENDPOINT_URL), FileSystemReader the
        local CKPT; the line also gives the seconds of the slowest rank's
        StorageReader load (make bench's cooperative rows).
    CKPTFS_COOP_MIB=N (gen and load alike): N MiB more of float32
        tensors, 8 MiB each, beside the keys above (for make bench).
    coop_check.py load CKPT W fail on
        As ddp, but rank 1 reads a copy of CKPT whose data files it cuts
        to half once it has opened it: rank 1 fails to read the parts it owns, and every rank
        must raise (rank 1 its read error, the others naming rank 1),
        none may hang.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))
from gen_torch_ckpt import free_port, join_group  # noqa: E402
from torch2_check import differing  # noqa: E402

# name, shape, dtype
KEYS = [
    ("model.w1", (64, 48), "float32"),
    ("model.w2", (33, 20), "bfloat16"),
    ("model.w3", (17, 5, 3), "float64"),
    ("model.ids", (40,), "int64"),
    ("model.big", (768, 1024), "float32"),     # 3 MiB: cut into parts
    ("model.to64", (12, 6), "float32"),        # loaded into float64
    ("model.strided", (8, 10), "float32"),     # into a transposed view
    ("optim.step", (), "float32"),
    ("optim.one", (1,), "float32"),
    ("model.empty", (0, 4), "float32"),
]
KEYS += [(f"model.bulk{i}", (1024, 2048), "float32")
         for i in range(int(os.environ.get("CKPTFS_COOP_MIB") or 0) // 8)]
EXTRA = {"param_groups": [{"lr": 0.1, "params": ["model.w1"]}]}


def dcp(torch):
    if torch.__version__.startswith("1."):
        import torch_dcp_compat
        torch_dcp_compat.install()
        import torch.distributed._shard.checkpoint as d
        return d, d.save_state_dict, d.load_state_dict
    import torch.distributed.checkpoint as d
    return d, d.save, d.load


def full(torch, name, shape, dtype):
    g = torch.Generator().manual_seed(sum(map(ord, name)) * 31 + len(name))
    t = torch.randn(shape, generator=g, dtype=torch.float64) * 100
    return t.to(getattr(torch, dtype))


def gen(out):
    import torch
    d, save, _ = dcp(torch)
    sd = {n: full(torch, n, s, dt) for n, s, dt in KEYS}
    sd.update(EXTRA)
    kw = {"no_dist": True} if torch.__version__.startswith("1.") else {}
    save(sd, storage_writer=d.FileSystemWriter(out), **kw)


def unique_bytes(torch):
    n = 0
    for _, shape, dt in KEYS:
        e = torch.empty(0, dtype=getattr(torch, dt)).element_size()
        for x in shape:
            e *= x
        n += e
    return n


def worker(rank, world, port, ckpt, mode, coop, q, s3root=None):
    import torch
    import torch.distributed as dist
    import ckptfs
    d, _, load = dcp(torch)
    join_group(port, rank, world)
    try:
        mesh = None
        if mode == "hsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor import (Replicate, Shard,
                                                  distribute_tensor)
            mesh = init_device_mesh("cpu", (2, world // 2))

        def fresh():
            sd = {}
            for n, shape, dt in KEYS:
                t = torch.full(shape, 7, dtype=getattr(torch, dt))
                if n == "model.to64":
                    t = t.double()
                if n == "model.strided":
                    t = torch.full(shape[::-1], 7,
                                   dtype=getattr(torch, dt)).t()
                if mesh is not None and len(shape) >= 1 and shape[0] > 1 \
                        and n != "model.strided":
                    t = distribute_tensor(t.float() if dt == "bfloat16"
                                          else t, mesh,
                                          [Replicate(), Shard(0)])
                    if dt == "bfloat16":
                        t = t.to(torch.bfloat16)
                sd[n] = t
            sd["param_groups"] = [{"lr": 0.0, "params": ["?"]}]
            return sd
        want, got = fresh(), fresh()
        load(want, storage_reader=d.FileSystemReader(ckpt))
        src = ckpt + "-bad" if mode == "fail" and rank == 1 else ckpt
        if s3root:
            src = s3root
        reader = ckptfs.StorageReader(src, staging_mb=1,
                                      cooperative=(coop == "on"))
        if mode == "fail":
            if rank == 1:       # cut after the open: the reads fail
                # (read_metadata reads .metadata alone; the open is
                # set_up_storage_reader's)
                reader.set_up_storage_reader(reader.read_metadata(), False)
                for f in os.listdir(src):
                    if f.endswith(".distcp"):
                        p = os.path.join(src, f)
                        os.truncate(p, os.path.getsize(p) // 2)
            try:
                load(got, storage_reader=reader)
            except BaseException as e:  # noqa: B902 - torch 1.13's
                # CheckpointException is a BaseException
                q.put((rank, [f"raised: {e}"], 0, 0.0))
                return
            q.put((rank, [], 0, 0.0))
            return
        dist.barrier()
        t0 = time.perf_counter()
        load(got, storage_reader=reader)
        secs = time.perf_counter() - t0
        fetched = reader.io_stats()["bytes_fetched"]
        reader.close()
        bad = differing(torch, want, got)
        q.put((rank, bad, fetched, secs))
    finally:
        dist.destroy_process_group()


def main(argv):
    import torch
    import torch.multiprocessing as tmp
    if argv[0] == "gen":
        gen(argv[1])
        return 0
    ckpt, world, mode, coop = argv[1], int(argv[2]), argv[3], argv[4]
    s3root = argv[6] if argv[5:6] == ["--s3"] else None
    if mode == "fail":
        import shutil
        bad = ckpt + "-bad"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(ckpt, bad)
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    tmp.start_processes(worker, args=(world, free_port(), ckpt, mode, coop,
                                      q, s3root),
                        nprocs=world, join=True, start_method="spawn")
    res = sorted(q.get() for _ in range(world))
    if mode == "fail":
        raised = [r for r, b, *_ in res if b and b[0].startswith("raised")]
        named = [r for r, b, *_ in res
                 if b and "rank 1 could not read key" in b[0]]
        print(f"torch {torch.__version__} W={world} fail: {len(raised)} of "
              f"{world} ranks raised, {len(named)} name rank 1; rank 0: "
              f"{res[0][1][:1]}"[:2000])
        return 0 if len(raised) == world and named else 1
    total = sum(r[2] for r in res)
    uniq = unique_bytes(torch)
    bad = [(r, b) for r, b, *_ in res if b]
    print(f"torch {torch.__version__} W={world} {mode} cooperative={coop}: "
          f"fetched {total} bytes on all ranks, {total / uniq:.3f}x the "
          f"{uniq} unique; per rank {[r[2] for r in res]}; "
          f"{len(bad)} ranks differ {bad}; "
          f"load {max(r[3] for r in res):.3f} s")
    if bad:
        return 1
    if coop == "on" and total > 1.05 * uniq:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
