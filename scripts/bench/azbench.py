# SPDX-License-Identifier: MIT
"""`make bench`'s Azure rows (issue 39, Performance): the WAN rows of
scripts/bench/wanbench.py again, from az:// on Azurite (the Azure Storage
emulator, tests/azure/azurite.sh) through the same WAN proxy
(tests/s3/wanproxy.py) and the same checkpoint (dcp.save from 4 ranks in
the sid chroot, --wan-gib).  For each delay (--az-delays, default 20 ms):

- ceiling: PARALLEL parallel curl ranged GETs (curl's multi interface) of
  exactly the ranges rank 3 of 8 needs (`ckptfs plan`), through the proxy,
  authorised by a container SAS (read+list) in a curl config file;
- ckptfs.load of rank 3 of 8 from az:// against it (the open apart), and
  bytes fetched per byte delivered, from io_stats() and from the proxy's
  counted answer bytes;
- the 4->8 resume with ckptfs.StorageReader("az://...") without and with
  a node-local index cache (emptied first), against two ceilings of all
  ranks' ranges: one curl with PARALLEL in flight, and one curl per rank
  at once, each its rank's ranges with PARALLEL in flight (the ranks'
  own connections, as the resume has them); and the same resume with a
  StorageReader whose read_data reads nothing (torch's share of it).  Torch's FsspecReader needs adlfs, which
  Debian does not package (bookworm nor sid), so there is no torch row.

--quick leaves these rows out (Azurite's start and the torch checkpoint
cost more than the whole smoke run's S3 rows): it says so.
"""
import os
import shutil
import statistics
import subprocess

import s3bench
import wanbench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
AZURITE = os.path.join(ROOT, "tests", "azure", "azurite.sh")
AZBLOB = os.path.join(ROOT, "tests", "azure", "azblob.py")
SID = s3bench.SID
CONTAINER = "ckptfs-bench"
PARALLEL = s3bench.PARALLEL


class Azurite:
    """An Azurite of the bench's own; stopped on exit."""

    def __init__(self, work):
        self.dir = os.path.join(work, "azurite")
        subprocess.call([AZURITE, "stop", self.dir],
                         stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)
        subprocess.check_call([AZURITE, "start", self.dir])
        self.env = {}
        with open(os.path.join(self.dir, "env")) as fh:
            for line in fh:
                if line.startswith("export "):
                    k, _, v = line[7:].strip().partition("=")
                    self.env[k] = v.strip("'")
        self.account = self.env["AZURE_STORAGE_ACCOUNT"]
        # the endpoint without the account: the proxy's upstream
        self.origin = self.env["AZURE_STORAGE_BLOB_ENDPOINT"].rsplit("/", 1)[0]

    def environ(self, base, endpoint=None):
        env = dict(base)
        for k in list(env):
            if k.startswith("AZURE_") or k.startswith("AWS_"):
                del env[k]
        env.update(self.env)
        if endpoint:
            env["AZURE_STORAGE_BLOB_ENDPOINT"] = f"{endpoint}/{self.account}"
        return env

    def put_dir(self, src, prefix):
        env = self.environ(os.environ)
        subprocess.check_call([AZURITE, "mkcontainer", self.dir, CONTAINER])
        subprocess.check_call(["/usr/bin/python3", AZBLOB, "putdir",
                               f"{CONTAINER}/{prefix}", src], env=env)

    def sas(self):
        """A container SAS, read+list, for an hour (tests/azure/azblob.py)."""
        return subprocess.check_output(
            ["/usr/bin/python3", AZBLOB, "sas", f"container:{CONTAINER}",
             "rl"], env=self.environ(os.environ), text=True).strip()

    def close(self):
        subprocess.call([AZURITE, "stop", self.dir])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def curl_ceiling(az, sas, endpoint, prefix, reads, n=PARALLEL, groups=None):
    """Seconds for `curl --parallel --parallel-max n` to GET exactly the
    given ranges of CONTAINER/prefix at endpoint (the proxy), with the SAS
    on each URL (s3bench.curl_parallel: nothing secret on a command
    line); with groups, one such curl per group at once."""
    return s3bench.curl_parallel(reads, n, groups=groups,
                                 transfer=lambda f, off, ln: (
        f'url = "{endpoint}/{az.account}/{CONTAINER}/{prefix}/{f}?{sas}"\n'
        f'header = "x-ms-range: bytes={off}-{off + ln - 1}"\n'
        'header = "x-ms-version: 2021-08-06"\n'))


