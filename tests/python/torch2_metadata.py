#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ckptfs.StorageReader.read_metadata as torch's own, inside the sid
chroot with torch 2.x (run by test_read_metadata.py): torch's entry
points that need the whole Metadata, each run with ckptfs.StorageReader
and with torch's FileSystemReader (the reference), results compared:

- read_metadata() equal to FileSystemReader's field by field
  (state_dict_metadata, planner_data, storage_data with every
  MetadataIndex.index, storage_meta but load_id, version), and nothing
  opened by it;
- storage_meta.load_id is the reader's own load_id, a new one after
  reset(), as FileSystemReader sets it;
- read_metadata with every .distcp file removed;
- dcp_to_torch_save (format_utils' FileSystemReader replaced by
  ckptfs.StorageReader): the torch.save file's nested state;
- _load_state_dict_from_keys (a partial load by a nested key);
- load_sharded_optimizer_state_dict (one gloo rank);
- a record stored with a transform other than zstd: refused by
  read_metadata, naming it; zstd records read;
- Megatron-Core's Metadata (all_local_plans, mcore_data).

    torch2_metadata.py TMPDIR
"""
import dataclasses
import glob
import os
import pickle
import shutil
import sys
import traceback
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "scripts"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.distributed.checkpoint.format_utils as fu  # noqa: E402
from torch.distributed._shard.sharded_tensor import \
    ShardedTensor  # noqa: E402
from torch.distributed.checkpoint.optimizer import \
    load_sharded_optimizer_state_dict  # noqa: E402
from torch.distributed.checkpoint.state_dict import \
    get_state_dict  # noqa: E402
from torch.distributed.checkpoint.state_dict_loader import \
    _load_state_dict_from_keys  # noqa: E402

import ckptfs  # noqa: E402
import torch2_reader  # noqa: E402

warnings.filterwarnings("ignore")


def model_and_optim(seed):
    return torch2_reader.model_and_optim(seed, width=12)


def same(a, b, where="sd"):
    """a and b equal, nested: the same dict keys at every level, equal
    tensors (a ShardedTensor by its local shards), equal other values."""
    if isinstance(a, ShardedTensor) or isinstance(b, ShardedTensor):
        sa, sb = a.local_shards(), b.local_shards()
        assert len(sa) == len(sb), where
        for x, y in zip(sa, sb):
            assert x.metadata == y.metadata, where
            same(x.tensor, y.tensor, where)
        return
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), (where, list(a), list(b))
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and \
            torch.equal(a, b), where
    else:
        assert a == b, (where, a, b)


def same_metadata(want, got, load_id):
    """got (ckptfs) equals want (FileSystemReader's) field by field; its
    storage_meta.load_id is load_id."""
    assert type(got) is type(want)
    for f in dataclasses.fields(want):
        if f.name == "storage_meta":
            continue
        assert getattr(got, f.name) == getattr(want, f.name), f.name
    assert want.planner_data and want.storage_data and want.version
    # MetadataIndex.index is left out of ==: compared here
    for a, b in zip(want.storage_data, got.storage_data):
        assert (a.fqn, a.offset, a.index) == (b.fqn, b.offset, b.index)
    for k, v in want.state_dict_metadata.items():
        w = got.state_dict_metadata[k]
        assert type(w) is type(v), k
        if hasattr(v, "properties"):
            assert dataclasses.asdict(v.properties) == \
                dataclasses.asdict(w.properties), k
    sw, sg = want.storage_meta, got.storage_meta
    assert type(sg) is type(sw)
    for f in dataclasses.fields(sw):
        if f.name != "load_id":
            assert getattr(sg, f.name) == getattr(sw, f.name), f.name
    assert sg.load_id == load_id and sg.load_id != sw.load_id


def main(tmp):
    m, o = model_and_optim(1)
    msd, osd = get_state_dict(m, o)
    ck = os.path.join(tmp, "ckpt")
    state = {"model": msd, "optim": osd, "extra": {"epoch": 3,
                                                   "ema": {"w": torch.ones(5)}}}
    dcp.save(state, checkpoint_id=ck)
    checks = [check_equal, check_load_id, check_bare, check_to_torch_save,
              check_from_keys, check_sharded_optim, check_transforms,
              check_megatron]
    failed = []
    for c in checks:   # each on its own: a failure does not hide the rest
        try:
            c(tmp, ck)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: B902 - DCP's CheckpointException
            traceback.print_exc()
            failed.append(f"{c.__name__}: {type(e).__name__}: {e}")
    for f in failed:
        print("FAIL", f)
    print(f"torch {torch.__version__}: {len(checks) - len(failed)} of "
          f"{len(checks)} read_metadata checks ok")
    return 1 if failed else 0


def check_equal(tmp, ck):
    """read_metadata: torch's Metadata field by field, nothing opened."""
    want = dcp.FileSystemReader(ck).read_metadata()
    r = ckptfs.StorageReader(ck)
    got = r.read_metadata()
    same_metadata(want, got, r.load_id)
    assert r._ck is None, "read_metadata opened the checkpoint"
    assert isinstance(r.load_id, str) and len(r.load_id) == 36


def check_load_id(tmp, ck):
    """load_id: a new one at each reset(), as FileSystemReader's."""
    r = ckptfs.StorageReader(ck)
    first = r.load_id
    assert r.read_metadata().storage_meta.load_id == first
    r.reset()
    assert r.load_id != first
    assert r.read_metadata().storage_meta.load_id == r.load_id
    r.reset(ck)
    assert r.read_metadata().storage_meta.load_id == r.load_id != first
    r.close()


def check_bare(tmp, ck):
    """.metadata alone: every .distcp removed."""
    bare = os.path.join(tmp, "bare")
    shutil.copytree(ck, bare)
    for f in glob.glob(os.path.join(bare, "*.distcp")):
        os.unlink(f)
    want = dcp.FileSystemReader(bare).read_metadata()
    r = ckptfs.StorageReader(bare)
    same_metadata(want, r.read_metadata(), r.load_id)


def check_to_torch_save(tmp, ck):
    """dcp_to_torch_save: the nested state torch's reader gives."""
    ref_pt, our_pt = os.path.join(tmp, "ref.pt"), os.path.join(tmp, "our.pt")
    fu.dcp_to_torch_save(ck, ref_pt)
    saved_reader = fu.FileSystemReader
    fu.FileSystemReader = ckptfs.StorageReader
    try:
        fu.dcp_to_torch_save(ck, our_pt)
    finally:
        fu.FileSystemReader = saved_reader
    ref = torch.load(ref_pt, weights_only=False)
    our = torch.load(our_pt, weights_only=False)
    assert isinstance(ref["model"], dict) and \
        torch.equal(ref["extra"]["ema"]["w"], torch.ones(5))
    same(ref, our)


def check_from_keys(tmp, ck):
    """A partial load by a nested key (_load_state_dict_from_keys)."""
    for keys in ({"model"}, {"extra"}, "optim"):
        a = _load_state_dict_from_keys(
            keys, storage_reader=dcp.FileSystemReader(ck))
        b = _load_state_dict_from_keys(
            keys, storage_reader=ckptfs.StorageReader(ck))
        assert set(a) == ({keys} if isinstance(keys, str) else keys)
        same(a, b, str(keys))


def check_sharded_optim(tmp, ck):
    """load_sharded_optimizer_state_dict, one gloo rank."""
    dist.init_process_group("gloo", init_method="file://" +
                            os.path.join(tmp, "pg"), rank=0, world_size=1)
    try:
        m2, _ = model_and_optim(2)
        msd2 = m2.state_dict()
        a = load_sharded_optimizer_state_dict(
            msd2, "optim", dcp.FileSystemReader(ck))
        b = load_sharded_optimizer_state_dict(
            msd2, "optim", ckptfs.StorageReader(ck))
        assert "state" in a["optim"] and a["optim"]["state"]
        same(a, b)
    finally:
        dist.destroy_process_group()


def check_transforms(tmp, ck):
    """zstd records: read; another transform: refused by read_metadata,
    naming it (a FileSystemWriter extension ckptfs cannot decode)."""
    from torch.distributed.checkpoint._extension import ZStandard
    z = os.path.join(tmp, "zstd")
    src = {"w": torch.arange(600.).reshape(20, 30), "b": torch.ones(7)}
    dcp.save(src, storage_writer=dcp.FileSystemWriter(
        z, _extensions=[ZStandard()]))
    rz = ckptfs.StorageReader(z)
    same_metadata(dcp.FileSystemReader(z).read_metadata(),
                  rz.read_metadata(), rz.load_id)
    dst = {"w": torch.zeros(20, 30), "b": torch.zeros(7)}
    dcp.load(dst, storage_reader=ckptfs.StorageReader(z))
    same(src, dst)
    md = dcp.FileSystemReader(z).read_metadata()
    md.storage_meta = None
    for info in md.storage_data.values():
        info.transform_descriptors = ["stream.rot13/1"]
    with open(os.path.join(z, ".metadata"), "wb") as f:
        pickle.dump(md, f)
    try:
        ckptfs.StorageReader(z).read_metadata()
    except ckptfs.CheckpointError as e:
        assert "transform 'stream.rot13/1' is not supported" in str(e), e
    else:
        raise AssertionError("a rot13 transform was not refused")


def check_megatron(tmp, ck):
    """Megatron-Core's Metadata (all_local_plans: SavePlans of
    WriteItems; mcore_data) through the restricted unpickler: equal to
    FileSystemReader's, its extra attributes too."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    from torch2_check import megatron_copy
    mc = os.path.join(tmp, "megatron")
    megatron_copy(torch, ck, mc)
    want = dcp.FileSystemReader(mc).read_metadata()
    r = ckptfs.StorageReader(mc)
    got = r.read_metadata()
    same_metadata(want, got, r.load_id)
    assert want.all_local_plans and \
        got.all_local_plans == want.all_local_plans
    assert got.mcore_data == want.mcore_data


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
