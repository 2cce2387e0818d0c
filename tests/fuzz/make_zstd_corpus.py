#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Seeds for tests/fuzz/fuzz_zstd.c: [flags, n, stored bytes].  flags bit 0
a torch.save payload, bit 1 two zstd layers, bit 2 a bytes entry; n + 1
float32 elements (bytes: (n + 1) * 64 bytes).

    make_zstd_corpus.py OUT_DIR
"""
import io
import os
import sys

import numpy as np
import torch
import zstandard


def z(raw, layers=1, size=True):
    for _ in range(layers):
        raw = zstandard.ZstdCompressor(write_content_size=size,
                                       write_checksum=True).compress(raw)
    return raw


def saved(t):
    buf = io.BytesIO()
    torch.save(t, buf)
    return buf.getvalue()


def main(out):
    os.makedirs(out, exist_ok=True)
    x = np.arange(16, dtype="<f4").tobytes()
    seeds = {
        "raw": bytes([0, 15]) + z(x),
        "raw_nosize": bytes([0, 15]) + z(x, size=False),
        "raw_two_layers": bytes([2, 15]) + z(x, 2),
        "torch_save": bytes([1, 15]) + z(saved(torch.arange(16.))),
        "torch_save_strided": bytes([1, 15]) +
        z(saved(torch.arange(32.)[::2])),
        "torch_save_offset": bytes([1, 7]) +
        z(saved(torch.arange(16.)[8:])),
        "bytes": bytes([4, 0]) + z(bytes(range(64))),
        "bomb": bytes([0, 15]) + z(bytes(2 << 20), size=False),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
