# SPDX-License-Identifier: MIT
"""torch's own ``Metadata`` from a DCP checkpoint's pickled
``.metadata`` (what ``FileSystemReader.read_metadata`` returns), read
through libckptfs's store (a local directory or ``s3://``) and unpickled
by an Unpickler that admits only what such a file holds: the dataclasses
and enums of torch's distributed-checkpoint metadata, ``torch.Size``,
torch's dtypes and layouts, ``OrderedDict``, ``PosixPath``.  Any other
global a hostile file names (``os.system``, ``builtins.eval``, ...) is
refused before anything is called: a :class:`CheckpointError` naming
it."""
from __future__ import annotations

import codecs
import collections
import ctypes as C
import enum
import errno
import importlib
import io
import os
import pathlib
import pickle
import sys
from typing import Any, Dict, Optional, Set, Tuple

import torch

from . import _args, _lib
from .errors import CheckpointError, from_lib

__all__ = ["read_object", "is_pickle", "load_metadata"]

# The classes of torch.distributed.checkpoint (and torch 1.13's
# torch.distributed._shard) that a .metadata pickle holds, as libckptfs's
# own unpickler admits them (core/torch/torch_globals.c): the metadata
# dataclasses, their enums, and the SavePlans Megatron-Core keeps in it.
_DCP_NAMES = frozenset((
    "Metadata", "TensorStorageMetadata", "ChunkStorageMetadata",
    "BytesStorageMetadata", "TensorProperties", "MetadataIndex",
    "_StorageInfo", "StorageMeta", "MEM_FORMAT_ENCODING",
    "_MEM_FORMAT_ENCODING", "SavePlan", "WriteItem", "WriteItemType",
    "TensorWriteData", "BytesIOWriteData"))
_DCP_PREFIX = "torch.distributed."
# Where they live (torch 2.x; 1.13): imported when not yet; any other
# torch.distributed module only when something imported it already (the
# pickle never makes torch import a module it names).
_DCP_MODULES = frozenset(
    f"torch.distributed.{m}" for m in (
        "checkpoint.metadata", "checkpoint.planner", "checkpoint.filesystem",
        "_shard.checkpoint.metadata", "_shard.checkpoint.planner",
        "_shard.checkpoint.filesystem", "_shard.sharded_tensor.metadata"))
_PATHS = {("pathlib", "PosixPath"), ("pathlib._local", "PosixPath"),
          ("pathlib", "PurePosixPath"),
          ("pathlib._local", "PurePosixPath")}
_BUILTINS = ("builtins", "__builtin__")     # protocol <= 2: __builtin__
_SETS = {"set": set, "frozenset": frozenset}


def read_object(root: str, name: str, follow_symlinks: bool = False,
                s3: Optional[Any] = None) -> Optional[bytes]:
    """The bytes of object name directly under checkpoint root (a local
    directory or ``s3://bucket[/prefix]``) through libckptfs's store
    (ckpt_object_read), or None when there is no such object (the root
    itself missing is an error).  s3: a struct ckpt_s3_opts or None."""
    lib = _lib.lib
    oo = _lib.OpenOpts()
    oo.follow_symlinks = bool(follow_symlinks)
    if s3 is not None:
        oo.s3 = C.pointer(s3)
    broot = os.fsencode(root)
    buf, n = C.c_void_p(), C.c_size_t()
    err = C.create_string_buffer(4096)

    def call(cancel: Any) -> int:
        return int(lib.ckpt_object_read(broot, name.encode(), C.byref(oo),
                                        C.byref(buf), C.byref(n), err,
                                        len(err)))
    rc, e = _lib.run_cancellable(call)
    if rc == -errno.ECANCELED:
        raise KeyboardInterrupt
    if rc == -errno.ENOENT and not _root_missing(root):
        return None
    if rc:
        raise from_lib(e if e is not None else _lib.last_error(),
                       opened=root)
    try:
        return C.string_at(buf.value or 0, n.value) if n.value else b""
    finally:
        lib.ckpt_object_free(buf)


def _root_missing(root: str) -> bool:
    """Whether a local root is missing (its -ENOENT is the directory's,
    not the object's); an s3:// root answered, or there would be another
    error."""
    return not _args.is_remote(os.fsencode(root)) and \
        not os.path.isdir(root)


def is_pickle(raw: bytes) -> bool:
    """Whether raw is a pickle of protocol 2 or later (torch's .metadata),
    not a native msgpack one (which never starts with PROTO)."""
    return len(raw) >= 2 and raw[0] == 0x80 and 2 <= raw[1] <= 5


class _Refused(Exception):
    pass


