#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A large rank-local PyTorch distributed checkpoint, as dcp.save(...,
use_collectives=False) lays one out: no .metadata, one __R.metadata per
rank, each listing only what that rank wrote to its __R_0.distcp.  Every
rank writes row R of each sharded key s<K> (float32 [PARTS, 4]) and the
whole of each replicated key r<K> (float32 [4], the same in every part),
so the merge meets PARTS x KEYS chunks to sort and PARTS copies of every
replicated chunk to drop.  Records are torch.save archives written by
Debian's torch 1.13; the metadata is pickled with torch 2.x's classes
(make_torch2_metadata.py's stand-ins).  Values: s<K>[r, j] = r * 1000 +
K * 10 + j, r<K>[j] = K * 10 + j, each plus BASE (--base, default 0).
--reverse writes each data file's records in reverse key order (other
offsets, other __R.metadata, files of the same sizes).

    make_ranklocal.py write OUT --parts P --keys K [--base B] [--reverse]
    make_ranklocal.py check MNT --parts P --keys K [--base B]
        compare a W=1 mount's files s<K> and r<K> with the values
"""
import argparse
import io
import os
import pickle
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))


def sharded(parts, k, base=0):
    r = np.arange(parts, dtype=np.float64)[:, None] * 1000
    return (r + k * 10 + np.arange(4) + base).astype("<f4")


def replicated(k, base=0):
    return (k * 10 + np.arange(4) + base).astype("<f4")


def write(out, parts, keys, base=0, reverse=False):
    import torch
    from make_torch2_metadata import stand_ins
    md, fs = stand_ins()
    os.makedirs(out, exist_ok=True)

    def props():
        return md.TensorProperties(torch.float32, torch.strided, False,
                                   None, False)

    rep = {}
    for k in range(keys):
        buf = io.BytesIO()
        torch.save(torch.from_numpy(replicated(k, base)), buf)
        rep[k] = buf.getvalue()
    for r in range(parts):
        fname = f"__{r}_0.distcp"
        sdm, sd, data = {}, {}, io.BytesIO()
        for k in (reversed(range(keys)) if reverse else range(keys)):
            row = torch.from_numpy(sharded(parts, k, base)[r:r + 1].copy())
            buf = io.BytesIO()
            torch.save(row, buf)
            off = data.tell()
            data.write(buf.getvalue())
            name = f"s{k}"
            sdm[name] = md.TensorStorageMetadata(
                props(), torch.Size([parts, 4]),
                [md.ChunkStorageMetadata(torch.Size([r, 0]),
                                         torch.Size([1, 4]))])
            sd[md.MetadataIndex(name, torch.Size([r, 0]), None)] = \
                fs._StorageInfo(fname, off, len(buf.getvalue()), None)
            off = data.tell()
            data.write(rep[k])
            name = f"r{k}"
            sdm[name] = md.TensorStorageMetadata(
                props(), torch.Size([4]),
                [md.ChunkStorageMetadata(torch.Size([0]), torch.Size([4]))])
            sd[md.MetadataIndex(name, torch.Size([0]), None)] = \
                fs._StorageInfo(fname, off, len(rep[k]), None)
        with open(os.path.join(out, fname), "wb") as fh:
            fh.write(data.getvalue())
        meta = md.Metadata(sdm, planner_data=None, storage_data=sd,
                           storage_meta=None, version="1.0.0")
        with open(os.path.join(out, f"__{r}.metadata"), "wb") as fh:
            pickle.dump(meta, fh, protocol=5)


def check(mnt, parts, keys, base=0):
    bad = []
    for k in range(keys):
        for name, want in ((f"s{k}", sharded(parts, k, base)),
                           (f"r{k}", replicated(k, base))):
            with open(os.path.join(mnt, name), "rb") as fh:
                if fh.read() != want.tobytes():
                    bad.append(name)
    print(f"{2 * keys} files, {len(bad)} differ: {' '.join(bad[:10])}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("write", "check"))
    ap.add_argument("path")
    ap.add_argument("--parts", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--base", type=int, default=0)
    ap.add_argument("--reverse", action="store_true")
    a = ap.parse_args()
    if a.cmd == "write":
        write(a.path, a.parts, a.keys, a.base, a.reverse)
    else:
        sys.exit(check(a.path, a.parts, a.keys, a.base))


if __name__ == "__main__":
    main()
