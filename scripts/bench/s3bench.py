# SPDX-License-Identifier: MIT
"""`make bench`'s object-store rows (issue 20), against a radosgw the bench
starts itself (tests/s3/rgw.sh) with the fault proxy in front of it as a
byte counter (tests/s3/faultproxy.py).  The checkpoint is the one the
newest-torch resume row uses (dcp.save from 4 ranks, Shard(0) float32,
in the sid chroot), uploaded to the bucket.  All in one run:

- ceiling: N parallel `curl` ranged GETs of exactly the byte ranges rank
  3 of 8 needs (`ckptfs plan`'s reads), N = the store's parallel GETs;
- ckptfs.load of rank 3 of 8 from s3:// (the open, which indexes the
  torch checkpoint, timed apart), and the same load over https (radosgw's
  second, TLS endpoint; a CA made by rgw.sh) as a ratio of the http one;
- `cat` of every file of an s3:// mount of rank 3 of 8;
- bytes fetched per byte delivered: the library's counters, and what the
  proxy sent for the same load;
- resume on 8 ranks from 4 with torch 2.x: dcp.load with torch's
  FsspecReader (s3fs) against ckptfs.StorageReader, and the ceiling for
  the same bytes (all ranks' ranges), with and without the checkpoint's
  `ckptfs index` output in the bucket, and with a node-local index cache
  (index_cache=, emptied before each repetition: one rank indexes, the
  others reuse its index).

--quick (make check's smoke run) uses a small native checkpoint and
leaves the torch resume out.
"""
import os
import shutil
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RGW = os.path.join(ROOT, "tests", "s3", "rgw.sh")
PROXY = os.path.join(ROOT, "tests", "s3", "faultproxy.py")
SID = os.path.join(ROOT, "scripts", "sid-chroot.sh")
PARALLEL = 16           # the S3 store's default parallel GETs
BUCKET = "ckptfs-bench"



def start_proxy(argv, port):
    """Start the proxy script argv[0] (tests/s3/) with argv[1:] and
    --port-file port; wait for it to write its port.  Returns (the Popen,
    the proxy's URL); the caller stops the process."""
    if os.path.exists(port):
        os.unlink(port)
    p = subprocess.Popen(["/usr/bin/python3", *argv, "--port-file", port],
                         stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not os.path.exists(port):
        if time.monotonic() > deadline:
            p.kill()
            raise RuntimeError(f"{os.path.basename(argv[0])} did not start")
        time.sleep(0.05)
    with open(port) as fh:
        return p, f"http://127.0.0.1:{int(fh.read())}"

class Radosgw:
    """A radosgw of the bench's own, and the proxy; stopped on exit."""

    def __init__(self, work):
        self.dir = os.path.join(work, "rgw")
        shutil.rmtree(self.dir, ignore_errors=True)
        # http and https (RGW_TLS=1: beast's ssl_endpoint, a test CA)
        subprocess.check_call([RGW, "start", self.dir],
                              env=dict(os.environ, RGW_TLS="1"))
        with open(os.path.join(self.dir, "https_url")) as fh:
            self.https_url = fh.read().strip()
        self.ca = os.path.join(self.dir, "tls", "ca.pem")
        self.env = {}
        with open(os.path.join(self.dir, "env")) as fh:
            for line in fh:
                if line.startswith("export "):
                    k, _, v = line[7:].strip().partition("=")
                    self.env[k] = v
        self.proxy = None
        port = os.path.join(self.dir, "proxy.port")
        self.proxy, self.proxy_url = start_proxy(
            [PROXY, "--upstream", self.env["AWS_ENDPOINT_URL"],
             "--max-seconds", "7200"], port)

    def environ(self, base=None):
        env = dict(base if base is not None else os.environ)
        for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3",
                  "AWS_DEFAULT_REGION"):
            env.pop(k, None)
        env.update(self.env)
        return env

    def put_dir(self, src, prefix):
        subprocess.check_call([RGW, "mkbucket", self.dir, BUCKET])
        for f in sorted(os.listdir(src)):
            p = os.path.join(src, f)
            if os.path.isfile(p):
                subprocess.check_call([RGW, "put", self.dir,
                                       f"{BUCKET}/{prefix}/{f}", p])

    def proxy_bytes(self):
        import json
        import urllib.request
        with urllib.request.urlopen(self.proxy_url +
                                    "/__faultproxy/stats") as r:
            return json.load(r)["bytes"]

    def proxy_reset(self):
        import urllib.request
        req = urllib.request.Request(self.proxy_url + "/__faultproxy/reset",
                                     data=b"{}", method="POST")
        urllib.request.urlopen(req).read()

    def close(self):
        if self.proxy is not None:
            self.proxy.terminate()
            self.proxy.wait()
        subprocess.call([RGW, "stop", self.dir])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def plan_ranges(ckptfs, root, world, rank, env):
    """`ckptfs plan`'s reads: [(file, offset, length)].  Eager
    (CKPTFS_EAGER_INDEX=1): one pass over every record, where a lazy
    plan locates each key's records in a batch of its own."""
    out = subprocess.check_output([ckptfs, "plan", root, "--world",
                                   str(world), "--rank", str(rank)],
                                  env=dict(env, CKPTFS_EAGER_INDEX="1"),
                                  text=True)
    reads = []
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) == 5 and f[1] == "read":
            reads.append((f[2], int(f[3]), int(f[4])))
    return reads