class _Unpickler(pickle.Unpickler):
    """pickle's Unpickler with find_class limited to the metadata's own
    classes and values (see the module doc)."""

    def __init__(self, f: Any, where: str) -> None:
        super().__init__(f)
        self.where = where
        self.enums: Set[type] = set()
        # What a BUILD could change for the whole process (pickle's BUILD
        # sets attributes of any object, an admitted class too): the
        # attributes of every admitted Python class and enum member, by
        # id, as they were when first admitted.
        self.before: Dict[int, Tuple[Any, Dict[str, Any]]] = {}

    def keep(self, obj: Any) -> Any:
        """obj, its attributes noted first (see before)."""
        objs = [obj]
        if isinstance(obj, type) and issubclass(obj, enum.Enum):
            objs += list(obj.__members__.values())
        for o in objs:
            if id(o) not in self.before:
                self.before[id(o)] = (o, dict(vars(o)))
        return obj

    def changed(self) -> Optional[str]:
        """The name of an admitted class or member the pickle changed
        (restored as it was), or None."""
        bad = None
        for o, was in self.before.values():
            now = vars(o)
            if now.keys() == was.keys() and \
                    all(now[k] is v for k, v in was.items()):
                continue
            bad = bad or getattr(o, "__qualname__", None) or repr(o)
            for k in [k for k in now if k not in was or now[k] is not
                      was[k]]:
                try:
                    if k in was:
                        setattr(o, k, was[k])
                    else:
                        delattr(o, k)
                except (AttributeError, TypeError):
                    pass
        return bad

    def refuse(self, what: str) -> _Refused:
        return _Refused(
            f"{self.where}: the pickle asks for {what}, which a torch "
            f"DCP .metadata never holds: refused, nothing of it run "
            f"(ckptfs admits only torch.distributed.checkpoint's metadata "
            f"classes, torch.Size, dtypes and layouts)")

    def find_class(self, module: str, name: str) -> Any:
        what = f"{module}.{name}"
        if module.startswith(_DCP_PREFIX) and name in _DCP_NAMES:
            mod = sys.modules.get(module)
            try:
                if mod is None and module in _DCP_MODULES:
                    mod = importlib.import_module(module)
                obj = getattr(mod, name)
            except (ImportError, AttributeError):
                raise self.refuse(what + " (not in this torch)") from None
            if not isinstance(obj, type) or \
                    not obj.__module__.startswith(_DCP_PREFIX):
                raise self.refuse(what)
            if issubclass(obj, enum.Enum):
                self.enums.add(obj)
            return self.keep(obj)
        if module == "torch":
            if name == "Size":
                return torch.Size
            obj = getattr(torch, name, None) if name.isidentifier() \
                else None
            if isinstance(obj, (torch.dtype, torch.layout,
                                torch.memory_format)):
                return obj
        if module == "torch.serialization" and name == "_get_layout":
            return self.layout
        if module in _BUILTINS:
            if name == "getattr":
                return self.member
            if name in _SETS:
                return _SETS[name]
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "_codecs" and name == "encode":
            return self.latin1      # protocol 2's bytes
        if (module, name) in _PATHS:
            return self.keep(getattr(pathlib, name))
        raise self.refuse(what)

    def member(self, cls: Any, name: Any) -> Any:
        """builtins.getattr as the pickle of an enum member (Python 3.12+
        pickles MEM_FORMAT_ENCODING.X as getattr(cls, 'X')): a member of
        an admitted enum, nothing else."""
        if cls in self.enums and isinstance(name, str) and \
                name in cls.__members__:
            return cls[name]
        raise self.refuse(f"builtins.getattr({getattr(cls, '__name__', '?')}"
                          f", {name!r})")

    def layout(self, name: Any) -> Any:
        """torch.serialization._get_layout: a torch.layout by name."""
        obj = getattr(torch, name[6:], None) \
            if isinstance(name, str) and name.startswith("torch.") else None
        if not isinstance(obj, torch.layout):
            raise self.refuse(f"torch.serialization._get_layout({name!r})")
        return obj

    def latin1(self, s: Any, enc: Any = "latin1") -> bytes:
        if not isinstance(s, str) or enc not in ("latin1", "latin-1"):
            raise self.refuse(f"_codecs.encode(..., {enc!r})")
        return codecs.encode(s, "latin1")

    def persistent_load(self, pid: Any) -> Any:
        raise self.refuse("a persistent id")


def load_metadata(raw: bytes, where: str, metadata_cls: type) -> Any:
    """The Metadata pickled in raw (a .metadata's bytes; where names it
    in messages), through the restricted unpickler.  A global it refuses,
    a pickle that is corrupt or that is not of a metadata_cls raises
    CheckpointError naming where."""
    u = _Unpickler(io.BytesIO(raw), where)
    try:
        try:
            md = u.load()
        finally:
            bad = u.changed()
        if bad is not None:
            raise _Refused(f"{where}: the pickle changes {bad}, which a "
                           f"torch DCP .metadata never does: refused "
                           f"(and undone)")
    except _Refused as e:
        raise CheckpointError(str(e), code=errno.EPERM, path=where) \
            from None
    except RecursionError:
        raise CheckpointError(f"{where}: the pickle nests too deeply",
                              code=errno.EINVAL, path=where) from None
    except Exception as e:  # noqa: B902 - any failure of a corrupt pickle
        raise CheckpointError(f"{where}: cannot be unpickled: "
                              f"{type(e).__name__}: {e}",
                              code=errno.EINVAL, path=where) from e
    if not isinstance(md, metadata_cls):
        raise CheckpointError(f"{where}: holds a {type(md).__name__}, not "
                              f"torch's Metadata", code=errno.EINVAL,
                              path=where)
    return md


def check_transforms(md: Any, where: str) -> None:
    """Refuse storage_data records stored with a transform other than
    zstd (torch's ``_extension_registry`` stream transforms: an
    encryption, say), which ckptfs cannot decode: a CheckpointError
    naming the transform and the key, as the open of the data says."""
    sd: Dict[Any, Any] = getattr(md, "storage_data", None) or {}
    if not isinstance(sd, dict):
        return
    for idx, info in sd.items():
        for d in getattr(info, "transform_descriptors", None) or ():
            name = d.split("/", 1)[0] if isinstance(d, str) else repr(d)
            if name != "stream.zstd":
                key = getattr(idx, "fqn", None)
                raise CheckpointError(
                    f"{where}: key '{key}': transform '{d}' is not "
                    f"supported (ckptfs decodes stream.zstd/1)",
                    code=errno.ENOTSUP, path=where, key=key)
