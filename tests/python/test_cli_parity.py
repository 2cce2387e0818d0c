# SPDX-License-Identifier: MIT
"""No silent wrong answers (issue 27 item 5): every argument combination
the ckptfs command refuses is refused by ckptfs.load, ckptfs.open(...).load,
load_view and StorageReader (each where it takes the argument), with the
same message.  Each row runs the real command (mount and, where it takes
the options, ls) and each Python entry point, and compares what they
said: the command's one line, without its "ckptfs: " prefix, against the
exception's text."""
import os
import subprocess

import pytest

import ckptfs
from conftest import CKPTFS

S3 = "s3://ck-bucket/run"

# (id, command options, Python keyword arguments, entry points,
#  the message).  Entry points: load, open (ckptfs.open(...).load),
#  view (load_view), reader (StorageReader), ls (ckptfs ls as well as
#  ckptfs mount).  "{ckpt}" is the checkpoint's path.
CASES = [
    ("world-without-rank", ["--world", "8"], dict(world=8),
     "load open ls", "rank is required with world"),
    ("world-without-rank-o", ["-o", "world=2"], dict(world=2),
     "load open", "rank is required with world"),
    ("rank-without-world", ["--rank", "1"], dict(rank=1),
     "load open ls", "world is required with rank"),
    ("rank-0-without-world", ["--rank", "0"], dict(rank=0),
     "load open ls", "world is required with rank"),
    ("rank-equals-world", ["--world", "4", "--rank", "4"],
     dict(world=4, rank=4), "load open ls",
     "rank 4 is out of range: need 0 <= rank < world (4)"),
    ("rank-negative", ["--world", "4", "--rank", "-1"],
     dict(world=4, rank=-1), "load open ls",
     "rank must be a whole number, got '-1'"),
    ("world-negative", ["--world", "-2", "--rank", "0"],
     dict(world=-2, rank=0), "load open ls",
     "world must be a whole number, got '-2'"),
    ("world-zero", ["--world", "0", "--rank", "0"], dict(world=0, rank=0),
     "load open ls", "world must be at least 1, got 0"),
    ("world-too-big", ["--world", "4294967296", "--rank", "0"],
     dict(world=2**32, rank=0), "load open ls",
     "world must be at most 4294967295, got '4294967296'"),
    ("rank-and-ranks", ["--world", "4", "--rank", "1", "--ranks", "0,1"],
     dict(world=4, rank=1, ranks=[0, 1]), "load open",
     "give either rank or ranks, not both"),
    ("ranks-without-world", ["--ranks", "0,1"], dict(ranks=[0, 1]),
     "load open", "world is required with ranks"),
    ("ranks-twice", ["--world", "4", "--ranks", "0,2,2"],
     dict(world=4, ranks=[0, 2, 2]), "load open",
     "ranks '0,2,2': rank 2 is listed twice"),
    ("ranks-out-of-range", ["--world", "2", "--ranks", "0,2"],
     dict(world=2, ranks=[0, 2]), "load open",
     "ranks '0,2': rank 2 is out of range: need 0 <= rank < world (2)"),
    ("ranks-negative", ["--world", "2", "--ranks", "-1"],
     dict(world=2, ranks=[-1]), "load open",
     "ranks must be a list such as 0-7 or 0,2,4-6, got '-1'"),
    ("ranks-empty", ["--world", "2", "--ranks", ""],
     dict(world=2, ranks=[]), "load open", "ranks needs a value"),
    ("ranks-too-big", ["--world", "2", "--ranks", "4294967295"],
     dict(world=2, ranks=[2**32 - 1]), "load open",
     "ranks '4294967295': rank 4294967295 is more than the largest rank, "
     "4294967294"),
    ("dtype", ["--dtype", "int8"], dict(dtype="int8"), "load open",
     "dtype must be float32 or bfloat16, got 'int8'"),
    ("prefix-empty", ["-o", "prefix="], dict(prefix=""), "load open view",
     "prefix must not be empty"),
    ("prefix-empty-long", ["--prefix", ""], dict(prefix=""),
     "load open view ls", "prefix must not be empty"),
    ("layout-empty", ["--layout", ""], dict(layout=""), "load open",
     "layout needs a value"),
    ("index-cache-empty", ["--index-cache", ""], dict(index_cache=""),
     "load reader ls", "index_cache needs a value"),
    ("cache-mb-zero", ["-o", "cache_mb=0"], dict(cache_mb=0),
     "load reader",
     "cache_mb must be between 1 and 1048576 (MiB), got 0"),
    ("cache-mb-huge", ["-o", "cache_mb=1048577"], dict(cache_mb=1048577),
     "load reader",
     "cache_mb must be between 1 and 1048576 (MiB), got 1048577"),
    ("cache-mb-negative", ["-o", "cache_mb=-1"], dict(cache_mb=-1),
     "load reader", "cache_mb must be a whole number, got '-1'"),
    ("s3-on-a-directory", ["--s3-region", "eu-west-1"],
     dict(s3_region="eu-west-1"), "load reader ls",
     "s3_region is only for s3:// checkpoints, not '{ckpt}'"),
    ("s3-o-on-a-directory", ["-o", "s3_endpoint=http://127.0.0.1:9"],
     dict(s3_endpoint="http://127.0.0.1:9"), "load reader",
     "s3_endpoint is only for s3:// checkpoints, not '{ckpt}'"),
    ("s3-parallel-zero", ["--s3-parallel", "0"], dict(s3_parallel=0),
     "load reader ls", "s3_parallel must be at least 1, got '0'"),
    ("s3-parallel-huge", ["--s3-parallel", "4294967295"],
     dict(s3_parallel=2**32 - 1), "load reader ls",
     "s3_parallel must be at most 4294967294, got '4294967295'"),
    ("s3-part-size-zero", ["--s3-part-size", "0"], dict(s3_part_size=0),
     "load reader ls",
     "s3_part_size must be a size such as 262144, 256K or 8M, got '0'"),
    ("s3-endpoint-empty", ["-o", "s3_endpoint="], dict(s3_endpoint=""),
     "load reader", "s3_endpoint needs a value"),
]


