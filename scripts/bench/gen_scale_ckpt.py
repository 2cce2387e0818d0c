#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A torch DCP checkpoint of many items, as `dcp.save` from RANKS ranks
lays out a mixture-of-experts optimizer state, built with torch's own
classes (Metadata, TensorStorageMetadata, MetadataIndex, _StorageInfo)
and torch.save records, without the cost of dcp.save on 2 cores.

    gen_scale_ckpt.py OUT [--params 5000] [--ranks 8]
        for each parameter layers.L.experts.E.w (64 experts per layer),
        optim.state.<p>.exp_avg and .exp_avg_sq, Shard(0) over RANKS ranks
        (one float32 [1, 16] row per rank; every fifth parameter has
        RANKS - 2 rows), and optim.state.<p>.step, a 0-d float32 saved by
        rank 0: 3 x PARAMS items, about 16.2 x PARAMS chunks (15,000 items,
        81,000 chunks by default).  Element [r, j] of key K (its number
        in that order) is K * 1000 + r * 16 + j; step is K.
    gen_scale_ckpt.py OUT --check MNT  (not used: see tests)

Prints the item and chunk counts and the .metadata size.  Runs with
torch 2.x (the sid chroot, scripts/sid-chroot.sh); with Debian's torch
1.13 the stand-ins of tests/make_torch2_metadata.py are used.
"""
import argparse
import io
import os
import pickle
import sys

COLS = 16


def classes():
    try:
        import torch.distributed.checkpoint.metadata as md
        import torch.distributed.checkpoint.filesystem as fs
        md.StorageMeta  # torch >= 2.4
        return md, fs
    except (ImportError, AttributeError):
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "..", "tests"))
        from make_torch2_metadata import stand_ins
        return stand_ins()


def keys(params, ranks):
    """(fqn, rows, is_step) in save order."""
    for i in range(params):
        p = f"layers.{i // 64}.experts.{i % 64}.w"
        rows = ranks - 2 if i % 5 == 0 and ranks > 2 else ranks
        yield f"optim.state.{p}.exp_avg", rows, False
        yield f"optim.state.{p}.exp_avg_sq", rows, False
        yield f"optim.state.{p}.step", 0, True


def value(k, rows):
    import numpy as np
    if rows == 0:
        return np.array(k, dtype="<f4")
    r = np.arange(rows, dtype=np.float64)[:, None] * COLS
    return (k * 1000 + r + np.arange(COLS)).astype("<f4")


def write(out, params, ranks):
    import torch
    md, fs = classes()
    os.makedirs(out, exist_ok=True)
    files = [io.BytesIO() for _ in range(ranks)]
    names = [f"__{r}_0.distcp" for r in range(ranks)]
    sdm, sd, pd = {}, {}, {}
    nchunks = 0

    def props():
        return md.TensorProperties(torch.float32, torch.strided, False,
                                   torch.contiguous_format, False)

    for k, (fqn, rows, step) in enumerate(keys(params, ranks)):
        v = value(k, rows)
        pd[fqn] = tuple(fqn.split(".", 2)[:2]) + (
            fqn.split(".", 2)[2].rsplit(".", 1)[0], fqn.rsplit(".", 1)[1])
        if step:
            parts = [(0, None)]
            size = torch.Size([])
        else:
            parts = [(r, r) for r in range(rows)]
            size = torch.Size([rows, COLS])
        chunks = []
        for r, row in parts:
            t = torch.from_numpy(v.copy() if row is None
                                 else v[row:row + 1].copy())
            off = torch.Size([] if row is None else [row, 0])
            sizes = torch.Size(t.shape)
            buf = io.BytesIO()
            torch.save(t, buf)
            at = files[r].tell()
            files[r].write(buf.getvalue())
            chunks.append(md.ChunkStorageMetadata(off, sizes))
            sd[md.MetadataIndex(fqn, off, len(chunks) - 1)] = \
                fs._StorageInfo(names[r], at, len(buf.getvalue()))
            nchunks += 1
        sdm[fqn] = md.TensorStorageMetadata(props(), size, chunks)
    kw = {}
    if hasattr(md, "StorageMeta"):
        kw["storage_meta"] = md.StorageMeta(checkpoint_id=out,
                                            save_id="bench", load_id=None)
    meta = md.Metadata(sdm, planner_data=pd, storage_data=sd, **kw)
    for r in range(ranks):
        with open(os.path.join(out, names[r]), "wb") as fh:
            fh.write(files[r].getvalue())
    with open(os.path.join(out, ".metadata"), "wb") as fh:
        pickle.dump(meta, fh)
    size = os.path.getsize(os.path.join(out, ".metadata"))
    print(f"{len(sdm)} items, {nchunks} chunks, .metadata {size} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--params", type=int, default=5000)
    ap.add_argument("--ranks", type=int, default=8)
    a = ap.parse_args()
    write(a.out, a.params, a.ranks)


if __name__ == "__main__":
    main()
