#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Independent reference resharder, written apart from the C engine.

It reads .metadata with Python's msgpack, assembles every tensor whole with
numpy from its chunks, slices rank R's part with the torch.chunk rule, and
returns {view path: expected bytes}.  Also a checker that compares a mounted
view with it, byte for byte, by read() and by mmap.

    reference.py check CKPT MNT --world W --rank R [--prefix P]
                 [--layout FILE] [--dtype float32|bfloat16]
    reference.py paths CKPT [--world W --rank R] [--prefix P]   (path TAB size)

With --layout, a key (prefix, "state", PARAM, STATE) is first cut to
PARAM's box; with --dtype, floating tensors are converted (round to
nearest even; compared with NaN == NaN).
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
    """A path component as a file name (see docs/usage.md: percent-encoding)."""
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
        if rec.get("strides") is not None and 0 not in ch["sizes"]:
            # element (l0, l1, ...) is at sum(l[d] * strides[d])
            part = np.lib.stride_tricks.as_strided(
                part, shape=tuple(ch["sizes"]),
                strides=tuple(s * dt.itemsize for s in rec["strides"]))
        else:
            part = part.reshape(tuple(ch["sizes"]))
        sl = tuple(slice(o, o + s) for o, s in zip(ch["offsets"], ch["sizes"]))
        out[sl] = part
    return out


def load_layout(path):
    boxes = {}
    if not path:
        return boxes
    for line in open(path):
        line = line.split("#", 1)[0].split()
        if not line:
            continue
        param, off, size = line
        boxes[param] = ([int(x) for x in off.split(",")],
                        [int(x) for x in size.split(",")])
    return boxes


def box_of(fqn, meta, boxes):
    """The layout line that binds key fqn: its exact FQN, else its PARAM,
    else the first shell-glob line matching the FQN."""
    import fnmatch
    if fqn in boxes:
        return boxes[fqn]
    p = param_of(fqn, meta)
    if p in boxes:
        return boxes[p]
    for name, box in boxes.items():
        if any(ch in name for ch in "*?[") and fnmatch.fnmatchcase(fqn, name):
            return box
    return None


def param_of(fqn, meta):
    comps = (meta.get("planner_data") or {}).get(fqn)
    if comps is not None:
        if len(comps) == 4 and str(comps[1]) == "state":
            return str(comps[2])
        return None
    parts = fqn.split(".")
    if len(parts) >= 4 and parts[1] == "state":
        return ".".join(parts[2:-1])
    return None


# ---- dtype conversion, written apart from core/convert.c -----------------
def e4m3_table():
    """All 256 float8_e4m3fn codes as float32 (NaN canonical)."""
    out = np.zeros(256, dtype="<f4")
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            out[b] = np.float32("nan") * s
        elif e == 0:
            out[b] = s * m / 8.0 * 2.0 ** -6
        else:
            out[b] = s * (1 + m / 8.0) * 2.0 ** (e - 7)
    return out


def to_f32(raw, src):
    if src == "float64":
        return np.frombuffer(raw, "<f8").astype("<f4")
    if src == "float32":
        return np.frombuffer(raw, "<f4").copy()
    if src == "float16":
        return np.frombuffer(raw, "<f2").astype("<f4")
    if src == "bfloat16":
        return (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
    if src == "float8_e5m2":
        return (np.frombuffer(raw, "u1").astype("<u2") << 8).view("<f2").astype("<f4")
    if src == "float8_e4m3fn":
        return e4m3_table()[np.frombuffer(raw, "u1")]
    raise ValueError(src)


_BF16 = None


def f64_to_bf16(x):
    """Nearest bfloat16 (ties to even) of each float64, by searching the
    table of every finite bfloat16 value."""
    global _BF16
    if _BF16 is None:
        codes = np.arange(0, 0x7f81, dtype="<u4")          # +0 .. +Inf
        _BF16 = ((codes << 16).view("<f4").astype("<f8"), codes.astype("<u2"))
    vals, codes = _BF16
    a = np.abs(x)
    i = np.clip(np.searchsorted(vals, a, side="left"), 1, len(vals) - 1)
    lo, hi = vals[i - 1], vals[i]
    with np.errstate(invalid="ignore"):
        dlo, dhi = a - lo, hi - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (codes[i] % 2 == 0))
    out = np.where(pick_hi, codes[i], codes[i - 1]).astype("<u2")
    out = np.where(a == vals[i - 1], codes[i - 1], out)
    # Half a step past the largest finite value (0x1.fep127, code 0x7f7f)
    # or more: Inf (the tie goes to the even code, which is Inf).
    big = a >= float.fromhex("0x1.ffp127")
    out = np.where(big, np.uint16(0x7f80), out)
    out = np.where(np.isinf(a), np.uint16(0x7f80), out)
    out = out | np.where(np.signbit(x), np.uint16(0x8000), np.uint16(0))
    return np.where(np.isnan(x), np.uint16(0x7fc0) | (out & 0x8000), out).astype("<u2")


def f32_to_bf16(f):
    u = f.view("<u4").astype("<u8")
    r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype("<u2")
    nan = np.isnan(f)
    return np.where(nan, (0x7fc0 | ((u >> 16) & 0x8000)).astype("<u2"), r)


