#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Check ckptfs views of a real PyTorch distributed checkpoint against torch
itself: every tensor is loaded whole with torch's own checkpoint loader
(load_state_dict + FileSystemReader), the expected view is
torch.chunk(t, W, 0)[R] (a one-element tensor whole to every rank), and
every file of the mount is compared byte for byte.  A bytes entry must be
the stored blob, which torch.load reads back to the saved object.

    torch_check.py CKPTFS CKPT MNT W [W ...] [--npy] [--layout FILE] [--ref REF]
        For each W, one mount with --ranks 0-(W-1) covers every rank.
        --npy mounts with --format npy and compares numpy.load's data;
        --layout mounts with a 2-D layout: keys optim.state.PARAM.STATE of
        a PARAM in the file see torch.chunk(t[box], W, 0)[R].  --ref loads
        the expected tensors from another checkpoint of the same tensors
        (one whose .metadata torch 1.13 can read).
    torch_check.py index INDEX CKPT
        every record of a `ckptfs index` file (msgpack) addresses, inside
        the .distcp files, exactly the bytes of the tensor torch.load
        reads from that record's archive (strides honoured).

Mounts are unmounted whatever happens (fusermount3 -u, then -uz).
"""
import io
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))
sys.path.insert(0, HERE)

import reference  # noqa: E402  (view_path: FQN -> view path)

# Liveness bounds scale with CKPTFS_TIME_SCALE (tests/bats/helpers.bash).
TIME_SCALE = max(1, int(os.environ.get("CKPTFS_TIME_SCALE", "1") or 1))


def torch_load_full(ckpt):
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.checkpoint.metadata import BytesStorageMetadata
    md = dcp.FileSystemReader(ckpt).read_metadata()
    sd = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, BytesStorageMetadata):
            sd[k] = None
        else:
            sd[k] = torch.empty(tuple(v.size), dtype=v.properties.dtype)
    dcp.load_state_dict(sd, dcp.FileSystemReader(ckpt), no_dist=True)
    blobs = {}
    for mi, si in md.storage_data.items():
        if isinstance(md.state_dict_metadata[mi.fqn], BytesStorageMetadata):
            with open(os.path.join(ckpt, si.relative_path), "rb") as f:
                f.seek(si.offset)
                blobs[mi.fqn] = f.read(si.length)
    return sd, blobs


def tensor_bytes(t):
    import torch
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def expected_view(t, world, rank, box=None):
    import torch
    if box is not None and t.numel() != 1:
        t = t[tuple(slice(o, o + n) for o, n in zip(*box))]
    if t.numel() == 1:
        return tensor_bytes(t)
    if t.dim() == 0 or t.shape[0] == 0:
        return b""
    parts = torch.chunk(t, world, 0)
    return tensor_bytes(parts[rank]) if rank < len(parts) else b""


def unmount(mnt, proc):
    if os.path.ismount(mnt):
        if subprocess.call(["fusermount3", "-u", mnt]) != 0:
            subprocess.call(["fusermount3", "-uz", mnt])
    if proc is not None:
        try:
            proc.wait(timeout=20 * TIME_SCALE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_layout(path):
    boxes = {}
    if path:
        for line in open(path):
            line = line.split("#")[0].split()
            if len(line) == 3:
                boxes[line[0]] = ([int(x) for x in line[1].split(",")],
                                  [int(x) for x in line[2].split(",")])
    return boxes


def param_of(key):
    c = key.split(".")
    if len(c) >= 4 and c[1] == "state":
        return ".".join(c[2:-1])
    return None


def check_world(ckptfs, ckpt, mnt, world, sd, blobs, npy=False, layout=None):
    import numpy as np
    import torch
    args = [ckptfs, "mount", ckpt, mnt, "--world", str(world),
            "--ranks", f"0-{world - 1}", "-f"]
    if npy:
        args += ["--format", "npy"]
    if layout:
        args += ["--layout", layout]
    boxes = load_layout(layout)
    proc = subprocess.Popen(args)
    bad = checked = 0
    try:
        for _ in range(200 * TIME_SCALE):
            if os.path.ismount(mnt):
                break
            if proc.poll() is not None:
                raise SystemExit(f"ckptfs mount exited with {proc.returncode}")
            time.sleep(0.05)
        else:
            raise SystemExit("mount did not come up")
        for rank in range(world):
            root = os.path.join(mnt, f"rank{rank}")
            seen = set()
            for key, val in sd.items():
                path = os.path.join(root, *reference.view_path(key, {}))
                if npy and key not in blobs:
                    path += ".npy"
                seen.add(path)
                with open(path, "rb") as f:
                    got = f.read()
                if key in blobs:
                    want = blobs[key]
                    ok = got == want and torch.load(io.BytesIO(got)) == val
                else:
                    want = expected_view(val, world, rank, boxes.get(param_of(key)))
                    if npy:
                        a = np.load(io.BytesIO(got))
                        got = a.tobytes()
                        ok = got == want and a.itemsize == val.element_size()
                    else:
                        ok = got == want
                checked += 1
                if not ok:
                    bad += 1
                    print(f"MISMATCH {ckpt} W={world} R={rank} {key}: "
                          f"{len(got)} bytes, want {len(want)}")
            for d, dirs, files in os.walk(root):
                if ".ckptfs" in dirs:
                    dirs.remove(".ckptfs")
                for f in files:
                    if os.path.join(d, f) not in seen:
                        bad += 1
                        print(f"UNEXPECTED FILE {os.path.join(d, f)}")
    finally:
        unmount(mnt, proc)
    return checked, bad


def check_index(index, ckpt):
    """Records of the native index against torch.load of each archive."""
    import msgpack
    import numpy as np
    import torch
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch.distributed._shard.checkpoint as dcp
    with open(index, "rb") as f:
        img = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
    assert img["format"] == "tensorplay-dcp" and img["version"] == 1, img.keys()
    md = dcp.FileSystemReader(ckpt).read_metadata()
    by_key = {(mi.fqn, tuple(mi.offset) if mi.offset is not None else None): si
              for mi, si in md.storage_data.items()}
    bad = 0
    for r in img["storage_data"]:
        offs = tuple(r["offsets"]) if r["offsets"] is not None else None
        si = by_key[(r["fqn"], offs)]
        assert r["relative_path"] == si.relative_path
        with open(os.path.join(ckpt, si.relative_path), "rb") as f:
            f.seek(si.offset)
            blob = f.read(si.length)
            f.seek(r["offset"])
            raw = f.read(r["length"])
        if offs is None:
            ok = raw == blob
        else:
            t = torch.load(io.BytesIO(blob))
            if "strides" in r:
                isz = t.element_size()
                flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) \
                    if raw else torch.empty(0, dtype=torch.uint8)
                flat = flat.view(t.dtype) if raw else torch.empty(0, dtype=t.dtype)
                got = torch.as_strided(flat, t.shape, r["strides"]).contiguous()
                ok = r["strides"] == list(t.stride()) and \
                    tensor_bytes(got) == tensor_bytes(t) and len(raw) % isz == 0
            else:
                ok = raw == tensor_bytes(t)
        if not ok:
            bad += 1
            print(f"INDEX MISMATCH {r['fqn']} {offs}")
    print(f"{index}: {len(img['storage_data'])} records checked, {bad} bad")
    del np
    return 1 if bad else 0


def main(argv):
    if argv[0] == "index":
        return check_index(argv[1], argv[2])
    npy = "--npy" in argv
    layout = None
    if "--layout" in argv:
        i = argv.index("--layout")
        layout = argv[i + 1]
        del argv[i:i + 2]
    ref = None
    if "--ref" in argv:
        i = argv.index("--ref")
        ref = argv[i + 1]
        del argv[i:i + 2]
    argv = [a for a in argv if a != "--npy"]
    ckptfs, ckpt, mnt = argv[:3]
    worlds = [int(w) for w in argv[3:]]
    sd, blobs = torch_load_full(ref or ckpt)
    total = bad = 0
    for w in worlds:
        c, b = check_world(ckptfs, ckpt, mnt, w, sd, blobs, npy, layout)
        total += c
        bad += b
    print(f"{ckpt}: {total} files checked for W in {worlds}"
          f"{' (npy)' if npy else ''}{' (layout)' if layout else ''}, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
