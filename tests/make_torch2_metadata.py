#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Rewrite a torch 1.13 checkpoint's .metadata the way torch 2.x pickles
it, to check that ckptfs matches classes by name, not by module.  Only
Debian's torch 1.13 runs here, so the 2.x classes are stand-ins with the
2.x module paths and fields (torch-dcp-format.md, section 7):

- classes from torch.distributed.checkpoint.metadata / .filesystem, and
  TensorProperties with _MEM_FORMAT_ENCODING there (2.3+);
- Metadata with storage_meta (a StorageMeta holding a pathlib path, 2.4+)
  and version "1.0.0"; planner_data as {fqn: path tuple};
- _StorageInfo with transform_descriptors=None (2.7+);
- pickle protocol 5 (Python 3.14's default).

    make_torch2_metadata.py SRC_CKPT OUT_CKPT
        OUT_CKPT gets SRC_CKPT's .distcp files (hard links) and the
        rewritten .metadata.
"""
import dataclasses
import enum
import os
import pathlib
import pickle
import shutil
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))

MD = "torch.distributed.checkpoint.metadata"
FS = "torch.distributed.checkpoint.filesystem"


def module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


def stand_ins():
    md, fs = module(MD), module(FS)

    class _MEM_FORMAT_ENCODING(enum.Enum):
        TORCH_CONTIGUOUS_FORMAT = 0

    @dataclasses.dataclass
    class TensorProperties:
        dtype: object = None
        layout: object = None
        requires_grad: bool = False
        memory_format: object = None
        pin_memory: bool = False

        def __getstate__(self):
            return (self.dtype, self.layout, self.requires_grad,
                    _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

    @dataclasses.dataclass
    class ChunkStorageMetadata:
        offsets: object
        sizes: object

    @dataclasses.dataclass
    class TensorStorageMetadata:
        properties: object
        size: object
        chunks: list

    @dataclasses.dataclass
    class BytesStorageMetadata:
        pass

    @dataclasses.dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: object = None
        index: object = None

    @dataclasses.dataclass
    class StorageMeta:
        checkpoint_id: object = None
        save_id: str = ""
        load_id: object = None
        modules: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class Metadata:
        state_dict_metadata: dict
        planner_data: object = None
        storage_data: object = None
        storage_meta: object = None
        version: object = None

    @dataclasses.dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int
        transform_descriptors: object = None

    for c in (_MEM_FORMAT_ENCODING, TensorProperties, ChunkStorageMetadata,
              TensorStorageMetadata, BytesStorageMetadata, MetadataIndex,
              StorageMeta, Metadata):
        c.__module__ = MD
        c.__qualname__ = c.__name__
        setattr(md, c.__name__, c)
    _StorageInfo.__module__ = FS
    _StorageInfo.__qualname__ = "_StorageInfo"
    fs._StorageInfo = _StorageInfo
    return md, fs


def main(src, out):
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch  # noqa: F401  (torch.Size, dtypes)
    from torch.distributed._shard.checkpoint.metadata import BytesStorageMetadata
    with open(os.path.join(src, ".metadata"), "rb") as f:
        old = pickle.load(f)
    md, fs = stand_ins()
    sdm = {}
    for k, v in old.state_dict_metadata.items():
        if isinstance(v, BytesStorageMetadata):
            sdm[k] = md.BytesStorageMetadata()
            continue
        p = v.properties
        sdm[k] = md.TensorStorageMetadata(
            md.TensorProperties(p.dtype, p.layout, p.requires_grad, None,
                                p.pin_memory),
            v.size, [md.ChunkStorageMetadata(c.offsets, c.sizes) for c in v.chunks])
    sd = {}
    for mi, si in old.storage_data.items():
        sd[md.MetadataIndex(mi.fqn, mi.offset, mi.index)] = fs._StorageInfo(
            si.relative_path, si.offset, si.length, None)
    new = md.Metadata(
        sdm, planner_data={k: tuple(k.split(".")) for k in sdm},
        storage_data=sd,
        storage_meta=md.StorageMeta(pathlib.PosixPath(out), "0f" * 16, None, []),
        version="1.0.0")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(src):
        if f.endswith(".distcp"):
            try:
                os.link(os.path.join(src, f), os.path.join(out, f))
            except OSError:
                shutil.copy(os.path.join(src, f), os.path.join(out, f))
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(new, f, protocol=5)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
