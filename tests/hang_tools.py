#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Helpers for the shutdown and memory tests (tests/bats/shutdown.bats,
tests/bats/memory.bats), written independently of ckptfs.

    hang_tools.py big OUT [--keys 3] [--mib 128]
        a native checkpoint of KEYS float32 keys of MIB MiB each (key kK,
        element i = (K + 1) * 2**26 + i rounded to float32), one data file each
    hang_tools.py zstd OUT [--keys 16] [--mib 48]
        the same shape with every key one zstd record (level 1: the values
        are a ramp, so each record compresses to a few MiB); the frame
        declares its size
    hang_tools.py over OUT FILE [--mib 4]
        a native checkpoint whose one key x (MIB MiB of float32) is the
        first bytes of FILE, reached through the symlink OUT/d0 (mount it
        with -o follow_symlinks): FILE may be on a mount made to hang
    hang_tools.py reader MNT [--start N] [--shuffle] [--only NAME]
        read every file under MNT (but .ckptfs/; only those named NAME
        with --only), from the N-th in path
        order round to the one before it, with 1 MiB preads (in a random
        order with --shuffle), then
        evict it (POSIX_FADV_DONTNEED), over and over; exit 0 at the first
        error, or when MNT is no longer a mount point
    hang_tools.py check MNT [--keys 16] [--mib 48] [--procs 16]
        read MNT/kK for every key at once, one process each, 1 MiB at a
        time, and compare with the values; exit 1 naming a file that
        differs
    hang_tools.py load CKPT SCRIPTS [--keys 16] [--mib 48] [--threads 16]
                  [--cache-mb 64]
        ckptfs.load (from SCRIPTS) the whole checkpoint with the numpy
        backend, compare with the values, and print "base B output O peak
        P": this process's peak RSS (VmHWM) before, the tensors' size and
        the peak after, in MiB
    hang_tools.py cached [--wait-some] [--term-pidfile F] PATH...
        bytes of the files in the page cache now (mmap + mincore, which
        costs a FUSE daemon no request), in all; with --wait-some, as
        soon as that is not 0 (looking again and again, for up to 30 s);
        with --term-pidfile, waits for the files to appear, then sends
        SIGTERM to the pid in F as soon as it has looked
"""
import argparse
import ctypes
import mmap
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "scripts"))


# numpy and the writer are imported when first used: the reader starts in
# a fraction of the time, which counts in the kill rounds under CPU load.
class _Lazy:
    def __getattr__(self, name):
        import numpy
        return getattr(numpy, name)


np = _Lazy()


def write_checkpoint(*args, **kw):
    from native_writer import write_checkpoint as wc
    return wc(*args, **kw)


def values(k, n):
    return (np.arange(n, dtype=np.int64) + (k + 1) * (1 << 26)).astype("<f4")


def big(out, keys, mib, zstd=False):
    n = (mib << 20) // 4
    sdm, storage = {}, []
    os.makedirs(out, exist_ok=True)
    if zstd:
        import zstandard
        zc = zstandard.ZstdCompressor(level=1)
    for k in range(keys):
        raw = values(k, n).tobytes()
        rec = {"fqn": f"k{k}", "offsets": [0], "relative_path": f"d{k}",
               "offset": 0}
        if zstd:
            raw = zc.compress(raw)
            rec["transforms"] = ["stream.zstd/1"]
        rec["length"] = len(raw)
        with open(os.path.join(out, f"d{k}"), "wb") as fh:
            fh.write(raw)
        sdm[f"k{k}"] = {"type": "tensor", "dtype": "float32", "size": [n],
                        "chunks": [{"offsets": [0], "sizes": [n]}]}
        storage.append(rec)
    write_checkpoint(out, {}, sdm, storage)


def over(out, target, mib):
    n = (mib << 20) // 4
    os.makedirs(out, exist_ok=True)
    os.symlink(target, os.path.join(out, "d0"))
    write_checkpoint(out, {}, {"x": {
        "type": "tensor", "dtype": "float32", "size": [n],
        "chunks": [{"offsets": [0], "sizes": [n]}]}},
        [{"fqn": "x", "offsets": [0], "relative_path": "d0", "offset": 0,
          "length": n * 4}])


def reader(mnt, start, shuffle, only):
    rng = random.Random(start)
    while os.path.ismount(mnt):     # then every read fails
        paths = []
        # A listing that fails is the first error too (a dead daemon's
        # mount may still look like a mount point from cached attributes).
        for root, dirs, files in os.walk(mnt, onerror=lambda e: os._exit(0)):
            dirs[:] = sorted(d for d in dirs if d != ".ckptfs")
            paths += [os.path.join(root, f) for f in sorted(files)
                      if only is None or f == only]
        start %= max(1, len(paths))
        for p in paths[start:] + paths[:start]:
            try:
                fd = os.open(p, os.O_RDONLY)
                try:
                    blocks = list(range(0, os.fstat(fd).st_size, 1 << 20))
                    if shuffle:
                        rng.shuffle(blocks)
                    for off in blocks:
                        os.pread(fd, 1 << 20, off)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
            except OSError:
                os._exit(0)


def check_one(path, k, n):
    want = values(k, n).tobytes()
    with open(path, "rb", buffering=0) as fh:
        off = 0
        while True:
            b = fh.read(1 << 20)
            if not b:
                break
            if b != want[off:off + len(b)]:
                return f"{path}: differs in the MiB at {off}"
            off += len(b)
    return None if off == len(want) else f"{path}: {off} bytes, not {len(want)}"


def check(mnt, keys, mib, procs):
    from concurrent.futures import ProcessPoolExecutor
    n = (mib << 20) // 4
    with ProcessPoolExecutor(procs) as ex:
        bad = [r for r in ex.map(check_one, [f"{mnt}/k{k}" for k in range(keys)],
                                 range(keys), [n] * keys) if r]
    for b in bad:
        print(b)
    print(f"{keys} files, {len(bad)} differ")
    return 1 if bad else 0


def hwm_mib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) >> 10
    return 0


def load(ckpt, scripts, keys, mib, threads, cache_mb):
    sys.path.insert(0, scripts)
    import ckptfs
    n = (mib << 20) // 4
    base = hwm_mib()
    views = ckptfs.load(ckpt, backend="numpy", threads=threads,
                        cache_mb=cache_mb)
    peak = hwm_mib()
    out = sum(a.nbytes for a in views.values()) >> 20
    bad = [k for k in range(keys)
           if not np.array_equal(views[f"k{k}"], values(k, n))]
    print(f"base {base} output {out} peak {peak}")
    if bad:
        print(f"keys that differ: {bad}")
    return 1 if bad else 0


def cached_bytes(paths):
    """Bytes of the files in the page cache (mmap + mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_char_p]
    page = mmap.PAGESIZE
    total = 0
    for p in paths:
        size = os.path.getsize(p)
        if size == 0:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd,
                             0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "mmap", p)
            npages = (size + page - 1) // page
            vec = ctypes.create_string_buffer(npages)
            if libc.mincore(addr, size, vec):
                raise OSError(ctypes.get_errno(), "mincore", p)
            libc.munmap(addr, size)
            raw = np.frombuffer(vec.raw, dtype=np.uint8)
            total += min(size, int(np.count_nonzero(raw & 1)) * page)
        finally:
            os.close(fd)
    return total


