#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Independent reference resharder, written apart from the C engine.

It reads .metadata with Python's msgpack, assembles every tensor whole with
numpy from its chunks, slices rank R's part with the torch.chunk rule, and
returns {view path: expected bytes}.  Also a checker that compares a mounted
view with it, byte for byte, by read() and by mmap.

    reference.py check CKPT MNT --world W --rank R [--prefix P]
    reference.py paths CKPT [--world W --rank R] [--prefix P]   (path TAB size)
"""
import argparse
import mmap
import os
import sys

import msgpack
import numpy as np

NP = {"float64": "<f8", "float32": "<f4", "float16": "<f2",
      "bfloat16": "<u2", "float8_e4m3fn": "u1", "float8_e5m2": "u1",
      "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1",
      "uint8": "u1", "bool": "u1"}


def encode(comp):
    """A path component as a file name (see README: percent-encoding)."""
    comp = str(comp)
    if comp == "":
        return "%"
    if comp in (".", "..") or "/" in comp or "\0" in comp:
        out = []
        for ch in comp:
            if ch in "/\0%.":
                out.append("%%%02X" % ord(ch))
            else:
                out.append(ch)
        return "".join(out)
    return comp


def load(ckpt):
    with open(os.path.join(ckpt, ".metadata"), "rb") as fh:
        return msgpack.unpackb(fh.read(), raw=False, strict_map_key=False)


def read_record(ckpt, rec):
    with open(os.path.join(ckpt, rec["relative_path"]), "rb") as fh:
        fh.seek(rec["offset"])
        data = fh.read(rec["length"])
    assert len(data) == rec["length"]
    return data


def full_tensor(ckpt, fqn, entry, records):
    shape = tuple(entry["size"])
    dt = np.dtype(NP[entry["dtype"]])
    out = np.zeros(shape, dtype=dt)
    for ch in entry["chunks"]:
        rec = records[(fqn, tuple(ch["offsets"]))]
        part = np.frombuffer(read_record(ckpt, rec), dtype=dt)
        part = part.reshape(tuple(ch["sizes"]))
        sl = tuple(slice(o, o + s) for o, s in zip(ch["offsets"], ch["sizes"]))
        out[sl] = part
    return out


def torch_chunk(t, world, rank):
    """torch.chunk(t, world, 0)[rank], or an empty slice where it does not
    exist; one-element tensors whole."""
    if t.size == 1:
        return t
    d0 = t.shape[0]
    cs = -(-d0 // world)
    lo, hi = min(d0, rank * cs), min(d0, (rank + 1) * cs)
    return t[lo:hi]


def view_path(fqn, meta):
    comps = (meta.get("planner_data") or {}).get(fqn)
    if comps is None:
        comps = fqn.split(".")
    return [encode(c) for c in comps]


def expected(ckpt, world=1, rank=0, prefix=None):
    meta = load(ckpt)
    records = {}
    for rec in meta["storage_data"]:
        off = rec.get("offsets")
        records[(rec["fqn"], tuple(off) if off is not None else None)] = rec
    out = {}
    for fqn, entry in meta["state_dict_metadata"].items():
        comps = (meta.get("planner_data") or {}).get(fqn)
        first = str(comps[0]) if comps else fqn.split(".")[0]
        if prefix is not None and first != prefix:
            continue
        path = "/".join(view_path(fqn, meta))
        if entry["type"] == "bytes":
            out[path] = read_record(ckpt, records[(fqn, None)])
            continue
        t = full_tensor(ckpt, fqn, entry, records)
        out[path] = np.ascontiguousarray(torch_chunk(t, world, rank)).tobytes()
    return out


def check(ckpt, mnt, world, rank, prefix=None):
    exp = expected(ckpt, world, rank, prefix)
    bad = []
    seen = set()
    for root, dirs, files in os.walk(mnt):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), mnt)
            seen.add(rel)
            if rel not in exp:
                bad.append(f"{rel}: not expected in the view")
    for rel, want in exp.items():
        p = os.path.join(mnt, rel)
        if rel not in seen:
            bad.append(f"{rel}: missing from the view")
            continue
        st = os.stat(p)
        if st.st_size != len(want):
            bad.append(f"{rel}: st_size {st.st_size}, want {len(want)}")
            continue
        with open(p, "rb") as fh:
            got = fh.read()
            if got != want:
                bad.append(f"{rel}: read() bytes differ")
            if want:
                with mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as mm:
                    if mm[:] != want:
                        bad.append(f"{rel}: mmap bytes differ")
            # An unaligned read across the middle, and one past the end.
            if len(want) > 3:
                fh.seek(1)
                if fh.read(len(want) - 2) != want[1:-1]:
                    bad.append(f"{rel}: read at offset 1 differs")
            fh.seek(len(want) + 5)
            if fh.read(10) != b"":
                bad.append(f"{rel}: read past the end returned data")
    return exp, bad


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["check", "paths"])
    ap.add_argument("ckpt")
    ap.add_argument("mnt", nargs="?")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--prefix")
    a = ap.parse_args(argv)
    if a.cmd == "paths":
        for p, b in sorted(expected(a.ckpt, a.world, a.rank, a.prefix).items()):
            print(f"{p}\t{len(b)}")
        return 0
    exp, bad = check(a.ckpt, a.mnt, a.world, a.rank, a.prefix)
    for b in bad:
        print(b)
    print(f"checked {len(exp)} files, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
