#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The newest PyTorch (Debian sid's, in scripts/sid-chroot.sh), against
ckptfs.  Runs inside the chroot (scripts/sid-chroot.sh run), which
binds the work tree there.

    torch2_check.py gen OUT
        4 gloo ranks dcp.save DTensor state (FileSystemWriter with
        thread_count=2) on a 1-D mesh (OUT/mesh1d: Shard(0), Shard(1)) and
        a 2x2 mesh (OUT/mesh2d: (Shard(0), Shard(1))), float32, bfloat16
        (distributed in float32 and converted: gloo cannot scatter bf16),
        float64, 0-d and empty plain tensors and a bytes entry; plus the
        model/optimizer state of a small model from get_state_dict.  The
        full tensors go to OUT/ref/ (raw bytes + index.json), the
        independent reference for the views.  OUT/ranklocal: the 1-D mesh
        state saved with use_collectives=False (one __R.metadata per
        rank); OUT/megatron: mesh1d with Megatron-Core's all_local_plans,
        common.pt and metadata.json; and the 1-D mesh state through the
        other writer options: OUT/zstd (_extensions=[ZStandard()],
        thread_count=2), OUT/st (SerializationFormat.SAFETENSORS) and
        OUT/hf (HuggingFaceStorageWriter, save_distributed and
        enable_consolidation: consolidated files and hf/sharded/).
    torch2_check.py gen-large OUT GIB
        4 gloo ranks dcp.save GIB GiB of Shard(0) float32 state (the
        benchmark's resume figure).
    torch2_check.py resume CKPT NEW_W fs|ckptfs|ckptfs-nocoop|fsspec|null|floor [THREADS]
        NEW_W ranks dcp.load it into Shard(0) DTensors with torch's
        FileSystemReader, ckptfs.StorageReader (THREADS threads; default
        or 0: its own default), torch's FsspecReader (CKPT
        s3://bucket/prefix, s3fs with AWS_ENDPOINT_URL) or a reader that
        reads nothing, or each rank preads its 1/NEW_W of the data files
        (see resume_worker); prints the wall time until the last rank is
        done and the CPU time of all ranks until each was done (the last
        line), after a line "io_stats [...]" of each rank's
        StorageReader.io_stats() for the ckptfs readers.
    torch2_check.py overlap SRC DST
        DST: the rank-local SRC with rank 1's model.w1 chunk overlapping
        rank 0's.
    torch2_check.py load CKPT NEW_W MESH [ref] [--from SRC]
        NEW_W gloo ranks dcp.load the state into DTensors on MESH ("8",
        "3", or "2x4": (Shard(0), Shard(1))) with torch's FileSystemReader
        and with ckptfs.StorageReader; every local tensor and bytes entry
        must be equal.  With ref (or without .metadata), the tensors
        StorageReader loads are compared with the ones saved instead.
        With --from SRC, StorageReader reads SRC (a copy of CKPT, e.g.
        s3://bucket/prefix) while FileSystemReader reads CKPT.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "scripts"))
from gen_torch_ckpt import free_port, join_group  # noqa: E402


# (name, shape, dtype, 1-D mesh placement dim or None for a plain tensor)
KEYS = [
    ("model.w1", (10, 6), "float32", 0),
    ("model.w2", (7, 12), "bfloat16", 1),
    ("model.b", (5,), "float32", 0),
    ("model.cube", (6, 3, 5), "float64", 1),
    ("model.tiny", (3, 2), "bfloat16", 0),
    ("optim.state.model.w1.exp_avg", (10, 6), "float32", 0),
    ("optim.state.model.w1.exp_avg_sq", (10, 6), "bfloat16", 0),
    ("optim.state.model.w1.step", (), "float32", None),
    ("model.empty", (0, 4), "float32", None),
    ("model.scale", (1,), "float32", None),
]


def full(torch, name, shape, dtype):
    g = torch.Generator().manual_seed(sum(map(ord, name)) * 7919 + len(name))
    return torch.randn(shape, generator=g, dtype=torch.float64).to(
        getattr(torch, dtype))


def placements(torch_dt, ndim, mesh_ndim, dim):
    from torch.distributed.tensor import Replicate, Shard
    if mesh_ndim == 1:
        return [Shard(dim if dim < ndim else 0)]
    if ndim >= 2:
        return [Shard(0), Shard(1)]
    return [Shard(0), Replicate()]


def dtensor(torch, mesh, t, pl):
    """distribute_tensor, in float32 for bfloat16 (gloo)."""
    from torch.distributed.tensor import distribute_tensor
    if t.dtype == torch.bfloat16:
        return distribute_tensor(t.float(), mesh, pl).to(torch.bfloat16)
    return distribute_tensor(t, mesh, pl)


def gen_worker(rank, world, port, out):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.checkpoint.state_dict import get_state_dict
    join_group(port, rank, world)
    try:
        for tag, shape in (("mesh1d", (4,)), ("mesh2d", (2, 2))):
            mesh = init_device_mesh("cpu", shape)
            sd = {}
            for name, shp, dt, dim in KEYS:
                t = full(torch, name, shp, dt)
                if dim is None:
                    sd[name] = t
                else:
                    sd[name] = dtensor(torch, mesh, t, placements(
                        torch, len(shp), len(shape), dim))
            sd["optim.param_groups"] = [{"lr": 0.01, "params": [0, 1]}]
            # A small model and its Adam state, as get_state_dict gives it.
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(4, 8),
                                        torch.nn.Linear(8, 2))
            opt = torch.optim.Adam(model.parameters())
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
            msd, osd = get_state_dict(model, opt)
            for k, v in msd.items():
                sd[f"gsd.model.{k}"] = v
            path = os.path.join(out, tag)
            dcp.save(sd, storage_writer=dcp.FileSystemWriter(
                path, thread_count=2))
            dist.barrier()
            if tag == "mesh1d":
                # Each rank its own __R.metadata, no .metadata.
                dcp.save(sd, storage_writer=dcp.FileSystemWriter(
                    os.path.join(out, "ranklocal")), use_collectives=False)
                dist.barrier()
                other_writers(torch, dcp, sd, out)
                dist.barrier()
            if rank == 0 and tag == "mesh1d":
                ref = os.path.join(out, "ref")
                os.makedirs(ref, exist_ok=True)
                index = {}
                for name, shp, dt, _ in KEYS:
                    t = full(torch, name, shp, dt).contiguous()
                    raw = (t.view(torch.int16) if t.dtype == torch.bfloat16
                           else t).numpy().tobytes()
                    with open(os.path.join(ref, name + ".bin"), "wb") as fh:
                        fh.write(raw)
                    index[name] = [dt, list(shp)]
                for k, v in msd.items():
                    t = v.detach().contiguous()
                    with open(os.path.join(ref, f"gsd.model.{k}.bin"),
                              "wb") as fh:
                        fh.write(t.numpy().tobytes())
                    index[f"gsd.model.{k}"] = [str(t.dtype)[6:],
                                               list(t.shape)]
                with open(os.path.join(ref, "index.json"), "w") as fh:
                    json.dump(index, fh)
                megatron_copy(torch, path, os.path.join(out, "megatron"))
    finally:
        dist.destroy_process_group()


def megatron_copy(torch, src, dst):
    """src as Megatron-Core (2025+) leaves it: Metadata pickled with an
    all_local_plans attribute (the ranks' SavePlans of WriteItems) and
    mcore_data; the data files are hard links."""
    import pickle
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata, MetadataIndex)
    from torch.distributed.checkpoint.planner import (
        SavePlan, TensorWriteData, WriteItem, WriteItemType)
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f.endswith(".distcp"):
            os.link(os.path.join(src, f), os.path.join(dst, f))
    with open(os.path.join(src, ".metadata"), "rb") as fh:
        md = pickle.load(fh)
    plans = []
    for fqn, tmd in md.state_dict_metadata.items():
        if not hasattr(tmd, "chunks"):
            continue
        items = [WriteItem(index=MetadataIndex(fqn, c.offsets),
                           type=WriteItemType.SHARD,
                           tensor_data=TensorWriteData(
                               chunk=ChunkStorageMetadata(c.offsets, c.sizes),
                               properties=tmd.properties, size=tmd.size))
                 for c in tmd.chunks]
        plans.append(SavePlan(items=items, storage_data=None,
                              planner_data=None))
    md.all_local_plans = plans
    md.mcore_data = {"sharded_backend": "torch_dist", "version": [2, 0],
                     "singleton_local_shards": False}
    with open(os.path.join(dst, ".metadata"), "wb") as fh:
        pickle.dump(md, fh)
    # Megatron-Core's files beside .metadata: the view shows them as they are.
    torch.save({"args": {"tensor_model_parallel_size": 2}, "iteration": 7,
                "rng_state": torch.arange(4)},
               os.path.join(dst, "common.pt"))
    with open(os.path.join(dst, "metadata.json"), "w") as fh:
        json.dump({"sharded_backend": "torch_dist",
                   "sharded_backend_version": 1,
                   "common_backend": "torch",
                   "common_backend_version": 1}, fh)


