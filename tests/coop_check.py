#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Cooperative reads of ckptfs.StorageReader against torch's own
FileSystemReader, on torch 1.13 (Debian 12) or >= 2 (the sid chroot).

    coop_check.py gen OUT [W]
        One process saves a state dict of plain tensors (float32,
        bfloat16, float64, int64, 0-d, one-element, empty, a 3 MiB one
        larger than the 1 MiB staging budget the loads use) and a bytes
        entry with torch's FileSystemWriter; with W (torch >= 2), W gloo
        ranks save it as DDP does, every rank the same whole state
        (dcp.save's planner writes each tensor once).
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
    coop_check.py load CKPT W STEP...
        The ranks run each STEP in turn in one process group: STEP is
        MODE[:FLAG...], MODE ddp, hsdp, uneven (rank 0 needs one key,
        rank r > 0 some: parts with 2..W-1 needers), fail, failpeer (rank
        2 cannot make room for the parts it receives: it raises, and the
        others load what they need from the others), or kill (rank 1 is
        SIGKILLed as it enters round 0's status exchange: the others must
        raise with ckptfs's error naming rank 1; run it alone, with
        COOP_PG_TIMEOUT=S, the process group's timeout).  FLAGs: off
        (cooperative off), rules (tests/nccl_rules.py enforces NCCL's
        point-to-point rules on gloo), mbN (staging_mb=N, default 1;
        mb16 puts every part in one round, where ranks own parts each
        other needs).  COOP_DUMP=S: each rank dumps its stacks and exits
        after S s.
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


def gen(out, rank=0, world=1, port=None):
    import torch
    d, save, _ = dcp(torch)
    sd = {n: full(torch, n, s, dt) for n, s, dt in KEYS}
    sd.update(EXTRA)
    kw = {"no_dist": True} if torch.__version__.startswith("1.") else {}
    if port is not None:
        import torch.distributed as dist
        join_group(port, rank, world)
        save(sd, storage_writer=d.FileSystemWriter(out))
        dist.destroy_process_group()
        return
    save(sd, storage_writer=d.FileSystemWriter(out), **kw)


def gen_rank(rank, out, world, port):
    gen(out, rank, world, port)


def unique_bytes(torch):
    n = 0
    for _, shape, dt in KEYS:
        e = torch.empty(0, dtype=getattr(torch, dt)).element_size()
        for x in shape:
            e *= x
        n += e
    return n


def worker(rank, world, port, ckpt, steps, q, s3root=None):
    if os.environ.get("COOP_DUMP"):
        import faulthandler
        faulthandler.dump_traceback_later(int(os.environ["COOP_DUMP"]), exit=True)
    import torch.distributed as dist
    # the launcher's store (port 0, so no race with a parallel suite)
    kw = {}
    if os.environ.get("COOP_PG_TIMEOUT"):
        import datetime
        kw["timeout"] = datetime.timedelta(
            seconds=float(os.environ["COOP_PG_TIMEOUT"]))
    store = join_group(port, rank, world, **kw)
    try:
        for n, step in enumerate(steps):
            mode, *flags = step.split(":")
            rules = None
            if "rules" in flags:
                import nccl_rules
                rules = nccl_rules.install(store, rank,
                                           prefix=f"nccl-rules/{n}")
            try:
                mb = [int(f[2:]) for f in flags if f.startswith("mb")]
                q.put((step, *one(rank, world, ckpt, mode,
                                  "off" if "off" in flags else "on",
                                  s3root, f"{n}", mb[0] if mb else 1)))
            finally:
                if rules is not None:
                    nccl_rules.uninstall(rules)
    finally:
        dist.destroy_process_group()


def one(rank, world, ckpt, mode, coop, s3root, n, mb=1):
    import torch
    import torch.distributed as dist
    import ckptfs
    d, _, load = dcp(torch)
    if True:
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
        if mode == "uneven":
            # rank 0 needs nothing another rank needs (no parts, yet it
            # takes part in every round); rank r > 0 the keys i with
            # i % (W - 1) < r: parts with 2..W-1 needers
            names = sorted(want)
            if rank == 0:
                names = ["optim.one"]
            else:
                names = [k for i, k in enumerate(names)
                         if i % (world - 1) < rank and k != "optim.one"]
            want = {k: want[k] for k in names}
            got = {k: got[k] for k in names}
        load(want, storage_reader=d.FileSystemReader(ckpt))
        src = ckpt
        if mode == "fail" and rank == 1:
            import shutil
            src = f"{ckpt}-bad{os.getpid()}.{n}"
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(ckpt, src)
        if s3root:
            src = s3root
        reader = ckptfs.StorageReader(src, staging_mb=mb,
                                      cooperative=(coop == "on"))
        dist.barrier()      # every rank, whatever its mode's branch
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
                return (rank, [f"raised: {e}"], 0, 0.0)
            return (rank, [], 0, 0.0)
        if mode == "failpeer" and rank == 2:
            # rank 2 cannot make room for the parts it receives (it
            # still reads and sends those it owns)
            from ckptfs import _coop
            real = _coop.Exchange._buf

            def nomem(self, pt, items):
                if pt[5] != self.rank:
                    raise MemoryError("injected: no room for a part")
                return real(self, pt, items)
            _coop.Exchange._buf = nomem
            try:
                load(got, storage_reader=reader)
            except BaseException as e:  # noqa: B902 - as above
                return (rank, [f"raised: {e}"], 0, 0.0)
            finally:
                _coop.Exchange._buf = real
            return (rank, ["loaded without raising"], 0, 0.0)
        if mode == "kill":
            # rank 1 is SIGKILLed as it enters round 0's status exchange
            # (it read the parts it owns); the others must raise, with
            # ckptfs's error naming rank 1, within the group's timeout
            import logging
            import signal
            from ckptfs import _coop
            if rank == 1:
                def die(*a, **k):
                    os.kill(os.getpid(), signal.SIGKILL)
                _coop.Exchange._statuses = die
            logged = []

            class Keep(logging.Handler):
                def emit(self, rec):
                    logged.append(rec.getMessage())
            logging.getLogger("ckptfs").addHandler(Keep())
            t0 = time.monotonic()
            try:
                load(got, storage_reader=reader)
            except BaseException as e:  # noqa: B902 - as above
                return (rank, [f"raised: {e}"[:300]] + logged, 0,
                        time.monotonic() - t0)
            return (rank, [], 0, 0.0)
        if mode == "failpeer":
            try:
                load(got, storage_reader=reader)
            except BaseException as e:  # noqa: B902 - as above
                return (rank, [f"raised: {e}"], 0, 0.0)
            return (rank, [], 0, 0.0)
        t0 = time.perf_counter()
        load(got, storage_reader=reader)
        secs = time.perf_counter() - t0
        fetched = reader.io_stats()["bytes_fetched"]
        reader.close()
        bad = differing(torch, want, got)
        return (rank, bad, fetched, secs)


def main(argv):
    import torch
    import torch.multiprocessing as tmp
    if argv[0] == "gen":
        if len(argv) > 2:       # W ranks, DDP's layout
            w = int(argv[2])
            tmp.spawn(gen_rank, args=(argv[1], w, free_port()), nprocs=w,
                      join=True)
            return 0
        gen(argv[1])
        return 0
    ckpt, world = argv[1], int(argv[2])
    s3root = None
    if "--s3" in argv:
        i = argv.index("--s3")
        s3root = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    steps = argv[3:]
    if len(steps) == 2 and steps[1] in ("on", "off"):  # MODE on|off
        steps = [steps[0] + (":off" if steps[1] == "off" else "")]
    port = free_port()
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, port, ckpt,
                                              steps, q, s3root))
             for r in range(world)]
    for p in procs:
        p.start()
    got = {}
    want = world * len(steps)
    import queue
    while len(got) < want:
        try:
            step, rank, *rest = q.get(timeout=5)
            got[(step, rank)] = rest
        except queue.Empty:
            if all(p.exitcode is not None for p in procs):
                break
    for p in procs:
        p.join()
    status = 0
    for step in steps:
        mode, *flags = step.split(":")
        res = [(r, *got[(step, r)]) for r in range(world)
               if (step, r) in got]
        if mode == "kill":
            # every rank but 1 raised, and ckptfs named rank 1 on each
            live = [r for r, *_ in res]
            named = [r for r, b, *_ in res if b and b[0].startswith(
                "raised") and any("rank 1 died or left" in x
                                  for x in b[1:])]
            print(f"torch {torch.__version__} W={world} {step}: ranks "
                  f"with a result {live}, raised naming rank 1 {named}; "
                  f"seconds to raise "
                  f"{[round(r[3], 1) for r in res]}; rank 0: "
                  f"{res[0][1] if res else None}"[:2000])
            if named != [r for r in range(world) if r != 1]:
                status = 1
            continue
        if len(res) < world:
            print(f"{step}: {world - len(res)} ranks gave no result "
                  f"(exit codes {[p.exitcode for p in procs]})")
            status = 1
            continue
        if mode == "fail":
            raised = [r for r, b, *_ in res
                      if b and b[0].startswith("raised")]
            named = [r for r, b, *_ in res
                     if b and "rank 1 could not read key" in b[0]]
            print(f"torch {torch.__version__} W={world} {step}: "
                  f"{len(raised)} of {world} ranks raised, {len(named)} "
                  f"name rank 1; rank 0: {res[0][1][:1]}"[:2000])
            if len(raised) != world or not named:
                status = 1
            continue
        if mode == "kill":
            continue
        if mode == "failpeer":
            # rank 2 raises its own error; DCP gathers it, so every rank
            # raises it, and no other rank has a failure of its own (the
            # exchange served them all): rank 2 is the only one named
            named = [r for r, b, *_ in res if b and "injected" in b[0]]
            others = [r for r, b, *_ in res if b and any(
                f"(RANK {x})" in b[0] for x in range(world) if x != 2)]
            ok = len(named) == world and not others
            print(f"torch {torch.__version__} W={world} {step}: rank 2: "
                  f"{res[2][1][:1]}; others: "
                  f"{[b for r, b, *_ in res if r != 2]}"[:2000])
            if not ok:
                status = 1
            continue
        total = sum(r[2] for r in res)
        uniq = unique_bytes(torch)
        bad = [(r, b) for r, b, *_ in res if b]
        print(f"torch {torch.__version__} W={world} {step} "
              f"cooperative={'off' if 'off' in flags else 'on'}: "
              f"fetched {total} bytes on all ranks, {total / uniq:.3f}x "
              f"the {uniq} unique; per rank {[r[2] for r in res]}; "
              f"{len(bad)} ranks differ {bad}; "
              f"load {max(r[3] for r in res):.3f} s"[:3000])
        if bad:
            status = 1
        if mode != "uneven" and "off" not in flags and total > 1.05 * uniq:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
