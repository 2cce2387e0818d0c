#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/bats/packages.bats's two sides of ckptfs.load in the Debian 12
chroot.  Inside it, with the packaged module:
    packages_check.py dump CKPT WORLD RANK OUT
loads CKPT as rank RANK of WORLD with ckptfs.load and pickles {view
path: bytes}, with the module's and the library's paths.  On the host:
    packages_check.py compare CKPT WORLD RANK OUT
compares that with tests/reference.py's independent numpy reference."""
import os
import pickle
import sys


def flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, prefix + k + "/")
        else:
            yield prefix + k, v


def dump(ckpt, world, rank, out):
    import ckptfs
    import numpy as np
    sd = ckptfs.load(ckpt, world=world, rank=rank, backend="numpy")
    got = {}
    for k, v in flat(sd):
        got[k] = (np.ascontiguousarray(v).tobytes()
                  if isinstance(v, np.ndarray) else bytes(v))
    with open(out, "wb") as fh:
        pickle.dump({"module": ckptfs.__file__, "lib": ckptfs._lib.lib.path,
                     "views": got}, fh)


def compare(ckpt, world, rank, out):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import reference
    want = reference.expected(ckpt, world=world, rank=rank)
    with open(out, "rb") as fh:
        got = pickle.load(fh)
    print("module", got["module"], "library", got["lib"])
    bad = sorted(k for k in set(want) | set(got["views"])
                 if want.get(k) != got["views"].get(k))
    for k in bad:
        print("differs:", k, len(want.get(k, b"")),
              len(got["views"].get(k, b"")))
    print(len(want), "views,", len(bad), "differ")
    return 1 if bad or not want else 0


if __name__ == "__main__":
    cmd, ckpt, world, rank, out = sys.argv[1:6]
    f = {"dump": dump, "compare": compare}[cmd]
    sys.exit(f(ckpt, int(world), int(rank), out) or 0)
