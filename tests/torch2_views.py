#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Host side of the newest-torch suite: views of checkpoints written by
torch 2.x (tests/torch2_check.py gen) against the full tensors it saved
as raw bytes (REF/index.json), sliced here with numpy by the torch.chunk
rule.

    torch2_views.py mount CKPT REF MNT W R [PREFIX]
                                     every file of a mounted view (only
                                     keys starting PREFIX; those must all
                                     be there)
    torch2_views.py load CKPT REF W R...     ckptfs.load, one dict per rank
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))

NP = {"float32": "<f4", "float64": "<f8", "bfloat16": "<u2", "int64": "<i8"}


def expected(ref, name, world, rank):
    dt, shape = json.load(open(os.path.join(ref, "index.json")))[name]
    a = np.fromfile(os.path.join(ref, name + ".bin"), dtype=NP[dt])
    a = a.reshape(shape)
    if a.size == 1 or a.ndim == 0:
        return a.tobytes()
    cs = -(-shape[0] // world)
    return np.ascontiguousarray(a[min(shape[0], rank * cs):
                                  min(shape[0], (rank + 1) * cs)]).tobytes()


def mount(ckpt, ref, mnt, w, r, prefix=""):
    w, r = int(w), int(r)
    index = [k for k in json.load(open(os.path.join(ref, "index.json")))
             if k.startswith(prefix)]
    files = {}
    for d, dirs, fs in os.walk(mnt):
        if ".ckptfs" in dirs:
            dirs.remove(".ckptfs")
        for f in fs:
            p = os.path.join(d, f)
            files[os.getxattr(p, "user.ckptfs.fqn").decode()] = p
    bad = 0
    for name in index:
        got = open(files[name], "rb").read()
        if got != expected(ref, name, w, r):
            print(name, "differs")
            bad += 1
    print(f"W={w} R={r}: {len(index)} keys against torch's tensors, {bad} differ")
    return 1 if bad else 0


def load(ckpt, ref, w, *ranks):
    import warnings
    import ckptfs
    w, ranks = int(w), [int(r) for r in ranks]
    index = json.load(open(os.path.join(ref, "index.json")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sds = ckptfs.load(ckpt, w, ranks=ranks, backend="numpy")
    bad = 0

    def find(d, fqn):
        for k, v in d.items():
            if isinstance(v, dict):
                x = find(v, fqn)
                if x is not None:
                    return x
            elif k == fqn:
                return v
        return None
    for r, sd in zip(ranks, sds):
        for name in index:
            v = find(sd, name)
            if v is None or np.ascontiguousarray(v).tobytes() != \
                    expected(ref, name, w, r):
                print(r, name, "differs")
                bad += 1
    print(f"ckptfs.load W={w} ranks {ranks}: {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit({"mount": mount, "load": load}[sys.argv[1]](*sys.argv[2:]))
