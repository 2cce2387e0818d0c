#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Safetensors checkpoints for tests/bats/safetensors.bats, written here
from the format's spec (8-byte little-endian header length, a JSON header
of {name: {dtype, shape, data_offsets}}, then the data), independently of
ckptfs and of the safetensors package.

    make_safetensors.py ok OUT [--shards N] [--index]
        Hugging Face's layout: model-0000K-of-0000N.safetensors (and
        model.safetensors.index.json with --index); keys of many dtypes
        and shapes (0-d, 1-D, empty, 3-D).
    make_safetensors.py sharded OUT
        torch DCP's sharded safetensors (HuggingFaceStorageWriter's
        sharded/ directory): shard-0000R-model-00001-of-00001.safetensors
        per old rank, each key in chunks (dim 0, dim 1, a 2x2 grid,
        uneven) at __metadata__ DCP_SHARDING_INFO's saved_offsets.
    make_safetensors.py CASE OUT     a broken or hostile directory
    make_safetensors.py expect OUT W R   print "path<TAB>hex of the view"
"""
import json
import os
import struct
import sys

import numpy as np

# name -> (dtype, numpy dtype of the raw values, shape)
KEYS = {
    "model.embed.weight": ("F32", "<f4", (10, 6)),
    "model.layers.0.attn.q.weight": ("BF16", "<u2", (7, 4)),
    "model.layers.0.attn.q.bias": ("F16", "<f2", (7,)),
    "model.layers.0.norm.weight": ("F64", "<f8", (3, 2, 2)),
    "model.step": ("I64", "<i8", ()),
    "model.mask": ("BOOL", "u1", (5, 2)),
    "model.codes": ("U8", "u1", (9,)),
    "model.empty": ("F32", "<f4", (0, 3)),
    "lm_head.weight": ("I32", "<i4", (4, 5)),
}


def values(name, npdt, shape):
    rng = np.random.default_rng(sum(map(ord, name)))
    n = int(np.prod(shape)) if shape else 1
    if npdt in ("u1",):
        a = rng.integers(0, 2 if "mask" in name else 255, n)
    elif npdt.startswith("<i"):
        a = rng.integers(-1000, 1000, n)
    elif npdt == "<u2":
        a = rng.integers(0, 65535, n)
    else:
        a = rng.standard_normal(n)
    return np.asarray(a).astype(npdt).reshape(shape)


def st_bytes(entries, meta=None, pad=True):
    """entries: [(name, dtype, shape, raw bytes)] -> file bytes."""
    head, data = {}, b""
    if meta is not None:
        head["__metadata__"] = meta
    for name, dt, shape, raw in entries:
        head[name] = {"dtype": dt, "shape": list(shape),
                      "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(head).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write_ok(out, shards=2, index=False):
    os.makedirs(out)
    names = list(KEYS)
    files = {}
    for i, name in enumerate(names):
        files.setdefault(i % shards, []).append(name)
    wmap = {}
    for k, group in files.items():
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        ents = []
        for name in group:
            dt, npdt, shape = KEYS[name]
            ents.append((name, dt, shape, values(name, npdt, shape).tobytes()))
            wmap[name] = fname
        with open(os.path.join(out, fname), "wb") as fh:
            fh.write(st_bytes(ents, {"format": "pt"}))
    if index:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as fh:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, fh)


TILING = {"model.embed.weight": "grid", "model.layers.0.attn.q.weight": "dim1",
          "model.layers.0.norm.weight": "dim0", "model.mask": "dim1",
          "lm_head.weight": "dim0"}


def chunks_of(name, shape):
    """A key's saved chunks, [(offsets, sizes)]: dim 0 (uneven), dim 1,
    or a 2x2 grid (TILING; 1-D keys dim 0, 0-d and empty ones whole)."""
    if len(shape) == 0 or 0 in shape:
        return [([0] * len(shape), list(shape))]
    how = TILING.get(name, "dim0")
    rest = list(shape[1:])
    if how == "dim0" or len(shape) == 1:
        cut = sorted({0, max(1, shape[0] // 3), shape[0]})
        return [([a] + [0] * len(rest), [b - a] + rest)
                for a, b in zip(cut, cut[1:])]
    c1 = max(1, shape[1] // 2)
    if how == "dim1":
        return [([0, a] + [0] * (len(shape) - 2), [shape[0], b - a] + rest[1:])
                for a, b in ((0, c1), (c1, shape[1]))]
    c0 = shape[0] // 2
    return [([a0, a1] + [0] * (len(shape) - 2), [b0 - a0, b1 - a1] + rest[1:])
            for a0, b0 in ((0, c0), (c0, shape[0]))
            for a1, b1 in ((0, c1), (c1, shape[1]))]


def write_sharded(out, drop=None, overlap=None, meta_edit=None, ranks=4):
    """Chunk j of every key goes to rank j % ranks's shard."""
    os.makedirs(out)
    per = {r: ([], {}) for r in range(ranks)}
    for name, (dt, npdt, shape) in KEYS.items():
        a = values(name, npdt, shape)
        for j, (o, sz) in enumerate(chunks_of(name, shape)):
            if (name, j) == drop:
                continue
            if (name, j) == overlap:
                o = [max(0, o[0] - 1)] + o[1:]
            sl = tuple(slice(a0, a0 + n) for a0, n in zip(o, sz))
            ents, info = per[j % ranks]
            ents.append((name, dt, sz, np.ascontiguousarray(a[sl]).tobytes()))
            info[name] = {"saved_offsets": o}
    for r, (ents, info) in per.items():
        meta = {"format": "pt", "DCP_VERSION": "1.0",
                "DCP_SHARDING_INFO": json.dumps(info)}
        if meta_edit:
            meta_edit(r, meta)
        with open(os.path.join(out, f"shard-{r + 1:05d}-model-00001-of-00001"
                               ".safetensors"), "wb") as fh:
            fh.write(st_bytes(ents, meta))