def overlap(src, dst):
    """A copy of a rank-local checkpoint whose rank 1 claims model.w1's
    rows from 2 instead of 3: its chunk overlaps rank 0's."""
    import pickle
    import shutil
    import torch
    from torch.distributed.checkpoint.metadata import MetadataIndex
    shutil.copytree(src, dst)
    p = os.path.join(dst, "__1.metadata")
    md = pickle.load(open(p, "rb"))
    c = md.state_dict_metadata["model.w1"].chunks[0]
    old = MetadataIndex("model.w1", c.offsets)
    c.offsets = torch.Size([2, 0])
    info = md.storage_data.pop(old)
    md.storage_data[MetadataIndex("model.w1", c.offsets)] = info
    pickle.dump(md, open(p, "wb"))


def other_writers(torch, dcp, sd, out):
    """The same 1-D mesh state through the other writer options, from
    the 4 ranks: zstd transforms (thread_count=2), SAFETENSORS
    serialization, and HuggingFaceStorageWriter(save_distributed=True,
    enable_consolidation=True), which takes tensors only."""
    from torch.distributed.checkpoint._extension import ZStandard
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(
        os.path.join(out, "zstd"), thread_count=2,
        _extensions=[ZStandard()]))
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(
        os.path.join(out, "st"),
        serialization_format=SerializationFormat.SAFETENSORS))
    tensors = {k: v for k, v in sd.items() if k.startswith("model.")}
    dcp.save(tensors, storage_writer=dcp.HuggingFaceStorageWriter(
        os.path.join(out, "hf"), save_distributed=True,
        enable_consolidation=True))


