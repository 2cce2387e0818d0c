# SPDX-License-Identifier: MIT
"""Ctrl-C during a load: the engine's threads see the cancel flag
between pieces and stop; KeyboardInterrupt is raised and every byte and
descriptor is freed.  The time from the signal to the exception is
printed (a sanity bound of 5 s only: no timing thresholds in tests)."""
import ctypes
import errno
import json
import os
import shutil
import subprocess

import pytest

import ckptfs
from ckptfs import _lib
from conftest import PY, ROOT, gen_native, run_py


@pytest.fixture(scope="module")
def big_ckpt(tmp_path_factory):
    """A 1 GiB native checkpoint of 20 parameters."""
    out = tmp_path_factory.mktemp("big") / "ckpt"
    subprocess.check_call([PY, os.path.join(ROOT, "scripts", "bench",
                                            "gen_bench_ckpt.py"), "data",
                           str(out), "--gib", "1.0", "--params", "20"],
                          stdout=subprocess.DEVNULL)
    return str(out)


# A child started where SIGINT is ignored (a background job of a shell
# without job control, as CI may start the suite) would not turn it into
# KeyboardInterrupt: each child sets Python's own handler first.
CHILD = r"""
import gc, json, os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy
import ckptfs
from ckptfs import _lib

def fds():
    return len(os.listdir("/proc/self/fd"))

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10

rcs, fired = [], []
real = _lib.lib.cdll.ckpt_view_read_batch_opts

def batch(*a):
    # SIGINT 0.05 s after the data starts to be read.
    def fire():
        time.sleep(0.05)
        fired.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=fire, daemon=True).start()
    rc = real(*a)
    rcs.append(rc)
    return rc

_lib.lib.ckpt_view_read_batch_opts = batch
gc.collect()
fd0, rss0 = fds(), rss()
try:
    ckptfs.load(sys.argv[1], backend="numpy", threads=2)
    result = "completed"
except KeyboardInterrupt:
    result = "KeyboardInterrupt"
t = time.monotonic()
gc.collect()
print(json.dumps(dict(result=result, rcs=rcs,
                      after_signal=t - fired[0] if fired else None,
                      fds_before=fd0, fds_after=fds(),
                      rss_before=rss0, rss_after=rss(),
                      threads=threading.active_count())))
"""


def test_ctrl_c_stops_the_engine_and_frees_everything(big_ckpt):
    p = run_py(CHILD, big_ckpt, timeout=120)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"KeyboardInterrupt {r['after_signal'] * 1000:.0f} ms after "
          f"SIGINT; RSS {r['rss_before'] >> 20} -> {r['rss_after'] >> 20} "
          f"MiB; fds {r['fds_before']} -> {r['fds_after']}")
    assert r["result"] == "KeyboardInterrupt"
    assert r["rcs"] == [-errno.ECANCELED], "the engine was not cancelled"
    assert r["after_signal"] < 5.0     # sanity only
    assert r["fds_after"] == r["fds_before"]
    assert r["rss_after"] < r["rss_before"] + (64 << 20)
    assert r["threads"] == 1


def test_a_flag_set_before_the_call_reads_nothing(native_ckpt):
    with ckptfs.open(native_ckpt) as c:
        name, k = next((n, k) for n, k in c.info().keys.items()
                       if k.kind == "tensor" and k.nbytes >= 16)
        reqs = (_lib.BoxReq * 1)()
        reqs[0].key = c.key_index(name)
        for d, s in enumerate(k.shape):
            reqs[0].size[d] = s
        buf = ctypes.create_string_buffer(b"\xa5" * k.nbytes, k.nbytes)
        reqs[0].dst = ctypes.addressof(buf)
        flag = ctypes.c_int(1)
        o = _lib.BatchOpts()
        o.threads = 2
        o.cancel = ctypes.pointer(flag)
        m = c._acquire()
        try:
            rc = _lib.lib.ckpt_meta_read_boxes_opts(m, reqs, 1,
                                                    ctypes.byref(o), None, 0)
            e = _lib.last_error()
            flag.value = 0
            rc2 = _lib.lib.ckpt_meta_read_boxes_opts(m, reqs, 1,
                                                     ctypes.byref(o), None, 0)
        finally:
            c._release()
    assert rc == -errno.ECANCELED and e.code == errno.ECANCELED
    assert e.message == b"cancelled"
    assert rc2 == 0 and buf.raw != b"\xa5" * k.nbytes



