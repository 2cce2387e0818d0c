#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Benchmark checkpoints for `make bench`.

    gen_bench_ckpt.py data OUTDIR --tiling dim0|dim1 [--gib 2] [--params 100]
        float32 Adam state (exp_avg and exp_avg_sq) for PARAMS parameters of
        mixed sizes, GIB GiB in all, saved by 4 ranks in dim-0 shards (as
        FSDP saves) or dim-1 shards (as tensor parallelism saves).  Values
        are the elements' global indices, so any slice is recognisable.
    gen_bench_ckpt.py meta OUTDIR [--keys 100000] [--chunks 10]
        a metadata-only checkpoint of KEYS keys x CHUNKS chunks (sparse data
        files), for the mount-time figure.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from native_writer import write_checkpoint  # noqa: E402

try:
    import xxhash
except ImportError:  # checksums are optional
    xxhash = None

SAVE_WORLD = 4


def shapes(total_elems, nparams, rng):
    w = np.exp(rng.uniform(np.log(1), np.log(600), nparams))
    w = w / w.sum() * total_elems
    out = []
    for i, n in enumerate(w):
        cols = [256, 512, 1024, 4096][i % 4]
        rows = max(8, int(n) // cols)
        out.append((rows, cols))
    return out


def splits(n):
    cs = -(-n // SAVE_WORLD)
    return [(r, r * cs, min(n, (r + 1) * cs) - r * cs)
            for r in range(SAVE_WORLD) if r * cs < n]


def data(out, tiling, gib, nparams):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    per_state = int(gib * (1 << 30) / 4 / 2)
    files = [open(os.path.join(out, f"__{r}_0.distcp"), "wb")
             for r in range(SAVE_WORLD)]
    sizes = [0] * SAVE_WORLD
    sdm, planner, storage = {}, {}, []
    for i, (rows, cols) in enumerate(shapes(per_state, nparams, rng)):
        pname = f"layers.{i}.weight"
        for state in ("exp_avg", "exp_avg_sq"):
            fqn = f"optim.state.{pname}.{state}"
            chunks = []
            dim = 0 if tiling == "dim0" else 1
            for r, off, n in splits(rows if dim == 0 else cols):
                o = [off, 0] if dim == 0 else [0, off]
                s = [n, cols] if dim == 0 else [rows, n]
                g = (np.arange(o[0], o[0] + s[0], dtype=np.float32)[:, None]
                     * cols + np.arange(o[1], o[1] + s[1], dtype=np.float32))
                payload = g.tobytes()
                rec = {"fqn": fqn, "offsets": o,
                       "relative_path": f"__{r}_0.distcp",
                       "offset": sizes[r], "length": len(payload)}
                if xxhash is not None:
                    rec["xxh3"] = xxhash.xxh3_64_intdigest(payload)
                storage.append(rec)
                files[r].write(payload)
                sizes[r] += len(payload)
                chunks.append({"offsets": o, "sizes": s})
            sdm[fqn] = {"type": "tensor", "dtype": "float32",
                        "size": [rows, cols], "chunks": chunks}
            planner[fqn] = ["optim", "state", pname, state]
    for f in files:
        f.close()
    write_checkpoint(out, {}, sdm, storage, planner)  # data streamed above


def meta_only(out, nkeys, nchunks):
    os.makedirs(out, exist_ok=True)
    sdm, storage = {}, []
    end = 0
    rows = nchunks * 4
    for k in range(nkeys):
        fqn = f"optim.state.layers.{k // 2}.weight.{('exp_avg', 'exp_avg_sq')[k % 2]}"
        sdm[fqn] = {"type": "tensor", "dtype": "float32", "size": [rows, 64],
                    "chunks": [{"offsets": [c * 4, 0], "sizes": [4, 64]}
                               for c in range(nchunks)]}
        for c in range(nchunks):
            storage.append({"fqn": fqn, "offsets": [c * 4, 0],
                            "relative_path": "__0_0.distcp", "offset": end,
                            "length": 4 * 64 * 4})
            end += 4 * 64 * 4
    with open(os.path.join(out, "__0_0.distcp"), "wb") as fh:
        fh.truncate(end)  # sparse
    write_checkpoint(out, {}, sdm, storage)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["data", "meta"])
    ap.add_argument("out")
    ap.add_argument("--tiling", choices=["dim0", "dim1"], default="dim0")
    ap.add_argument("--gib", type=float, default=2)
    ap.add_argument("--params", type=int, default=100)
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--chunks", type=int, default=10)
    a = ap.parse_args(argv)
    if a.kind == "data":
        data(a.out, a.tiling, a.gib, a.params)
    else:
        meta_only(a.out, a.keys, a.chunks)


if __name__ == "__main__":
    main(sys.argv[1:])
