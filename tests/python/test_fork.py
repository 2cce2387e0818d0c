# SPDX-License-Identifier: MIT
"""Fork-safe handles (issue 37, item 3): a process forks (os.fork, and a
torch DataLoader starting its workers) while other threads read through
an s3:// handle; each child loads through the same handle and must get
the local copy's values (numpy reference), within a liveness bound
(scaled by CKPTFS_TIME_SCALE): a lock held by a parent's thread at the
fork, or the parent's busy workers, would leave the child hanging."""
import hashlib
import os
import subprocess

import pytest

import reference
from conftest import PY, ROOT, gen_native
from stall_s3 import StallS3

SCALE = float(os.environ.get("CKPTFS_TIME_SCALE", "1") or 1)
BUCKET = "bkt"
FORKS = 50

CHILD = r"""
import hashlib, json, os, select, sys, threading, time
import numpy
import ckptfs

target, kw, mode, forks, bound = sys.argv[1], json.loads(sys.argv[2]), \
    sys.argv[3], int(sys.argv[4]), float(sys.argv[5])

def digest(d, pre=""):
    out = {}
    for k, v in d.items():
        p = pre + str(k)
        if isinstance(v, dict):
            out.update(digest(v, p + "/"))
        elif isinstance(v, numpy.ndarray):
            out[p] = hashlib.sha256(v.tobytes()).hexdigest()
        elif isinstance(v, (bytes, bytearray)):
            out[p] = hashlib.sha256(bytes(v)).hexdigest()
    return out

c = ckptfs.open(target, **kw)
stop = threading.Event()
loads = [0]

def reader():
    while not stop.is_set():
        c.load(backend="numpy", threads=4)
        loads[0] += 1
readers = [threading.Thread(target=reader, daemon=True) for _ in range(3)]
for t in readers:
    t.start()
while loads[0] < 1:
    time.sleep(0.01)
res = {"children": [], "hung": 0}
if mode == "fork":
    for i in range(forks):
        time.sleep(0.002 * (i % 7))     # forks fall at varied points
        r, w = os.pipe()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                out = json.dumps(digest(c.load(backend="numpy", threads=2)))
            except BaseException as e:
                out = json.dumps({"error": repr(e)})
            os.write(w, out.encode())
            os._exit(0)
        os.close(w)
        buf = b""
        while True:
            left = t0 + bound - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                res["hung"] += 1
                os.kill(pid, 9)
                break
            b = os.read(r, 1 << 20)
            if not b:
                break
            buf += b
        os.close(r)
        os.waitpid(pid, 0)
        res["children"].append({"t": time.monotonic() - t0,
                                "got": json.loads(buf) if buf else None})
else:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class DS(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return json.dumps(digest(c.load(backend="numpy", threads=2)))

    for i in range(forks):
        t0 = time.monotonic()
        dl = DataLoader(DS(), batch_size=None, num_workers=2,
                        timeout=bound, multiprocessing_context="fork")
        try:
            for item in dl:
                res["children"].append({"t": time.monotonic() - t0,
                                        "got": json.loads(item)})
        except RuntimeError as e:       # a worker timed out
            res["hung"] += 1
            res["error"] = repr(e)
stop.set()
for t in readers:
    t.join()
res["parent"] = digest(c.load(backend="numpy"))
c.close()
print(json.dumps(res), flush=True)
os._exit(0)         # no interpreter teardown under the daemon threads
"""


@pytest.fixture
def s3ckpt(tmp_path):
    d = tmp_path / "bucket"
    d.mkdir()
    ck = gen_native(d / "ck", seed=13, keys=40)
    srv = StallS3(str(d), BUCKET)
    yield ck, srv
    srv.close()


def _expected(ck):
    return {k: hashlib.sha256(bytes(v)).hexdigest()
            for k, v in reference.expected(ck).items()}


@pytest.mark.parametrize("mode,forks", [("fork", FORKS),
                                        ("dataloader", FORKS // 5)])
def test_a_child_forked_during_s3_reads_loads_the_right_values(
        s3ckpt, tmp_path, mode, forks):
    if mode == "dataloader":
        pytest.importorskip("torch")
    import json
    ck, srv = s3ckpt
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "scripts") + os.pathsep + \
        os.path.join(ROOT, "tests")
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
              "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
              "AWS_SHARED_CREDENTIALS_FILE"):
        env.pop(k, None)
    env.update(HOME=str(home), AWS_ACCESS_KEY_ID="ck",
               AWS_SECRET_ACCESS_KEY="ck-secret", AWS_REGION="us-east-1")
    bound = 20 * SCALE          # liveness: a load takes well under 1 s
    kw = dict(s3_endpoint=srv.url)
    p = subprocess.run([PY, "-c", CHILD, f"s3://{BUCKET}/ck",
                        json.dumps(kw), mode, str(forks), str(bound)],
                       env=env, capture_output=True, text=True,
                       timeout=forks * (bound + 5) + 120 * SCALE)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    want = _expected(ck)
    times = [x["t"] for x in r["children"]]
    print(f"{mode}: {len(times)} children, {r['hung']} hung; slowest "
          f"{max(times or [0]):.2f} s")
    assert r["hung"] == 0, r.get("error")
    assert len(r["children"]) == forks * (4 if mode == "dataloader" else 1)
    assert r["parent"] == want
    for x in r["children"]:
        assert x["got"] == want