def differing(torch, want, got):
    """The keys of state dict got that differ from want: a tensor (or a
    DTensor's local shard) of another dtype, shape or value, one still all
    7 (the fill of the destinations: not loaded), or a bytes entry."""
    bad = []
    for k in want:
        a, b = want[k], got[k]
        if isinstance(a, torch.Tensor):
            la = a.to_local() if hasattr(a, "to_local") else a
            lb = b.to_local() if hasattr(b, "to_local") else b
            if la.dtype != lb.dtype or la.shape != lb.shape or \
                    not torch.equal(la, lb):
                bad.append(k)
            elif la.numel() and (la == 7).all():
                bad.append(k + " (not loaded)")
        elif a != b:
            bad.append(k)
    return bad


def load_worker(rank, world, port, ckpt, mesh_spec, ref=False, src=None):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    import ckptfs
    join_group(port, rank, world)
    try:
        shape = tuple(int(x) for x in mesh_spec.split("x"))
        mesh = init_device_mesh("cpu", shape)
        # Without .metadata (rank-local __R.metadata files), or with "ref"
        # (SAFETENSORS serialization, which torch's FileSystemReader
        # cannot read back), compare with the saved tensors.
        by_torch = (os.path.exists(os.path.join(ckpt, ".metadata")) and
                    not ref)
        md = (dcp.FileSystemReader(ckpt) if by_torch else
              ckptfs.StorageReader(ckpt)).read_metadata()

        def fresh():
            sd = {}
            for name, tmd in md.state_dict_metadata.items():
                if not hasattr(tmd, "size"):
                    sd[name] = None          # bytes: load puts the object
                    continue
                size, dt = tuple(tmd.size), tmd.properties.dtype
                numel = 1
                for d in size:
                    numel *= d
                z = torch.full(size, 7, dtype=dt)
                if numel <= 1 or size[0] == 0:
                    sd[name] = z
                else:
                    sd[name] = dtensor(torch, mesh, z, placements(
                        torch, len(size), len(shape), 0))
            return sd
        want, got = fresh(), fresh()
        if by_torch:
            dcp.load(want, storage_reader=dcp.FileSystemReader(ckpt))
        else:
            keys = {n: (s, d) for n, s, d, _ in KEYS}
            for k in list(want):
                if k not in keys:
                    del want[k], got[k]
                    continue
                t = full(torch, k, *keys[k])
                w = want[k]
                if hasattr(w, "to_local"):
                    from torch.distributed.tensor import distribute_tensor
                    want[k] = (distribute_tensor(t.float(), w.device_mesh,
                                                 w.placements).to(t.dtype)
                               if t.dtype == torch.bfloat16 else
                               distribute_tensor(t, w.device_mesh,
                                                 w.placements))
                else:
                    want[k] = t
        dcp.load(got, storage_reader=ckptfs.StorageReader(src or ckpt))
        bad = differing(torch, want, got)
        print(f"rank {rank}/{world} mesh {mesh_spec}: {len(want)} entries, "
              f"{len(bad)} differ {bad[:4]}", flush=True)
        if bad:
            raise SystemExit(1)
    finally:
        dist.destroy_process_group()


