#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write real PyTorch distributed checkpoints with torch's own
save_state_dict + FileSystemWriter, from several gloo processes on
127.0.0.1 (torch.multiprocessing.spawn), for the tests and the benchmark.

    gen_torch_ckpt.py OUTDIR [--world N] [--seed S]
        OUTDIR/per_item   (single_file_per_rank=False: one file per item)
        OUTDIR/per_rank   (single_file_per_rank=True)
        ShardedTensors (ChunkShardingSpec) on dim 0 and dim 1, uneven,
        1-D and 3-D, in float32/float16/bfloat16/float64/int64; plain
        tensors: 0-d, one-element, empty, non-contiguous; bytes entries.
    gen_torch_ckpt.py OUTDIR --large GIB [--world 4] [--dim 0|1] [--params N]
        OUTDIR/large: about GIB GiB of float32 optimizer state (exp_avg,
        exp_avg_sq of 100 parameters of mixed sizes), sharded along dim 0
        (FSDP-like) or dim 1 (tensor-parallel-like; 1-D tensors on dim 0).
        --params N: N small parameters instead (rows 8..12, a few KiB
        each; GIB not used): 2 * N items, 2 * N * world records.

Debian's torch 1.13 needs scripts/torch_dcp_compat.py on Python 3.11.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


_STORES = []


def _tcp_store(port, world, is_master, timeout):
    import torch.distributed as dist
    kw = dict(world_size=world, is_master=is_master, timeout=timeout,
              wait_for_workers=False)
    try:
        # torch >= 2.3 serves with libuv by default; the classic server
        # is the one every version has
        return dist.TCPStore("127.0.0.1", port, use_libuv=False, **kw)
    except TypeError:
        return dist.TCPStore("127.0.0.1", port, **kw)


def free_port():
    """The port of a rendezvous store this (launching) process serves on
    port 0 and keeps for its lifetime: the ranks join it with
    join_group().  No port is picked, closed and hoped free."""
    import datetime
    store = _tcp_store(0, None, True, datetime.timedelta(seconds=300))
    _STORES.append(store)
    return store.port


def join_group(port, rank, world, backend="gloo", **kw):
    """init_process_group through the launcher's store at PORT; returns
    that store (a client of it)."""
    import datetime
    import torch.distributed as dist
    timeout = kw.get("timeout") or datetime.timedelta(seconds=300)
    store = _tcp_store(port, world, False, timeout)
    dist.init_process_group(backend, store=store, rank=rank,
                            world_size=world, **kw)
    return store


def full_tensor(torch, seed, name, shape, dtype):
    """The same values on every rank: seeded by (seed, name)."""
    g = torch.Generator().manual_seed((seed * 1000003 + sum(map(ord, name)) * 7919
                                       + len(name)) % (1 << 62))
    n = 1
    for d in shape:
        n *= d
    if dtype in (torch.int64, torch.int32):
        t = torch.randint(-(1 << 40), 1 << 40, (n,), generator=g, dtype=torch.int64)
        return t.to(dtype).reshape(shape)
    return torch.randn(n, generator=g, dtype=torch.float64).to(dtype).reshape(shape)