def curl_parallel(reads, n, transfer, groups=None):
    """Seconds for `curl --parallel --parallel-max n` to make one transfer
    per (file, offset, length) of reads, each described by the curl config
    lines transfer(f, off, ln) returns.  With groups (lists of such
    reads, reads then unused), one such curl per group, all started at
    once (each rank's own ranges on its own connections, as ranks fetch
    in a resume): the seconds until the last ends.  The configs are 0600
    files, so no credential is on a command line."""
    names = []
    try:
        for g in groups if groups is not None else [reads]:
            with tempfile.NamedTemporaryFile("w", suffix=".curl",
                                             delete=False) as c:
                names.append(c.name)
                os.chmod(c.name, 0o600)
                for i, (f, off, ln) in enumerate(g):
                    if i:
                        c.write("next\n")
                    c.write(transfer(f, off, ln) + 'output = "/dev/null"\n'
                            'fail\nsilent\n')
        t0 = time.perf_counter()
        procs = [subprocess.Popen(["curl", "--parallel",
                                   "--parallel-immediate", "--parallel-max",
                                   str(n), "--no-progress-meter", "-K", c])
                 for c in names]
        bad = [p.wait() for p in procs]
        if any(bad):
            raise subprocess.CalledProcessError(max(bad), "curl --parallel")
        return time.perf_counter() - t0
    finally:
        for c in names:
            os.unlink(c)


def curl_ceiling(rgw, prefix, reads, n=PARALLEL, endpoint=None):
    """Seconds for `curl --parallel --parallel-max n` to GET exactly the
    given ranges (curl_parallel), from endpoint (default: radosgw
    itself)."""
    env = rgw.env
    ep = endpoint or env["AWS_ENDPOINT_URL"]
    return curl_parallel(reads, n, lambda f, off, ln: (
        f'url = "{ep}/{BUCKET}/{prefix}/{f}"\n'
        f'range = "{off}-{off + ln - 1}"\n'
        f'aws-sigv4 = "aws:amz:{env["AWS_REGION"]}:s3"\n'
        f'user = "{env["AWS_ACCESS_KEY_ID"]}:'
        f'{env["AWS_SECRET_ACCESS_KEY"]}"\n'
        'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n'))

LOAD = """
import json, sys, time, ckptfs
root, w, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kw = {"s3_endpoint": sys.argv[4]} if len(sys.argv) > 4 else {}
t0 = time.perf_counter()
with ckptfs.open(root, **kw) as ck:
    t1 = time.perf_counter()
    s0 = ck.io_stats()
    sd = ck.load(w, r, backend="numpy")
    t2 = time.perf_counter()
    s1 = ck.io_stats()
print(json.dumps({"open": t1 - t0, "load": t2 - t1,
                  "connects": s1["connects"],
                  "fetched": s1["bytes_fetched"] - s0["bytes_fetched"],
                  "delivered": s1["bytes_delivered"] - s0["bytes_delivered"],
                  "requests": s1["requests"] - s0["requests"]}))
"""


