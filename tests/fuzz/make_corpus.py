#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Seed corpus for tests/fuzz: small generated checkpoints' .metadata and
the rejected cases of make_bad_ckpt.py, each behind a 16-byte header of
world, rank, offset and length.

    make_corpus.py OUTDIR
"""
import os
import random
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_ckpt  # noqa: E402


def header(rng):
    return struct.pack("<4I", rng.randrange(64), rng.randrange(64),
                       rng.randrange(8192), rng.randrange(1 << 20))


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(24):
            d = os.path.join(tmp, f"g{seed}")
            gen_ckpt.generate(d, seed, nkeys=4 + seed % 6, nfiles=2,
                              max_elems=200)
            meta = open(os.path.join(d, ".metadata"), "rb").read()
            with open(os.path.join(out, f"gen-{seed:02d}"), "wb") as fh:
                fh.write(header(rng) + meta)
        cases = subprocess.run(
            ["/usr/bin/python3", os.path.join(ROOT, "tests", "make_bad_ckpt.py"),
             "--list"], capture_output=True, text=True, check=True).stdout.split()
        for case in cases:
            if case in ("huge_metadata",):
                continue
            d = os.path.join(tmp, case)
            subprocess.run(["/usr/bin/python3",
                            os.path.join(ROOT, "tests", "make_bad_ckpt.py"),
                            case, d], check=True)
            meta = open(os.path.join(d, ".metadata"), "rb").read()
            with open(os.path.join(out, f"bad-{case}"), "wb") as fh:
                fh.write(header(rng) + meta)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus"))
