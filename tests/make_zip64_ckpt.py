#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A PyTorch distributed checkpoint with one record larger than 4 GiB
(zip64), made cheaply: the .distcp archive is laid out as torch.save lays
it out (records archive/data.pkl, archive/data/0, archive/version; zero
sizes in local headers, data descriptors, 64-byte aligned data, zip64 end
records), but the 4 GiB of tensor data is a sparse hole except for a
random first and last 64 KiB.  data.pkl and .metadata are pickled by
Python from torch's own classes.  Python's zipfile must accept the
archive, as an independent check of its structure.

    make_zip64_ckpt.py OUTDIR      writes OUTDIR/.metadata, __0_0.distcp
                                   and OUTDIR/ends.bin (the two 64 KiB ends)
"""
import collections
import io
import os
import pickle
import random
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))

NUMEL = (1 << 32) + 1000          # uint8 elements: > 4 GiB
END = 65536


def data_pkl(torch, numel):
    storage = object()

    class Rebuild:
        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2,
                    (storage, 0, (numel,), (1,), False, collections.OrderedDict()))

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            if obj is storage:
                return ("storage", torch.ByteStorage, "0", "cpu", numel)
            return None

    buf = io.BytesIO()
    P(buf, protocol=2).dump(Rebuild())
    return buf.getvalue()


def local_header(name, pos, zip64_size=None):
    """Local header with torch's zero sizes, padded so data is 64-aligned."""
    extra = b""
    if zip64_size is not None:
        extra = struct.pack("<HHQQ", 1, 16, zip64_size, 0)
    base = pos + 30 + len(name) + len(extra) + 4
    pad = (-base) % 64
    extra += struct.pack("<HH", 0x4246, pad) + b"Z" * pad
    return struct.pack("<IHHHHHIIIHH", 0x04034b50, 45 if zip64_size else 20,
                       0x0808, 0, 0, 0, 0, 0, 0, len(name), len(extra)) + name + extra


def descriptor(size, z64):
    if z64:
        return struct.pack("<IIQQ", 0x08074b50, 0, size, size)
    return struct.pack("<IIII", 0x08074b50, 0, size, size)


def write_archive(f, pkl, numel, rnd):
    """Write the archive at f's position; returns (ends, length)."""
    start = f.tell()
    entries = []        # (name, lho, size)

    def pos():
        return f.tell() - start

    name = b"archive/data.pkl"
    entries.append((name, pos(), len(pkl)))
    f.write(local_header(name, pos()))
    f.write(pkl)
    f.write(descriptor(len(pkl), False))

    name = b"archive/data/0"
    lho = pos()
    f.write(local_header(name, lho, numel))
    entries.append((name, lho, numel))
    head = rnd.randbytes(END)
    tail = rnd.randbytes(END)
    f.write(head)
    f.seek(numel - 2 * END, 1)      # the sparse hole
    f.write(tail)
    f.write(descriptor(numel, True))

    name = b"archive/version"
    lho = pos()
    f.write(local_header(name, lho))
    entries.append((name, lho, 2))
    f.write(b"3\n")
    f.write(descriptor(2, False))

    cd_off = pos()
    for name, lho, size in entries:
        big_size = size >= 0xffffffff
        big_lho = lho >= 0xffffffff
        ext = b""
        if big_size or big_lho:
            vals = ([size, size] if big_size else []) + ([lho] if big_lho else [])
            ext = struct.pack("<HH", 1, 8 * len(vals)) + b"".join(
                struct.pack("<Q", v) for v in vals)
        f.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0x0808, 0,
                            0, 0, 0,
                            0xffffffff if big_size else size,
                            0xffffffff if big_size else size,
                            len(name), len(ext), 0, 0, 0, 0,
                            0xffffffff if big_lho else lho) + name + ext)
    cd_len = pos() - cd_off
    e64 = pos()
    f.write(struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0,
                        len(entries), len(entries), cd_len, cd_off))
    f.write(struct.pack("<IIQI", 0x07064b50, 0, e64, 1))
    f.write(struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, len(entries),
                        len(entries), cd_len, 0xffffffff, 0))
    return head + tail, pos()


def main(out):
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch
    from torch.distributed._shard.checkpoint import metadata as M
    from torch.distributed._shard.checkpoint.filesystem import _StorageInfo
    from torch.distributed._shard.sharded_tensor.metadata import TensorProperties

    os.makedirs(out, exist_ok=True)
    rnd = random.Random(64)
    path = os.path.join(out, "__0_0.distcp")
    with open(path, "wb") as f:
        ends, length = write_archive(f, data_pkl(torch, NUMEL), NUMEL, rnd)
    # zipfile reads the central directory through a window on the file.
    with open(path, "rb") as f:
        names = [(i.filename, i.file_size) for i in zipfile.ZipFile(f).infolist()]
    assert names == [("archive/data.pkl", len(data_pkl(torch, NUMEL))),
                     ("archive/data/0", NUMEL), ("archive/version", 2)], names
    size = torch.Size([NUMEL])
    md = M.Metadata(
        state_dict_metadata={"big.bytes": M.TensorStorageMetadata(
            properties=TensorProperties(dtype=torch.uint8), size=size,
            chunks=[M.ChunkStorageMetadata(offsets=torch.Size([0]), sizes=size)])},
        storage_data={M.MetadataIndex("big.bytes", torch.Size([0]), 0):
                      _StorageInfo("__0_0.distcp", 0, length)})
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(md, f)
    with open(os.path.join(out, "ends.bin"), "wb") as f:
        f.write(ends)


if __name__ == "__main__":
    main(sys.argv[1])