def sharded(torch, st_mod, spec_cls, world, rank, full, dim):
    """A ShardedTensor of full, split over the world along dim."""
    spec = spec_cls(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
    st = st_mod.empty(spec, *full.shape, dtype=full.dtype)
    for sh in st.local_shards():
        sl = tuple(slice(o, o + s) for o, s in
                   zip(sh.metadata.shard_offsets, sh.metadata.shard_sizes))
        sh.tensor.copy_(full[sl])
    return st


# (name, shape, dtype name, shard dim or None for a plain tensor)
SMALL = [
    ("model.layer1.weight", (10, 6), "float32", 0),
    ("optim.state.layer1.weight.exp_avg", (10, 6), "float32", 0),
    ("optim.state.layer1.weight.exp_avg_sq", (10, 6), "float32", 0),
    ("optim.state.layer1.weight.step", (), "float32", None),
    ("model.layer2.weight", (6, 12), "float16", 1),
    ("optim.state.layer2.weight.exp_avg", (6, 12), "bfloat16", 1),
    ("optim.state.layer2.weight.exp_avg_sq", (7, 13), "float64", 1),
    ("model.bias", (5,), "float32", 0),
    ("model.cube", (6, 3, 5), "float64", 0),
    ("model.cube_tp", (3, 8, 2), "float32", 1),
    ("model.counts", (9, 2), "int64", 0),
    ("model.tiny", (3, 4), "bfloat16", 0),
    ("model.scale", (1,), "float32", None),
    ("model.empty", (0, 4), "float32", None),
    ("model.replicated", (5, 3), "float16", None),
]


def small_state(torch, st_mod, spec_cls, world, rank, seed):
    sd = {}
    for name, shape, dt, dim in SMALL:
        full = full_tensor(torch, seed, name, shape, getattr(torch, dt))
        sd[name] = full if dim is None else sharded(torch, st_mod, spec_cls,
                                                     world, rank, full, dim)
    # Non-contiguous plain tensor: [9, 7] with strides (1, 9).
    sd["model.transposed"] = full_tensor(torch, seed, "model.transposed",
                                         (7, 9), torch.float32).t()
    sd["model.transposed_i64"] = full_tensor(torch, seed, "model.transposed_i64",
                                             (2, 3, 4), torch.int64).permute(2, 0, 1)
    sd["optim.param_groups"] = [{"lr": 0.001, "betas": (0.9, 0.999),
                                 "params": [0, 1, 2], "seed": seed}]
    sd["optim.meta"] = {"step": 7, "name": "adam"}
    return sd


def large_shapes(gib, nparams=100):
    """nparams parameters of mixed sizes, two float32 states each: about
    gib GiB."""
    target = gib * (1 << 30) / 8        # elements per state
    if nparams != 100:
        # Many small parameters (a MoE's experts): each a few KiB, rows
        # 8..12 (uneven over the ranks), GIB not used.
        small = [(64,), (32,), (16, 3), (43,), (20, 5), (1,)]
        return [(8 + i % 5,) + small[i % len(small)][:1 if i % 2 else 2]
                for i in range(nparams)]
    bases = [(4096, 1024), (1024,), (2048, 512), (512, 512), (8192, 256),
             (3000, 700), (777, 333), (64,)]
    total = sum(eval("*".join(map(str, b))) for b in bases)
    k = max(1, round((target / total / 12.5) ** 0.5 * 1.0))
    shapes = []
    for i in range(nparams):
        b = bases[i % len(bases)]
        shapes.append((b[0] * k,) + tuple(b[1:]))
    scale = target / sum(eval("*".join(map(str, s))) for s in shapes)
    out = []
    for s in shapes:
        d0 = max(1, int(s[0] * scale))
        out.append((d0,) + s[1:])
    return out


def large_state(torch, st_mod, spec_cls, world, rank, gib, dim,
                nparams=100):
    spec_dims = [f"rank:{r}/cpu" for r in range(world)]
    sd = {}
    for i, shape in enumerate(large_shapes(gib, nparams)):
        for kind in ("exp_avg", "exp_avg_sq"):
            name = f"optim.state.layer{i}.weight.{kind}"
            spec = spec_cls(dim=dim if len(shape) > dim else 0,
                            placements=spec_dims)
            st = st_mod.empty(spec, *shape, dtype=torch.float32)
            for sh in st.local_shards():
                g = torch.Generator().manual_seed(i * 7 + (kind == "exp_avg") + rank * 1000)
                sh.tensor.copy_(torch.rand(sh.tensor.shape, generator=g))
            sd[name] = st
    sd["optim.param_groups"] = [{"lr": 0.001,
                                 "params": list(range(nparams))}]
    return sd


def worker(rank, world, port, jobs):
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch
    import torch.distributed as dist
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard import sharded_tensor as st_mod
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    join_group(port, rank, world)
    try:
        for kind, path, arg, per_rank in jobs:
            if kind == "small":
                sd = small_state(torch, st_mod, ChunkShardingSpec, world, rank, arg)
            else:
                sd = large_state(torch, st_mod, ChunkShardingSpec, world, rank,
                                 *arg)
            dcp.save_state_dict(sd, dcp.FileSystemWriter(
                path, single_file_per_rank=per_rank))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--large", type=float, default=0)
    ap.add_argument("--dim", type=int, choices=[0, 1], default=0)
    ap.add_argument("--params", type=int, default=100)
    a = ap.parse_args(argv)
    if not 2 <= a.world <= 8:
        sys.exit("gen_torch_ckpt.py: --world must be 2..8")
    if a.large:
        jobs = [("large", os.path.join(a.out, "large"), (a.large, a.dim, a.params), True)]
    else:
        jobs = [("small", os.path.join(a.out, "per_item"), a.seed, False),
                ("small", os.path.join(a.out, "per_rank"), a.seed, True)]
    for _, path, _, _ in jobs:
        os.makedirs(path, exist_ok=True)
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(a.world, free_port(), jobs), nprocs=a.world, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])