def large_worker(rank, world, port, out, gib):
    """About gib GiB of float32 optimizer-like state: 100 parameters'
    exp_avg and exp_avg_sq as Shard(0) DTensors over world ranks."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    join_group(port, rank, world)
    mesh = init_device_mesh("cpu", (world,))
    per = int(gib * (1 << 30) / 4 / 200)
    cols = 1024
    rows = max(world, per // cols)
    sd = {}
    for i in range(100):
        for kind in ("exp_avg", "exp_avg_sq"):
            cs = -(-rows // world)
            lo, hi = min(rows, rank * cs), min(rows, (rank + 1) * cs)
            local = torch.rand((hi - lo, cols))
            sd[f"optim.state.layer{i}.weight.{kind}"] = DTensor.from_local(
                local, mesh, [Shard(0)], shape=torch.Size([rows, cols]),
                stride=(cols, 1))
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(out))
    dist.destroy_process_group()


def fsspec_s3_fixup():
    """s3fs in Debian sid: aiobotocore 2.25 calls botocore 1.43's
    ClientArgsCreator.compute_endpoint_resolver_builtin_defaults without
    the argument s3_disable_express_session_auth that botocore made
    required; give it its default so that s3fs works at all."""
    import inspect
    from botocore.args import ClientArgsCreator
    f = ClientArgsCreator.compute_endpoint_resolver_builtin_defaults
    if "s3_disable_express_session_auth" not in \
            inspect.signature(f).parameters or getattr(f, "_fixed", False):
        return

    def wrapped(self, *a, **kw):
        if len(a) < 9:
            kw.setdefault("s3_disable_express_session_auth", None)
        return f(self, *a, **kw)
    wrapped._fixed = True
    ClientArgsCreator.compute_endpoint_resolver_builtin_defaults = wrapped


def _floor_slice(ckpt, world, rank):
    """Rank's eighth (1/world) of the concatenated data files: (fd, file
    offset, length, offset in the rank's buffer) runs, and its size."""
    files = sorted(f for f in os.listdir(ckpt) if f.endswith(".distcp"))
    sizes = [os.path.getsize(os.path.join(ckpt, f)) for f in files]
    per = -(-sum(sizes) // world)
    lo, hi = rank * per, min(sum(sizes), (rank + 1) * per)
    runs, at = [], 0
    for f, n in zip(files, sizes):
        a, b = max(lo, at), min(hi, at + n)
        if a < b:
            fd = os.open(os.path.join(ckpt, f), os.O_RDONLY)
            runs.append((fd, a - at, b - a, a - lo))
        at += n
    return runs, max(0, hi - lo)


def resume_worker(rank, world, port, ckpt, reader, q, threads=0):
    """dcp.load into Shard(0) DTensors on world ranks: the wall time until
    the last rank is done.  The state dict is allocated and zeroed before
    the clock starts, as a resuming job's model and optimizer state is.
    reader: fs (FileSystemReader), ckptfs (StorageReader, its default
    threads with LOCAL_WORLD_SIZE set as torchrun sets it), null (a
    FileSystemReader whose read_data resolves and commits every item and
    reads nothing: torch's own metadata, planning and collectives, the
    floor for any reader; null-ckptfs: the same from ckptfs.StorageReader,
    for s3:// and az://), floor (no dcp.load: the rank preads its
    1/world of the data files into a buffer allocated and zeroed the same
    way, the floor for the data)."""
    import time
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.futures import Future
    import ckptfs
    os.environ["LOCAL_WORLD_SIZE"] = str(world)
    storage_reader = ckptfs.StorageReader     # imported before the clock

    def read_nothing(plan, planner):
        for it in plan.items:
            if it.type != dcp.planner.LoadItemType.BYTE_IO:
                planner.commit_tensor(it, planner.resolve_tensor(it))
        fut = Future()
        fut.set_result(None)
        return fut

    class NullReader(dcp.FileSystemReader):
        def read_data(self, plan, planner):
            return read_nothing(plan, planner)

    class NullStorageReader(storage_reader):
        """null for an object store: ckptfs.StorageReader's open and
        metadata, torch's planning and collectives, no data read."""
        def read_data(self, plan, planner):
            return read_nothing(plan, planner)

    join_group(port, rank, world)
    mesh = init_device_mesh("cpu", (world,))
    if reader == "fsspec":
        fsspec_s3_fixup()
    md = (dcp.FileSystemReader(ckpt)
          if not ckpt.startswith(("s3://", "az://")) else
          storage_reader(ckpt)).read_metadata()
    sd, runs = {}, []
    if reader == "floor":
        runs, n = _floor_slice(ckpt, world, rank)
        buf = torch.zeros(n, dtype=torch.uint8)
        mv = memoryview(buf.numpy())
    else:
        for k, v in md.state_dict_metadata.items():
            rows, cols = v.size
            cs = -(-rows // world)
            lo, hi = min(rows, rank * cs), min(rows, (rank + 1) * cs)
            sd[k] = DTensor.from_local(torch.zeros((hi - lo, cols)), mesh,
                                       [Shard(0)], shape=v.size,
                                       stride=(cols, 1))
    dist.barrier()
    t0 = time.perf_counter()
    c0 = time.process_time()
    if reader == "floor":
        for fd, off, n, at in runs:
            got = 0
            while got < n:
                got += os.preadv(fd, [mv[at + got:at + n]], off + got)
    else:
        if reader == "fsspec":
            from torch.distributed.checkpoint._fsspec_filesystem import \
                FsspecReader
        r = {"fs": lambda: dcp.FileSystemReader(ckpt),
             "fsspec": lambda: FsspecReader(ckpt),
             "null": lambda: NullReader(ckpt),
             "null-ckptfs": lambda: NullStorageReader(ckpt),
             "ckptfs": lambda: storage_reader(ckpt, threads=threads or None),
             "ckptfs-nocoop": lambda: storage_reader(
                 ckpt, threads=threads or None, cooperative=False),
             }[reader]()
        dcp.load(sd, storage_reader=r)
    cpu = time.process_time() - c0
    dist.barrier()
    stats = r.io_stats() if reader.startswith("ckptfs") else None
    q.put((time.perf_counter() - t0, cpu, stats))
    dist.destroy_process_group()


def main(argv):
    import torch.multiprocessing as tmp
    if argv[0] == "gen":
        tmp.spawn(gen_worker, args=(4, free_port(), argv[1]), nprocs=4,
                  join=True)
        return 0
    if argv[0] == "gen-large":
        tmp.spawn(large_worker, args=(4, free_port(), argv[1],
                                      float(argv[2])), nprocs=4, join=True)
        return 0
    if argv[0] == "resume":
        world = int(argv[2])
        ctx = tmp.get_context("spawn")
        q = ctx.SimpleQueue()
        threads = int(argv[4]) if len(argv) > 4 else 0
        tmp.start_processes(resume_worker, args=(world, free_port(), argv[1],
                                                 argv[3], q, threads),
                            nprocs=world, join=True, start_method="spawn")
        res = [q.get() for _ in range(world)]
        if res[0][2] is not None:   # before the last line, which callers
            import json             # split
            print("io_stats", json.dumps([r[2] for r in res]))
        print(f"{max(r[0] for r in res):.4f} {sum(r[1] for r in res):.4f}")
        return 0
    if argv[0] == "overlap":
        overlap(argv[1], argv[2])
        return 0
    if argv[0] == "load":
        world = int(argv[2])
        src = None
        if "--from" in argv:
            i = argv.index("--from")
            src = argv[i + 1]
            del argv[i:i + 2]
        tmp.spawn(load_worker, args=(world, free_port(), argv[1], argv[3],
                                     argv[4:5] == ["ref"], src),
                  nprocs=world, join=True)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