def convert(raw, src, dst):
    if dst == "float32":
        return to_f32(raw, src).tobytes()
    if src == "float64":
        return f64_to_bf16(np.frombuffer(raw, "<f8")).tobytes()
    return f32_to_bf16(to_f32(raw, src)).tobytes()


def same_floats(got, want, dtype):
    """Bytes equal, except that any NaN matches any NaN."""
    if got == want:
        return True
    if len(got) != len(want):
        return False
    if dtype == "float32":
        a, b = np.frombuffer(got, "<f4"), np.frombuffer(want, "<f4")
    else:
        a = (np.frombuffer(got, "<u2").astype("<u4") << 16).view("<f4")
        b = (np.frombuffer(want, "<u2").astype("<u4") << 16).view("<f4")
    bits = a.view("<u4") == b.view("<u4")
    return bool(np.all(bits | (np.isnan(a) & np.isnan(b))))


def torch_chunk(t, world, rank, whole_if_one=True):
    """torch.chunk(t, world, 0)[rank], or an empty slice where it does not
    exist; one-element tensors whole (the rule looks at the global tensor,
    so a layout box of one element is still split)."""
    if t.size == 1 and whole_if_one:
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


def expected(ckpt, world=1, rank=0, prefix=None, layout=None, dtype=None,
             kinds=None):
    """{path: bytes}; kinds, if a dict, gets {path: view dtype}."""
    if kinds is None:
        kinds = {}
    meta = load(ckpt)
    boxes = load_layout(layout)
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
            kinds[path] = "bytes"
            continue
        t = full_tensor(ckpt, fqn, entry, records)
        box = box_of(fqn, meta, boxes)
        if box is not None and t.size != 1:
            off, size = box
            t = t[tuple(slice(o, o + s) for o, s in zip(off, size))]
            view = torch_chunk(t, world, rank, whole_if_one=False)
        else:
            view = torch_chunk(t, world, rank)
        view = np.ascontiguousarray(view).tobytes()
        vdt = entry["dtype"]
        if dtype and entry["dtype"] in FLOATS:
            view = convert(view, entry["dtype"], dtype)
            vdt = dtype
        out[path] = view
        kinds[path] = vdt
    return out


def expected_attrs(ckpt, world=1, rank=0, layout=None, dtype=None):
    """{path: {xattr name: value}} as the view should show them."""
    meta = load(ckpt)
    boxes = load_layout(layout)
    out = {}
    for fqn, entry in meta["state_dict_metadata"].items():
        path = "/".join(view_path(fqn, meta))
        a = {"user.ckptfs.fqn": fqn, "user.ckptfs.kind": entry["type"]}
        out[path] = a
        if entry["type"] != "tensor":
            continue
        shape = list(entry["size"])
        off, size = [0] * len(shape), list(shape)
        numel = int(np.prod(shape)) if shape else 1
        if numel != 1:
            box = box_of(fqn, meta, boxes)
            if box is not None:
                off, size = list(box[0]), list(box[1])
            cs = -(-size[0] // world)
            lo = min(size[0], rank * cs)
            hi = min(size[0], (rank + 1) * cs)
            off[0] += lo
            size[0] = hi - lo
        dt = entry["dtype"]
        if dtype and dt in FLOATS:
            dt = dtype
        a.update({"user.ckptfs.dtype": dt,
                  "user.ckptfs.shape": ",".join(map(str, size)),
                  "user.ckptfs.global_shape": ",".join(map(str, shape)),
                  "user.ckptfs.offsets": ",".join(map(str, off))})
    return out


FLOATS = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn",
          "float8_e5m2")


def check(ckpt, mnt, world, rank, prefix=None, layout=None, dtype=None):
    kinds = {}
    exp = expected(ckpt, world, rank, prefix, layout, dtype, kinds)
    bad = []
    seen = set()
    for root, dirs, files in os.walk(mnt):
        if ".ckptfs" in dirs:
            dirs.remove(".ckptfs")
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
        def same(a, b):
            if dtype and kinds[rel] == dtype:
                return same_floats(a, b, dtype)
            return a == b
        with open(p, "rb") as fh:
            got = fh.read()
            if not same(got, want):
                bad.append(f"{rel}: read() bytes differ")
            if want:
                with mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as mm:
                    if not same(mm[:], want):
                        bad.append(f"{rel}: mmap bytes differ")
            # An unaligned read across the middle, and one past the end.
            if len(want) > 3 and not dtype:
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
    ap.add_argument("--layout")
    ap.add_argument("--dtype")
    a = ap.parse_args(argv)
    if a.cmd == "paths":
        for p, b in sorted(expected(a.ckpt, a.world, a.rank, a.prefix,
                                    a.layout, a.dtype).items()):
            print(f"{p}\t{len(b)}")
        return 0
    exp, bad = check(a.ckpt, a.mnt, a.world, a.rank, a.prefix, a.layout,
                     a.dtype)
    for b in bad:
        print(b)
    print(f"checked {len(exp)} files, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
