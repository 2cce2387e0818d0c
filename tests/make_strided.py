#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Native checkpoints whose records are stored with strides (a tensor
saved from a non-contiguous view: transposed, permuted, with gaps between
rows, broadcast), for tests/bats/strided.bats, written here from the
format spec (docs/format.md) with msgpack and numpy, independently of
ckptfs.  tests/reference.py gives the views.

    make_strided.py OUT [--seed N] [--big]

Keys: 2-D transposes of every dtype size; 3-D tensors in each of the
five non-identity permutations; a 4-D random permutation; layouts with
padding between stored rows; a broadcast (stride 0) dim; a 1-D tensor
of every other element; tensors tiled in dim-0, dim-1 and grid chunks
whose records are each strided (or some row-major), in two data files.
With --big, a transposed float32 [1100, 1030] (4.3 MiB: the direct
loader gathers it in several pieces) and a bfloat16 [700, 2100].
"""
import argparse
import itertools
import os

import msgpack
import numpy as np

DT = {"float32": "<f4", "bfloat16": "<u2", "float64": "<f8",
      "int8": "i1", "uint8": "u1", "int16": "<i2", "int64": "<i8",
      "bool": "u1", "float16": "<f2", "int32": "<i4"}


class Writer:
    def __init__(self, out, rng):
        self.out, self.rng = out, rng
        self.files = [open(os.path.join(out, f"data{i}"), "wb")
                      for i in range(2)]
        self.meta, self.recs = {}, []

    def values(self, dtype, shape):
        n = int(np.prod(shape)) if shape else 1
        if dtype == "bool":
            return (self.rng.integers(0, 2, n)).astype("u1").reshape(shape)
        raw = self.rng.integers(0, 256, n * np.dtype(DT[dtype]).itemsize,
                                dtype=np.uint8)
        return raw.view(DT[dtype]).reshape(shape)

    def record(self, fqn, offsets, part, order=None, gaps=0,
               broadcast=False, step=0):
        """Append the record of part (a chunk's values), stored in the
        layout of dims `order` (outermost first) with each stored row
        followed by `gaps` unused elements; or with dim 0 broadcast
        (stride 0); or, 1-D, every step-th element."""
        nd = part.ndim
        order = list(range(nd)) if order is None else list(order)
        f = self.rng.integers(0, 2)
        fh = self.files[f]
        if step:
            t = np.zeros(step * (part.size - 1) + 1, dtype=part.dtype)
            t[::step] = part
            strides, payload = [step], t.tobytes()
        elif broadcast:     # dim 0 all equal: stored once, stride 0
            part[...] = part[:1]
            base = np.ascontiguousarray(part[:1])
            strides = [0] + [int(s) // part.itemsize
                             for s in base.strides[1:]]
            payload = base.tobytes()
        else:
            # lay out in `order`, then pad each innermost stored row
            t = np.ascontiguousarray(part.transpose(order))
            if gaps and t.ndim:
                pad = np.zeros(t.shape[:-1] + (gaps,), dtype=t.dtype)
                t = np.concatenate([t, pad], axis=-1)
            padded = t.shape
            st = [1] * nd
            acc = 1
            for k in range(nd - 1, -1, -1):
                st[k] = acc
                acc *= padded[k]
            strides = [0] * nd
            for k, d in enumerate(order):
                strides[d] = st[k]
            payload = t.tobytes()
            n = int(np.prod(part.shape)) if nd else 1
            span = 1 + sum((s - 1) * x for s, x in zip(part.shape,
                                                          strides))
            payload = payload[:span * part.itemsize] if n else b""
        lead = int(self.rng.integers(0, 3)) * part.itemsize
        fh.write(b"\x5a" * lead)
        rec = {"fqn": fqn, "offsets": list(offsets),
               "relative_path": f"data{f}", "offset": fh.tell(),
               "length": len(payload)}
        rec["strides"] = strides
        fh.write(payload)
        self.recs.append(rec)

    def tensor(self, fqn, dtype, shape, chunks, layout):
        """chunks: [(offsets, sizes)]; layout(k, part) -> record kwargs."""
        full = self.values(dtype, shape)
        self.meta[fqn] = {"type": "tensor", "dtype": dtype,
                          "size": list(shape),
                          "chunks": [{"offsets": list(o), "sizes": list(s)}
                                     for o, s in chunks]}
        for k, (o, s) in enumerate(chunks):
            sl = tuple(slice(a, a + b) for a, b in zip(o, s))
            part = np.array(full[sl])
            self.record(fqn, o, part, **layout(k, part))

    def close(self):
        for fh in self.files:
            fh.close()
        with open(os.path.join(self.out, ".metadata"), "wb") as fh:
            msgpack.dump({"format": "tensorplay-dcp", "version": 1,
                          "state_dict_metadata": self.meta,
                          "storage_data": self.recs}, fh)


def whole(shape):
    return [([0] * len(shape), list(shape))]


def dim_chunks(shape, dim, n):
    cuts = sorted(set([0, shape[dim]] +
                      [shape[dim] * i // n for i in range(1, n)]))
    out = []
    for a, b in zip(cuts, cuts[1:]):
        o, s = [0] * len(shape), list(shape)
        o[dim], s[dim] = a, b - a
        out.append((o, s))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    w = Writer(a.out, rng)
    rev = lambda k, p: {"order": list(range(p.ndim))[::-1]}  # noqa: E731
    for dt in ("float32", "bfloat16", "float64", "int8", "bool", "int64"):
        w.tensor(f"t2.{dt}", dt, (37, 53), whole((37, 53)), rev)
    w.tensor("t2.tall", "float32", (300, 5), whole((300, 5)), rev)
    w.tensor("t2.wide", "float16", (3, 300), whole((3, 300)), rev)
    for i, perm in enumerate(itertools.permutations(range(3))):
        if perm == (0, 1, 2):
            continue
        w.tensor(f"t3.p{i}", "float32", (9, 6, 7), whole((9, 6, 7)),
                 lambda k, p, o=perm: {"order": o})
    perm4 = [int(x) for x in rng.permutation(4)]
    w.tensor("t4.perm", "int16", (5, 4, 6, 3), whole((5, 4, 6, 3)),
             lambda k, p: {"order": perm4})
    w.tensor("gaps.t2", "float32", (21, 34), whole((21, 34)),
             lambda k, p: {"order": [1, 0], "gaps": 3})
    w.tensor("gaps.rowmajor", "int32", (17, 10), whole((17, 10)),
             lambda k, p: {"gaps": 2})
    w.tensor("gaps.t3", "float64", (4, 5, 6), whole((4, 5, 6)),
             lambda k, p: {"order": [2, 0, 1], "gaps": 1})
    w.tensor("bcast", "float32", (19, 8), whole((19, 8)),
             lambda k, p: {"broadcast": True})
    w.tensor("rowmajor1d", "uint8", (45,), whole((45,)),
             lambda k, p: {"order": [0]})
    w.tensor("stride2", "float32", (29,), whole((29,)),
             lambda k, p: {"step": 2})
    # tilings: each chunk strided its own way, one row-major
    shp = (26, 18)
    w.tensor("tiled.dim0", "float32", shp, dim_chunks(shp, 0, 4), rev)
    w.tensor("tiled.dim1", "bfloat16", shp, dim_chunks(shp, 1, 3),
             lambda k, p: {"order": [1, 0], "gaps": k})
    grid = [(o0 + o1, [a[0]] + [b[1]])
            for (o0, a) in [([0], [10]), ([10], [16])]
            for (o1, b) in [([0], [0, 7]), ([7], [0, 11])]]
    w.tensor("tiled.grid", "float64", shp, grid,
             lambda k, p: {} if k == 2 else {"order": [1, 0]})
    shp3 = (12, 5, 8)
    w.tensor("tiled.t3", "float32", shp3, dim_chunks(shp3, 0, 3),
             lambda k, p: {"order": [[2, 0, 1], [1, 2, 0], [0, 2, 1]][k]})
    if a.big:
        w.tensor("big.t2", "float32", (1100, 1030), whole((1100, 1030)),
                 rev)
        w.tensor("big.bf16", "bfloat16", (700, 2100), whole((700, 2100)),
                 rev)
    w.close()


if __name__ == "__main__":
    main()
