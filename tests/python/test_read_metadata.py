# SPDX-License-Identifier: MIT
"""ckptfs.StorageReader.read_metadata as torch's own FileSystemReader's:
with torch 2.x (the sid chroot, tests/python/torch2_metadata.py) torch's
entry points that need the whole Metadata (dcp_to_torch_save,
_load_state_dict_from_keys, load_sharded_optimizer_state_dict,
storage_meta.load_id, .metadata alone) compared with FileSystemReader;
with torch 1.13 (this Python) the Metadata equal to FileSystemReader's
and the checkpoint not opened by it; a hostile .metadata refused before
anything of it runs."""
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, run_py
from test_torch2 import SID, chroot_tmp

HOOK = "import torch_dcp_compat; torch_dcp_compat.install()\n"


def test_read_metadata_is_torch2s():
    host, inside = chroot_tmp()
    try:
        p = subprocess.run([SID, "run", "/usr/bin/python3",
                            "@ROOT@/tests/python/torch2_metadata.py", inside],
                           capture_output=True, text=True, timeout=600)
        print(p.stdout, p.stderr[-6000:])
        assert "8 of 8 read_metadata checks ok" in p.stdout
        assert p.returncode == 0
    finally:
        shutil.rmtree(host, ignore_errors=True)


def test_read_metadata_is_torch113s(torch_ckpts, tmp_path):
    """torch 1.13: equal to FileSystemReader's, the data not opened; with
    every .distcp file removed too; a load through the same reader
    equals FileSystemReader's."""
    bare = tmp_path / "bare"
    shutil.copytree(os.path.join(torch_ckpts, "per_item"), bare)
    for f in os.listdir(bare):
        if f.endswith(".distcp"):
            os.unlink(bare / f)
    run_py(HOOK + """
import sys, torch, ckptfs
from ckptfs.torch import _dcp
for ck, load in ((sys.argv[1], True), (sys.argv[2], False)):
    want = _dcp.FileSystemReader(ck).read_metadata()
    r = ckptfs.StorageReader(ck)
    got = r.read_metadata()
    assert type(got) is type(want) and got == want, ck
    assert got.storage_data == want.storage_data and got.storage_data
    assert r._ck is None, "read_metadata opened the checkpoint"
    if not load:
        continue
    def dests():
        return {k: torch.zeros(v.size, dtype=v.properties.dtype)
                for k, v in want.state_dict_metadata.items()
                if hasattr(v, "size")}
    a, b = dests(), dests()
    _dcp.load_state_dict(a, storage_reader=_dcp.FileSystemReader(ck),
                         no_dist=True)
    _dcp.load_state_dict(b, storage_reader=r, no_dist=True)
    assert a and all(torch.equal(a[k], b[k]) for k in a)
print("ok")
""", os.path.join(torch_ckpts, "per_item"), bare)


class Boom:
    """Unpickled, runs a shell command (what a hostile .metadata does)."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def hostile(d, payload):
    os.makedirs(d)
    with open(os.path.join(d, ".metadata"), "wb") as f:
        f.write(payload)
    return str(d)


def test_hostile_metadata_runs_nothing(tmp_path):
    """A .metadata whose pickle calls os.system: pickle itself runs it
    (the reference: the payload is live); read_metadata refuses it
    naming the global, and the command never runs.  The same for
    builtins.getattr reaching past the admitted classes, and for a BUILD
    that would change an admitted class for the whole process (undone).
    """
    live, mark = tmp_path / "live", tmp_path / "ran"
    payload = pickle.dumps(Boom(f"touch {live}"), protocol=4)
    pickle.loads(payload)
    assert live.exists()
    d = hostile(tmp_path / "ck", pickle.dumps(Boom(f"touch {mark}"),
                                              protocol=4))
    # getattr(Metadata, "__init__"): the first step of a gadget chain
    gadget = (b"\x80\x04" b"cbuiltins\ngetattr\n"
              b"ctorch.distributed._shard.checkpoint.metadata\nMetadata\n"
              b"X\x08\x00\x00\x00__init__" b"\x86R.")
    g = hostile(tmp_path / "gadget", gadget)
    # BUILD on the class itself: Metadata.__eq__ = OrderedDict, for the
    # whole process
    build = (b"\x80\x02"
             b"ctorch.distributed._shard.checkpoint.metadata\nMetadata\n"
             b"N}X\x06\x00\x00\x00__eq__ccollections\nOrderedDict\ns"
             b"\x86b.")
    b = hostile(tmp_path / "build", build)
    p = run_py(HOOK + """
import sys, ckptfs
from ckptfs.torch import _md
eq = _md.Metadata.__eq__
for d, want in ((sys.argv[1], "posix.system"),
                (sys.argv[2], "builtins.getattr(Metadata, '__init__')"),
                (sys.argv[3], "changes Metadata")):
    try:
        ckptfs.StorageReader(d).read_metadata()
    except ckptfs.CheckpointError as e:
        assert want in str(e) and "refused" in str(e), e
        assert e.path == d + "/.metadata", e.path
        print(e)
    else:
        sys.exit("not refused: " + d)
assert _md.Metadata.__eq__ is eq, "Metadata changed"
""", d, g, b)
    assert not mark.exists()
    assert "posix.system" in p.stdout
