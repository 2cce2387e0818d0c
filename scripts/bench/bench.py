#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`make bench`: ckptfs read throughput against baselines measured in the
same run, on generated float32 Adam-state checkpoints (>= 2 GiB) saved by 4
ranks in dim-0 and dim-1 shards, with the backing files in the page cache.

    bench.py --ckptfs BIN --ceilfs BIN [--work DIR] [--gib 2] [--reps 5]
             [--quick]

Prints a table (median, min, max of REPS repetitions), writes it to
scripts/bench/results.md and a bar chart to scripts/bench/results.png
(gnuplot).  --quick is the smoke run `make check` uses: a tiny checkpoint,
one repetition, no chart.
"""
import argparse
import mmap
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import time

import azbench
import s3bench
import wanbench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- mounts
class Mount:
    """A FUSE daemon in the foreground, in the background."""

    def __init__(self, argv, mnt, popen=subprocess.Popen):
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        self.proc = popen(argv + ["-f"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
        self.t0 = time.perf_counter()
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv}: {self.proc.stderr.read().decode()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv}: mount timed out")
            time.sleep(0.002)
        self.ready = time.perf_counter() - self.t0

    def set_readahead(self, kb):
        """What ckptfs does to its own mount (mount_run.c), for the
        ceiling: the same FUSE settings."""
        real = os.path.realpath(self.mnt)
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                f = line.split()
                if f[4] == real:
                    dev = f[2]
        try:
            with open(f"/sys/class/bdi/{dev}/read_ahead_kb", "w") as fh:
                fh.write(f"{kb}\n")
        except OSError:
            pass

    def status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def close(self):
        if os.path.ismount(self.mnt):
            if subprocess.call(["fusermount3", "-u", self.mnt]) != 0:
                subprocess.call(["fusermount3", "-uz", self.mnt])
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def ckptfs_mount(args, ckpt, mnt, world, rank, extra=()):
    return Mount([args.ckptfs, "mount", ckpt, mnt, "--world", str(world),
                  "--rank", str(rank), *extra], mnt)


# ---------------------------------------------------------------- readers
def files_of(root):
    """The view's key files (not .ckptfs/, whose view.safetensors holds
    every tensor a second time)."""
    out = []
    for d, dirs, fs in os.walk(root):
        if ".ckptfs" in dirs:
            dirs.remove(".ckptfs")
        out += [os.path.join(d, f) for f in fs]
    return sorted(out)


def read_all(paths, bs=MiB):
    buf = bytearray(bs)
    mv = memoryview(buf)
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as fh:
            while True:
                n = fh.readinto(mv)
                if not n:
                    break
                total += n
    return total


def pread_bytes(paths, nbytes, bs=MiB):
    """Read nbytes sequentially from the backing files, 1 MiB preads."""
    buf = bytearray(bs)
    left = nbytes
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        off = 0
        try:
            while left > 0:
                n = os.preadv(fd, [memoryview(buf)[:min(bs, left)]], off)
                if n <= 0:
                    break
                off += n
                left -= n
        finally:
            os.close(fd)
        if left <= 0:
            break
    return nbytes - left


def mmap_touch(paths):
    total = 0
    for p in paths:
        size = os.path.getsize(p)
        if not size:
            continue
        with open(p, "rb") as fh, mmap.mmap(fh.fileno(), 0,
                                            prot=mmap.PROT_READ) as mm:
            s = 0
            for off in range(0, size, PAGE):
                s += mm[off]
            total += size
    return total


def warm(paths):
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(8 * MiB):
                pass


# ---------------------------------------------------------------- stats
class Table:
    def __init__(self):
        self.rows = []

    def add(self, name, samples, unit="GB/s", base=None, note="",
            ratio=""):
        """A row; its ratio is median / base's median (base: (median,
        name)), or the text ratio gives (a ratio of times, which are
        better when smaller)."""
        med = statistics.median(samples)
        row = {"name": name, "med": med, "min": min(samples),
               "max": max(samples), "unit": unit, "note": note,
               "ratio": ratio}
        if base is not None:
            bmed, bname = base
            row["ratio"] = f"{med / bmed:.2f}x {bname}" if bmed else ""
        self.rows.append(row)
        print(f"  {name:<44} {med:9.3f} {unit:<5} "
              f"[{row['min']:.3f}, {row['max']:.3f}] {row['ratio']} {note}",
              flush=True)
        return med

    def markdown(self, header):
        out = [header, "",
               "| measurement | median | min | max | unit | ratio | note |",
               "|---|---:|---:|---:|---|---|---|"]
        for r in self.rows:
            out.append(f"| {r['name']} | {r['med']:.3f} | {r['min']:.3f} | "
                       f"{r['max']:.3f} | {r['unit']} | {r['ratio']} | "
                       f"{r['note']} |")
        return "\n".join(out) + "\n"


def timed(fn, reps):
    """Run fn() reps times; it returns (bytes, seconds)."""
    return [fn() for _ in range(reps)]


def gbps(res):
    return [b / s / 1e9 for b, s in res]


# ---------------------------------------------------------------- runs
def first_read(args, ckpt, w, r, work, reader=read_all):
    def one():
        with ckptfs_mount(args, ckpt, os.path.join(work, "mnt"), w, r) as m:
            paths = files_of(m.mnt)
            t = time.perf_counter()
            n = reader(paths)
            return n, time.perf_counter() - t
    return one


def view_runs(args, t, ckpt, tiling, w, r, work, raw_paths, ceil):
    with ckptfs_mount(args, ckpt, os.path.join(work, "mnt"), w, r) as m:
        nbytes = sum(os.path.getsize(p) for p in files_of(m.mnt))
    reps = args.reps
    raw = t.add(f"raw pread, {nbytes / MiB:.0f} MiB ({tiling} W={w})",
                gbps(timed(lambda: (lambda t0: (pread_bytes(raw_paths, nbytes),
                                                time.perf_counter() - t0))(
                    time.perf_counter()), reps)))
    v = t.add(f"view first read, tiling {tiling}, W={w} R={r}",
              gbps(timed(first_read(args, ckpt, w, r, work), reps)),
              base=(ceil["first"], "ceiling"), note=f"{_ratio(raw)}")
    if "first_n" in ceil:
        t.rows[-1]["note"] += f"; {v / ceil['first_n']:.2f}x the same-files ceiling"
        print(f"    {v / ceil['first_n']:.2f}x the same-files ceiling", flush=True)
    # Re-read: the same mount, second pass from the kernel's page cache.
    with ckptfs_mount(args, ckpt, os.path.join(work, "mnt"), w, r) as m:
        paths = files_of(m.mnt)
        read_all(paths)
        res = []
        for _ in range(reps):
            t0 = time.perf_counter()
            n = read_all(paths)
            res.append((n, time.perf_counter() - t0))
    t.add(f"view re-read, tiling {tiling}, W={w} R={r}", gbps(res),
          base=(ceil["reread"], "ceiling"))
    v = t.add(f"view mmap every page, tiling {tiling}, W={w} R={r}",
              gbps(timed(first_read(args, ckpt, w, r, work, mmap_touch), reps)),
              base=(ceil["mmap"], "ceiling"))
    if "mmap_n" in ceil:
        t.rows[-1]["note"] += f"{v / ceil['mmap_n']:.2f}x the same-files ceiling"
        print(f"    {v / ceil['mmap_n']:.2f}x the same-files ceiling", flush=True)
    return raw


def _ratio(raw):
    return f"raw {raw:.2f} GB/s"


def ceiling(args, t, work, backing_src, nbytes, sizes=None):
    backing = os.path.join(work, "ceil.bin")
    if not os.path.exists(backing) or os.path.getsize(backing) != nbytes:
        with open(backing, "wb") as out:
            left = nbytes
            for p in backing_src:
                with open(p, "rb") as fh:
                    while left > 0:
                        b = fh.read(min(8 * MiB, left))
                        if not b:
                            break
                        out.write(b)
                        left -= len(b)
    warm([backing])
    mnt = os.path.join(work, "ceilmnt")
    res = {}

    def first(reader, extra=(), names=("data",)):
        def one():
            with Mount([args.ceilfs, backing, mnt, *extra], mnt) as m:
                m.set_readahead(1024)
                p = [os.path.join(m.mnt, n) for n in names]
                t0 = time.perf_counter()
                n = reader(p)
                return n, time.perf_counter() - t0
        return one
    res["first"] = t.add(f"FUSE ceiling first read, {nbytes / MiB:.0f} MiB",
                         gbps(timed(first(read_all), args.reps)))
    with Mount([args.ceilfs, backing, mnt], mnt) as m:
        m.set_readahead(1024)
        p = [os.path.join(m.mnt, "data")]
        read_all(p)
        rr = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            n = read_all(p)
            rr.append((n, time.perf_counter() - t0))
    res["reread"] = t.add("FUSE ceiling re-read", gbps(rr))
    res["mmap"] = t.add("FUSE ceiling mmap every page",
                        gbps(timed(first(mmap_touch), args.reps)))
    if sizes:
        # The same bytes as as many files as the view: each file restarts
        # the kernel's readahead, which one big file does not.
        sfile = os.path.join(work, "ceil.sizes")
        with open(sfile, "w") as fh:
            fh.write("\n".join(map(str, sizes)) + "\n")
        extra = ("--sizes", sfile)
        names = [f"f{i:07d}" for i in range(len(sizes))]
        res["first_n"] = t.add(f"FUSE ceiling as {len(sizes)} files like the "
                               "view, first read",
                               gbps(timed(first(read_all, extra, names),
                                          args.reps)))
        res["mmap_n"] = t.add(f"FUSE ceiling as {len(sizes)} files, mmap "
                              "every page",
                              gbps(timed(first(mmap_touch, extra, names),
                                         args.reps)))
    return res


def _reader_proc(paths, q):
    t0 = time.perf_counter()
    n = read_all(paths)
    q.put((n, time.perf_counter() - t0))


def all_ranks(args, t, ckpt, work, world=8):
    res = []
    for _ in range(args.reps):
        mounts = [ckptfs_mount(args, ckpt, os.path.join(work, f"rank{r}"),
                               world, r) for r in range(world)]
        try:
            q = mp.Queue()
            procs = [mp.Process(target=_reader_proc,
                                args=(files_of(m.mnt), q)) for m in mounts]
            t0 = time.perf_counter()
            for p in procs:
                p.start()
            total = sum(q.get()[0] for _ in procs)
            for p in procs:
                p.join()
            res.append((total, time.perf_counter() - t0))
        finally:
            for m in mounts:
                m.close()
    t.add(f"all {world} ranks at once (8 mounts, 8 readers), aggregate",
          gbps(res))


def prefetch(args, t, ckpt, work, w=3, r=1, pause=2.0):
    """First read after a pause (a reader that spends seconds importing
    torch first), without and with -o prefetch."""
    out = {}
    for label, extra in (("without", ()), ("with", ("-o", "prefetch"))):
        res = []
        for _ in range(args.reps):
            with ckptfs_mount(args, ckpt, os.path.join(work, "mnt"), w, r,
                              extra) as m:
                time.sleep(pause if not args.quick else 0.2)
                paths = files_of(m.mnt)
                t0 = time.perf_counter()
                n = read_all(paths)
                res.append((n, time.perf_counter() - t0))
        out[label] = t.add(f"first read after a {pause:.0f} s pause, {label} "
                           f"-o prefetch (W={w} R={r})", gbps(res),
                           base=(out["without"], "without") if out else None)


def torch_figures(args, t, work, w=8, r=3, pause=2.0):
    """Rank r's slices into memory from real PyTorch distributed
    checkpoints saved by 4 gloo ranks (dim-0 and dim-1 shards): torch's own
    loader against numpy.fromfile over a ckptfs mount of the same files."""
    tb = os.path.join(HERE, "torch_baseline.py")
    try:
        subprocess.run(["/usr/bin/python3", "-c", "import torch"], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        note = "python3-torch is not installed: not measured"
        print(f"  torch baseline: {note}")
        return note
    world = 2 if args.quick else 4
    mnt = os.path.join(work, "mnt")
    for dim in (0, 1):
        tdir = os.path.join(work, f"torch-dcp-{args.torch_gib}-w{world}-dim{dim}")
        if not os.path.exists(os.path.join(tdir, "large", ".metadata")):
            print(f"writing a {args.torch_gib} GiB PyTorch checkpoint from "
                  f"{world} gloo ranks, dim-{dim} shards (save_state_dict)...",
                  flush=True)
            subprocess.check_call([
                "/usr/bin/python3",
                os.path.join(ROOT, "scripts", "gen_torch_ckpt.py"), tdir,
                "--large", str(args.torch_gib), "--world", str(world),
                "--dim", str(dim)])
        tdir = os.path.join(tdir, "large")
        warm([os.path.join(tdir, f) for f in os.listdir(tdir)])
        size = sum(os.path.getsize(os.path.join(tdir, f))
                   for f in os.listdir(tdir))
        tt, tw, vt, pt, mt = [], [], [], [], []
        for _ in range(args.reps):
            for extra, out in (([], tt), (["--whole"], tw)):
                o = subprocess.check_output(
                    ["/usr/bin/python3", tb, "load", tdir, "--world", str(w),
                     "--rank", str(r), *extra])
                out.append(float(o.split()[0]))
            t0 = time.perf_counter()
            with ckptfs_mount(args, tdir, mnt, w, r) as m:
                mt.append(time.perf_counter() - t0)
                o = subprocess.check_output(["/usr/bin/python3", tb, "view",
                                             m.mnt])
                vt.append(float(o.split()[0]))
            with ckptfs_mount(args, tdir, mnt, w, r, ("-o", "prefetch")) as m:
                time.sleep(pause)
                o = subprocess.check_output(["/usr/bin/python3", tb, "view",
                                             m.mnt])
                pt.append(float(o.split()[0]))
        tag = f"dim-{dim} shards, {size / 2**30:.2f} GiB, {world} ranks"
        torch_med = t.add(f"torch's loader, rank {r} of {w} ({tag}): "
                          "overlapping chunks", tt, unit="s")
        t.add(f"torch's loader, whole tensors then sliced ({tag})", tw,
              unit="s")
        t.add(f"ckptfs mount of that torch checkpoint ({tag})", mt, unit="s")
        v = t.add(f"ckptfs numpy.fromfile over the view ({tag})", vt,
                  unit="s")
        t.add(f"ckptfs -o prefetch, reader after {pause:.0f} s ({tag})", pt,
              unit="s",
              note=f"{torch_med / v:.1f}x faster than torch's loader without "
                   f"prefetch, {torch_med / statistics.median(pt):.1f}x with; "
                   f"{statistics.median(tw) / v:.1f}x vs whole tensors")
    return ("torch 1.13's distributed checkpoint loader (FileSystemReader) "
            f"with its default planner's resharding read items for rank {r}'s "
            "rows (scripts/bench/torch_baseline.py): FileSystemReader "
            "torch.loads every overlapping saved chunk whole; also timed "
            "loading each tensor whole and slicing it. ckptfs mounts the same "
            "checkpoint files directly (written by scripts/gen_torch_ckpt.py "
            f"from {world} gloo ranks)")


def _torch_ckpt(args, work, world, dim):
    tdir = os.path.join(work, f"torch-dcp-{args.torch_gib}-w{world}-dim{dim}")
    if not os.path.exists(os.path.join(tdir, "large", ".metadata")):
        subprocess.check_call([
            "/usr/bin/python3", os.path.join(ROOT, "scripts", "gen_torch_ckpt.py"),
            tdir, "--large", str(args.torch_gib), "--world", str(world),
            "--dim", str(dim)])
    return os.path.join(tdir, "large")


def lib_env(args):
    """The environment a Python process needs to use the libckptfs built
    beside args.ckptfs (the sanitized build: its runtimes go first)."""
    lib = os.path.join(os.path.dirname(args.ckptfs), "libckptfs.so")
    env = dict(os.environ, CKPTFS_LIB=lib)
    syms = subprocess.run(["nm", "-D", lib], capture_output=True,
                          text=True).stdout
    if "__asan_" in syms:
        rt = [subprocess.check_output(["cc", f"-print-file-name={x}"],
                                      text=True).strip()
              for x in ("libasan.so", "libubsan.so")]
        env.update(LD_PRELOAD=":".join(rt), ASAN_OPTIONS="detect_leaks=0")
    return env


def direct_figures(args, t, work, w=8, r=3):
    """Issue 13's rows: a rank's state loaded straight from the data files
    (ckptfs.load, no FUSE) against raw pread; resuming on 8 ranks with
    dcp's load_state_dict and ckptfs.StorageReader against torch's
    FileSystemReader and against 8 readers of a --ranks mount; and, on a
    cold page cache, the device bytes read per byte delivered."""
    tb = os.path.join(HERE, "torch_baseline.py")
    world = 2 if args.quick else 4
    tdir = _torch_ckpt(args, work, world, 0)
    data = sorted(os.path.join(tdir, f) for f in os.listdir(tdir)
                  if f.endswith(".distcp"))
    warm(data)
    py = ["/usr/bin/python3", tb]
    env = lib_env(args)

    def run(*a):
        return subprocess.check_output(py + list(a), env=env).split()

    first_load_figures(args, t, tdir, w, r, run)
    # Resume on 8 ranks, all in one run.
    mnt = os.path.join(work, "mnt")
    tf, tc, tm = [], [], []
    reps = max(1, min(args.reps, 3))
    for _ in range(reps):
        tf.append(float(run("resume", tdir, "--world", "8", "--reader",
                            "fs")[0]))
        tc.append(float(run("resume", tdir, "--world", "8", "--reader",
                            "ckptfs")[0]))
        with Mount([args.ckptfs, "mount", tdir, mnt, "--world", "8",
                    "--ranks", "0-7"], mnt) as m:
            tm.append(float(run("resume", tdir, m.mnt, "--world", "8",
                                "--reader", "mount")[0]))
    fs_med = t.add(f"resume on 8 ranks from {world}: load_state_dict with "
                   f"torch's FileSystemReader", tf, unit="s")
    t.add("resume on 8 ranks: load_state_dict with ckptfs.StorageReader", tc,
          unit="s", note=f"{fs_med / statistics.median(tc):.1f}x faster than "
          "FileSystemReader, same processes and state dict")
    t.add("resume on 8 ranks: 8 readers of a --ranks 0-7 mount", tm, unit="s",
          note=f"StorageReader is {statistics.median(tm) / statistics.median(tc):.1f}x faster")
    resume_newest_torch(args, t)
    cold_figures(args, t, work, tdir, data, w, r, run)


def first_load_figures(args, t, tdir, w, r, run):
    """Issue 22's first load: ckptfs.load's first call in a fresh process
    (opening and indexing the checkpoint included) against a fresh
    process that allocates the same tensors and preads the same bytes
    into them (torch_baseline.py rawpread), each run its own process."""
    res, res1, raw = [], [], []
    files = [os.path.join(tdir, f) for f in os.listdir(tdir)]
    for _ in range(args.reps):
        warm(files)     # page cache warm for each run, whatever else ran
        o = run("rawpread", tdir, "--world", str(w), "--rank", str(r))
        raw.append((int(o[1]), float(o[0])))
        o = run("direct", tdir, "--world", str(w), "--rank", str(r))
        res.append((int(o[1]), float(o[0])))
        o = run("direct", tdir, "--world", str(w), "--rank", str(r),
                "--threads", "1")
        res1.append((int(o[1]), float(o[0])))
    base = t.add(f"fresh process: rank {r} of {w}'s tensors allocated, the "
                 f"same {raw[0][0] / 2**20:.0f} MiB pread into them "
                 f"(first-load baseline)", gbps(raw))
    t.add(f"ckptfs.load first call in a fresh process, rank {r} of {w}, "
          f"{os.cpu_count()} threads", gbps(res), base=(base, "baseline"),
          note="torch checkpoint, includes opening and indexing it; "
               "target >= 0.9x")
    t.add("ckptfs.load first call, 1 thread", gbps(res1),
          base=(base, "baseline"))


def resume_newest_torch(args, t, world=8):
    """The same resume with the newest torch (the sid chroot of `make
    sid-chroot`, when built): dcp.load into Shard(0) DTensors on 8 ranks
    from a checkpoint dcp.save wrote from 4 (--resume-gib), the state dict
    allocated and zeroed before the clock, FileSystemReader against
    ckptfs.StorageReader; and the limit for any reader (issue 22): a
    reader that reads nothing (torch's own metadata, planning, collectives
    and per-item resolve/commit) plus the data floor (8 processes each
    preading its eighth of the data files into memory allocated and
    zeroed the same way), each measured alone (tests/torch2_check.py
    resume)."""
    sid = os.path.join(ROOT, "scripts", "sid-chroot.sh")
    d = subprocess.check_output([sid, "path"], text=True).strip()
    if not os.path.exists(os.path.join(d, ".ckptfs-ready")):
        print("  newest torch: no sid chroot (make sid-chroot); not measured")
        return
    gib = 0.05 if args.quick else args.resume_gib
    inside = f"/tmp/ckptfs-bench-resume-{gib}"
    check = "@ROOT@/tests/torch2_check.py"
    if not os.path.exists(os.path.join(d + inside, ".metadata")):
        subprocess.check_call([sid, "run", "/usr/bin/python3", check,
                               "gen-large", inside, str(gib)],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    files = [os.path.join(d + inside, f) for f in os.listdir(d + inside)]
    ver = subprocess.check_output(
        [sid, "run", "/usr/bin/python3", "-c",
         "import torch; print(torch.__version__)"], text=True,
        stderr=subprocess.DEVNULL).split()[-1]
    res = {"fs": [], "ckptfs": [], "null": [], "floor": []}
    cpu = {k: [] for k in res}
    for i in range(max(1, min(args.reps, 3)) if not args.reps_resume
                   else args.reps_resume):
        for reader in res:
            if reader == "fs" and i >= 3:
                continue        # 10x slower; 3 runs say enough
            warm(files)
            out = subprocess.check_output(
                [sid, "run", "/usr/bin/python3", check, "resume", inside,
                 str(world), reader], text=True, stderr=subprocess.DEVNULL)
            wall, secs = map(float, out.split()[-2:])
            res[reader].append(wall)
            cpu[reader].append(secs)
    med = {k: statistics.median(v) for k, v in res.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    limit = med["null"] + med["floor"]
    fs = t.add(f"resume on {world} ranks from 4, torch {ver}: dcp.load with "
               f"FileSystemReader ({gib} GiB, state allocated and zeroed "
               f"first)", res["fs"], unit="s")
    null = t.add(f"resume on {world} ranks, torch {ver}: dcp.load with a "
                 f"reader that reads nothing (torch's metadata, planning, "
                 f"collectives, resolve/commit)", res["null"], unit="s")
    floor = t.add(f"data floor: {world} processes each pread 1/{world} of "
                  f"the data files into memory allocated and zeroed first",
                  res["floor"], unit="s")
    t.add(f"resume on {world} ranks, torch {ver}: dcp.load with "
          f"ckptfs.StorageReader", res["ckptfs"], unit="s",
          ratio=f"{limit / med['ckptfs']:.2f}x the limit (null {null:.3f} "
                f"s + floor {floor:.3f} s = {limit:.3f} s; target >= 0.9x)",
          note=f"{fs / med['ckptfs']:.1f}x faster than FileSystemReader; "
               f"CPU of all ranks {mcpu['ckptfs']:.3f} s against null "
               f"{mcpu['null']:.3f} + floor {mcpu['floor']:.3f} s: "
               f"{(mcpu['null'] + mcpu['floor']) / mcpu['ckptfs']:.2f}x")


def resume_figures(args, t, work, w=8, r=3):
    """--only resume: the two ratios issue 22 asks for, alone: the first
    ckptfs.load against its fresh-process baseline, and the resume with
    StorageReader against the limit."""
    world = 2 if args.quick else 4
    tdir = _torch_ckpt(args, work, world, 0)
    warm([os.path.join(tdir, f) for f in os.listdir(tdir)])
    env = lib_env(args)
    py = ["/usr/bin/python3", os.path.join(HERE, "torch_baseline.py")]

    def run(*a):
        return subprocess.check_output(py + list(a), env=env).split()
    first_load_figures(args, t, tdir, w, r, run)
    resume_newest_torch(args, t)


def cold_figures(args, t, work, tdir, data, w, r, run):
    if os.geteuid() != 0:
        print("  cold cache: needs root to drop caches; not measured")
        return
    mnt = os.path.join(work, "mnt")
    rows = {"torch": [], "mount": [], "direct": []}
    for _ in range(args.reps):
        o = run("load", tdir, "--world", str(w), "--rank", str(r), "--cold")
        rows["torch"].append(tuple(map(float, o[:3])))
        with ckptfs_mount(args, tdir, mnt, w, r) as m:
            o = run("view", m.mnt, "--cold", "--ckpt", tdir)
            rows["mount"].append(tuple(map(float, o[:3])))
        o = run("direct", tdir, "--world", str(w), "--rank", str(r),
                "--cold")
        rows["direct"].append(tuple(map(float, o[:3])))
    # Baseline: cat of the data files that hold rank r's rows (from
    # `ckptfs plan`'s read lines).
    plan = subprocess.check_output([args.ckptfs, "plan", tdir, "--world",
                                    str(w), "--rank", str(r)], text=True)
    need = {os.path.join(tdir, line.split("\t")[2])
            for line in plan.splitlines() if line.startswith("\tread\t")}
    cat = []
    for _ in range(args.reps):
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        t0 = time.perf_counter()
        n = read_all(sorted(need))
        cat.append((n, time.perf_counter() - t0))
    base = t.add(f"cold: cat of the {len(need)} data files holding rank "
                 f"{r}'s bytes (baseline)", gbps(cat))
    for name, label in (("torch", "torch's resharding loader"),
                        ("mount", "the ckptfs mount"),
                        ("direct", "ckptfs.load")):
        samples = rows[name]
        amp = statistics.median(dev / got for _, got, dev in samples)
        t.add(f"cold: {label}, rank {r} of {w}",
              [got / secs / 1e9 for secs, got, _ in samples],
              base=(base, "cat"),
              note=f"device read {amp:.2f} bytes per byte delivered")


def _merged_ranges(ckptfs, ckpt, w, r, align=4096):
    """The byte ranges rank r of w needs (ckptfs plan's reads), widened
    to align and merged where they touch: {path: [(off, end)]}."""
    plan = subprocess.check_output([ckptfs, "plan", ckpt, "--world", str(w),
                                    "--rank", str(r)], text=True)
    per = {}
    for line in plan.splitlines():
        f = line.split("\t")
        if len(f) == 5 and f[1] == "read":
            off, ln = int(f[3]), int(f[4])
            per.setdefault(os.path.join(ckpt, f[2]), []).append(
                (off // align * align, -(-(off + ln) // align) * align))
    out = {}
    for path, rs in per.items():
        rs.sort()
        merged = [list(rs[0])]
        for a, b in rs[1:]:
            if a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out[path] = merged
    return out


def _fio_log(ranges, path, bs=MiB):
    """An fio iolog (version 2) reading every range in bs requests."""
    lines = ["fio version 2 iolog"]
    for f in sorted(ranges):
        lines += [f"{f} add", f"{f} open"]
        for a, b in ranges[f]:
            lines += [f"{f} read {o} {min(bs, b - o)}" for o in range(a, b, bs)]
        lines.append(f"{f} close")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return sum(b - a for rs in ranges.values() for a, b in rs)


def _fio(dev, log):
    """The deep-queue reader: fio replaying log with O_DIRECT, libaio,
    32 requests in flight, in the throttled group; (bytes, seconds)."""
    import json
    out = dev.run(["fio", "--name=deepq", f"--read_iolog={log}",
                   "--ioengine=libaio", "--direct=1", "--iodepth=32",
                   "--replay_no_stall=1", "--output-format=json"])
    j = json.loads(out[out.index("{"):])["jobs"][0]
    return j["read"]["total_ios"], j["job_runtime"] / 1e3


def device_figures(args, t, work, w=8, r=3):
    """Issue 22's cold rows on a device whose speed the bench sets
    (scripts/bench/device.py): the torch checkpoint of direct_figures on
    a throttled loop device, page cache of its files dropped before each
    run; rank r of w read by a deep-queue reader (fio, the baseline), by
    ckptfs.load, and by cat of a mount's view files.  At two settings:
    bandwidth-bound (args.device_bps) and IOPS-bound (args.device_iops),
    each alone."""
    import device
    why = device.available()
    if why is None and subprocess.call(["sh", "-c", "command -v fio"],
                                       stdout=subprocess.DEVNULL):
        why = "fio is not installed"
    if why:
        print(f"  throttled device: {why}; not measured")
        return
    src = _torch_ckpt(args, work, 2 if args.quick else 4, 0)
    size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
    tb = os.path.join(HERE, "torch_baseline.py")
    # No node-local index cache: "as saved" is every run a node's first
    # open (lazy: .metadata, then the records the rank reads).
    env = dict(lib_env(args), CKPTFS_INDEX_CACHE="")
    with device.Device(os.path.join(work, "device"),
                       mib=size * 5 // 2 // MiB + 256) as dev:
        ckpt = os.path.join(dev.root, "ckpt")
        shutil.copytree(src, ckpt)
        dev.seal()
        ranges = _merged_ranges(args.ckptfs, ckpt, w, r)
        log = os.path.join(work, "deepq.iolog")
        need = _fio_log(ranges, log)
        mnt = os.path.join(work, "mnt")

        def cold(fn):
            dev.drop_cache()
            # idle past blk-throttle's slice, so that every run starts
            # with the same allowance (a slice's worth at once)
            time.sleep(0.25)
            b0, n0 = dev.read_bytes(), dev.read_ios()
            got, secs = fn()
            db, dn = dev.read_bytes() - b0, dev.read_ios() - n0
            return got, secs, db, dn

        def fio_run():
            ios, secs = _fio(dev, log)
            return need, secs

        def load_run(d=ckpt, extra=()):
            o = dev.run(["/usr/bin/python3", tb, "direct", d, "--world",
                         str(w), "--rank", str(r), *extra], env=env).split()
            return int(o[1]), float(o[0])

        # The same checkpoint with its index written (`ckptfs index`):
        # opening it reads one file instead of every record's header.
        ickpt = os.path.join(dev.root, "indexed")
        shutil.copytree(src, ickpt)
        subprocess.check_call([args.ckptfs, "index", ickpt],
                              stdout=subprocess.DEVNULL)
        dev.seal()

        def cat_run(m):
            def one():
                paths = files_of(m.mnt)
                n = sum(os.path.getsize(p) for p in paths)
                t0 = time.perf_counter()
                subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL,
                               check=True)
                return n, time.perf_counter() - t0
            return one

        settings = [("unthrottled", 0, 0),
                    (f"bandwidth-bound {args.device_bps / 1e9:g} GB/s",
                     args.device_bps, 0),
                    (f"IOPS-bound {args.device_iops} IOPS", 0,
                     args.device_iops)]
        if args.quick:          # the smoke run: one setting
            settings = settings[2:]
        for label, bps, iops in settings:
            dev.throttle(bps=bps, iops=iops)
            rows = {"fio": [], "load": [], "iload": [], "dload": [],
                    "cat": []}
            for _ in range(args.reps):
                rows["fio"].append(cold(fio_run))
                rows["load"].append(cold(load_run))
                rows["iload"].append(cold(lambda: load_run(ickpt)))
                rows["dload"].append(cold(lambda: load_run(
                    ickpt, ["--direct-io"])))
                with Mount([args.ckptfs, "mount", ckpt, mnt, "--world",
                            str(w), "--rank", str(r)], mnt,
                           popen=dev.popen) as m:
                    rows["cat"].append(cold(cat_run(m)))

            def note(name):
                s = rows[name]
                amp = statistics.median(db / got for got, _, db, _ in s)
                req = statistics.median(db / dn / 1024 if dn else 0
                                        for _, _, db, dn in s)
                n = statistics.median(dn for _, _, _, dn in s)
                return (f"device read {amp:.2f} bytes per byte delivered, "
                        f"{req:.0f} KiB per request ({n:.0f} requests)")
            base = t.add(f"device {label}: fio iodepth=32 O_DIRECT 1 MiB "
                         f"reads of rank {r} of {w}'s bytes ({need / MiB:.0f} "
                         "MiB, baseline)",
                         [g / s / 1e9 for g, s, _, _ in rows["fio"]],
                         note=note("fio"))
            t.add(f"device {label}: ckptfs.load, rank {r} of {w}",
                  [g / s / 1e9 for g, s, _, _ in rows["load"]],
                  base=(base, "fio"), note=note("load") +
                  "; as saved, no index cache: a lazy open reads "
                  ".metadata, then locates only the records the rank "
                  "reads, from its reads' own bytes where it can")
            t.add(f"device {label}: ckptfs.load, rank {r} of {w}, "
                  "checkpoint indexed (ckptfs index)",
                  [g / s / 1e9 for g, s, _, _ in rows["iload"]],
                  base=(base, "fio"), note=note("iload") +
                  "; page-cache pages are scattered 4 KiB pages: a "
                  "request ends at 128 of them when they are not "
                  "adjacent in memory, so the count varies run to run")
            t.add(f"device {label}: ckptfs.load(direct_io=True), rank {r} "
                  f"of {w}, checkpoint indexed",
                  [g / s / 1e9 for g, s, _, _ in rows["dload"]],
                  base=(base, "fio"), note=note("dload") +
                  "; cold ranges of 256 KiB or more read with O_DIRECT "
                  "through huge pages, max_sectors_kb per request")
            t.add(f"device {label}: cat of the mount's view files",
                  [g / s / 1e9 for g, s, _, _ in rows["cat"]],
                  base=(base, "fio"), note=note("cat"))

        dev.throttle()


def zip64_figure(args, t, work):
    """A real torch.save record larger than 4 GiB (zip64), written by
    torch's save_state_dict: mount time and a check of its last MiB."""
    tb = os.path.join(HERE, "torch_baseline.py")
    d = os.path.join(work, "torch-zip64")
    if not os.path.exists(os.path.join(d, ".metadata")):
        print("writing a 4.05 GiB tensor with torch's save_state_dict...",
              flush=True)
        subprocess.check_call(["/usr/bin/python3", tb, "zip64", d])
    mnt = os.path.join(work, "mnt")
    mt = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        with ckptfs_mount(args, d, mnt, 2, 1) as m:
            mt.append(time.perf_counter() - t0)
            out = subprocess.run(["/usr/bin/python3", tb, "zip64-check",
                                  m.mnt], capture_output=True, text=True)
    ok = out.returncode == 0
    t.add("mount of a torch checkpoint with a 4.05 GiB (zip64) record", mt,
          unit="s", note="last MiB of rank 1's view matches" if ok else
          "MISMATCH: " + out.stdout.strip())


def strided_figure(args, t, work, n=2048):
    """A transposed float32 tensor (record strides [1, n], as torch saves
    a transposed replicated tensor) read through the mount with 128 KiB
    and 1 MiB reads and by ckptfs.load: throughput against reading its
    data file, and against the same tensor saved row-major read the same
    way; the bytes the daemon read (rchar in /proc/PID/io) per byte
    delivered."""
    import msgpack
    import numpy as np
    if args.quick:
        n = 256
    a = np.arange(n * n, dtype="<f4").reshape(n, n)
    dirs = {}
    for kind, data, extra in (("strided", a.T, {"strides": [1, n]}),
                              ("rowmajor", a, {})):
        d = dirs[kind] = os.path.join(work, f"{kind}-{n}")
        if os.path.exists(os.path.join(d, ".metadata")):
            continue
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "data"), "wb") as fh:
            fh.write(np.ascontiguousarray(data).tobytes())
        with open(os.path.join(d, ".metadata"), "wb") as fh:
            msgpack.dump({
                "format": "tensorplay-dcp", "version": 1,
                "state_dict_metadata": {"t": {
                    "type": "tensor", "dtype": "float32", "size": [n, n],
                    "chunks": [{"offsets": [0, 0], "sizes": [n, n]}]}},
                "storage_data": [dict({
                    "fqn": "t", "offsets": [0, 0], "relative_path": "data",
                    "offset": 0, "length": n * n * 4}, **extra)]}, fh)
    raw = os.path.join(dirs["strided"], "data")
    warm([raw, os.path.join(dirs["rowmajor"], "data")])
    nbytes = n * n * 4
    base = t.add(f"strided record, {nbytes >> 20} MiB: read of its data "
                 f"file (baseline)",
                 gbps(timed(lambda: _timed_read([raw]), args.reps)))
    for bs in (128 << 10, MiB):
        res = {}
        for kind, extra in (("rowmajor", ()), ("strided", ()),
                            ("nowindow", ("-o", "ahead_kb=0"))):
            samples, amp, ok = [], [], True
            d = dirs["strided" if kind == "nowindow" else kind]
            for _ in range(args.reps):
                with ckptfs_mount(args, d, os.path.join(work, "mnt"),
                                  1, 0, extra) as m:
                    path = os.path.join(m.mnt, "t")
                    before = _rchar(m.proc.pid)
                    t0 = time.perf_counter()
                    got = read_all([path], bs)
                    samples.append(got / (time.perf_counter() - t0) / 1e9)
                    amp.append((_rchar(m.proc.pid) - before) / got)
                    with open(path, "rb") as fh:
                        ok = ok and fh.read() == a.tobytes()
            res[kind] = (samples, amp, ok)
        rm = t.add(f"the same tensor saved row-major through the mount, "
                   f"{bs >> 10} KiB reads", res["rowmajor"][0],
                   base=(base, "its file"))
        for kind, label in (("strided", ""),
                            ("nowindow", ", no read-ahead windows "
                                         "(-o ahead_kb=0)")):
            samples, amp, ok = res[kind]
            t.add(f"strided record through the mount, {bs >> 10} KiB "
                  f"reads{label}", samples, base=(base, "its file"),
                  note=f"{statistics.median(samples) / rm:.2f}x row-major; "
                       f"daemon read {statistics.median(amp):.2f} bytes per "
                       f"byte delivered; bytes {'match' if ok else 'DIFFER'}")
    env = lib_env(args)
    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); "
            "import ckptfs, numpy as np; ckptfs.load(sys.argv[1], "
            "backend='numpy'); t0 = time.perf_counter(); "
            "sd = ckptfs.load(sys.argv[1], backend='numpy'); "
            "dt = time.perf_counter() - t0; n = int(sys.argv[3]); "
            "ok = (sd['t'] == np.arange(n * n, dtype='<f4')"
            ".reshape(n, n)).all(); print(sd['t'].nbytes, dt, int(ok))")
    res = {}
    for kind in ("rowmajor", "strided"):
        out = []
        for _ in range(args.reps):
            o = subprocess.run(["/usr/bin/python3", "-c", code, dirs[kind],
                                os.path.dirname(HERE), str(n)],
                               capture_output=True, text=True, env=env,
                               check=True).stdout.split()
            out.append((int(o[0]), float(o[1]), o[2] == "1"))
        res[kind] = out
    rm = t.add("the same tensor saved row-major: ckptfs.load (new memory, "
               f"{os.cpu_count()} threads)",
               gbps([(g, s) for g, s, _ in res["rowmajor"]]),
               base=(base, "its file"))
    s = gbps([(g, s) for g, s, _ in res["strided"]])
    t.add("strided record: ckptfs.load (new memory)", s,
          base=(base, "its file"),
          note=f"{statistics.median(s) / rm:.2f}x row-major; values "
               f"{'match' if all(k for _, _, k in res['strided']) else 'DIFFER'}")


