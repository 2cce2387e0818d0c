#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A native checkpoint whose names would inject into a terminal or a log:
a state key and a data file holding ESC [ 31m, CR and LF, and a key and
a data file path of about 2,000 characters.

    make_nasty_names.py OUTDIR [short-esc | short-long]

short-esc / short-long: the data file with the escape sequence / with
the long path is one byte short of its record, so opening it fails with
a message naming that key and file.  Prints nothing.
"""
import os
import sys

import msgpack
import numpy as np

ESC_KEY = "w\x1b[31mred\r\nx.weight"
ESC_FILE = "d\x1b[31m\r\nz.distcp"
LONG_KEY = ".".join(["k" * 249] * 8) + ".w"
LONG_FILE = "/".join(["p" * 199] * 9) + "/" + "f" * 190 + ".distcp"


def main(out, mode=None):
    os.makedirs(out, exist_ok=True)
    meta, storage = {}, []
    for key, rel, seed in ((ESC_KEY, ESC_FILE, 1), (LONG_KEY, LONG_FILE, 2)):
        a = np.random.default_rng(seed).standard_normal((4, 8)).astype("<f4")
        data = a.tobytes()
        if mode == ("short-esc" if rel == ESC_FILE else "short-long"):
            data = data[:-1]
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        meta[key] = {"type": "tensor", "dtype": "float32", "size": [4, 8],
                     "chunks": [{"offsets": [0, 0], "sizes": [4, 8]}]}
        storage.append({"fqn": key, "offsets": [0, 0], "index": 0,
                        "relative_path": rel, "offset": 0,
                        "length": 4 * 8 * 4})
    with open(os.path.join(out, ".metadata"), "wb") as fh:
        fh.write(msgpack.packb({"format": "tensorplay-dcp", "version": 1,
                                "state_dict_metadata": meta,
                                "storage_data": storage},
                               use_bin_type=True))


if __name__ == "__main__":
    main(*sys.argv[1:])
