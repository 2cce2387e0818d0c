# SPDX-License-Identifier: MIT
"""Issue 38 items 2 and 3 on a local checkpoint of thousands of items
(2,000 tensors saved by 4 ranks: 8,000 records; generated at run time by
scripts/gen_torch_ckpt.py --params): an open without an index reads
.metadata alone, as one from an object store does, and a load reads only
the records of its rank's share; its views equal the eager pass's
(CKPTFS_EAGER_INDEX=1) byte for byte; and the 8 processes of a node that
open it at once with an empty index cache parse its .metadata once.
Expected counts come from torch's own read_metadata() (lazy_check.py
share), expected bytes from the eager open."""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import PY, ROOT, run_py

pytest.importorskip("torch")

LAZY_CHECK = os.path.join(ROOT, "tests", "lazy_check.py")
WINDOW = 1024   # CKPT_LOCATE_WINDOW: a locating read's reach past a record


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    out = tmp_path_factory.mktemp("many")
    subprocess.check_call([PY, os.path.join(ROOT, "scripts",
                                            "gen_torch_ckpt.py"),
                           str(out), "--large", "0.001", "--world", "4",
                           "--params", "1000"], stdout=subprocess.DEVNULL)
    return str(out / "large")


def lazy_check(*args, env=None):
    p = run_py("import sys, lazy_check\n"
               "sys.exit(lazy_check.main(sys.argv[1:]))",
               *args, env=env)
    return p.stdout


def test_lazy_and_eager_opens_give_the_same_views(many):
    out = lazy_check("lazyeager", many, "-", 1, 0, 2, 1, 3, 1, 8, 5)
    print(out)
    assert out.count("files equal") == 4, out


# One process: the plan of rank R of W, as JSON; or the exception it
# raised, by class and message.
PLAN = r"""
import json, sys
import ckptfs
ck, w, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with ckptfs.open(ck, index_cache=False) as h:
    try:
        p = h.plan(w, r)
    except ckptfs.Error as e:
        print(json.dumps({"raised": type(e).__name__, "msg": str(e)}))
    else:
        print(json.dumps([[e.key, [[x.file, x.offset, x.length, x.decoded]
                                   for x in e.runs]] for e in p]))
"""


def test_a_lazy_plan_locates_its_records_and_names_one_it_cannot(
        many, tmp_path):
    for w, r in ((8, 5), (3, 0), (1, 0)):
        lazy = json.loads(run_py(PLAN, many, w, r).stdout)
        eager = json.loads(run_py(PLAN, many, w, r, env={
            "CKPTFS_EAGER_INDEX": "1"}).stdout)
        assert sum(len(runs) for _, runs in lazy) > 0, lazy
        assert lazy == eager
    # The zip end record of __2_0.distcp's first record, broken: the plan
    # that needs it raises, naming the file and the key; it is never a
    # plan without that record's runs.
    broken = tmp_path / "broken"
    shutil.copytree(many, broken)
    b = bytearray((broken / "__2_0.distcp").read_bytes())
    b[b.index(b"PK\x05\x06")] = 0
    (broken / "__2_0.distcp").write_bytes(bytes(b))
    got = json.loads(run_py(PLAN, broken, 1, 0).stdout)
    assert got["raised"] == "ReadError", got
    assert "__2_0.distcp" in got["msg"] and "key '" in got["msg"] and \
        "no zip end record" in got["msg"], got


# One process: open CKPT (no index cache) lazily or not, as the
# environment says, and load rank R of W: the handle's I/O counters after
# the open and after the load.
COUNT = r"""
import json, sys
import ckptfs
ck, w, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with ckptfs.open(ck, index_cache=False) as h:
    at_open = h.io_stats()
    h.load(w, r, backend="numpy")
    after = h.io_stats()
print(json.dumps({"open": at_open, "after": after}))
"""