def cli_message(args, sub):
    """The command's one line for args (exit 2), without its prefix."""
    p = subprocess.run([CKPTFS, *args], capture_output=True, text=True,
                       timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (args, p.returncode,
                                                   p.stderr)
    prefix = f"ckptfs {sub}: " if sub else "ckptfs: "
    assert lines[0].startswith(prefix), lines
    return lines[0][len(prefix):]


@pytest.fixture(scope="module")
def reader_cls():
    """ckptfs.torch.StorageReader, with the test helper's hook (torch 1.13
    on Python 3.11) installed first; None without torch."""
    try:
        import torch_dcp_compat
        torch_dcp_compat.install()
        import ckptfs.torch
    except ImportError:
        return None
    return ckptfs.torch.StorageReader


def python_error(entry, ckpt, kw, reader_cls, tmp_path):
    """What entry point entry raised for kw (an Exception), or None."""
    try:
        if entry == "load":
            ckptfs.load(ckpt, backend="numpy", **kw)
        elif entry == "open":
            with ckptfs.open(ckpt) as ck:
                ck.load(backend="numpy", **kw)
        elif entry == "view":
            ckptfs.load_view(str(tmp_path), **kw)
        elif entry == "reader":
            if reader_cls is None:
                pytest.skip("no torch")
            with reader_cls(ckpt, **kw) as r:
                r.read_metadata()
    except (ValueError, TypeError) as e:
        return e
    return None


@pytest.mark.parametrize("name,args,kw,entries,msg", CASES,
                         ids=[c[0] for c in CASES])
def test_refused_alike(native_ckpt, tmp_path, reader_cls, name, args, kw,
                       entries, msg):
    want = msg.format(ckpt=native_ckpt)
    mnt = str(tmp_path / "absent")     # never mounted: refused before
    assert cli_message(["mount", native_ckpt, mnt, *args], None) == want
    if "ls" in entries.split():
        assert cli_message(["ls", native_ckpt, *args], "ls") == want
    for entry in entries.split():
        if entry == "ls":
            continue
        e = python_error(entry, native_ckpt, kw, reader_cls, tmp_path)
        assert e is not None, f"{entry}({kw}) was accepted"
        assert isinstance(e, ckptfs.CheckpointError), (entry, repr(e))
        assert str(e) == want, (entry, str(e))


def test_fstab_form_alike(native_ckpt, tmp_path):
    """The mount.fuse3 form's -o world=2 alone is refused as load(world=2)
    is."""
    msg = cli_message([native_ckpt, str(tmp_path / "absent"), "-o",
                       "world=2,ro"], None)
    with pytest.raises(ckptfs.CheckpointError) as e:
        ckptfs.load(native_ckpt, 2)
    assert str(e.value) == msg == "rank is required with world"


def test_whole_view_and_world_1_still_work(native_ckpt):
    """What the command accepts, Python accepts: no world (the whole
    checkpoint), world 1 alone, world and rank, world and ranks."""
    whole = ckptfs.load(native_ckpt, backend="numpy")
    assert ckptfs.load(native_ckpt, 1, backend="numpy").keys() == \
        whole.keys()
    assert ckptfs.load(native_ckpt, 2, 1, backend="numpy").keys() == \
        whole.keys()
    assert len(ckptfs.load(native_ckpt, 2, ranks=[0, 1],
                           backend="numpy")) == 2
    with ckptfs.open(native_ckpt) as ck:
        assert ck.load(world=3, rank=2, backend="numpy").keys() == \
            whole.keys()