def cached(paths, wait_some, term_pidfile=None):
    deadline = time.monotonic() + 30 * int(os.environ.get("CKPTFS_TIME_SCALE", "1") or 1)
    while True:
        try:
            c = cached_bytes(paths)
            break
        except FileNotFoundError:
            # --term-pidfile: started before the mount, waits for it
            if not term_pidfile or time.monotonic() >= deadline:
                raise
            time.sleep(0.001)
    while wait_some and c == 0 and time.monotonic() < deadline:
        c = cached_bytes(paths)
    if term_pidfile:
        # SIGTERM at once, before the prefetch can get further
        while True:
            try:
                with open(term_pidfile) as f:
                    pid = int(f.read())
                break
            except (FileNotFoundError, ValueError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.001)
        os.kill(pid, signal.SIGTERM)
    print(c)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, keys, mib in (("big", 3, 128), ("zstd", 16, 48)):
        p = sub.add_parser(name)
        p.add_argument("out")
        p.add_argument("--keys", type=int, default=keys)
        p.add_argument("--mib", type=int, default=mib)
    p = sub.add_parser("over")
    p.add_argument("out")
    p.add_argument("file")
    p.add_argument("--mib", type=int, default=4)
    p = sub.add_parser("reader")
    p.add_argument("mnt")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--only")
    p = sub.add_parser("check")
    p.add_argument("mnt")
    p = sub.add_parser("load")
    p.add_argument("ckpt")
    p.add_argument("scripts")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--cache-mb", type=int, default=64)
    for name in ("check", "load"):
        p = sub.choices[name]
        p.add_argument("--keys", type=int, default=16)
        p.add_argument("--mib", type=int, default=48)
    sub.choices["check"].add_argument("--procs", type=int, default=16)
    p = sub.add_parser("cached")
    p.add_argument("--wait-some", action="store_true")
    p.add_argument("--term-pidfile")
    p.add_argument("paths", nargs="+")
    a = ap.parse_args()
    if a.cmd in ("big", "zstd"):
        big(a.out, a.keys, a.mib, a.cmd == "zstd")
    elif a.cmd == "over":
        over(a.out, a.file, a.mib)
    elif a.cmd == "reader":
        reader(a.mnt, a.start, a.shuffle, a.only)
    elif a.cmd == "check":
        sys.exit(check(a.mnt, a.keys, a.mib, a.procs))
    elif a.cmd == "load":
        sys.exit(load(a.ckpt, a.scripts, a.keys, a.mib, a.threads,
                      a.cache_mb))
    else:
        cached(a.paths, a.wait_some, a.term_pidfile)


if __name__ == "__main__":
    main()
