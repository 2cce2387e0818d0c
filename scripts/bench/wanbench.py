# SPDX-License-Identifier: MIT
"""`make bench`'s WAN rows (issue 28 part 4): the object-store rows again,
through tests/s3/wanproxy.py between the readers and radosgw, which holds
each answer's first byte until DELAY ms after its request and caps each
connection at RATE MB/s.  For each delay (0, 20, 50 ms), in one run:

- ceiling: PARALLEL parallel curl ranged GETs (curl's multi interface) of
  exactly the ranges rank 3 of 8 needs (`ckptfs plan`), through the proxy;
- ckptfs.load of rank 3 of 8 against that ceiling (the open timed apart,
  as in the S3 rows; its time and requests are a row of their own);
- `cat` of every file of an s3:// mount of rank 3 of 8 against it;
- the 4->8 resume (torch 2.x in the sid chroot): torch's FsspecReader
  (s3fs), ckptfs.StorageReader without and with a node-local index cache
  (emptied first: the first resume on a node), and the ceiling for all
  ranks' ranges;
- the requests each case made, from the proxy's counters, against the
  plan's ranges.

The checkpoint is small (--wan-gib, default 0.25 GiB) so that the 50 ms
rows stay short; its size is in the rows' names.
"""
import json
import os
import shutil
import statistics
import subprocess
import time
import urllib.request

import s3bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WANPROXY = os.path.join(ROOT, "tests", "s3", "wanproxy.py")
SID = s3bench.SID
DELAYS = (0, 20, 50)
RATE_MBPS = 100         # per connection


class WanProxy:
    """tests/s3/wanproxy.py in front of upstream; stopped on exit."""

    def __init__(self, work, upstream):
        self.p, self.url = s3bench.start_proxy(
            [WANPROXY, "--upstream", upstream,
             "--rate-mbps", str(RATE_MBPS)],
            os.path.join(work, "wanproxy.port"))

    def _post(self, what, body):
        req = urllib.request.Request(f"{self.url}/__wan/{what}",
                                     data=json.dumps(body).encode(),
                                     method="POST")
        urllib.request.urlopen(req).read()

    def config(self, delay_ms):
        self._post("config", {"delay_ms": delay_ms, "rate_mbps": RATE_MBPS})

    def reset(self):
        self._post("reset", {})

    def stats(self):
        with urllib.request.urlopen(f"{self.url}/__wan/stats") as r:
            return json.load(r)

    def close(self):
        self.p.terminate()
        self.p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


TRACE_DIR = None       # where each case's request trace is written


def counted(px, fn, name=None):
    """fn()'s value and the proxy's (requests, {method: n}, log) for it;
    with name, the log is kept as TRACE_DIR/name.json (method, path,
    range, status, bytes per request)."""
    px.reset()
    v = fn()
    s = px.stats()
    if name and TRACE_DIR:
        with open(os.path.join(TRACE_DIR, name + ".json"), "w") as fh:
            json.dump(s["log"], fh)
    return v, s["requests"], s["by_method"], s["log"]


def methods(by):
    return ", ".join(f"{n} {m}" for m, n in sorted(by.items()))


def resume_once(root, world, reader, env):
    out = subprocess.check_output(
        [SID, "run", "/usr/bin/python3", "@ROOT@/tests/torch2_check.py",
         "resume", root, str(world), reader, "0"], text=True, env=env,
        stderr=subprocess.DEVNULL)
    return float(out.split()[-2])


