#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write a random checkpoint in the ckptfs native format (version 1).

    gen_ckpt.py OUTDIR [--seed N] [--keys N] [--files N] [--max-elems N]

Driven by a seed, it makes random shapes and dtypes (0-d, one-element,
empty, 1-D..4-D), saved tilings (whole, dim 0 as ChunkShardingSpec does,
dim 1, grids, uneven cuts, and non-grid "brick" tilings), gaps between
records, records shuffled across several data files, bytes entries, keys
with and without planner_data (some with int components), and keys
outside the "optim" prefix.  Every record carries its XXH3-64 checksum.
"""
import argparse
import os
import random
import sys

import msgpack
import numpy as np

try:
    import xxhash
except ImportError:  # checksums are optional in the format
    xxhash = None

# format dtype -> (numpy storage dtype, itemsize)
DTYPES = {
    "float64": "<f8", "float32": "<f4", "float16": "<f2", "bfloat16": "<u2",
    "float8_e4m3fn": "u1", "float8_e5m2": "u1", "int64": "<i8",
    "int32": "<i4", "int16": "<i2", "int8": "i1", "uint8": "u1",
    "bool": "?",
}


def random_array(rng, dtype, shape):
    npdt = np.dtype(DTYPES[dtype])
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        a = rng.integers(0, 2, n).astype("?")
    elif npdt.kind == "f":
        a = (rng.standard_normal(n) * 10).astype(npdt)
    else:
        info = np.iinfo(npdt)
        a = rng.integers(info.min, info.max, n, endpoint=True, dtype=npdt)
    return a.reshape(shape)


def cuts(rng, n, parts):
    """Split range(n) into at most `parts` non-empty uneven pieces."""
    if n <= 1 or parts <= 1:
        return [(0, n)]
    k = min(parts, n)
    points = sorted(rng.choice(np.arange(1, n), size=k - 1, replace=False))
    bounds = [0] + [int(p) for p in points] + [n]
    return [(bounds[i], bounds[i + 1] - bounds[i]) for i in range(k)]


def even(n, parts):
    """ChunkShardingSpec: ceil split, ranks with nothing get no chunk."""
    cs = -(-n // parts) if n else 0
    out = []
    for r in range(parts):
        lo, hi = r * cs, min(n, (r + 1) * cs)
        if lo < hi:
            out.append((lo, hi - lo))
    return out or [(0, n)]


def tiling(rng, shape, kind):
    """List of (offsets, sizes) boxes tiling shape exactly."""
    nd = len(shape)
    whole = [([0] * nd, list(shape))]
    if nd == 0 or int(np.prod(shape)) == 0 or kind == "whole":
        return whole
    if kind == "dim0":
        return [([o] + [0] * (nd - 1), [s] + list(shape[1:]))
                for o, s in even(shape[0], int(rng.integers(2, 5)))]
    if kind == "dim1" and nd >= 2:
        return [([0, o] + [0] * (nd - 2), [shape[0], s] + list(shape[2:]))
                for o, s in even(shape[1], int(rng.integers(2, 5)))]
    if kind == "grid":
        per_dim = [cuts(rng, d, int(rng.integers(1, 4))) for d in shape]
        boxes = [([], [])]
        for pieces in per_dim:
            boxes = [(o + [po], s + [ps]) for o, s in boxes
                     for po, ps in pieces]
        return boxes
    if kind == "brick" and nd >= 2:
        boxes = []
        for o0, s0 in cuts(rng, shape[0], int(rng.integers(2, 4))):
            for o1, s1 in cuts(rng, shape[1], int(rng.integers(1, 4))):
                boxes.append(([o0, o1] + [0] * (nd - 2),
                              [s0, s1] + list(shape[2:])))
        return boxes
    return [([o] + [0] * (nd - 1), [s] + list(shape[1:]))
            for o, s in cuts(rng, shape[0], int(rng.integers(2, 5)))]


SPECIAL_SHAPES = [[], [1], [1, 1], [0, 4], [5, 0], [3], [2, 7], [1, 5],
                  [7, 1], [1, 1, 1]]


def random_shape(rng, max_elems):
    if rng.random() < 0.25:
        return list(SPECIAL_SHAPES[int(rng.integers(len(SPECIAL_SHAPES)))])
    nd = int(rng.integers(1, 5))
    shape = [int(rng.integers(1, 24)) for _ in range(nd)]
    while int(np.prod(shape)) > max_elems:
        i = int(np.argmax(shape))
        shape[i] = max(1, shape[i] // 2)
    return shape


def make_keys(rng, nkeys):
    """(fqn, path components or None) for optimizer-like and other keys."""
    out = []
    states = ["exp_avg", "exp_avg_sq", "step", "momentum_buffer"]
    for i in range(nkeys):
        p = f"layer{i // 3}.{['weight', 'bias', 'norm'][i % 3]}"
        st = states[int(rng.integers(len(states)))]
        style = rng.random()
        if style < 0.35:
            out.append((f"optim.state.{p}.{st}", ["optim", "state", p, st]))
        elif style < 0.5:
            out.append((f"optim.state.{i}.{st}", ["optim", "state", i, st]))
        elif style < 0.8:
            out.append((f"optim.state.{p}.{st}", None))
        else:
            out.append((f"model.{p}", None))
    # De-duplicate by fqn and by path while keeping order.
    seen, paths, uniq = set(), [], []
    for fqn, comps in out:
        path = tuple(str(c) for c in comps) if comps else tuple(fqn.split("."))
        if fqn in seen or any(path[:len(q)] == q or q[:len(path)] == path
                              for q in paths):
            continue
        seen.add(fqn)
        paths.append(path)
        uniq.append((fqn, comps))
    return uniq


def generate(out, seed, nkeys=24, nfiles=3, max_elems=4000):
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    files = [f"__{i}_0.distcp" for i in range(nfiles)]
    blobs = {f: bytearray() for f in files}
    sdm, planner, storage = {}, {}, []
    kinds = ["whole", "dim0", "dim1", "grid", "brick", "uneven"]
    for fqn, comps in make_keys(rng, nkeys):
        items = []
        if comps is None and rng.random() < 0.1:
            # A bytes entry (pickled param_groups, say).
            payload = rng.bytes(int(rng.integers(0, 200)))
            sdm[fqn] = {"type": "bytes"}
            items.append(({"fqn": fqn, "offsets": None, "index": None},
                          payload))
        else:
            dtype = list(DTYPES)[int(rng.integers(len(DTYPES)))]
            shape = random_shape(rng, max_elems)
            arr = random_array(rng, dtype, shape)
            boxes = tiling(rng, shape, kinds[int(rng.integers(len(kinds)))])
            order = list(range(len(boxes)))
            rng.shuffle(order)
            chunks = [{"offsets": boxes[i][0], "sizes": boxes[i][1]}
                      for i in order]
            entry = {"type": "tensor", "dtype": dtype, "size": shape,
                     "chunks": chunks}
            if rng.random() < 0.5:
                entry["requires_grad"] = bool(rng.random() < 0.5)
            sdm[fqn] = entry
            for idx, ch in enumerate(chunks):
                sl = tuple(slice(o, o + s)
                           for o, s in zip(ch["offsets"], ch["sizes"]))
                part = np.ascontiguousarray(arr[sl]) if shape else arr
                items.append(({"fqn": fqn, "offsets": ch["offsets"],
                               "index": idx}, part.tobytes()))
        if comps is not None:
            planner[fqn] = comps
        for rec, payload in items:
            f = files[int(rng.integers(nfiles))]
            blobs[f] += rng.bytes(int(rng.integers(0, 40)))  # a gap
            rec.update({"relative_path": f, "offset": len(blobs[f]),
                        "length": len(payload)})
            if xxhash is not None:
                rec["xxh3"] = xxhash.xxh3_64_intdigest(payload)
            blobs[f] += payload
            storage.append(rec)
    rng.shuffle(storage)
    for f, data in blobs.items():
        with open(os.path.join(out, f), "wb") as fh:
            fh.write(data + rng.bytes(int(rng.integers(0, 16))))
    meta = {"format": "tensorplay-dcp", "version": 1,
            "state_dict_metadata": sdm, "planner_data": planner,
            "storage_data": storage}
    with open(os.path.join(out, ".metadata"), "wb") as fh:
        fh.write(msgpack.packb(meta, use_bin_type=True))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keys", type=int, default=24)
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--max-elems", type=int, default=4000)
    a = ap.parse_args(argv)
    generate(a.out, a.seed, a.keys, a.files, a.max_elems)


if __name__ == "__main__":
    main(sys.argv[1:])