# ---------------------------------------------------------------------
# Ctrl-C in every phase against a server that accepts and never answers
# (tests/stall_s3.py): the open (.metadata), the listing, the index pass,
# the index cache's lock wait and the reads.  A child Python process is
# sent SIGINT while the phase waits; KeyboardInterrupt must come (the
# time is printed; 5 s x CKPTFS_TIME_SCALE is a liveness bound only),
# with no thread or descriptor left behind, and a later call (on the
# same handle for reads) must give the right values.

import fcntl       # noqa: E402
import glob        # noqa: E402
import signal      # noqa: E402
import threading   # noqa: E402
import time        # noqa: E402

import numpy as np  # noqa: E402

import reference   # noqa: E402
from stall_s3 import StallS3  # noqa: E402

SCALE = float(os.environ.get("CKPTFS_TIME_SCALE", "1") or 1)
BOUND = 5.0 * SCALE      # liveness only
BUCKET = "bkt"

PHASE_CHILD = r"""
import signal as _sig
_sig.signal(_sig.SIGINT, _sig.default_int_handler)
import json, os, sys, threading, time
import numpy
import ckptfs

phase, target, kw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

def nfds():
    return len(os.listdir("/proc/self/fd"))

def flat(d, pre=""):
    out = {}
    for k, v in d.items():
        p = pre + str(k)
        if isinstance(v, dict):
            out.update(flat(v, p + "/"))
        elif isinstance(v, numpy.ndarray):
            out[p] = v.tobytes().hex()
        elif isinstance(v, (bytes, bytearray)):
            out[p] = bytes(v).hex()
    return out

res = {}
fd0 = nfds()
c = None
try:
    c = ckptfs.open(target, **kw)
    res["fds_open"] = nfds()
    print("OPENED", flush=True)
    c.load(backend="numpy", trust_pickles=False)
    res["result"] = "completed"
except KeyboardInterrupt:
    res["result"] = "KeyboardInterrupt"
res["t_interrupt"] = time.monotonic()
res["threads"] = threading.active_count()
res["fds_after"] = nfds()
res["fds_before"] = fd0
print("INTERRUPTED", flush=True)
sys.stdin.readline()            # the server answers again
if c is None:                   # the open was stopped: open again
    c = ckptfs.open(target, **kw)
later = c.load(backend="numpy", trust_pickles=False)
res["nkeys"] = len(c.info().keys)
c.close()
res["later"] = flat(later)
res["fds_end"] = nfds()
res["threads_end"] = threading.active_count()
print(json.dumps(res), flush=True)
"""


def _child_env(tmp_path):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(ROOT, "scripts") + os.pathsep + \
        os.path.join(ROOT, "tests")
    e.update(HOME=str(home), AWS_ACCESS_KEY_ID="ck",
             AWS_SECRET_ACCESS_KEY="ck-secret", AWS_REGION="us-east-1")
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
              "AWS_ENDPOINT_URL_S3", "AWS_SHARED_CREDENTIALS_FILE",
              "AWS_CONFIG_FILE"):
        e.pop(k, None)
    return e


def _line(p, want, deadline):
    """The child's next stdout line, which must be want."""
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if line.strip() == want:
            return
    p.kill()
    raise AssertionError(f"child did not say {want}: {p.stderr.read()}")


