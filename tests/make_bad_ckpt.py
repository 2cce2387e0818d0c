#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write a small valid checkpoint, then break it one way.

    make_bad_ckpt.py CASE OUTDIR     (CASE 'ok' leaves it valid)
    make_bad_ckpt.py --list

Each case breaks one validation rule; tests/bats/reject.bats checks the
message each one gives.
"""
import os
import sys

import msgpack
import numpy as np

W = "optim.state.w.exp_avg"


def base(out):
    os.makedirs(out, exist_ok=True)
    a = np.arange(48, dtype="<f4").reshape(6, 8)
    data = bytearray()
    storage = []
    for off in (0, 3):
        part = a[off:off + 3].tobytes()
        storage.append({"fqn": W, "offsets": [off, 0], "index": off // 3,
                        "relative_path": "__0_0.distcp", "offset": len(data),
                        "length": len(part)})
        data += part
    pg = b"param-groups-pickle"
    storage.append({"fqn": "optim.param_groups", "offsets": None,
                    "index": None, "relative_path": "__0_0.distcp",
                    "offset": len(data), "length": len(pg)})
    data += pg
    step = np.array(7.0, dtype="<f4").tobytes()
    storage.append({"fqn": "optim.state.w.step", "offsets": [], "index": 0,
                    "relative_path": "__1_0.distcp", "offset": 0,
                    "length": 4})
    with open(os.path.join(out, "__0_0.distcp"), "wb") as fh:
        fh.write(data)
    with open(os.path.join(out, "__1_0.distcp"), "wb") as fh:
        fh.write(step)
    return {
        "format": "tensorplay-dcp", "version": 1,
        "state_dict_metadata": {
            W: {"type": "tensor", "dtype": "float32", "size": [6, 8],
                "chunks": [{"offsets": [0, 0], "sizes": [3, 8]},
                           {"offsets": [3, 0], "sizes": [3, 8]}]},
            "optim.param_groups": {"type": "bytes"},
            "optim.state.w.step": {"type": "tensor", "dtype": "float32",
                                   "size": [], "chunks": [
                                       {"offsets": [], "sizes": []}]},
        },
        "storage_data": storage,
    }


def ent(m):
    return m["state_dict_metadata"][W]


def rec(m, i=0):
    return m["storage_data"][i]


def write(out, m):
    with open(os.path.join(out, ".metadata"), "wb") as fh:
        fh.write(msgpack.packb(m, use_bin_type=True))


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


@case
def ok(m, out):
    pass


@case
def bad_format(m, out):
    m["format"] = "pytorch"


@case
def bad_version(m, out):
    m["version"] = 2


@case
def no_version(m, out):
    del m["version"]


@case
def size_not_array(m, out):
    ent(m)["size"] = "6,8"


@case
def offset_not_uint(m, out):
    rec(m)["offset"] = -1


@case
def fqn_not_str(m, out):
    rec(m)["fqn"] = 5


@case
def chunks_not_array(m, out):
    ent(m)["chunks"] = {"a": 1}


@case
def bad_type(m, out):
    ent(m)["type"] = "tensorz"


@case
def bad_dtype(m, out):
    ent(m)["dtype"] = "float128"


@case
def chunk_outside(m, out):
    ent(m)["chunks"][1]["sizes"] = [4, 8]
    rec(m, 1)["length"] = 4 * 8 * 4


@case
def chunk_dims_mismatch(m, out):
    ent(m)["chunks"][1]["offsets"] = [3, 0, 0]


@case
def overlap(m, out):
    ent(m)["chunks"][0]["sizes"] = [4, 8]
    rec(m, 0)["length"] = 4 * 8 * 4


@case
def gap(m, out):
    ent(m)["chunks"][0]["sizes"] = [2, 8]
    rec(m, 0)["length"] = 2 * 8 * 4


@case
def no_record(m, out):
    del m["storage_data"][1]


@case
def bytes_no_record(m, out):
    del m["storage_data"][2]


@case
def record_no_chunk(m, out):
    rec(m, 1)["offsets"] = [4, 0]


@case
def record_unknown_key(m, out):
    rec(m, 1)["fqn"] = "optim.state.nope"


@case
def duplicate_record(m, out):
    m["storage_data"].append(dict(rec(m, 0)))


@case
def duplicate_chunk(m, out):
    ent(m)["chunks"].append({"offsets": [0, 0], "sizes": [0, 8]})


@case
def length_mismatch(m, out):
    rec(m, 0)["length"] = 95


@case
def offset_overflow(m, out):
    rec(m, 0)["offset"] = 2**64 - 10


@case
def dims_overflow(m, out):
    ent(m)["size"] = [2**40, 2**40]
    ent(m)["chunks"] = [{"offsets": [0, 0], "sizes": [2**40, 2**40]}]


@case
def path_dotdot(m, out):
    rec(m, 0)["relative_path"] = "../__0_0.distcp"


@case
def path_absolute(m, out):
    rec(m, 0)["relative_path"] = "/etc/passwd"


@case
def path_nul(m, out):
    rec(m, 0)["relative_path"] = "__0_0.distcp\0x"


@case
def path_nul_repeat(m, out):
    # the record before names __0_0.distcp: the path is not that file
    rec(m, 1)["relative_path"] = "__0_0.distcp\0x"


@case
def file_missing(m, out):
    os.unlink(os.path.join(out, "__1_0.distcp"))


@case
def file_short(m, out):
    with open(os.path.join(out, "__0_0.distcp"), "r+b") as fh:
        fh.truncate(100)


@case
def file_is_dir(m, out):
    os.unlink(os.path.join(out, "__1_0.distcp"))
    os.mkdir(os.path.join(out, "__1_0.distcp"))


@case
def file_is_fifo(m, out):
    os.unlink(os.path.join(out, "__1_0.distcp"))
    os.mkfifo(os.path.join(out, "__1_0.distcp"))


@case
def symlink_outside(m, out):
    target = os.path.join(os.path.dirname(os.path.abspath(out)),
                          "outside.distcp")
    os.replace(os.path.join(out, "__1_0.distcp"), target)
    os.symlink(target, os.path.join(out, "__1_0.distcp"))


@case
def same_path(m, out):
    m["planner_data"] = {"optim.state.w.step": ["optim", "state", "w",
                                                "exp_avg"]}


@case
def file_vs_dir(m, out):
    m["planner_data"] = {"optim.state.w.step": ["optim", "state"]}


@case
def long_name(m, out):
    # A path component of 300 bytes: no file system takes such a name.
    m["planner_data"] = {"optim.state.w.step": ["optim", "state", "w",
                                                "s" * 300]}


@case
def duplicate_key(m, out):
    # msgpack maps can repeat a key; Python dicts cannot, so splice bytes.
    pass


@case
def trailing_junk(m, out):
    pass


@case
def not_msgpack(m, out):
    pass


@case
def empty_metadata(m, out):
    pass


@case
def huge_metadata(m, out):
    pass


@case
def huge_count(m, out):
    pass


# Wrong types, one case per field: (case, where, field, bad value, message).
WRONG_TYPES = [
    ("top", None, "format", 1, "field 'format': expected string, got integer"),
    ("top", None, "version", "1", "field 'version': expected unsigned integer, got string"),
    ("top", None, "state_dict_metadata", [], "field 'state_dict_metadata': expected map, got array"),
    ("top", None, "storage_data", {}, "field 'storage_data': expected array, got map"),
    ("top", None, "planner_data", [], "field 'planner_data': expected map, got array"),
    ("entry", None, "type", 1, "field 'type': expected string, got integer"),
    ("entry", None, "dtype", 4, "field 'dtype': expected string, got integer"),
    ("entry", None, "size", [6, "8"], "field 'size': expected array of unsigned integers, got string"),
    ("entry", None, "size", [6, -8], "field 'size': expected array of unsigned integers, got negative integer"),
    ("entry", None, "chunks", "x", "field 'chunks': expected array, got string"),
    ("entry", None, "requires_grad", 1, "field 'requires_grad': expected bool, got integer"),
    ("chunk", None, "offsets", None, "field 'chunks[0].offsets': expected array of unsigned integers, got nil"),
    ("chunk", None, "sizes", [3.0, 8], "field 'chunks[0].sizes': expected array of unsigned integers, got float"),
    ("record", None, "fqn", None, "field 'fqn': expected string, got nil"),
    ("record", None, "offsets", "0,0", "field 'offsets': expected array or nil, got string"),
    ("record", None, "index", "0", "field 'index': expected unsigned integer or nil, got string"),
    ("record", None, "relative_path", 7, "field 'relative_path': expected string, got integer"),
    ("record", None, "offset", 1.5, "field 'offset': expected unsigned integer, got float"),
    ("record", None, "length", "96", "field 'length': expected unsigned integer, got string"),
    ("record", None, "xxh3", b"\x00", "field 'xxh3': expected unsigned integer, got bin"),
]


def wrong_type(m, i):
    kind, _, field, value, _ = WRONG_TYPES[i]
    if kind == "top":
        m[field] = value
    elif kind == "entry":
        ent(m)[field] = value
    elif kind == "chunk":
        ent(m)["chunks"][0][field] = value
    else:
        rec(m, 0)[field] = value


def main(argv):
    if argv and argv[0] == "--list":
        print("\n".join(CASES))
        return 0
    if argv and argv[0] == "--wrong-types":
        for i, w in enumerate(WRONG_TYPES):
            print(f"{i}\t{w[4]}")
        return 0
    name, out = argv
    m = base(out)
    if name.startswith("wrong_type_"):
        wrong_type(m, int(name[len("wrong_type_"):]))
        write(out, m)
        return 0
    CASES[name](m, out)
    write(out, m)
    meta = os.path.join(out, ".metadata")
    if name == "duplicate_key":
        packed = msgpack.packb(m, use_bin_type=True)
        # Rename key 'optim.param_groups' into W's spelling: same length.
        a = "optim.param_groups".encode()
        b = ("optim.state.w.exp_avg"[:len(a)]).encode()
        assert len(a) == len(b)
        sdm = m["state_dict_metadata"]
        sdm["optim.state.w.exp_av"] = sdm.pop("optim.param_groups")
        packed = msgpack.packb(m, use_bin_type=True)
        packed = packed.replace(b"optim.state.w.exp_av\x81",
                                W.encode() + b"\x81", 1)
        packed = packed.replace(b"\xb4optim.state.w.exp_avg", b"\xb5" + W.encode(), 1)
        with open(meta, "wb") as fh:
            fh.write(packed)
    elif name == "trailing_junk":
        with open(meta, "ab") as fh:
            fh.write(b"\x00junk")
    elif name == "not_msgpack":
        with open(meta, "wb") as fh:
            fh.write(b"\x80\x04\x95 this is a pickle, not msgpack")
    elif name == "empty_metadata":
        open(meta, "wb").close()
    elif name == "huge_metadata":
        with open(meta, "wb") as fh:
            fh.truncate(1 << 30)  # 1 GiB, sparse
    elif name == "huge_count":
        # state_dict_metadata claims 2^32-1 entries
        packed = msgpack.packb(m, use_bin_type=True)
        key = b"\xb3state_dict_metadata"
        i = packed.index(key) + len(key)
        assert packed[i] & 0xf0 == 0x80
        packed = packed[:i] + b"\xdf\xff\xff\xff\xff" + packed[i + 1:]
        with open(meta, "wb") as fh:
            fh.write(packed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