def rank0_info(change):
    """A write_sharded meta_edit: change(info) on rank 0's decoded
    DCP_SHARDING_INFO."""
    def edit(r, meta):
        if r == 0:
            info = json.loads(meta["DCP_SHARDING_INFO"])
            change(info)
            meta["DCP_SHARDING_INFO"] = json.dumps(info)
    return edit


def expect(out, w, r):
    for name, (dt, npdt, shape) in KEYS.items():
        a = values(name, npdt, shape)
        if a.size != 1 and a.ndim:
            cs = -(-a.shape[0] // w)
            a = a[min(a.shape[0], r * cs):min(a.shape[0], (r + 1) * cs)]
        print(f"{name.replace('.', '/')}\t{np.ascontiguousarray(a).tobytes().hex()}")


def one(out, raw, name="model.safetensors"):
    os.makedirs(out)
    with open(os.path.join(out, name), "wb") as fh:
        fh.write(raw)


def case(c, out):
    x = values("x", "<f4", (4,)).tobytes()
    good = st_bytes([("x", "F32", (4,), x)])
    if c == "truncated_header":
        one(out, good[:20])
    elif c == "header_len_huge":
        one(out, struct.pack("<Q", 2**64 - 1) + good[8:])
    elif c == "tiny_file":
        one(out, b"\x01\x02")
    elif c == "offsets_past_file":
        h = json.dumps({"x": {"dtype": "F32", "shape": [4],
                              "data_offsets": [0, 4096]}}).encode()
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "offsets_overlap":
        h = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "y": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}).encode()
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "size_mismatch":
        h = json.dumps({"x": {"dtype": "F32", "shape": [5],
                              "data_offsets": [0, 16]}}).encode()
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "offset_2_64":
        h = ('{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, '
             '18446744073709551616]}}').encode()
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "shape_overflow":
        h = json.dumps({"x": {"dtype": "F32", "shape": [2**40, 2**40],
                              "data_offsets": [0, 16]}}).encode()
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "deep_json":
        h = ("[" * 100000 + "]" * 100000).encode()
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "not_json":
        h = b'{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16],}}'
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "float_offset":
        h = b'{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16.0]}}'
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "bad_dtype":
        h = json.dumps({"x": {"dtype": "C64", "shape": [2],
                              "data_offsets": [0, 16]}}).encode()
        one(out, struct.pack("<Q", len(h)) + h + x)
    elif c == "duplicate_key":
        os.makedirs(out)
        for f in ("a.safetensors", "b.safetensors"):
            with open(os.path.join(out, f), "wb") as fh:
                fh.write(good)
    elif c == "index_mismatch":
        write_ok(out, 2, True)
        p = os.path.join(out, "model.safetensors.index.json")
        d = json.load(open(p))
        d["weight_map"]["model.embed.weight"] = "model-00002-of-00002.safetensors"
        json.dump(d, open(p, "w"))
    elif c == "sharded_gap":
        write_sharded(out, drop=("model.embed.weight", 1))
    elif c == "sharded_overlap":
        write_sharded(out, overlap=("model.embed.weight", 2))
    elif c == "sharded_not_json":
        write_sharded(out, meta_edit=lambda r, m: m.update(
            DCP_SHARDING_INFO="{not json") if r == 1 else None)
    elif c == "sharded_missing_key":
        write_sharded(out, meta_edit=rank0_info(
            lambda info: info.pop("model.embed.weight")))
    elif c == "sharded_unknown_key":
        write_sharded(out, meta_edit=rank0_info(
            lambda info: info.update({"model.ghost": {"saved_offsets": [0]}})))
    elif c == "sharded_offset_2_64":
        def edit(r, m):
            if r == 0:
                m["DCP_SHARDING_INFO"] = m["DCP_SHARDING_INFO"].replace(
                    '"model.embed.weight": {"saved_offsets": [0, 0]}',
                    '"model.embed.weight": {"saved_offsets": '
                    '[18446744073709551615, 0]}')
        write_sharded(out, meta_edit=edit)
    elif c == "sharded_not_string":
        write_sharded(out, meta_edit=lambda r, m: m.update(
            DCP_SHARDING_INFO={"x": 1}) if r == 0 else None)
    elif c == "sharded_mixed":
        write_sharded(out, meta_edit=lambda r, m: m.pop(
            "DCP_SHARDING_INFO") if r == 2 else None)
    elif c == "sharded_dtype_clash":
        write_sharded(out)
        p = os.path.join(out, "shard-00002-model-00001-of-00001.safetensors")
        raw = open(p, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        h = json.loads(raw[8:8 + n])
        h["model.embed.weight"]["dtype"] = "I32"
        hb = json.dumps(h).encode()
        open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
    elif c == "index_missing_key":
        write_ok(out, 2, True)
        p = os.path.join(out, "model.safetensors.index.json")
        d = json.load(open(p))
        d["weight_map"]["model.ghost"] = "model-00001-of-00002.safetensors"
        json.dump(d, open(p, "w"))
    elif c == "stale_shards":   # an index, and two files it does not list
        write_ok(out, 2, True)
        y = values("model.embed.weight", "<f4", (2,)).tobytes()
        with open(os.path.join(out, "model-old.safetensors"), "wb") as fh:
            fh.write(st_bytes([("model.stale", "F32", (4,), x)]))
        with open(os.path.join(out, "z-extra.safetensors"), "wb") as fh:
            fh.write(st_bytes([("model.embed.weight", "F32", (2,), y)]))
    elif c in HEADERS:          # a header written as given
        h = HEADERS[c]
        one(out, struct.pack("<Q", len(h)) + h + x)
    else:
        raise SystemExit(f"unknown case {c}")


# Headers Python's json reads one way and a first-match reader another,
# or that are not UTF-8: each refused (issue 19).
HEADERS = {
    "field_twice": b'{"x": {"dtype": "F32", "shape": [4], '
                   b'"data_offsets": [0, 16], "shape": [2]}}',
    "metadata_twice": b'{"__metadata__": {"a": "b"}, "x": {"dtype": "F32", '
                      b'"shape": [4], "data_offsets": [0, 16]}, '
                      b'"__metadata__": {"c": "d"}}',
    "metadata_not_strings": b'{"__metadata__": {"format": "pt", "n": 1}, '
                            b'"x": {"dtype": "F32", "shape": [4], '
                            b'"data_offsets": [0, 16]}}',
    "metadata_not_object": b'{"__metadata__": ["pt"], "x": {"dtype": "F32", '
                           b'"shape": [4], "data_offsets": [0, 16]}}',
    "metadata_key_twice": b'{"__metadata__": {"format": "pt", "format": "np"}, '
                          b'"x": {"dtype": "F32", "shape": [4], '
                          b'"data_offsets": [0, 16]}}',
    "key_lone_surrogate": b'{"x\\ud800": {"dtype": "F32", "shape": [4], '
                          b'"data_offsets": [0, 16]}}',
    "key_low_surrogate": b'{"x\\udc00\\ud800": {"dtype": "F32", "shape": [4], '
                         b'"data_offsets": [0, 16]}}',
    "key_not_utf8": b'{"x\xff\xfe": {"dtype": "F32", "shape": [4], '
                    b'"data_offsets": [0, 16]}}',
    "key_cesu8": b'{"x\xed\xa0\x80": {"dtype": "F32", "shape": [4], '
                 b'"data_offsets": [0, 16]}}',
    "key_pair": '{"x\\ud83d\\ude00": {"dtype": "F32", "shape": [4], '
                '"data_offsets": [0, 16]}}'.encode(),
}


def main(argv):
    if argv[0] == "ok":
        shards = int(argv[argv.index("--shards") + 1]) if "--shards" in argv else 2
        write_ok(argv[1], shards, "--index" in argv)
    elif argv[0] == "sharded":
        write_sharded(argv[1])
    elif argv[0] == "expect":
        expect(argv[1], int(argv[2]), int(argv[3]))
    else:
        case(argv[0], argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