def zstd_figure(args, t, work):
    """A native checkpoint whose records are zstd frames (the layout
    torch's ZStandard extension gives, with raw payloads): the first read
    of every view byte through the mount, and ckptfs.load, against
    decompressing the same records in this process with the zstandard
    package (what torch's reader does before torch.load)."""
    import msgpack
    import numpy as np
    import zstandard
    mib = 16 if args.quick else 256
    rows, cols, nchunks = mib * MiB // 4 // 1024, 1024, 32
    d = os.path.join(work, f"zstd-{mib}")
    meta = os.path.join(d, ".metadata")
    if not os.path.exists(meta):
        os.makedirs(d, exist_ok=True)
        rng = np.random.default_rng(5)
        per = rows // nchunks
        recs, off = [], 0
        cz = zstandard.ZstdCompressor(level=3)
        with open(os.path.join(d, "data"), "wb") as fh:
            for c in range(nchunks):
                # bf16-precision values: compressible, as optimizer state is
                a = rng.standard_normal((per, cols)).astype("<f4")
                a = (a.view("<u4") & 0xFFFF0000).view("<f4")
                z = cz.compress(a.tobytes())
                fh.write(z)
                recs.append({"fqn": "w", "offsets": [c * per, 0],
                             "relative_path": "data", "offset": off,
                             "length": len(z),
                             "transforms": ["stream.zstd/1"]})
                off += len(z)
        with open(meta + ".tmp", "wb") as fh:
            msgpack.dump({
                "format": "tensorplay-dcp", "version": 1,
                "state_dict_metadata": {"w": {
                    "type": "tensor", "dtype": "float32",
                    "size": [per * nchunks, cols],
                    "chunks": [{"offsets": [c * per, 0], "sizes": [per, cols]}
                               for c in range(nchunks)]}},
                "storage_data": recs}, fh)
        os.rename(meta + ".tmp", meta)
    with open(meta, "rb") as fh:
        recs = msgpack.load(fh)["storage_data"]
    data = os.path.join(d, "data")
    warm([data])
    stored = os.path.getsize(data)

    def decode_all():
        dz = zstandard.ZstdDecompressor()
        t0 = time.perf_counter()
        n = 0
        with open(data, "rb") as fh:
            for r in recs:
                fh.seek(r["offset"])
                n += len(dz.decompress(fh.read(r["length"]),
                                       max_output_size=64 * MiB))
        return n, time.perf_counter() - t0
    decoded = decode_all()[0]
    base = t.add(f"zstd records, {decoded >> 20} MiB decoded from "
                 f"{stored >> 20} MiB: zstandard decode in Python (baseline)",
                 gbps(timed(decode_all, args.reps)))
    t.add("zstd records through the mount, first read (each decoded once)",
          gbps(timed(first_read(args, d, 1, 0, work), args.reps)),
          base=(base, "zstandard"))
    # rank 3 of 8: 4 of the 32 records are decoded
    t.add("zstd records through the mount, first read of rank 3 of 8",
          gbps(timed(first_read(args, d, 8, 3, work), args.reps)),
          base=(base, "zstandard"), note="decodes only its 4 records")
    env = lib_env(args)
    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); "
            "import ckptfs; t0 = time.perf_counter(); "
            "sd = ckptfs.load(sys.argv[1], backend='numpy'); "
            "print(sd['w'].nbytes, time.perf_counter() - t0)")

    def load_once():
        out = subprocess.run(["/usr/bin/python3", "-c", code, d,
                              os.path.join(os.path.dirname(HERE))],
                             capture_output=True, text=True, env=env,
                             check=True).stdout.split()
        return int(out[0]), float(out[1])
    t.add("zstd records: ckptfs.load of all (2 threads decode)",
          gbps(timed(load_once, args.reps)), base=(base, "zstandard"))


