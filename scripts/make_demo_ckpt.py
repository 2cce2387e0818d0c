#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write the built-in demo checkpoint (demo/ckpt), as 4 training ranks would
have saved an Adam optimizer's state for a 3-layer model.

Values are chosen so the view is easy to read: element [i, j] of a
parameter's exp_avg is i + j/100 (so row numbers show which rows a rank
got), exp_avg_sq is its square, and step is 0-d.  layer1 and layer3 are
saved in dim-0 shards (as FSDP does), layer2 in dim-1 shards (as tensor
parallelism does).  param_groups is a bytes entry.

    make_demo_ckpt.py OUTDIR
"""
import sys

import numpy as np

from native_writer import write_checkpoint

PARAMS = [("layer1.weight", (10, 4), 0), ("layer1.bias", (10,), 0),
          ("layer2.weight", (6, 8), 1), ("layer3.weight", (3, 6), 0)]
SAVE_WORLD = 4


def shards(shape, dim):
    n = shape[dim]
    cs = -(-n // SAVE_WORLD)
    for r in range(SAVE_WORLD):
        lo, hi = r * cs, min(n, (r + 1) * cs)
        if lo >= hi:
            continue
        off = [0] * len(shape)
        size = list(shape)
        off[dim], size[dim] = lo, hi - lo
        yield r, off, size


def main(out):
    files = {r: bytearray() for r in range(SAVE_WORLD)}
    sdm, planner, storage = {}, {}, []

    def put(rank, fqn, offsets, payload):
        f = files[rank]
        storage.append({"fqn": fqn, "offsets": offsets,
                        "index": None if offsets is None else 0,
                        "relative_path": f"__{rank}_0.distcp",
                        "offset": len(f), "length": len(payload)})
        f += payload

    pg = b'{"lr": 0.001, "betas": [0.9, 0.999], "params": [0, 1, 2, 3]}'
    sdm["optim.param_groups"] = {"type": "bytes"}
    planner["optim.param_groups"] = ["optim", "param_groups"]
    put(0, "optim.param_groups", None, pg)
    for name, shape, dim in PARAMS:
        idx = np.indices(shape).astype("f4")
        base = idx[0] + (idx[1] / 100 if len(shape) > 1 else 0)
        for state, arr in (("exp_avg", base), ("exp_avg_sq", base * base)):
            fqn = f"optim.state.{name}.{state}"
            chunks = []
            for r, off, size in shards(shape, dim):
                sl = tuple(slice(o, o + s) for o, s in zip(off, size))
                chunks.append({"offsets": off, "sizes": size})
                put(r, fqn, off, np.ascontiguousarray(arr[sl]).tobytes())
            sdm[fqn] = {"type": "tensor", "dtype": "float32",
                        "size": list(shape), "chunks": chunks}
            planner[fqn] = ["optim", "state", name, state]
        fqn = f"optim.state.{name}.step"
        sdm[fqn] = {"type": "tensor", "dtype": "float32", "size": [],
                    "chunks": [{"offsets": [], "sizes": []}]}
        planner[fqn] = ["optim", "state", name, "step"]
        put(0, fqn, [], np.array(100.0, dtype="f4").tobytes())
    write_checkpoint(out, {f"__{r}_0.distcp": d for r, d in files.items()},
                     sdm, storage, planner)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo/ckpt")
