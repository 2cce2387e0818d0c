#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Hostile and broken PyTorch checkpoints, made from a good one written by
scripts/gen_torch_ckpt.py (its per_rank checkpoint).

    make_hostile_torch.py cases GOOD OUTDIR
        OUTDIR/<case>/ for each case, and OUTDIR/expect.tsv:
        case <TAB> text the one-line error must contain
    make_hostile_torch.py corpus GOOD OUTDIR
        fuzz seeds for tests/unit/fuzz_torch.c (first byte 0: a .metadata
        pickle; 1: one .distcp record)
"""
import os
import pickle
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))


def dcp_metadata(ckpt):
    import torch_dcp_compat
    torch_dcp_compat.install()
    with open(os.path.join(ckpt, ".metadata"), "rb") as f:
        return pickle.load(f)


def copy(good, out, name):
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(good, d)
    return d


def write_meta(d, data):
    with open(os.path.join(d, ".metadata"), "wb") as f:
        f.write(data)


def tensor_record(md, want_fqn=None, dtype=None):
    """(MetadataIndex, _StorageInfo) of a tensor record."""
    from torch.distributed._shard.checkpoint.metadata import TensorStorageMetadata
    for mi, si in md.storage_data.items():
        e = md.state_dict_metadata[mi.fqn]
        if not isinstance(e, TensorStorageMetadata):
            continue
        if want_fqn and mi.fqn != want_fqn:
            continue
        if dtype is not None and e.properties.dtype != dtype:
            continue
        if si.length > 0:
            return mi, si
    raise SystemExit("no such record")


def patch_blob(d, si, fn):
    path = os.path.join(d, si.relative_path)
    with open(path, "r+b") as f:
        f.seek(si.offset)
        blob = bytearray(f.read(si.length))
        fn(blob)
        f.seek(si.offset)
        f.write(blob)


def cd_entry(blob, suffix):
    """Offset of the central directory entry whose name ends with suffix."""
    at = 0
    while True:
        at = blob.find(b"PK\x01\x02", at)
        if at < 0:
            raise SystemExit("no CD entry " + suffix.decode())
        nlen = struct.unpack_from("<H", blob, at + 28)[0]
        if bytes(blob[at + 46:at + 46 + nlen]).endswith(suffix):
            return at
        at += 4


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/ckptfs-pwned",))


def cases(good, out):
    import torch
    os.makedirs(out, exist_ok=True)
    md = dcp_metadata(good)
    exp = []

    d = copy(good, out, "os_system")
    write_meta(d, pickle.dumps(Evil(), protocol=4))
    exp.append(("os_system", "names global 'posix.system', which is not allowed"))

    d = copy(good, out, "os_system_inside")
    md2 = dcp_metadata(good)
    md2.planner_data = Evil()
    write_meta(d, pickle.dumps(md2, protocol=4))
    exp.append(("os_system_inside", "which is not allowed"))

    d = copy(good, out, "bad_opcode")
    write_meta(d, pickle.dumps({"a": 1.5}, protocol=4))
    exp.append(("bad_opcode", "opcode BINFLOAT"))

    d = copy(good, out, "recursion_bomb")
    n = 1000000
    write_meta(d, b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".")
    exp.append(("recursion_bomb", "not a torch distributed checkpoint Metadata"))

    d = copy(good, out, "mark_bomb")
    write_meta(d, b"\x80\x04" + b"(" * 1000000 + b".")
    exp.append(("mark_bomb", "stack not a single value at STOP"))

    d = copy(good, out, "memo_out_of_range")
    write_meta(d, b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00N\x94h\x07.")
    exp.append(("memo_out_of_range", "memo index 7 is not set"))

    d = copy(good, out, "memo_put_huge")
    write_meta(d, b"\x80\x02Nr\xff\xff\xff\x7f.")
    exp.append(("memo_put_huge", "memo index out of range"))

    d = copy(good, out, "truncated_pickle")
    with open(os.path.join(good, ".metadata"), "rb") as f:
        data = f.read()
    write_meta(d, data[:len(data) // 2])
    exp.append(("truncated_pickle", ".metadata: pickle"))

    d = copy(good, out, "transform_descriptors")
    md2 = dcp_metadata(good)
    for si in md2.storage_data.values():
        si.transform_descriptors = ["stream.zstd/1"]
    write_meta(d, pickle.dumps(md2, protocol=4))
    exp.append(("transform_descriptors", "transform_descriptors"))

    d = copy(good, out, "path_escape")
    md2 = dcp_metadata(good)
    mi, si = tensor_record(md2)
    si.relative_path = "../" + si.relative_path
    write_meta(d, pickle.dumps(md2, protocol=4))
    exp.append(("path_escape", "must be relative"))

    # a tensor record right after one of the same file: that file's name
    # with a NUL and more is not that file (checked, not taken as seen)
    d = copy(good, out, "path_nul_repeat")
    md2 = dcp_metadata(good)
    items = list(md2.storage_data.items())
    from torch.distributed._shard.checkpoint.metadata import TensorStorageMetadata
    for (_, prev), (mi, si) in zip(items, items[1:]):
        if (si.relative_path == prev.relative_path and si.length > 0 and
                isinstance(md2.state_dict_metadata[mi.fqn],
                           TensorStorageMetadata)):
            si.relative_path += "\0x"
            break
    else:
        raise SystemExit("no tensor record after one of its file")
    write_meta(d, pickle.dumps(md2, protocol=4))
    exp.append(("path_nul_repeat", "must be relative"))

    mi, si = tensor_record(md, "model.layer1.weight")
    d = copy(good, out, "zip_lying_sizes")

    def lie(blob):
        at = cd_entry(blob, b"/data/0")
        struct.pack_into("<II", blob, at + 20, 0x7ffffff0, 0x7ffffff0)
    patch_blob(d, si, lie)
    exp.append(("zip_lying_sizes", "runs past the data area"))

    d = copy(good, out, "zip_size_mismatch")

    def smaller(blob):
        at = cd_entry(blob, b"/data/0")
        csize = struct.unpack_from("<I", blob, at + 20)[0]
        struct.pack_into("<II", blob, at + 20, csize - 4, csize - 4)
    patch_blob(d, si, smaller)
    exp.append(("zip_size_mismatch", "storage record is"))

    d = copy(good, out, "zip_bad_cd_offset")

    def cdoff(blob):
        struct.pack_into("<I", blob, len(blob) - 6, 0x7fffffff)
        # and the zip64 end record's copy, which is used when saturated
    patch_blob(d, si, cdoff)
    exp.append(("zip_bad_cd_offset", "central directory lies outside the record"))

    d = copy(good, out, "not_a_zip")
    patch_blob(d, si, lambda b: b.__setitem__(slice(0, 4), b"XXXX"))
    exp.append(("not_a_zip", "not a torch.save zip archive"))

    # A record that is a safetensors blob (SerializationFormat.SAFETENSORS)
    # which does not hold the key, or lies about where its bytes are.
    def st_blob(header):
        def put(blob):
            import json
            h = json.dumps(header).encode()
            raw = struct.pack("<Q", len(h)) + h
            blob[:len(raw)] = raw
        return put
    d = copy(good, out, "st_payload_missing_key")
    patch_blob(d, si, st_blob({"zzz": {"dtype": "F32", "shape": [1],
                                       "data_offsets": [0, 4]}}))
    exp.append(("st_payload_missing_key",
                "the safetensors blob there has no tensor of this key"))
    d = copy(good, out, "st_payload_lying_offsets")
    patch_blob(d, si, st_blob({mi.fqn: {"dtype": "F32", "shape": [1],
                                        "data_offsets": [0, 1 << 40]}}))
    exp.append(("st_payload_lying_offsets",
                "data_offsets must be [begin, end]"))

    d = copy(good, out, "datapkl_os_system")

    def evil_pkl(blob):
        old = b"torch._utils\n_rebuild_tensor_v2\n"
        at = blob.find(old)
        new = b"posix\nsystem\n"
        blob[at:at + len(old)] = new + b"N" * (len(old) - len(new))
    patch_blob(d, si, evil_pkl)
    exp.append(("datapkl_os_system", "names global 'posix.system'"))

    # _rebuild_tensor_v3 (float8's, torch 2.1+) is accepted only with its
    # own arguments: a v2 call renamed to v3 lacks the dtype.
    d = copy(good, out, "datapkl_v3_without_dtype")

    def to_v3(blob):
        at = blob.find(b"torch._utils\n_rebuild_tensor_v2\n")
        blob[at + 30] = ord("3")
    patch_blob(d, si, to_v3)
    exp.append(("datapkl_v3_without_dtype",
                "_rebuild_tensor_v3 takes 7 or 8 arguments"))

    d = copy(good, out, "dtype_mismatch")
    mi64, si64 = tensor_record(md, "model.counts")

    def to_bool(blob):
        at = blob.find(b"LongStorage")
        blob[at:at + 11] = b"BoolStorage"
    patch_blob(d, si64, to_bool)
    exp.append(("dtype_mismatch", "storage record is"))

    d = copy(good, out, "truncated_distcp")
    last = max(md.storage_data.items(), key=lambda kv: kv[1].offset)[1]
    with open(os.path.join(d, last.relative_path), "r+b") as f:
        f.truncate(last.offset + last.length - 10)
    exp.append(("truncated_distcp", "runs past the end of the"))

    d = copy(good, out, "missing_distcp")
    os.unlink(os.path.join(d, si.relative_path))
    exp.append(("missing_distcp", "No such file"))

    d = copy(good, out, "not_metadata")
    write_meta(d, pickle.dumps(torch.Size([1, 2]), protocol=4))
    exp.append(("not_metadata", "not a torch distributed checkpoint Metadata"))

    with open(os.path.join(out, "expect.tsv"), "w") as f:
        for c, t in exp:
            f.write(f"{c}\t{t}\n")


def corpus(good, out):
    os.makedirs(out, exist_ok=True)
    md = dcp_metadata(good)
    with open(os.path.join(good, ".metadata"), "rb") as f:
        data = f.read()
    seeds = {"metadata": b"\x00" + data,
             "evil": b"\x00" + pickle.dumps(Evil(), protocol=4),
             "memo": b"\x00\x80\x04N\x94h\x07.",
             "proto2_meta": b"\x00" + pickle.dumps(md, protocol=2)}
    seen = set()
    for mi, si in md.storage_data.items():
        with open(os.path.join(good, si.relative_path), "rb") as f:
            f.seek(si.offset)
            blob = f.read(si.length)
        key = (mi.fqn.split(".")[-1], len(blob) // 256)
        if key in seen:
            continue
        seen.add(key)
        seeds[f"record_{len(seen)}"] = b"\x01" + blob
    for name, blob in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    {"cases": cases, "corpus": corpus}[sys.argv[1]](sys.argv[2], sys.argv[3])
