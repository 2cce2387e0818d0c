#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Python-side checks of Entra ID tokens (tests/bats/azure_entra.bats).

  entra_check.py same ROOT LOCAL W R CA     ckptfs.load(ROOT) (az://, the
      token from the environment, CA the test CA, the endpoint from
      AZURE_STORAGE_BLOB_ENDPOINT) equals ckptfs.load(LOCAL), numpy
  entra_check.py interrupt ROOT W R CA COUNT
      ckptfs.load(ROOT) while the token endpoint hangs, with an open
      deadline of 10 minutes; SIGINT once COUNT (the token server's
      request log) has a line: prints "KeyboardInterrupt" when the load
      ends so, else what it ended with.
"""
import os
import signal
import sys
import threading
import time
import warnings

import numpy as np

import ckptfs

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from loader_checks import flatten  # noqa: E402


def flat(d):
    return dict(flatten(d))


def same(root, local, w, r, ca):
    w, r = int(w), int(r)
    got = flat(ckptfs.load(root, w, r, backend="numpy", s3_ca_bundle=ca))
    want = flat(ckptfs.load(local, w, r, backend="numpy"))
    bad = 0
    if sorted(got) != sorted(want):
        print("keys differ:", sorted(set(got) ^ set(want))[:10])
        bad += 1
    for k in sorted(set(got) & set(want)):
        g, e = got[k], want[k]
        if isinstance(e, np.ndarray):
            ok = (isinstance(g, np.ndarray) and g.dtype == e.dtype and
                  g.shape == e.shape and g.tobytes() == e.tobytes())
        else:
            ok = g == e
        if not ok:
            print("differs:", k)
            bad += 1
    print(f"compared {len(want)} entries, {bad} problems")
    return 1 if bad or not want else 0


def interrupt(root, w, r, ca, count):
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def fire():
        while not (os.path.exists(count) and os.path.getsize(count)):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=fire, daemon=True).start()
    try:
        ckptfs.load(root, int(w), int(r), backend="numpy", s3_ca_bundle=ca,
                    s3_open_deadline_ms=600000)
        print("loaded")
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
    except Exception as e:      # the test prints what came instead
        print("error:", e)
    return 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")     # numpy's missing dtypes
    cmd = sys.argv[1]
    if cmd == "same":
        sys.exit(same(*sys.argv[2:7]))
    if cmd == "interrupt":
        sys.exit(interrupt(*sys.argv[2:7]))
    sys.exit("usage: entra_check.py same|interrupt ...")
