# SPDX-License-Identifier: MIT
"""Ctrl-C during a load: the engine's threads see the cancel flag
between pieces and stop; KeyboardInterrupt is raised and every byte and
descriptor is freed.  The time from the signal to the exception is
printed (a sanity bound of 5 s only: no timing thresholds in tests)."""
import ctypes
import errno
import json
import os
import subprocess

import pytest

import ckptfs
from ckptfs import _lib
from conftest import PY, ROOT, run_py


@pytest.fixture(scope="module")
def big_ckpt(tmp_path_factory):
    """A 1 GiB native checkpoint of 20 parameters."""
    out = tmp_path_factory.mktemp("big") / "ckpt"
    subprocess.check_call([PY, os.path.join(ROOT, "scripts", "bench",
                                            "gen_bench_ckpt.py"), "data",
                           str(out), "--gib", "1.0", "--params", "20"],
                          stdout=subprocess.DEVNULL)
    return str(out)


CHILD = r"""
import gc, json, os, signal, sys, threading, time
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