def resume_checkpoint(gib, rows):
    """The torch 2.x checkpoint of gib GiB the resume rows read, made in
    the sid chroot once (kept between runs): (the chroot's root, the
    checkpoint's path on the host), or None (said on a line naming rows)
    when there is no sid chroot."""
    sid = subprocess.check_output([SID, "path"], text=True).strip()
    if not os.path.exists(os.path.join(sid, ".ckptfs-ready")):
        print(f"  {rows}: no sid chroot (make sid-chroot); not measured")
        return None
    inside = f"/tmp/ckptfs-bench-resume-{gib}"
    src = sid + inside
    if not os.path.exists(os.path.join(src, ".metadata")):
        subprocess.check_call([SID, "run", "/usr/bin/python3",
                               "@ROOT@/tests/torch2_check.py", "gen-large",
                               inside, str(gib)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    return sid, src


def wan_figures(args, t, lib_env, bench):
    """The WAN rows (see the module's docstring); bench: bench.py's
    Mount, files_of and read_all for the mount's cat."""
    if not shutil.which("radosgw") or not shutil.which("curl"):
        print("  WAN: radosgw or curl missing (make deps); not measured")
        return
    gib = args.wan_gib
    got = resume_checkpoint(gib, "WAN")
    if not got:
        return
    sid, src = got
    w, r, prefix = 8, 3, f"wan-{gib}"
    root = f"s3://{s3bench.BUCKET}/{prefix}"
    mnt = os.path.join(args.work, "mnt")
    cdir = "/tmp/ckptfs-bench-wan-index-cache"      # inside the chroot
    reps = max(1, min(args.reps, 3))
    size = f"{gib} GiB checkpoint, {RATE_MBPS} MB/s per connection"
    global TRACE_DIR
    TRACE_DIR = os.path.join(args.work, "wan-traces")
    os.makedirs(TRACE_DIR, exist_ok=True)
    print(f"  WAN: request traces in {TRACE_DIR}")
    with s3bench.Radosgw(args.work) as rgw, \
            WanProxy(args.work, rgw.env["AWS_ENDPOINT_URL"]) as px:
        env0 = rgw.environ(lib_env)
        rgw.put_dir(src, prefix)
        env = dict(env0, AWS_ENDPOINT_URL=px.url, CKPTFS_INDEX_CACHE="")
        reads = s3bench.plan_ranges(args.ckptfs, root, w, r, env0)
        need = sum(x[2] for x in reads)
        allr = set()
        for k in range(w):
            allr.update(s3bench.plan_ranges(args.ckptfs, root, w, k, env0))
        allr = sorted(allr)
        need_all = sum(x[2] for x in allr)
        for d in args.wan_delays:
            px.config(d)
            tag = f"WAN {d} ms"
            ceil = []
            for _ in range(reps):
                s, n, by, _ = counted(px, lambda: s3bench.curl_ceiling(
                    rgw, prefix, reads, endpoint=px.url))
                ceil.append(need / s / 1e9)
            base = t.add(f"{tag}: ceiling, {s3bench.PARALLEL} parallel curl "
                         f"ranged GETs of the {need / 2**20:.1f} MiB rank "
                         f"{r} of {w} needs ({len(reads)} ranges; {size})",
                         ceil, note=f"{n} requests")
            loads, nreq = [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                x, n, by, _ = counted(px, lambda: s3bench.load_once(
                    env, root, w, r), f"{d}ms-load")
                x["all"] = time.perf_counter() - t0
                loads.append(x)
                nreq.append((n, by))
            lreq = loads[-1]["requests"]
            t.add(f"{tag}: ckptfs.load of rank {r} of {w} (open apart)",
                  [x["delivered"] / x["load"] / 1e9 for x in loads],
                  base=(base, "ceiling"), note=f"{lreq} GETs")
            t.add(f"{tag}: opening it (torch checkpoint, no index: "
                  ".metadata, listing, every record's zip windows)",
                  [x["open"] for x in loads], unit="s",
                  note=f"requests: {nreq[-1][0] - lreq} "
                       f"(open and load: {methods(nreq[-1][1])})")
            cats, creq = [], None
            for _ in range(reps):
                v, n, by, _ = counted(px, lambda: s3bench.cat_mount(
                    args, env, root, mnt, w, r, bench), f"{d}ms-cat")
                cats.append(v)
                creq = by
            t.add(f"{tag}: cat of every file of an s3:// mount, rank {r} "
                  f"of {w} (mount's open apart)",
                  [b / s / 1e9 for b, s in cats], base=(base, "ceiling"),
                  note=f"requests, mount included: {methods(creq)}")
            rs, n, by, _ = counted(px, lambda: s3bench.curl_ceiling(
                rgw, prefix, allr, endpoint=px.url))
            t.add(f"{tag}: ceiling for the resume's bytes, all {w} ranks' "
                  f"{len(allr)} ranges ({need_all / 2**20:.1f} MiB)", [rs],
                  unit="s")
            res = {}
            for reader, extra in (("fsspec", {}), ("ckptfs", {}),
                                  ("ckptfs", {"CKPTFS_INDEX_CACHE": cdir})):
                key = reader + (" cache" if extra else "")
                res[key] = ([], None)
                for _ in range(reps if reader == "ckptfs" or d == 0 else 1):
                    shutil.rmtree(sid + cdir, ignore_errors=True)
                    v, n, by, _ = counted(px, lambda: resume_once(
                        root, w, reader, dict(env, **extra)),
                        f"{d}ms-resume-{key.replace(' ', '-')}")
                    res[key][0].append(v)
                    res[key] = (res[key][0], (n, by))
            shutil.rmtree(sid + cdir, ignore_errors=True)
            fs = t.add(f"{tag}: resume on {w} ranks from 4, torch's "
                       "FsspecReader (s3fs)", res["fsspec"][0], unit="s",
                       note=f"requests: {methods(res['fsspec'][1][1])}")
            for key, what in (("ckptfs", "ckptfs.StorageReader, no index "
                               "cache (every rank indexes)"),
                              ("ckptfs cache", "ckptfs.StorageReader, "
                               "node-local index cache, empty at start")):
                ck = statistics.median(res[key][0])
                n, by = res[key][1]
                t.add(f"{tag}: resume on {w} ranks, {what}", res[key][0],
                      unit="s", ratio=f"{fs / ck:.1f}x faster than "
                                      "FsspecReader",
                      note=f"{ck / rs:.2f}x the ceiling's time; requests: "
                           f"{methods(by)} (plan: {len(allr)} ranges, "
                           f"{(n - len(allr)) / w:+.1f} a rank)")
