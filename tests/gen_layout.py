#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write a 2-D (TP x DP) layout file for a generated checkpoint: each
optimizer parameter's box is tensor-parallel rank T's part of a split over
TP ranks along dim 0, dim 1, or both (a 2x2 grid of TP ranks).  Adds one
line that matches no key, and comments and blank lines.

    gen_layout.py CKPT OUT --split 0|1|both --tp 2 --tp-rank 1
"""
import argparse
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import reference  # noqa: E402


def part(n, parts, i):
    cs = -(-n // parts)
    lo = min(n, i * cs)
    return lo, min(n, lo + cs) - lo


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--split", choices=["0", "1", "both"], default="1")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--tp-rank", type=int, default=1)
    a = ap.parse_args(argv)
    meta = reference.load(a.ckpt)
    shapes = {}
    for fqn, e in meta["state_dict_metadata"].items():
        p = reference.param_of(fqn, meta)
        if p is None or e["type"] != "tensor":
            continue
        n = 1
        for d in e["size"]:
            n *= d
        if n != 1:
            shapes.setdefault(p, []).append(e["size"])
    lines = ["# generated TP layout", ""]
    for p, ss in sorted(shapes.items()):
        if len({len(s) for s in ss}) != 1 or not ss[0]:
            continue
        shape = [min(s[d] for s in ss) for d in range(len(ss[0]))]
        off, size = [0] * len(shape), list(shape)
        dims = {"0": [0], "1": [1], "both": [0, 1]}[a.split]
        if any(d >= len(shape) for d in dims):
            dims = [0]
        if a.split == "both" and len(shape) >= 2:
            ranks = [a.tp_rank // 2, a.tp_rank % 2]
            for d, r in zip(dims, ranks):
                off[d], size[d] = part(shape[d], 2, r)
        else:
            off[dims[0]], size[dims[0]] = part(shape[dims[0]], a.tp, a.tp_rank)
        lines.append(f"{p} {','.join(map(str, off))} {','.join(map(str, size))}"
                     "   # TP box")
    lines.append("no.such.param 0,0 1,1")
    with open(a.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
