#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The torch baseline of `make bench`: the time for torch's own checkpoint
loader (torch.distributed checkpointing, FileSystemReader) to get rank R's
slices of every tensor into memory, against ckptfs (numpy.fromfile over
every file of the view), on the same tensors.

    torch_baseline.py load TORCH_CKPT --world W --rank R
        load with torch's loader, slice rank R's rows; print seconds
    torch_baseline.py view MNT
        numpy.fromfile every file of a mounted view; print seconds
    torch_baseline.py zip64 DIR
        save one uint8 tensor of 4.05 GiB (a zip64 record) with torch's
        save_state_dict; its last MiB is seeded random, the rest zeros
    torch_baseline.py zip64-check MNT
        the view (W=2, R=1) of that tensor ends with the same MiB

Debian's torch 1.13 has no multi-rank resharding loader without a process
group per rank, so torch loads each tensor whole and slices it, as every
rank of a resharding load does (torch.load of every overlapping chunk whole).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests"))


def dcp():
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch.distributed._shard.checkpoint as dcp_mod
    return dcp_mod


def load(ckpt, world, rank):
    import torch
    d = dcp()
    from torch.distributed._shard.checkpoint.metadata import BytesStorageMetadata
    md = d.FileSystemReader(ckpt).read_metadata()
    t0 = time.perf_counter()
    sd = {k: None if isinstance(v, BytesStorageMetadata) else
          torch.empty(tuple(v.size), dtype=v.properties.dtype)
          for k, v in md.state_dict_metadata.items()}
    d.load_state_dict(sd, d.FileSystemReader(ckpt), no_dist=True)
    out = {}
    nbytes = 0
    for k, t in sd.items():
        if not isinstance(t, torch.Tensor):
            out[k] = t
            continue
        if t.numel() != 1:
            cs = -(-t.shape[0] // world)
            t = t[rank * cs:(rank + 1) * cs]
        out[k] = t.clone()
        nbytes += out[k].numel() * out[k].element_size()
    dt = time.perf_counter() - t0
    print(f"{dt:.4f} {nbytes}")


def view(mnt):
    import numpy as np
    paths = []
    for d, dirs, fs in os.walk(mnt):
        if ".ckptfs" in dirs:
            dirs.remove(".ckptfs")     # view.safetensors repeats every tensor
        paths += [os.path.join(d, f) for f in fs]
    paths.sort()
    t0 = time.perf_counter()
    n = sum(np.fromfile(p, dtype="u1").nbytes for p in paths)
    print(f"{time.perf_counter() - t0:.4f} {n}")


ZIP64_NUMEL = int(4.05 * 2**30)


def zip64_tail():
    import torch
    g = torch.Generator().manual_seed(64)
    return torch.randint(0, 256, (1 << 20,), generator=g, dtype=torch.uint8)


def zip64_save(out):
    import torch
    d = dcp()
    t = torch.zeros(ZIP64_NUMEL, dtype=torch.uint8)
    t[-(1 << 20):] = zip64_tail()
    os.makedirs(out, exist_ok=True)
    d.save_state_dict({"big": t}, d.FileSystemWriter(out), no_dist=True)


def zip64_check(mnt):
    path = os.path.join(mnt, "big")
    size = os.path.getsize(path)
    want = ZIP64_NUMEL - -(-ZIP64_NUMEL // 2)
    with open(path, "rb") as f:
        f.seek(-(1 << 20), 2)
        tail = f.read()
    ok = size == want and tail == zip64_tail().numpy().tobytes()
    print("ok" if ok else f"MISMATCH size {size} want {want}")
    return 0 if ok else 1


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["load", "view", "zip64", "zip64-check"])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--rank", type=int, default=3)
    a = ap.parse_args(argv)
    if a.cmd == "zip64":
        zip64_save(a.a)
    elif a.cmd == "zip64-check":
        return zip64_check(a.a)
    elif a.cmd == "load":
        load(a.a, a.world, a.rank)
    else:
        view(a.a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
