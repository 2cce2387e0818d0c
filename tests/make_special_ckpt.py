#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A checkpoint of special floating-point values, for dtype views: every bit
pattern of float8_e4m3fn, float8_e5m2, float16 and bfloat16, and float32 /
float64 values that test rounding (ties, ulp neighbours of ties, overflow,
subnormals, NaN, Inf, signed zero), each saved in two dim-0 chunks.

    make_special_ckpt.py OUTDIR
"""
import os
import sys

import msgpack
import numpy as np


def f32_specials(rng):
    base = rng.standard_normal(4000).astype("<f4")
    u = base.view("<u4")
    ties = (u & 0xffff0000) | 0x8000            # exact bf16 ties
    near = np.concatenate([ties - 1, ties + 1])  # either side of a tie
    odd_even = np.arange(0x3f800000, 0x3f800000 + (1 << 17), 0x4000,
                         dtype="<u4") | 0x8000
    special = np.array([0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                        0xffc00001, 0x7f800001, 0x00000001, 0x80000001,
                        0x007fffff, 0x00800000, 0x7f7fffff, 0x7f7f8000,
                        0x7f7f7fff, 0xff7fffff, 0x00008000, 0x00018000,
                        0x0000ffff], dtype="<u4")
    return np.concatenate([u, ties, near, odd_even, special]).view("<f4")


def f64_specials(rng):
    x = rng.standard_normal(4000) * 10.0 ** rng.integers(-45, 39, 4000)
    f = f32_specials(rng).astype("<f8")
    # float64 values just off a bfloat16 tie, which float32 would round
    # onto the tie (the double-rounding trap), and off float32 halfway.
    t = (f32_specials(rng).view("<u4") & 0xffff0000 | 0x8000).view("<f4").astype("<f8")
    eps = np.abs(t) * 2.0 ** -40
    extra = np.array([1e308, -1e308, 3.3961e38, 3.3963e38, 1e-50, -1e-300,
                      np.inf, -np.inf, np.nan, 2.0 ** -133, 2.0 ** -134,
                      3 * 2.0 ** -134, 2.0 ** -134 * (1 + 2 ** -30),
                      float.fromhex("0x1.fep127"),
                      float.fromhex("0x1.ffp127"),
                      float.fromhex("0x1.fefffffffffffp127"),
                      -float.fromhex("0x1.ffp127")])
    return np.concatenate([x, f, t + eps, t - eps, extra]).astype("<f8")


def main(out):
    np.seterr(all="ignore")
    rng = np.random.default_rng(3)
    os.makedirs(out, exist_ok=True)
    arrays = {
        "float8_e4m3fn": np.arange(256, dtype="u1"),
        "float8_e5m2": np.arange(256, dtype="u1"),
        "float16": np.arange(65536, dtype="<u2"),
        "bfloat16": np.arange(65536, dtype="<u2"),
        "float32": f32_specials(rng),
        "float64": f64_specials(rng),
        "int32": np.arange(-50, 50, dtype="<i4"),
    }
    sdm, storage, data = {}, [], bytearray()
    for dt, a in arrays.items():
        n = len(a)
        half = n // 2
        fqn = f"special.{dt}"
        chunks = [{"offsets": [0], "sizes": [half]},
                  {"offsets": [half], "sizes": [n - half]}]
        sdm[fqn] = {"type": "tensor", "dtype": dt, "size": [n],
                    "chunks": chunks}
        for ch in chunks:
            o, s = ch["offsets"][0], ch["sizes"][0]
            payload = a[o:o + s].tobytes()
            storage.append({"fqn": fqn, "offsets": [o],
                            "relative_path": "data", "offset": len(data),
                            "length": len(payload)})
            data += payload
    with open(os.path.join(out, "data"), "wb") as fh:
        fh.write(data)
    with open(os.path.join(out, ".metadata"), "wb") as fh:
        fh.write(msgpack.packb({"format": "tensorplay-dcp", "version": 1,
                                "state_dict_metadata": sdm,
                                "storage_data": storage}))


if __name__ == "__main__":
    main(sys.argv[1])