def zstd_rss_figures(args, t, work, readers=16, cache_mb=64):
    """Peak RSS with 16 readers of zstd records at once, against the
    -o cache_mb cap: the daemon with 16 concurrent readers of its files,
    and ckptfs.load with 16 threads (its peak beyond the tensors it
    returns).  The records are 48 MiB each (3 MiB with --quick, under a
    4 MiB cap), so that the cap holds one at a time."""
    mib, cache_mb = (3, 4) if args.quick else (48, cache_mb)
    tools = os.path.join(ROOT, "tests", "hang_tools.py")
    d = os.path.join(work, f"zstd-rss-{readers}x{mib}")
    if not os.path.exists(os.path.join(d, ".metadata")):
        subprocess.check_call(["/usr/bin/python3", tools, "zstd", d,
                               "--keys", str(readers), "--mib", str(mib)])
    warm([os.path.join(d, f) for f in os.listdir(d)])
    daemon, load = [], []
    for _ in range(args.reps):
        with ckptfs_mount(args, d, os.path.join(work, "mnt"), 1, 0,
                          ("-o", f"cache_mb={cache_mb}")) as m:
            subprocess.check_call(["/usr/bin/python3", tools, "check",
                                   m.mnt, "--keys", str(readers), "--mib",
                                   str(mib), "--procs", str(readers)],
                                  stdout=subprocess.DEVNULL)
            daemon.append(m.status("VmHWM") / MiB)
        out = subprocess.run(["/usr/bin/python3", tools, "load", d,
                              os.path.dirname(HERE), "--keys", str(readers),
                              "--mib", str(mib), "--threads", str(readers),
                              "--cache-mb", str(cache_mb)],
                             env=lib_env(args), capture_output=True,
                             text=True, check=True).stdout.split()
        base, tensors, peak = int(out[1]), int(out[3]), int(out[5])
        load.append(peak - base - tensors)
    what = f"{readers} readers of {readers} {mib} MiB zstd records"
    t.add(f"daemon peak RSS, {what}, -o cache_mb={cache_mb}", daemon,
          unit="MiB", base=(cache_mb, "the cap"))
    t.add(f"ckptfs.load peak RSS beyond its tensors, {readers} threads, "
          f"cache_mb={cache_mb}", load, unit="MiB", base=(cache_mb, "the cap"))


