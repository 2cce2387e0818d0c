#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Native checkpoints whose records are stored with transforms (zstd,
docs/format.md), for tests/bats/zstd.bats, written here from the format
spec with msgpack and the zstandard package, independently of ckptfs.
The values are make_safetensors.py's, so its `expect` gives the views.

    make_zstd.py ok OUT
        every key of make_safetensors.KEYS in chunks (dim 0, dim 1, a
        grid, uneven), most records zstd-compressed (with and without the
        frame's content size, one through two zstd layers), a few plain,
        in two data files; plus a zstd bytes entry "meta.blob".
    make_zstd.py CASE OUT           a broken or hostile checkpoint
    make_zstd.py blob               print meta.blob's bytes, hex
"""
import os
import sys

import msgpack
import numpy as np
import zstandard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_safetensors import KEYS, values  # noqa: E402

NATIVE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16",
          "F64": "float64", "I64": "int64", "BOOL": "bool", "U8": "uint8",
          "I32": "int32"}
BLOB = bytes(range(256)) * 5 + b"param_groups"


def boxes(shape, k):
    """Chunks of a tensor: the k-th key's tiling."""
    if len(shape) == 0 or 0 in shape:
        return [([0] * len(shape), list(shape))]
    how = k % 4
    d0 = shape[0]
    if how == 0 or len(shape) == 1:      # dim 0, uneven
        cut = [0, max(1, d0 // 3), d0] if d0 > 1 else [0, d0]
        return [([a] + [0] * (len(shape) - 1), [b - a] + list(shape[1:]))
                for a, b in zip(cut, cut[1:]) if b > a]
    if how == 1:                          # dim 1
        d1 = shape[1]
        cut = [0, d1 // 2, d1] if d1 > 1 else [0, d1]
        return [([0, a] + [0] * (len(shape) - 2),
                 [d0, b - a] + list(shape[2:]))
                for a, b in zip(cut, cut[1:]) if b > a]
    if how == 2 and d0 > 1 and shape[1] > 1:   # a 2x2 grid
        c0, c1 = d0 // 2, shape[1] // 2
        out = []
        for a0, b0 in ((0, c0), (c0, d0)):
            for a1, b1 in ((0, c1), (c1, shape[1])):
                out.append(([a0, a1] + [0] * (len(shape) - 2),
                            [b0 - a0, b1 - a1] + list(shape[2:])))
        return out
    return [([0] * len(shape), list(shape))]   # whole


def compress(raw, i, layers=1):
    for _ in range(layers):
        if i % 2:   # streaming: no content size in the frame
            buf = zstandard.ZstdCompressor(write_content_size=False)
            raw = buf.compress(raw)
        else:
            raw = zstandard.ZstdCompressor(level=3).compress(raw)
    return raw


def write(out, sdm, records, files):
    os.makedirs(out, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
    img = {"format": "tensorplay-dcp", "version": 1,
           "state_dict_metadata": sdm, "storage_data": records}
    with open(os.path.join(out, ".metadata"), "wb") as fh:
        fh.write(msgpack.packb(img, use_bin_type=True))


def add(files, fname, data):
    files.setdefault(fname, b"")
    off = len(files[fname])
    files[fname] += data
    return off


def write_ok(out):
    sdm, records, files, i = {}, [], {}, 0
    for k, (name, (dt, npdt, shape)) in enumerate(KEYS.items()):
        a = values(name, npdt, shape)
        chunks = boxes(shape, k)
        sdm[name] = {"type": "tensor", "dtype": NATIVE[dt],
                     "size": list(shape),
                     "chunks": [{"offsets": o, "sizes": s} for o, s in chunks]}
        for o, s in chunks:
            sl = tuple(slice(a0, a0 + n) for a0, n in zip(o, s))
            raw = np.ascontiguousarray(a[sl]).tobytes()
            fname = f"__{i % 2}_0.distcp"
            rec = {"fqn": name, "offsets": o, "relative_path": fname}
            if i % 5 == 4:          # a plain record among them
                rec["offset"] = add(files, fname, raw)
                rec["length"] = len(raw)
            else:
                z = compress(raw, i, 2 if i == 3 else 1)
                rec["offset"] = add(files, fname, z)
                rec["length"] = len(z)
                rec["transforms"] = ["stream.zstd/1"] * (2 if i == 3 else 1)
            records.append(rec)
            i += 1
    sdm["meta.blob"] = {"type": "bytes"}
    z = compress(BLOB, 1)
    records.append({"fqn": "meta.blob", "offsets": None,
                    "relative_path": "__0_0.distcp",
                    "offset": add(files, "__0_0.distcp", z), "length": len(z),
                    "transforms": ["stream.zstd/1"], "size": len(BLOB)})
    write(out, sdm, records, files)


def one_key(out, stored, transforms=("stream.zstd/1",), numel=4, extra=None):
    """Keys x (numel float32, stored as given) and y (plain, readable)."""
    y = np.arange(3, dtype="<f4").tobytes()
    files = {}
    rx = {"fqn": "x", "offsets": [0], "relative_path": "__0_0.distcp",
          "offset": add(files, "__0_0.distcp", stored), "length": len(stored),
          "transforms": list(transforms)}
    rx.update(extra or {})
    ry = {"fqn": "y", "offsets": [0], "relative_path": "__0_0.distcp",
          "offset": add(files, "__0_0.distcp", y), "length": len(y)}
    sdm = {"x": {"type": "tensor", "dtype": "float32", "size": [numel],
                 "chunks": [{"offsets": [0], "sizes": [numel]}]},
           "y": {"type": "tensor", "dtype": "float32", "size": [3],
                 "chunks": [{"offsets": [0], "sizes": [3]}]}}
    write(out, sdm, [rx, ry], files)


def case(c, out):
    x = np.arange(4, dtype="<f4").tobytes()
    zc = zstandard.ZstdCompressor(write_checksum=True)
    if c == "bomb_declared":    # the frame says 64 MiB
        one_key(out, zc.compress(bytes(64 << 20)))
    elif c == "bomb_stream":    # no size in the frame: found while decoding
        one_key(out, zstandard.ZstdCompressor(
            write_content_size=False).compress(bytes(64 << 20)))
    elif c == "short":          # decodes to 12 bytes, the chunk needs 16
        one_key(out, zc.compress(x[:12]))
    elif c == "long":
        one_key(out, zc.compress(x + b"\0" * 4))
    elif c == "corrupt":        # a frame whose checksum fails
        z = bytearray(zc.compress(np.arange(1000, dtype="<f4").tobytes()))
        z[len(z) // 2] ^= 0xFF
        one_key(out, bytes(z), numel=1000)
    elif c == "truncated":
        z = zc.compress(np.random.default_rng(1).standard_normal(
            1000).astype("<f4").tobytes())
        one_key(out, z[:len(z) // 2], numel=1000)
    elif c == "trailing":       # a frame, then bytes that are not one
        one_key(out, zc.compress(x) + b"garbage!")
    elif c == "not_zstd":
        one_key(out, b"PK\3\4 not a zstd frame")
    elif c == "unknown_transform":
        one_key(out, zc.compress(x), ("stream.lz4/1",))
    elif c == "domain_transform":
        one_key(out, zc.compress(x), ("stream.zstd@example.com/1",))
    elif c == "version_transform":
        one_key(out, zc.compress(x), ("stream.zstd/2",))
    elif c == "malformed_transform":
        one_key(out, zc.compress(x), ("stream zstd/1",))
    elif c == "too_many_transforms":
        one_key(out, zc.compress(x), ("stream.zstd/1",) * 5)
    elif c == "strides_and_transforms":
        one_key(out, zc.compress(x), extra={"strides": [1]})
    elif c == "bytes_without_size":
        write(out, {"b": {"type": "bytes"}},
              [{"fqn": "b", "offsets": None, "relative_path": "f",
                "offset": 0, "length": 13,
                "transforms": ["stream.zstd/1"]}],
              {"f": zc.compress(b"hello")})
    else:
        raise SystemExit(f"unknown case {c}")


def main(argv):
    if argv[0] == "ok":
        write_ok(argv[1])
    elif argv[0] == "blob":
        print(BLOB.hex())
    else:
        case(argv[0], argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
