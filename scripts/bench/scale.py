#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The open of a checkpoint of many items, against torch's own
read_metadata() in the same run (issue 38, item 5, small case).

    scale.py --ckptfs BUILD/ckptfs [--params 5000] [--reps 3]

Generates (once, with torch 2.x in the sid chroot: gen_scale_ckpt.py)
3 x PARAMS items (15,000 items and 81,000 chunks by default) and then,
each in a fresh process and with an empty node-local index cache
(CKPTFS_INDEX_CACHE set to a new directory):
  - ckptfs.open(): the time and the peak RSS over the process's baseline
    (VmHWM after the open less VmRSS before it), and that over the
    .metadata's size;
  - ckptfs.open() again in a fresh process, with that cache now filled
    (the image's head and its parsed form are read; nothing is parsed);
  - `ckptfs info` (the CLI): wall and CPU time, peak RSS (/usr/bin/time);
  - torch's FileSystemReader(dir).read_metadata() in the sid chroot: time
    and peak RSS over its baseline;
  - 8 processes that open it at once with one empty node-local cache
    (one parses, the others wait for its image and parsed form): the
    slowest's open
    against one process's alone, and how many parsed.
Prints the best of REPS of each and the ratios.  Not part of make check:
it measures, it asserts nothing.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SID = os.path.join(ROOT, "scripts", "sid-chroot.sh")

# Run in a fresh process: "seconds cpu_seconds peak_over_baseline_bytes".
PROBE = r"""
import sys, time
def kb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
%s
base = kb("VmRSS:")
t0, c0 = time.perf_counter(), time.process_time()
%s
t, c = time.perf_counter() - t0, time.process_time() - c0
print(t, c, kb("VmHWM:") - base)
"""

CKPTFS_OPEN = PROBE % ("import ckptfs", "ck = ckptfs.open(sys.argv[1])")
TORCH_READ = PROBE % (
    "from torch.distributed.checkpoint import FileSystemReader",
    "md = FileSystemReader(sys.argv[1]).read_metadata()")

# Each of 8 processes: ready, wait for the start file, open; prints
# "seconds origin".
OPEN_AT_ONCE = r"""
import os, sys, time
import ckptfs
ckpt, cache, start, ready = sys.argv[1:5]
open(ready, "w").close()
while not os.path.exists(start):
    time.sleep(0.001)
t0 = time.perf_counter()
ck = ckptfs.open(ckpt, index_cache=cache)
print(time.perf_counter() - t0, ck.info().origin)
"""


def opens_at_once(ckpt, env, n):
    """The slowest of n processes opening ckpt at once with one empty
    cache, and how many of them parsed (origin "torch")."""
    d = tempfile.mkdtemp(prefix="ckptfs-scale-at-once-")
    try:
        cache = os.path.join(d, "cache")
        os.mkdir(cache, 0o700)
        ps = [subprocess.Popen(["/usr/bin/python3", "-c", OPEN_AT_ONCE, ckpt,
                                cache, os.path.join(d, "start"),
                                os.path.join(d, f"ready{i}")], env=env,
                               stdout=subprocess.PIPE, text=True)
              for i in range(n)]
        while not all(os.path.exists(os.path.join(d, f"ready{i}"))
                      for i in range(n)):
            if any(p.poll() is not None for p in ps):
                break
            time.sleep(0.01)
        open(os.path.join(d, "start"), "w").close()
        outs = [p.communicate()[0].split() for p in ps]
        if any(p.returncode for p in ps):
            raise RuntimeError(f"scale: an open of the {n} failed")
        return (max(float(o[-2]) for o in outs),
                sum(o[-1] == "torch" for o in outs))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def best(runs):
    return tuple(min(r[i] for r in runs) for i in range(3))


def probe(cmd, env=None):
    out = subprocess.check_output(cmd, env=env, text=True)
    t, c, rss = out.split()[-3:]
    return float(t), float(c), int(rss)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptfs", required=True)
    ap.add_argument("--params", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    sid = subprocess.check_output([SID, "path"], text=True).strip()
    if not os.path.exists(os.path.join(sid, "usr/bin/python3")):
        print("scale: no sid chroot (make sid-chroot); not measured")
        return 0
    inside = f"/tmp/ckptfs-bench-scale-{a.params}"
    ckpt = sid + inside
    if not os.path.exists(os.path.join(ckpt, ".metadata")):
        print(f"generating {3 * a.params} items...", flush=True)
        subprocess.check_call([SID, "run", "/usr/bin/python3",
                               "@ROOT@/scripts/bench/gen_scale_ckpt.py",
                               inside, "--params", str(a.params)])
    msize = os.path.getsize(os.path.join(ckpt, ".metadata"))
    build = os.path.dirname(os.path.abspath(a.ckptfs))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "scripts"),
               CKPTFS_LIB=os.path.join(build, "libckptfs.so"))
    opens, warms, infos, torchs = [], [], [], []
    for _ in range(a.reps):
        cache = tempfile.mkdtemp(prefix="ckptfs-scale-cache-")
        try:
            e = dict(env, CKPTFS_INDEX_CACHE=cache)
            opens.append(probe(["/usr/bin/python3", "-c", CKPTFS_OPEN,
                                ckpt], e))
            # the same cache, now holding the image and its parsed form
            warms.append(probe(["/usr/bin/python3", "-c", CKPTFS_OPEN,
                                ckpt], e))
            shutil.rmtree(cache)
            os.mkdir(cache)
            out = subprocess.run(
                ["/usr/bin/time", "-f", "%e %U %S %M", a.ckptfs, "info",
                 ckpt],
                env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True, check=True).stderr.split()
            infos.append((float(out[-4]), float(out[-3]) + float(out[-2]),
                          int(out[-1]) * 1024))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        torchs.append(probe([SID, "run", "/usr/bin/python3", "-c",
                             TORCH_READ, inside]))
    at_once = min(opens_at_once(ckpt, env, 8) for _ in range(a.reps))
    (ot, oc, orss), (it, ic, irss), (tt, tc, trss) = \
        best(opens), best(infos), best(torchs)
    wt, wc, wrss = best(warms)
    mib = 1 << 20
    print(f"scale: {3 * a.params} items, .metadata {msize / mib:.1f} MiB, "
          f"best of {a.reps}, no node-local index cache "
          f"(wall s, CPU s, peak RSS)")
    print(f"  torch read_metadata()  {tt:7.3f} {tc:7.3f}  +{trss / mib:6.1f} MiB")
    print(f"  ckptfs.open()          {ot:7.3f} {oc:7.3f}  +{orss / mib:6.1f} MiB"
          f"  ({ot / tt:.2f}x torch's time, {oc / tc:.2f}x its CPU, "
          f"{orss / msize:.1f}x .metadata)")
    print(f"  ckptfs.open(), cached  {wt:7.3f} {wc:7.3f}  +{wrss / mib:6.1f} MiB"
          f"  ({wt / tt:.3f}x torch's time; the node-local index cache "
          f"filled: its image's head and parsed form)")
    print(f"  ckptfs info (CLI)      {it:7.3f} {ic:7.3f}   {irss / mib:6.1f} MiB"
          f"  ({it / tt:.2f}x torch's time, {ic / tc:.2f}x its CPU; "
          f"RSS of the whole process)")
    slow, parsed = at_once
    print(f"  8 ckptfs.open() at once {slow:6.3f}  (the slowest of 8, one "
          f"empty cache: {slow / ot:.2f}x one open alone; {parsed} "
          f"parse(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
