#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Checks of the direct (no FUSE) paths of the ckptfs package
(scripts/ckptfs/) for tests/bats/direct.bats.

    direct_checks.py same CKPT MNT W (R|LIST) [--prefix P] [--layout F] [--dtype D]
        ckptfs.load(CKPT, ...) equals load_view(MNT) (a mount made with the
        same options; with a rank LIST, load_view(MNT/rankN) per rank),
        byte for byte, dtype and shape, numpy and torch backends.
    direct_checks.py ref CKPT W R
        ckptfs.load against the independent numpy reference.
    direct_checks.py errors TMPDIR
        ValueError / OSError cases, never a crash.
    direct_checks.py rlimit CKPT W R
        ckptfs.load with the soft RLIMIT_NOFILE set low (64, below the
        hard limit) equals the numpy reference and leaves the limit as it
        was: the library does not change its host process.
    direct_checks.py dcp-torch CKPT SEED SAVED_W NEW_W [THREADS] [--from SRC]
        NEW_W gloo processes load the state torch's gen_torch_ckpt.py
        saved (seed SEED, SAVED_W ranks) resharded for NEW_W ranks, with
        torch's FileSystemReader and with ckptfs.StorageReader: every local
        shard, plain tensor and bytes entry equal.  With --from SRC,
        StorageReader reads SRC (a copy of CKPT: s3://bucket/prefix).
    direct_checks.py dcp-native CKPT NEW_W
        NEW_W gloo processes load a native checkpoint with
        ckptfs.StorageReader into ShardedTensors split along dim 0; every
        shard equals the numpy reference's view of that rank.
"""
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ckptfs  # noqa: E402
from gen_torch_ckpt import free_port, join_group  # noqa: E402


def _raw(v):
    import numpy as np
    import torch
    if isinstance(v, torch.Tensor):
        t = v.contiguous()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        elif str(t.dtype).startswith("torch.float8"):
            t = t.view(torch.uint8)
        return str(v.dtype), tuple(v.shape), t.numpy().tobytes()
    if isinstance(v, np.ndarray):
        return str(v.dtype), v.shape, np.ascontiguousarray(v).tobytes()
    return type(v).__name__, None, v


def diff(a, b, where=""):
    """Problems between two nested dicts of tensors/arrays/bytes."""
    out = []
    if isinstance(a, dict) != isinstance(b, dict):
        return [f"{where}: dict vs leaf"]
    if isinstance(a, dict):
        if set(a) != set(b):
            return [f"{where}: keys differ: {sorted(map(str, set(a) ^ set(b)))[:5]}"]
        for k in a:
            out += diff(a[k], b[k], f"{where}/{k}")
        return out
    ra, rb = _raw(a), _raw(b)
    if ra != rb:
        out.append(f"{where}: {ra[:2]} vs {rb[:2]} or values differ")
    return out


def count(d):
    return sum(count(v) if isinstance(v, dict) else 1 for v in d.values())


def same(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("mnt")
    ap.add_argument("world", type=int)
    ap.add_argument("rank")
    ap.add_argument("--prefix")
    ap.add_argument("--layout")
    ap.add_argument("--dtype")
    a = ap.parse_args(argv)
    bad = n = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for backend in ("numpy", "torch"):
            kw = dict(prefix=a.prefix, layout=a.layout, dtype=a.dtype,
                      backend=backend)
            if "," in a.rank or "-" in a.rank:
                ranks = []
                for part in a.rank.split(","):
                    lo, _, hi = part.partition("-")
                    ranks += range(int(lo), int(hi or lo) + 1)
                got = ckptfs.load(a.ckpt, a.world, ranks=ranks, **kw)
                want = [ckptfs.load_view(os.path.join(a.mnt, f"rank{r}"),
                                         backend=backend) for r in ranks]
                probs = [p for g, w in zip(got, want) for p in diff(g, w)]
                n += sum(count(w) for w in want)
            else:
                got = ckptfs.load(a.ckpt, a.world, int(a.rank), **kw)
                want = ckptfs.load_view(a.mnt, backend=backend)
                probs = diff(got, want)
                n += count(want)
            for p in probs[:10]:
                print(backend, p)
            bad += len(probs)
    print(f"compared {n} entries (both backends), {bad} problems")
    return 1 if bad or not n else 0


def ref(ckpt, w, r, local=None):
    """ckptfs.load of ckpt against the numpy reference of ckpt, or of
    local (a local copy of an s3:// ckpt)."""
    import reference
    w, r = int(w), int(r)
    exp = reference.expected(local or ckpt, w, r)
    got = {}

    def flat(d, pre=()):
        for k, v in d.items():
            if isinstance(v, dict):
                flat(v, pre + (str(k),))
            else:
                got["/".join(pre + (str(k),))] = v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat(ckptfs.load(ckpt, w, r, backend="numpy", threads=3))
    bad = 0
    for path, want in exp.items():
        v = got.get(path)
        raw = v if isinstance(v, bytes) else (None if v is None else _raw(v)[2])
        if raw != want:
            print(path, "differs")
            bad += 1
    if set(got) != set(exp):
        print("paths differ", set(got) ^ set(exp))
        bad += 1
    print(f"compared {len(exp)} entries with the reference, {bad} problems")
    return 1 if bad else 0


def reuse(ckpt, n):
    """One thread, two GETs in flight at most: two warm-up loads of ckpt
    and n more make at most two connections in all
    (io_stats()["connects"]), though they GET again each time.  (The
    warm-up may reach one connection only, when its GETs happen to run
    one after another; a later load may then open the second.)"""
    n = int(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ckptfs.open(ckpt, threads=1, s3_parallel=2) as c:
            c.load(2, 1, backend="numpy")
            c.load(2, 1, backend="numpy")
            s0 = c.io_stats()
            for _ in range(n):
                c.load(2, 1, backend="numpy")
            s1 = c.io_stats()
    made = s1["connects"] - s0["connects"]
    gets = s1["requests"] - s0["requests"]
    print(f"warm-up: {s0['connects']} connections, {s0['requests']} "
          f"requests; {n} more loads: {made} connections, {gets} requests")
    return 0 if 1 <= s1["connects"] <= 2 and gets >= n else 1


def rlimit(ckpt, w, r):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = 64 if hard == resource.RLIM_INFINITY or hard > 64 else hard - 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    rc = ref(ckpt, w, r)
    after = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"RLIMIT_NOFILE before ({low}, {hard}), after {after}")
    if after != (low, hard):
        print("ckptfs.load changed RLIMIT_NOFILE")
        rc = 1
    return rc


def errors(tmp):
    import errno
    import shutil
    import subprocess
    ok = 0

    def expect(exc, text, fn):
        nonlocal ok
        try:
            fn()
        except exc as e:
            if text in str(e):
                ok += 1
                return
            print(f"message {str(e)!r} lacks {text!r}")
            return
        print(f"no {exc.__name__} ({text})")

    bad = subprocess.check_output
    expect(FileNotFoundError, "cannot open", lambda: ckptfs.load(os.path.join(tmp, "none")))
    c = os.path.join(tmp, "c")
    subprocess.check_call(["/usr/bin/python3", os.path.join(HERE, "make_bad_ckpt.py"),
                           "chunk_outside", c])
    expect(ValueError, "optim.state.w.exp_avg", lambda: ckptfs.load(c))
    shutil.rmtree(c)
    subprocess.check_call(["/usr/bin/python3", os.path.join(HERE, "make_bad_ckpt.py"),
                           "file_short", c])
    expect(ValueError, "data file has", lambda: ckptfs.load(c))
    shutil.rmtree(c)
    subprocess.check_call(["/usr/bin/python3", os.path.join(HERE, "make_bad_ckpt.py"),
                           "ok", c])
    expect(ValueError, "rank 4 is out of range", lambda: ckptfs.load(c, 4, 4))
    expect(ValueError, "dtype must be", lambda: ckptfs.load(c, dtype="int8"))
    expect(ValueError, "backend must be", lambda: ckptfs.load(c, backend="jax"))
    expect(ValueError, "nolayout", lambda: ckptfs.load(c, layout=os.path.join(tmp, "nolayout")))
    # A data file truncated after it was checked: EIO naming file and key,
    # never wrong bytes.
    from ckptfs.handle import Checkpoint

    orig = Checkpoint.__init__

    def cut_after_open(self, path, **kw):
        orig(self, path, **kw)
        with open(os.path.join(c, "__0_0.distcp"), "r+b") as fh:
            fh.truncate(100)
    Checkpoint.__init__ = cut_after_open
    try:
        try:
            ckptfs.load(c)
            print("no OSError for a truncated data file")
        except OSError as e:
            if e.errno == errno.EIO and "__0_0.distcp" in str(e) and "key '" in str(e) \
                    and isinstance(e, ckptfs.ReadError) and e.key and \
                    e.path.endswith("__0_0.distcp") and e.offset is not None:
                ok += 1
            else:
                print("OSError without file and key:", e)
    finally:
        Checkpoint.__init__ = orig
    del bad
    print(f"{ok} of 8 error cases give the expected one-line error")
    return 0 if ok == 8 else 1


# ---------------------------------------------------------------- dcp
def _dcp_worker(rank, world, port, job):
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch
    import torch.distributed as dist
    from ckptfs.torch import dcp_modules
    dcp, _, _ = dcp_modules()
    from torch.distributed._shard import sharded_tensor as st_mod
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    join_group(port, rank, world)
    try:
        if job[0] == "torch":
            _, ckpt, seed, threads, src = job
            import gen_torch_ckpt as g

            def fresh():
                sd = g.small_state(torch, st_mod, ChunkShardingSpec, world,
                                   rank, seed + 1000)   # other values
                return sd
            want, got = fresh(), fresh()
            dcp.load_state_dict(want, dcp.FileSystemReader(ckpt))
            dcp.load_state_dict(got, ckptfs.StorageReader(src or ckpt,
                                                          threads=threads))
            bad = []
            for k in want:
                a, b = want[k], got[k]
                if hasattr(a, "local_shards"):
                    for sa, sb in zip(a.local_shards(), b.local_shards()):
                        if not torch.equal(sa.tensor, sb.tensor) or \
                                sa.tensor.dtype != sb.tensor.dtype:
                            bad.append(k)
                elif isinstance(a, torch.Tensor):
                    if a.dtype != b.dtype or a.shape != b.shape or \
                            not torch.equal(a, b):
                        bad.append(k)
                elif a != b:
                    bad.append(k)
            n = len(want)
        else:
            _, ckpt = job
            import numpy as np
            import reference
            from ckptfs._dtypes import torch_dtype
            exp = reference.expected(ckpt, world, rank)
            meta = reference.load(ckpt)
            sd, paths = {}, {}
            spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu"
                                                        for r in range(world)])
            for fqn, e in meta["state_dict_metadata"].items():
                path = "/".join(reference.view_path(fqn, meta))
                if e["type"] != "tensor":
                    continue    # random bytes here, not torch.save blobs
                with warnings.catch_warnings():  # float8 on torch 1.13
                    warnings.simplefilter("ignore")
                    dt = torch_dtype(e["dtype"], fqn)
                size = e["size"]
                numel = int(np.prod(size)) if size else 1
                if numel == 1 or not size or size[0] == 0:
                    sd[fqn] = torch.zeros(size, dtype=dt)
                else:
                    sd[fqn] = st_mod.empty(spec, *size, dtype=dt)
                paths[fqn] = path
            dcp.load_state_dict(sd, ckptfs.StorageReader(ckpt))
            bad, n = [], 0
            for fqn, v in sd.items():
                want = exp[paths[fqn]]
                if hasattr(v, "local_shards"):
                    sh = v.local_shards()
                    t = sh[0].tensor if sh else torch.empty(0)
                else:
                    t = v
                got = v if isinstance(v, (bytes, bytearray)) else _raw(t)[2]
                if isinstance(v, (bytes, bytearray)):
                    import io
                    got = v.getvalue() if isinstance(v, io.BytesIO) else v
                n += 1
                if got != want:
                    bad.append(fqn)
        print(f"rank {rank}/{world}: {n} entries, {len(bad)} differ "
              f"{bad[:5]}", flush=True)
        if bad:
            raise SystemExit(1)
    finally:
        dist.destroy_process_group()


def dcp_run(job, world):
    import torch.multiprocessing as tmp
    os.environ.setdefault("USE_LIBUV", "0")
    tmp.spawn(_dcp_worker, args=(world, free_port(), job), nprocs=world,
              join=True)
    return 0


def main(argv):
    cmd = argv[0]
    if cmd == "same":
        return same(argv[1:])
    if cmd == "reuse":
        return reuse(*argv[1:3])
    if cmd == "ref":
        return ref(*argv[1:5])
    if cmd == "errors":
        return errors(argv[1])
    if cmd == "rlimit":
        return rlimit(*argv[1:4])
    if cmd == "dcp-torch":
        src = None
        if "--from" in argv:
            i = argv.index("--from")
            src = argv[i + 1]
            del argv[i:i + 2]
        threads = int(argv[5]) if len(argv) > 5 else 0
        return dcp_run(("torch", argv[1], int(argv[2]), threads, src),
                       int(argv[4]))
    if cmd == "dcp-native":
        return dcp_run(("native", argv[1]), int(argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