def test_a_lazy_open_reads_metadata_then_only_a_ranks_records(many):
    w, r = 8, 5
    share = lazy_check("share", many, w, r).split()
    nrec, nbytes = int(share[1]), int(share[3])
    data = sum(os.path.getsize(os.path.join(many, f))
               for f in os.listdir(many) if f.endswith(".distcp"))
    assert 100 < nrec < 8000 / 2 and nbytes < data / 2, (nrec, nbytes)
    lazy = json.loads(run_py(COUNT, many, w, r).stdout.splitlines()[-1])
    eager = json.loads(run_py(COUNT, many, w, r, env={
        "CKPTFS_EAGER_INDEX": "1"}).stdout.splitlines()[-1])
    print("records", nrec, "of 8000,", nbytes, "bytes of", data,
          "; lazy", lazy["after"], "; eager", eager["after"])
    # The open: .metadata, one pread, and nothing else.
    meta = os.path.getsize(os.path.join(many, ".metadata"))
    assert lazy["open"]["requests"] == 1, lazy["open"]
    assert lazy["open"]["bytes_fetched"] == meta, lazy["open"]
    # The load: the rank's records, each with at most a locating window
    # on either side (joined reads), and none of the others.
    got = lazy["after"]["read_bytes_fetched"]
    assert got <= nbytes + 2 * WINDOW * nrec, (got, nbytes, nrec)
    # The eager pass reads every record's zip windows at open: a request
    # or more for each of the 8000.
    assert eager["open"]["requests"] >= 8000 / 2, eager["open"]
    assert eager["after"]["bytes_fetched"] > \
        lazy["after"]["bytes_fetched"], (eager, lazy)


def test_a_lazy_local_load_reads_a_records_run_in_one_request(many):
    # W=3 R=1 reads 3,600 of the 8,000 records, most of them in part
    # (each saved chunk's rows from one end): a record's head window,
    # its rows (straight into the tensor) and its tail window follow one
    # another in its file, and are one preadv, not three preads or one
    # read into a buffer and copied.
    w, r = 3, 1
    share = lazy_check("share", many, w, r).split()
    nrec, nbytes = int(share[1]), int(share[3])
    lazy = json.loads(run_py(COUNT, many, w, r).stdout.splitlines()[-1])
    got = lazy["after"]
    reads = got["requests"] - lazy["open"]["requests"]
    print("records", nrec, "bytes", nbytes, "; lazy", got)
    # (before: 404 requests and 1.40x the records' bytes)
    assert reads <= nrec / 10, (reads, nrec)
    assert got["read_bytes_fetched"] <= 1.2 * nbytes, (got, nbytes)


# One of 8 processes: wait for the start file, open CKPT with the index
# cache given, load rank 1 of 4; its origin, the open's time and I/O, and
# a digest of every file's bytes.
OPEN8 = r"""
import hashlib, json, os, sys, time
import ckptfs
ck, cache, start, ready = sys.argv[1:5]
open(ready, "w").close()
while cache != "off" and not os.path.exists(start):
    time.sleep(0.001)
t0 = time.monotonic()
with ckptfs.open(ck, index_cache=False if cache == "off" else cache) as h:
    t_open = time.monotonic() - t0
    origin, at_open = h.info().origin, h.io_stats()
    sd = h.load(4, 1, backend="numpy")
def flat(d, p=()):
    for k in sorted(d):
        if isinstance(d[k], dict):
            yield from flat(d[k], p + (k,))
        else:
            yield p + (k,), d[k]
dg = hashlib.sha256()
for p, v in flat(sd):
    dg.update(".".join(p).encode())
    dg.update(v.tobytes() if hasattr(v, "tobytes") else bytes(v))
print(json.dumps({"origin": origin, "open_s": t_open,
                  "requests": at_open["requests"],
                  "digest": dg.hexdigest()}))
"""


def test_eight_concurrent_opens_parse_once(many, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    start = tmp_path / "start"
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(ROOT, "scripts")
    ref = json.loads(run_py(OPEN8, many, "off", "-", tmp_path / "r0", env={
        "CKPTFS_EAGER_INDEX": "1"}).stdout.splitlines()[-1])
    procs = []
    try:
        procs = [subprocess.Popen([PY, "-c", OPEN8, many, str(cache),
                                   str(start), str(tmp_path / f"ready{i}")],
                                  env=e, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for i in range(8)]
        deadline = time.monotonic() + 120
        while not all(os.path.exists(tmp_path / f"ready{i}")
                      for i in range(8)) and time.monotonic() < deadline \
                and all(p.poll() is None for p in procs):
            time.sleep(0.01)
        start.touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    res = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        res.append(json.loads(out.splitlines()[-1]))
    print("opens (s):", sorted(round(x["open_s"], 3) for x in res))
    # One parsed the pickle (and stored its lazy image under the key's
    # lock); the seven others waited for it and read the image.
    origins = sorted(x["origin"] for x in res)
    assert origins == ["torch"] + ["torch-index-cache"] * 7, res
    # Each open read .metadata alone (lazy), and each view equals the
    # eager open's.
    assert all(x["requests"] <= 2 for x in res), res
    assert {x["digest"] for x in res} == {ref["digest"]}, (res, ref)
    assert len([f for f in os.listdir(cache)
                if f.endswith(".ckptfs-index")]) == 1