def az_figures(args, t, lib_env):
    """The Azure rows (see the module's docstring)."""
    if args.quick:
        print("  Azure: not measured in --quick (Azurite and the torch "
              "checkpoint; make bench and --only azure run these rows)")
        return
    if not os.access(os.path.join(os.environ.get(
            "CKPTFS_AZURITE_PREFIX", "/opt/ckptfs-azurite"), "bin",
            "azurite-blob"), os.X_OK) or not shutil.which("curl"):
        print("  Azure: Azurite or curl missing (make deps); not measured")
        return
    gib = args.wan_gib
    got = wanbench.resume_checkpoint(gib, "Azure")
    if not got:
        return
    sid, src = got
    w, r, prefix = 8, 3, f"wan-{gib}"
    reps = max(1, min(args.reps, 3))
    size = f"{gib} GiB checkpoint, {wanbench.RATE_MBPS} MB/s per connection"
    wanbench.TRACE_DIR = os.path.join(args.work, "az-traces")
    os.makedirs(wanbench.TRACE_DIR, exist_ok=True)
    print(f"  Azure: request traces in {wanbench.TRACE_DIR}")
    with Azurite(args.work) as az, \
            wanbench.WanProxy(args.work, az.origin) as px:
        az.put_dir(src, prefix)
        root = f"az://{az.account}/{CONTAINER}/{prefix}"
        env0 = az.environ(lib_env)
        env = dict(az.environ(lib_env, px.url), CKPTFS_INDEX_CACHE="")
        sas = az.sas()
        reads = s3bench.plan_ranges(args.ckptfs, root, w, r, env0)
        need = sum(x[2] for x in reads)
        ranks = [s3bench.plan_ranges(args.ckptfs, root, w, k, env0)
                 for k in range(w)]
        allr = sorted(set(x for rk in ranks for x in rk))
        need_all = sum(x[2] for x in allr)
        for d in args.az_delays:
            px.config(d)
            tag = f"Azure WAN {d} ms"
            ceil = []
            for _ in range(reps):
                s, n, _, _ = wanbench.counted(px, lambda: curl_ceiling(
                    az, sas, px.url, prefix, reads))
                ceil.append(need / s / 1e9)
            base = t.add(f"{tag}: ceiling, {PARALLEL} parallel curl ranged "
                         f"GETs of the {need / 2**20:.1f} MiB rank {r} of "
                         f"{w} needs ({len(reads)} ranges; {size}; Azurite)",
                         ceil, note=f"{n} requests")
            loads, sent = [], []
            for _ in range(reps):
                x, n, by, log = wanbench.counted(px, lambda: s3bench.load_once(
                    env, root, w, r), f"{d}ms-az-load")
                loads.append(x)
                sent.append((n, by, sum(e[4] for e in log)))
            last = loads[-1]
            t.add(f"{tag}: ckptfs.load of rank {r} of {w} from az:// "
                  "(open apart)",
                  [x["delivered"] / x["load"] / 1e9 for x in loads],
                  base=(base, "ceiling"),
                  note=f"{last['requests']} GETs; requests, open included: "
                       f"{wanbench.methods(sent[-1][1])}")
            t.add(f"{tag}: bytes fetched per byte delivered, that load "
                  "(io_stats)", [x["fetched"] / x["delivered"]
                                 for x in loads], unit="x",
                  note=f"proxy: {sent[-1][2] / last['delivered']:.3f}x "
                       "(every answer's bytes, headers and the open's "
                       "requests included)")
            rs, _, _, _ = wanbench.counted(px, lambda: curl_ceiling(
                az, sas, px.url, prefix, allr))
            t.add(f"{tag}: ceiling for the resume's bytes, all {w} ranks' "
                  f"{len(allr)} ranges ({need_all / 2**20:.1f} MiB) from "
                  f"one curl, {PARALLEL} in flight", [rs], unit="s")
            # The ranks' own: each rank's ranges on connections of its
            # own, as the resume's ranks fetch them.
            rk, _, _, _ = wanbench.counted(px, lambda: curl_ceiling(
                az, sas, px.url, prefix, None, groups=ranks))
            t.add(f"{tag}: ceiling for the resume's bytes, {w} curls at "
                  f"once, each one rank's ranges, {PARALLEL} in flight each",
                  [rk], unit="s")
            # torch's share: a StorageReader whose read_data reads
            # nothing (its open and .metadata, torch's planning and
            # collectives), to tell the resume's reading from it
            nulls = []
            for _ in range(reps):
                v, _, _, _ = wanbench.counted(px, lambda: wanbench.resume_once(
                    root, w, "null-ckptfs", env))
                nulls.append(v)
            null = statistics.median(nulls)
            t.add(f"{tag}: resume on {w} ranks, ckptfs.StorageReader whose "
                  "read_data reads nothing (open, .metadata, torch's "
                  "planning and collectives)", nulls, unit="s")
            cdir = "/tmp/ckptfs-bench-az-index-cache"    # inside the chroot
            for extra, what in (({}, "no index cache (every rank indexes)"),
                                ({"CKPTFS_INDEX_CACHE": cdir},
                                 "node-local index cache, empty at start")):
                res, n, by = [], 0, None
                for _ in range(reps):
                    shutil.rmtree(sid + cdir, ignore_errors=True)
                    v, n, by, _ = wanbench.counted(
                        px, lambda: wanbench.resume_once(
                            root, w, "ckptfs", dict(env, **extra)),
                        f"{d}ms-az-resume{'-cache' if extra else ''}")
                    res.append(v)
                shutil.rmtree(sid + cdir, ignore_errors=True)
                ck = statistics.median(res)
                t.add(f"{tag}: resume on {w} ranks from 4, "
                      f"ckptfs.StorageReader(\"az://...\"), {what}", res,
                      unit="s",
                      note=f"{ck / rs:.2f}x the one-curl ceiling's time, "
                           f"{ck / rk:.2f}x the {w} curls'; less the "
                           f"reader that reads nothing, "
                           f"{(ck - null) / rk:.2f}x the {w} curls'; "
                           "requests: "
                           f"{wanbench.methods(by)} (plan: {len(allr)} "
                           f"ranges, {(n - len(allr)) / w:+.1f} a rank); no "
                           "FsspecReader row: adlfs is not packaged in "
                           "Debian")
