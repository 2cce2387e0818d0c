#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Concurrency stress test of a mounted view.

    stress.py CKPT MNT --world W --rank R [--procs 16] [--seconds 5]

N processes, for a bounded time, do random preads (random offsets and
sizes, crossing chunk boundaries and ending past EOF), O_DIRECT reads (which
bypass the page cache, so every one reaches the daemon), preads after
dropping the file's cached pages, and mmap reads across all files of the
view.  Every byte is compared with the independent reference.  Prints the
operation and mismatch counts; exits 1 on any mismatch or error.
"""
import argparse
import mmap
import multiprocessing as mp
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def worker(args, exp, seed, q):
    rng = random.Random(seed)
    paths = [p for p in exp if exp[p]] or list(exp)
    ops = bad = 0
    deadline = time.monotonic() + args.seconds
    try:
        while time.monotonic() < deadline:
            rel = rng.choice(paths)
            want = exp[rel]
            n = len(want)
            path = os.path.join(args.mnt, rel)
            kind = rng.random()
            off = rng.randrange(0, n + 64) if rng.random() < 0.9 else n
            size = rng.choice([1, 3, 4096, 65536, 1 << 20,
                               rng.randrange(1, 3 * n + 10)])
            if kind < 0.35:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    got = os.pread(fd, size, off)
                finally:
                    os.close(fd)
            elif kind < 0.7:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                try:
                    got = os.pread(fd, size, off)
                finally:
                    os.close(fd)
            else:
                if n == 0:
                    continue
                with open(path, "rb") as fh, \
                        mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as mm:
                    off = min(off, n - 1)
                    got = mm[off:off + size]
            ops += 1
            if got != want[off:off + size]:
                bad += 1
                print(f"mismatch: {rel} off={off} size={size} "
                      f"got {len(got)} bytes", file=sys.stderr)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        bad += 1
    q.put((ops, bad))


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("mnt")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5)
    args = ap.parse_args(argv)
    exp = reference.expected(args.ckpt, args.world, args.rank)
    q = mp.Queue()
    procs = [mp.Process(target=worker, args=(args, exp, s, q))
             for s in range(args.procs)]
    for p in procs:
        p.start()
    results = [q.get(timeout=args.seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    ops = sum(r[0] for r in results)
    bad = sum(r[1] for r in results)
    print(f"{args.procs} processes, {ops} reads, {bad} mismatches")
    return 1 if bad or ops == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