def load_once(env, root, w, r, endpoint=None):
    import json
    argv = ["/usr/bin/python3", "-c", LOAD, root, str(w), str(r)]
    if endpoint:
        argv.append(endpoint)
    return json.loads(subprocess.check_output(
        argv, env=env, cwd=os.path.join(ROOT, "scripts")).split(b"\n")[-2])


def cat_mount(args, env, root, mnt, w, r, bench):
    """Bytes and seconds to read every file of a fresh mount once, 1 MiB
    reads as `cat` makes them (bench: bench.py's Mount, files_of and
    read_all)."""
    os.makedirs(mnt, exist_ok=True)
    saved = dict(os.environ)
    os.environ.update(env)         # the daemon's AWS settings
    try:
        m = bench["Mount"]([args.ckptfs, "mount", root, mnt, "--world",
                            str(w), "--rank", str(r)], mnt)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    with m:
        paths = bench["files_of"](m.mnt)
        t0 = time.perf_counter()
        n = bench["read_all"](paths)
        return n, time.perf_counter() - t0


def s3_figures(args, t, lib_env, gib, bench):
    """The object-store rows (see the module's docstring); bench: the
    helpers of bench.py that cat_mount uses."""
    if not shutil.which("radosgw") or not shutil.which("curl"):
        print("  S3: radosgw or curl missing (make deps); not measured")
        return
    if args.quick:
        # The smoke run: a small native checkpoint, no torch resume.
        src = os.path.join(args.work, f"s3-native-{gib}")
        if not os.path.exists(os.path.join(src, ".metadata")):
            subprocess.check_call(["/usr/bin/python3",
                                   os.path.join(HERE, "gen_bench_ckpt.py"),
                                   "data", src, "--tiling", "dim0", "--gib",
                                   str(gib)], stdout=subprocess.DEVNULL)
    else:
        sid = subprocess.check_output([SID, "path"], text=True).strip()
        if not os.path.exists(os.path.join(sid, ".ckptfs-ready")):
            print("  S3: no sid chroot (make sid-chroot); not measured")
            return
        subprocess.check_call([SID, "build"])      # python3-s3fs in it
        inside = f"/tmp/ckptfs-bench-resume-{gib}"
        src = sid + inside
        if not os.path.exists(os.path.join(src, ".metadata")):
            subprocess.check_call([SID, "run", "/usr/bin/python3",
                                   "@ROOT@/tests/torch2_check.py",
                                   "gen-large", inside, str(gib)],
                                  stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    reps = args.reps
    w, r, prefix = 8, 3, f"resume-{gib}"
    root = f"s3://{BUCKET}/{prefix}"
    mnt = os.path.join(args.work, "mnt")
    with Radosgw(args.work) as rgw:
        env = rgw.environ(lib_env)
        rgw.put_dir(src, prefix)
        reads = plan_ranges(args.ckptfs, root, w, r, env)
        need = sum(x[2] for x in reads)
        ceil = [(need, curl_ceiling(rgw, prefix, reads)) for _ in range(reps)]
        base = t.add(f"S3 ceiling: {PARALLEL} parallel curl ranged GETs of "
                     f"the {need / 2**20:.0f} MiB rank {r} of {w} needs "
                     f"({len(reads)} ranges, radosgw on loopback)",
                     [b / s / 1e9 for b, s in ceil])
        loads = [load_once(env, root, w, r) for _ in range(reps)]
        lmed = t.add(f"S3: ckptfs.load of rank {r} of {w} (open apart)",
                     [x["delivered"] / x["load"] / 1e9 for x in loads],
                     base=(base, "curl ceiling"),
                     note=f"{statistics.median(x['requests'] for x in loads):.0f} "
                          "GETs")
        tenv = dict(env, AWS_CA_BUNDLE=rgw.ca)
        tls = [load_once(tenv, root, w, r, endpoint=rgw.https_url)
               for _ in range(reps)]
        t.add(f"S3 over https: ckptfs.load of rank {r} of {w} (open apart)",
              [x["delivered"] / x["load"] / 1e9 for x in tls],
              base=(lmed, "http"),
              note=f"{statistics.median(x['connects'] for x in tls):.0f} "
                   "connections (TLS handshakes, open included), "
                   f"{statistics.median(x['connects'] for x in loads):.0f} "
                   "over http")
        t.add("S3: opening it (.metadata; a torch checkpoint's records' "
              "zip windows in one parallel batch)",
              [x["open"] for x in loads], unit="s")
        # Bytes fetched per byte delivered, by the library and by the
        # proxy that carried the same load.
        rgw.proxy_reset()
        px = load_once(env, root, w, r, endpoint=rgw.proxy_url)
        sent = rgw.proxy_bytes()
        t.add("S3: bytes fetched per byte delivered by ckptfs.load "
              "(library's count)",
              [x["fetched"] / x["delivered"] for x in loads], unit="x",
              note=f"proxy: {sent / px['delivered']:.3f}x for the same "
                   "load, open included "
                   f"(library {px['fetched'] / px['delivered']:.3f}x "
                   "without the open)")
        cats = [cat_mount(args, env, root, mnt, w, r, bench)
                for _ in range(reps)]
        t.add(f"S3: cat of every file of an s3:// mount, rank {r} of {w}",
              [b / s / 1e9 for b, s in cats], base=(base, "curl ceiling"))
        if not args.quick:
            resume_rows(args, t, rgw, env, root, prefix, reads, w)


def resume_rows(args, t, rgw, env, root, prefix, reads, world):
    """Resume on world ranks from 4 with torch 2.x in the chroot: torch's
    FsspecReader against ckptfs.StorageReader, and the curl ceiling for
    all the bytes the ranks read."""
    allr = set()
    for k in range(world):
        allr.update(plan_ranges(args.ckptfs, root, world, k, env))
    allr = sorted(allr)
    need = sum(x[2] for x in allr)
    reps = max(1, min(args.reps, 3))
    ceil = statistics.median(curl_ceiling(rgw, prefix, allr)
                             for _ in range(reps))
    check = "@ROOT@/tests/torch2_check.py"
    res = {"fsspec": [], "ckptfs": []}
    for _ in range(reps):
        for reader in res:
            out = subprocess.check_output(
                [SID, "run", "/usr/bin/python3", check, "resume", root,
                 str(world), reader, "0"], text=True, env=env,
                stderr=subprocess.DEVNULL)
            res[reader].append(float(out.split()[-2]))
    t.add(f"S3 ceiling for the resume's bytes: {PARALLEL} parallel curl "
          f"GETs of all {world} ranks' ranges ({need / 2**30:.2f} GiB)",
          [ceil], unit="s")
    fs = t.add(f"S3 resume on {world} ranks from 4, torch 2.x: dcp.load with "
               "torch's FsspecReader (s3fs)", res["fsspec"], unit="s")
    ck = statistics.median(res["ckptfs"])
    t.add(f"S3 resume on {world} ranks: dcp.load with "
          "ckptfs.StorageReader(\"s3://...\")", res["ckptfs"], unit="s",
          note=f"{fs / ck:.1f}x faster than FsspecReader; "
               f"{ck / ceil:.2f}x the ceiling's time")
    # The node-local index cache, empty as on a node's first resume: one
    # rank indexes the checkpoint, the others wait for it and reuse its
    # index (the rows above run with CKPTFS_INDEX_CACHE="": every rank
    # indexes).
    cdir = "/tmp/ckptfs-bench-index-cache"          # inside the chroot
    sid = subprocess.check_output([SID, "path"], text=True).strip()
    res3 = []
    for _ in range(reps):
        shutil.rmtree(sid + cdir, ignore_errors=True)
        out = subprocess.check_output(
            [SID, "run", "/usr/bin/python3", check, "resume", root,
             str(world), "ckptfs", "0"], text=True,
            env=dict(env, CKPTFS_INDEX_CACHE=cdir), stderr=subprocess.DEVNULL)
        res3.append(float(out.split()[-2]))
    shutil.rmtree(sid + cdir, ignore_errors=True)
    ck3 = statistics.median(res3)
    t.add(f"S3 resume on {world} ranks: ckptfs.StorageReader with a "
          "node-local index cache (cleared before each repetition: the "
          "first resume on a node)", res3, unit="s",
          note=f"{fs / ck3:.1f}x faster than FsspecReader; "
               f"{ck3 / ceil:.2f}x the ceiling's time")
    # With the index built once and kept in the bucket, each rank's open
    # is one GET instead of reading every record's zip windows.
    idx = os.path.join(args.work, "s3-index")
    subprocess.check_call([args.ckptfs, "index", root, "--index", idx],
                          env=env, stdout=subprocess.DEVNULL)
    subprocess.check_call([RGW, "put", rgw.dir,
                           f"{BUCKET}/{prefix}/.ckptfs-index", idx])
    res2 = []
    for _ in range(reps):
        out = subprocess.check_output(
            [SID, "run", "/usr/bin/python3", check, "resume", root,
             str(world), "ckptfs", "0"], text=True, env=env,
            stderr=subprocess.DEVNULL)
        res2.append(float(out.split()[-2]))
    ck2 = statistics.median(res2)
    t.add(f"S3 resume on {world} ranks: ckptfs.StorageReader with "
          "`ckptfs index` output in the bucket (.ckptfs-index)", res2,
          unit="s", note=f"{fs / ck2:.1f}x faster than FsspecReader; "
                         f"{ck2 / ceil:.2f}x the ceiling's time")
    subprocess.call([RGW, "rm", rgw.dir, f"{BUCKET}/{prefix}/.ckptfs-index"])


def proxy_counts(rgw):
    """The proxy's requests by kind and the object bytes it sent back
    since its last reset: {"GET", "HEAD", "LIST", "bytes"}."""
    import json
    import urllib.request
    with urllib.request.urlopen(rgw.proxy_url + "/__faultproxy/stats") as r:
        st = json.load(r)
    out = {k: st["by_method"].get(k, 0) for k in ("GET", "HEAD", "LIST")}
    out["bytes"] = st["bytes_by_method"].get("GET", 0)
    return out


def counts_note(c, ref, what, per_rank=None):
    """'GET g, HEAD h, LIST l; B MiB from the store, x.xx what'."""
    note = (f"proxy: GET {c['GET']}, HEAD {c['HEAD']}, LIST {c['LIST']}; "
            f"{c['bytes'] / 2**20:.1f} MiB from the store, "
            f"{c['bytes'] / ref:.2f}x {what}")
    if per_rank:
        med = {k: statistics.median(s[k] for s in per_rank)
               for k in ("open_gets", "open_heads", "read_gets",
                         "open_bytes_fetched", "read_bytes_fetched")}
        note += (f"; per rank (ckptfs's io_stats, median; open GETs "
                 f"{min(s['open_gets'] for s in per_rank)}-"
                 f"{max(s['open_gets'] for s in per_rank)}): open "
                 f"{med['open_gets']:.0f} GETs + {med['open_heads']:.0f} "
                 f"HEADs, {med['open_bytes_fetched'] / 2**10:.0f} KiB; "
                 f"reads {med['read_gets']:.0f} GETs, "
                 f"{med['read_bytes_fetched'] / 2**20:.1f} MiB")
    return note


def request_rows(args, t, lib_env):
    """Issue 29's request rows: for the 4 -> 8 resume (torch 2.x,
    Shard(0), no index cache, no .ckptfs-index) and for the cooperative
    cases of tests/coop_check.py (DDP: every rank loads the whole state;
    HSDP: DTensors on a (2, 4) mesh, (Replicate(), Shard(0))), all 8 gloo
    ranks in the sid chroot, cooperative and cooperative=False: the
    requests by kind and the object bytes the proxy carried (its own
    count, not ckptfs's), and the time of the load."""
    import json
    sid = subprocess.check_output([SID, "path"], text=True).strip()
    if not os.path.exists(os.path.join(sid, ".ckptfs-ready")):
        print("  S3 requests: no sid chroot (make sid-chroot); not measured")
        return
    gib, mib, world = args.req_gib, args.coop_mib, 8
    rinside = f"/tmp/ckptfs-bench-resume-{gib}"
    if not os.path.exists(os.path.join(sid + rinside, ".metadata")):
        subprocess.check_call([SID, "run", "/usr/bin/python3",
                               "@ROOT@/tests/torch2_check.py", "gen-large",
                               rinside, str(gib)],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    cinside = f"/tmp/ckptfs-bench-coop-{mib}"
    cenv = dict(lib_env, CKPTFS_COOP_MIB=str(mib), CKPTFS_INDEX_CACHE="")
    if not os.path.exists(os.path.join(sid + cinside, ".metadata")):
        subprocess.check_call([SID, "run", "/usr/bin/python3",
                               "@ROOT@/tests/coop_check.py", "gen", cinside],
                              env=cenv, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)

    def size_of(d):
        return sum(os.path.getsize(os.path.join(d, f))
                   for f in os.listdir(d) if f.endswith(".distcp"))
    rsize, csize = size_of(sid + rinside), size_of(sid + cinside)
    with Radosgw(args.work) as rgw:
        env = rgw.environ(lib_env)
        env.update(AWS_ENDPOINT_URL=rgw.proxy_url, CKPTFS_INDEX_CACHE="")
        rgw.put_dir(sid + rinside, "req-resume")
        rgw.put_dir(sid + cinside, "req-coop")
        cdir = "/tmp/ckptfs-bench-req-cache"        # inside the chroot
        for reader, coop, cache in (("ckptfs", "on", ""),
                                    ("ckptfs-nocoop", "off", ""),
                                    ("ckptfs", "on", cdir)):
            rgw.proxy_reset()
            shutil.rmtree(sid + cdir, ignore_errors=True)
            out = subprocess.check_output(
                [SID, "run", "/usr/bin/python3",
                 "@ROOT@/tests/torch2_check.py", "resume",
                 f"s3://{BUCKET}/req-resume", str(world), reader, "0"],
                text=True, env=dict(env, CKPTFS_INDEX_CACHE=cache),
                stderr=subprocess.DEVNULL)
            shutil.rmtree(sid + cdir, ignore_errors=True)
            c = proxy_counts(rgw)
            per = []
            for line in out.splitlines():
                if line.startswith("io_stats "):
                    per = json.loads(line[len("io_stats "):])
            how = ("a node-local index cache, empty before (one rank "
                   "indexes, 7 reuse)" if cache else "no index cache")
            t.add(f"S3 requests, resume on {world} ranks from 4 "
                  f"({rsize / 2**30:.2f} GiB, Shard(0), {how}, no "
                  f".ckptfs-index), cooperative={coop == 'on'}",
                  [float(out.split()[-2])], unit="s",
                  note=counts_note(c, rsize, "the checkpoint", per))
        for mode in ("ddp", "hsdp"):
            for coop in ("on", "off"):
                rgw.proxy_reset()
                out = subprocess.check_output(
                    [SID, "run", "/usr/bin/python3",
                     "@ROOT@/tests/coop_check.py", "load", cinside,
                     str(world), mode, coop, "--s3",
                     f"s3://{BUCKET}/req-coop"],
                    text=True, env=dict(env, CKPTFS_COOP_MIB=str(mib)),
                    stderr=subprocess.DEVNULL)
                c = proxy_counts(rgw)
                secs = float(out.rsplit("load ", 1)[1].split()[0])
                what = {"ddp": "DDP: every rank loads the whole state",
                        "hsdp": "HSDP 2x4: DTensor on a (2, 4) mesh, "
                                "(Replicate(), Shard(0))"}[mode]
                t.add(f"S3 requests, {what} ({csize / 2**20:.0f} MiB, "
                      f"{world} gloo ranks), cooperative={coop == 'on'}",
                      [secs], unit="s",
                      note=counts_note(c, csize, "the checkpoint's data "
                                       "files"))