def _run_phase(tmp_path, phase, target, kw, waiting, release,
               open_first=False, env=None):
    """Start the child, wait until waiting() says it waits in the phase,
    send SIGINT, release() the server, and return its report and the
    latency from the signal to KeyboardInterrupt."""
    p = subprocess.Popen([PY, "-c", PHASE_CHILD, phase, target,
                          json.dumps(kw)],
                         env=dict(_child_env(tmp_path), **(env or {})),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60 * SCALE
        if open_first:
            _line(p, "OPENED", deadline)
        while not waiting(p):
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, "the phase never waited"
            time.sleep(0.01)
        time.sleep(0.3)    # well inside the wait (curl's poll, a retry)
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        # A child that never stops is killed: its EOF fails the test.
        watchdog = threading.Timer(BOUND + 30 * SCALE, p.kill)
        watchdog.daemon = True
        watchdog.start()
        _line(p, "INTERRUPTED", t0 + BOUND + 30 * SCALE)
        watchdog.cancel()
        release()
        out, err = p.communicate("go\n", timeout=120 * SCALE)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    lat = r["t_interrupt"] - t0
    print(f"{phase}: KeyboardInterrupt {lat * 1000:.0f} ms after SIGINT")
    assert r["result"] == "KeyboardInterrupt"
    assert lat < BOUND, f"{phase}: {lat:.1f} s"     # liveness only
    assert r["threads"] == 1 and r["threads_end"] == 1
    if not open_first:      # nothing of the stopped open is left
        assert r["fds_after"] == r["fds_before"], r
    assert r["fds_end"] == r["fds_before"], r
    return r


def _check_native(r, ckpt):
    want = {k: v.hex() for k, v in reference.expected(ckpt).items()}
    got = r["later"]
    assert want and set(want) <= set(got)
    for k, v in want.items():
        assert got[k] == v, k


@pytest.fixture
def s3dir(tmp_path):
    """A directory served as bucket BUCKET by a stalling server."""
    d = tmp_path / "bucket"
    d.mkdir()
    srv = StallS3(str(d), BUCKET)
    yield d, srv
    srv.close()


def test_ctrl_c_in_the_open(s3dir, tmp_path):
    d, srv = s3dir
    ck = gen_native(d / "ck", seed=5, keys=8)
    srv.stall(lambda q: q.key == "ck/.metadata")
    r = _run_phase(tmp_path, "open", f"s3://{BUCKET}/ck",
                   dict(s3_endpoint=srv.url), lambda p: srv.stalled.is_set(),
                   lambda: srv.stall(lambda q: False, 0))
    _check_native(r, ck)


def test_ctrl_c_in_the_listing(s3dir, tmp_path):
    d, srv = s3dir
    subprocess.check_call([PY, os.path.join(ROOT, "tests",
                                            "make_safetensors.py"), "ok",
                           str(d / "st")], stdout=subprocess.DEVNULL)
    # The probe asks for one key (max-keys); the listing asks for all.
    srv.stall(lambda q: q.key == "" and "max-keys" not in q.query)
    r = _run_phase(tmp_path, "list", f"s3://{BUCKET}/st",
                   dict(s3_endpoint=srv.url), lambda p: srv.stalled.is_set(),
                   lambda: srv.stall(lambda q: False, 0))
    exp = subprocess.check_output([PY, os.path.join(
        ROOT, "tests", "make_safetensors.py"), "expect", str(d / "st"), "1",
        "0"], text=True)
    want = dict(line.split("\t") for line in exp.splitlines() if line)
    assert want
    for k, v in want.items():
        assert r["later"][k] == v, k


@pytest.mark.parametrize("eager", [True, False])
def test_ctrl_c_in_the_index_pass(s3dir, tmp_path, torch_ckpts, eager):
    """The index pass: the open's with CKPTFS_EAGER_INDEX=1; else (the lazy
    open of an object store) the load's, locating its records.  A record
    whose locating was cancelled is located by the later load."""
    d, srv = s3dir
    shutil.copytree(os.path.join(torch_ckpts, "per_item"), d / "tk")
    srv.stall(lambda q: q.method == "GET" and q.ranged and
              q.key.endswith(".distcp"))
    r = _run_phase(tmp_path, "index", f"s3://{BUCKET}/tk",
                   dict(s3_endpoint=srv.url, index_cache=False),
                   lambda p: srv.stalled.is_set(),
                   lambda: srv.stall(lambda q: False, 0),
                   open_first=not eager,
                   env={"CKPTFS_EAGER_INDEX": "1" if eager else ""})
    with ckptfs.open(os.path.join(torch_ckpts, "per_item"),
                     index_cache=False) as c:
        local = c.load(backend="numpy", trust_pickles=False)
        assert r["nkeys"] == len(c.info().keys)
    n = 0
    stack = [("", local)]
    while stack:
        pre, dd = stack.pop()
        for k, v in dd.items():
            if isinstance(v, dict):
                stack.append((pre + str(k) + "/", v))
            elif isinstance(v, np.ndarray):
                assert r["later"][pre + str(k)] == v.tobytes().hex()
                n += 1
    assert n > 0


def test_ctrl_c_in_the_index_cache_lock_wait(tmp_path, torch_ckpts):
    ck = os.path.join(torch_ckpts, "per_item")
    cache = tmp_path / "icache"
    with ckptfs.open(ck, index_cache=str(cache)):
        pass    # indexed and cached: the lock file stays
    for f in glob.glob(str(cache / "*.ckptfs-index")):
        os.unlink(f)        # the next open misses and takes the lock
    locks = glob.glob(str(cache / "*.lock"))
    assert len(locks) == 1
    fd = os.open(locks[0], os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)

    def waiting(p):
        try:
            return any(os.readlink(f"/proc/{p.pid}/fd/{x}") == locks[0]
                       for x in os.listdir(f"/proc/{p.pid}/fd"))
        except OSError:
            return False

    def release():
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    try:
        r = _run_phase(tmp_path, "lock", ck, dict(index_cache=str(cache)),
                       waiting, release)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    assert r["later"]


@pytest.mark.parametrize("mode", ["silent", "headers-then-stall",
                                  "503-backoff"])
def test_ctrl_c_in_a_read_then_the_handle_reads(s3dir, tmp_path, mode):
    d, srv = s3dir
    ck = gen_native(d / "ck", seed=9, keys=8)
    busy = mode == "503-backoff"
    srv.stall(lambda q: q.method == "GET" and q.ranged and
              q.key.endswith(".distcp"), count=10 ** 6 if busy else 1,
              headers_first=mode == "headers-then-stall", busy=busy)
    # 503s: SIGINT once a request was sent again, in a retry's backoff
    # or the retry itself (s3_retries=20: minutes of backoff).
    kw = dict(s3_endpoint=srv.url, s3_retries=20)
    r = _run_phase(tmp_path, "read", f"s3://{BUCKET}/ck", kw,
                   lambda p: srv.picked >= (8 if busy else 1),
                   lambda: srv.stall(lambda q: False, 0), open_first=True)
    _check_native(r, ck)


def test_a_thread_flag_set_before_an_open_sends_nothing(s3dir):
    """ckpt_thread_cancel_set(): the C contract.  A set flag stops an
    S3 open before its first request (-ECANCELED, "cancelled" in the
    last error); cleared, the same thread opens; the flag is the
    thread's only."""
    d, srv = s3dir
    gen_native(d / "ck", seed=5, keys=4)
    L = _lib.lib
    s3 = _lib.S3Opts()
    s3.endpoint = srv.url.encode()
    s3.access_key, s3.secret_key = b"ck", b"ck-secret"
    s3.region = b"us-east-1"
    oo = _lib.OpenOpts()
    oo.s3 = ctypes.pointer(s3)
    flag = ctypes.c_int(1)
    m = ctypes.c_void_p()
    err = ctypes.create_string_buffer(512)
    root = f"s3://{BUCKET}/ck".encode()
    old = L.ckpt_thread_cancel_set(ctypes.pointer(flag))
    try:
        rc = L.ckpt_meta_open_opts(root, ctypes.byref(oo), ctypes.byref(m),
                                   err, len(err))
        e = _lib.last_error()
        sent = len(srv.log)
        flag.value = 0
        rc2 = L.ckpt_meta_open_opts(root, ctypes.byref(oo), ctypes.byref(m),
                                    err, len(err))
    finally:
        L.ckpt_thread_cancel_set(old)
    assert rc == -errno.ECANCELED and e.code == errno.ECANCELED
    assert e.message == root + b": cancelled", e.message
    assert sent == 0
    assert rc2 == 0, err.value
    L.ckpt_meta_free(m)