def _timed_read(paths):
    t0 = time.perf_counter()
    n = read_all(paths)
    return n, time.perf_counter() - t0


def _rchar(pid):
    with open(f"/proc/{pid}/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def verify_figures(args, t, ckpt):
    """`ckptfs verify` throughput against cat and xxh64sum of the same
    files, all in the page cache."""
    files = sorted(os.path.join(ckpt, f) for f in os.listdir(ckpt)
                   if f.endswith(".distcp"))
    nbytes = sum(os.path.getsize(f) for f in files)
    warm(files)

    def timed_cmd(argv):
        res = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            res.append(nbytes / (time.perf_counter() - t0) / 1e9)
        return res
    cat = t.add(f"cat of the data files ({nbytes / 2**30:.2f} GiB)",
                timed_cmd(["cat"] + files))
    base = [(cat, "cat")]
    if shutil.which("xxh64sum"):
        xx = t.add("xxh64sum of the data files", timed_cmd(["xxh64sum"] + files))
        base = [(xx, "xxh64sum")]
    res = timed_cmd([args.ckptfs, "verify", ckpt])
    t.add("ckptfs verify (xxh3 of every record, 2 threads)", res,
          base=base[0], note=f"{statistics.median(res) / cat:.2f}x cat")


def mount_figures(args, t, work):
    meta = os.path.join(work, "meta1m")
    keys, chunks = (100000, 10) if not args.quick else (1000, 10)
    if not os.path.exists(os.path.join(meta, ".metadata")):
        subprocess.check_call(["/usr/bin/python3",
                               os.path.join(HERE, "gen_bench_ckpt.py"),
                               "meta", meta, "--keys", str(keys),
                               "--chunks", str(chunks)])
    secs, rss = [], []
    for _ in range(args.reps):
        with ckptfs_mount(args, meta, os.path.join(work, "mnt"), 8, 3) as m:
            secs.append(m.ready)
            rss.append(m.status("VmHWM") / MiB)
    msize = os.path.getsize(os.path.join(meta, ".metadata")) / MiB
    t.add(f"mount, {keys} keys x {chunks} chunks ({msize:.0f} MiB metadata)",
          secs, unit="s")
    t.add("daemon peak RSS after that mount", rss, unit="MiB")


def ranklocal_figure(args, t, work):
    """Mounting a rank-local torch checkpoint (one __R.metadata per rank)
    of many parts x many keys: every part indexed, then merged (chunks
    sorted per key, replicated ones dropped)."""
    parts, keys = (64, 8) if args.quick else (2048, 32)
    d = os.path.join(work, f"ranklocal-{parts}x{keys}")
    if not os.path.exists(os.path.join(d, f"__{parts - 1}.metadata")):
        print(f"writing a rank-local checkpoint of {parts} parts x "
              f"{2 * keys} keys...", flush=True)
        subprocess.check_call(["/usr/bin/python3",
                               os.path.join(ROOT, "tests", "make_ranklocal.py"),
                               "write", d, "--parts", str(parts),
                               "--keys", str(keys)])
    warm([os.path.join(d, f) for f in os.listdir(d)])
    secs = []
    for _ in range(args.reps):
        with ckptfs_mount(args, d, os.path.join(work, "mnt"), 1, 0) as m:
            secs.append(m.ready)
    t.add(f"mount, rank-local torch checkpoint, {parts} parts x {2 * keys} "
          f"keys ({parts * 2 * keys} chunks before the merge)", secs,
          unit="s")


def rss_growth(args, t, ckpt, work):
    res = []
    for _ in range(max(1, args.reps // 2)):
        with ckptfs_mount(args, ckpt, os.path.join(work, "mnt"), 1, 0) as m:
            before = m.status("VmRSS")
            n = read_all(files_of(m.mnt))
            after = m.status("VmRSS")
            res.append((after - before) / MiB)
    t.add(f"daemon RSS growth reading the whole view ({n / (1 << 30):.2f} GiB)",
          res, unit="MiB")


def chart(t, png):
    rows = [r for r in t.rows if r["unit"] == "GB/s"]
    dat = png[:-4] + ".dat"
    with open(dat, "w") as fh:
        for i, r in enumerate(rows):
            label = r["name"].replace('"', "'")
            fh.write(f'{i} "{label}" {r["med"]:.4f} {r["min"]:.4f} {r["max"]:.4f}\n')
    gp = f"""
set terminal png size 1400,{220 + 28 * len(rows)} font ",10"
set output "{png}"
set style fill solid 0.6
set xlabel "GB/s (median; bars: min-max)"
set ytics ({", ".join(f'"{r["name"]}" {i}' for i, r in enumerate(rows))})
set yrange [-1:{len(rows)}]
set xrange [0:*]
set lmargin 60
set title "ckptfs make bench"
plot "{dat}" using ($3/2):1:($3/2):(0.35) with boxxyerror notitle, \\
     "{dat}" using 3:1:4:5 with xerrorbars notitle lc rgb "black"
"""
    try:
        subprocess.run(["gnuplot"], input=gp.encode(), check=True)
        return True
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"  (no chart: {e})")
        return False


def s3_rows(args, t, work):
    """Issue 20's object-store rows (scripts/bench/s3bench.py), against a
    radosgw of the bench's own."""
    s3bench.s3_figures(args, t, lib_env(args), args.s3_gib,
                       dict(Mount=Mount, files_of=files_of,
                            read_all=read_all))


def request_rows(args, t, work):
    """Issue 29's request counts (scripts/bench/s3bench.py)."""
    s3bench.request_rows(args, t, lib_env(args))


def wan_rows(args, t, work):
    """Issue 28's WAN rows (scripts/bench/wanbench.py): the S3 rows through
    a latency and bandwidth proxy at 0, 20 and 50 ms."""
    wanbench.wan_figures(args, t, lib_env(args),
                         dict(Mount=Mount, files_of=files_of,
                              read_all=read_all))


def az_rows(args, t, work):
    """Issue 39's Azure rows (scripts/bench/azbench.py): ckptfs.load and
    the resume from az:// on Azurite, through the WAN proxy."""
    azbench.az_figures(args, t, lib_env(args))


def main(argv):
    # No node-local index cache unless a row asks for one (s3bench's):
    # every repetition's open indexes a torch checkpoint as the first did.
    os.environ["CKPTFS_INDEX_CACHE"] = ""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptfs", required=True)
    ap.add_argument("--ceilfs", required=True)
    ap.add_argument("--work", default="/tmp/ckptfs-bench")
    ap.add_argument("--gib", type=float, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--torch-gib", type=float, default=1.05)
    ap.add_argument("--s3-gib", type=float, default=2,
                    help="the checkpoint of the S3 rows (issue 20)")
    ap.add_argument("--resume-gib", type=float, default=2,
                    help="the torch 2.x checkpoint of the resume rows")
    ap.add_argument("--reps-resume", type=int, default=0,
                    help="repetitions of the resume rows (default: "
                         "--reps, at most 3)")
    ap.add_argument("--req-gib", type=float, default=0.5,
                    help="the torch 2.x checkpoint of the request rows' "
                         "resume (issue 29)")
    ap.add_argument("--coop-mib", type=int, default=64,
                    help="the bulk of the cooperative request rows' "
                         "checkpoint (issue 29)")
    ap.add_argument("--quick", action="store_true")
    # blk-throttle lets a group that was idle dispatch one slice (100 ms)
    # worth at once, so a setting must make the run last well over that:
    # rank 3 of 8 of the 1.05 GiB checkpoint is 135 MiB.
    ap.add_argument("--device-bps", type=float, default=2e8,
                    help="the throttled device's bandwidth-bound setting")
    ap.add_argument("--device-iops", type=int, default=500,
                    help="the throttled device's IOPS-bound setting")
    ap.add_argument("--wan-gib", type=float, default=0.25,
                    help="the torch 2.x checkpoint of the WAN rows")
    ap.add_argument("--wan-delays", default="0,20,50",
                    type=lambda s: [int(x) for x in s.split(",")],
                    help="the WAN rows' first-byte delays (ms)")
    ap.add_argument("--az-delays", default="20",
                    type=lambda s: [int(x) for x in s.split(",")],
                    help="the Azure rows' first-byte delays (ms)")
    ap.add_argument("--only", choices=["device", "strided", "s3", "resume",
                                       "requests", "wan", "azure"],
                    help="run only these rows (no chart, results.md kept)")
    ap.add_argument("--out", default=os.path.join(HERE, "results.md"))
    args = ap.parse_args(argv)
    if args.quick:
        args.gib, args.reps, args.torch_gib = 0.02, 1, 0.01
        args.s3_gib = 0.02
    os.makedirs(args.work, exist_ok=True)
    t = Table()
    if args.only:
        {"device": device_figures, "strided": strided_figure,
         "s3": s3_rows, "requests": request_rows, "wan": wan_rows,
         "azure": az_rows,
         "resume": resume_figures}[args.only](args, t, args.work)
        return 0
    ckpts = {}
    for tiling in ("dim0", "dim1"):
        d = os.path.join(args.work, f"{tiling}-{args.gib}-v2")
        if not os.path.exists(os.path.join(d, ".metadata")):
            print(f"generating {args.gib} GiB checkpoint, {tiling} shards...",
                  flush=True)
            subprocess.check_call(["/usr/bin/python3",
                                   os.path.join(HERE, "gen_bench_ckpt.py"),
                                   "data", d, "--tiling", tiling,
                                   "--gib", str(args.gib)])
        ckpts[tiling] = d
    data_a = sorted(os.path.join(ckpts["dim0"], f) for f in
                    os.listdir(ckpts["dim0"]) if f.endswith(".distcp"))
    for d in ckpts.values():
        warm([os.path.join(d, f) for f in os.listdir(d)])
    print(f"ckptfs bench: {args.gib} GiB per tiling, {args.reps} reps, "
          f"{os.cpu_count()} CPUs", flush=True)
    for w, r in ((8, 3), (3, 1)):
        with ckptfs_mount(args, ckpts["dim0"], os.path.join(args.work, "mnt"),
                          w, r) as m:
            sizes = [os.path.getsize(p) for p in files_of(m.mnt)]
            nbytes = sum(sizes)
        ceil = ceiling(args, t, args.work, data_a, nbytes, sizes)
        for tiling in ("dim0", "dim1"):
            view_runs(args, t, ckpts[tiling], tiling, w, r, args.work,
                      sorted(os.path.join(ckpts[tiling], f)
                             for f in os.listdir(ckpts[tiling])
                             if f.endswith(".distcp")), ceil)
    all_ranks(args, t, ckpts["dim0"], args.work)
    prefetch(args, t, ckpts["dim1"], args.work)
    verify_figures(args, t, ckpts["dim0"])
    strided_figure(args, t, args.work)
    zstd_figure(args, t, args.work)
    zstd_rss_figures(args, t, args.work)
    mount_figures(args, t, args.work)
    ranklocal_figure(args, t, args.work)
    rss_growth(args, t, ckpts["dim0"], args.work)
    note = torch_figures(args, t, args.work)
    direct_figures(args, t, args.work)
    device_figures(args, t, args.work)
    s3_rows(args, t, args.work)
    az_rows(args, t, args.work)     # says why not with --quick
    if not args.quick:
        request_rows(args, t, args.work)
        wan_rows(args, t, args.work)
        zip64_figure(args, t, args.work)
    header = (f"# ckptfs benchmark\n\n{time.strftime('%Y-%m-%d %H:%M')}, "
              f"{os.cpu_count()} CPUs, {args.gib} GiB float32 Adam state per "
              f"tiling, saved by 4 ranks; backing files in the page cache; "
              f"{args.reps} repetitions (median, min, max).\n\n"
              f"Ratios are against baselines measured in the same run: the "
              f"FUSE ceiling is scripts/bench/ceilfs.c, a minimal FUSE file "
              f"served by pread with the same settings.\n\n"
              f"Torch baseline: {note}.")
    if not args.quick:
        with open(args.out, "w") as fh:
            fh.write(t.markdown(header))
        chart(t, args.out[:-3] + ".png")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
