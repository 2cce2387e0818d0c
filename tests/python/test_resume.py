# SPDX-License-Identifier: MIT
"""The work a resume does beyond its bytes (issue 22): opening a torch
checkpoint reads each record's zip head and tail in one read; the tensors
ckptfs.load allocates live on huge pages, each its own storage; and
StorageReader stages what it cannot read in place within a byte budget,
equal to torch's FileSystemReader."""
import ctypes as C
import os

import pytest

from conftest import run_py


def read_syscalls():
    """This process's read system calls so far (/proc/self/io syscr)."""
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("syscr:"):
                return int(line.split()[1])
    raise AssertionError("no syscr in /proc/self/io")


@pytest.mark.parametrize("layout", ["per_item", "per_rank"])
def test_opening_reads_each_record_once(torch_ckpts, layout):
    # Each record is a zip archive whose head (data.pkl) and tail (the
    # central directory) are read to locate its bytes; a record's tail and
    # the next record's head are adjacent, so they are read together.
    from ckptfs import _lib
    ck = os.path.join(torch_ckpts, layout).encode()
    lib = _lib.lib
    err = C.create_string_buffer(4096)
    m = C.c_void_p()
    before = read_syscalls()
    assert lib.ckpt_meta_open_opts(ck, C.byref(_lib.OpenOpts()),
                                   C.byref(m), err, len(err)) == 0, err.value
    reads = read_syscalls() - before
    try:
        mi = _lib.MetaInfo()
        lib.ckpt_meta_info(m, C.byref(mi))
        records = mi.nchunks
    finally:
        lib.ckpt_meta_free(m)
    assert records >= 40
    # .metadata and a few stat-like reads besides; three per record before
    assert reads <= records + 16, (reads, records)


# -- StorageReader's staging --------------------------------------------

STAGE_CODE = r"""
import io, os, sys
import torch_dcp_compat
torch_dcp_compat.install()
import torch
import torch.distributed._shard.checkpoint as dcp
from torch.distributed._shard.checkpoint.default_planner import \
    DefaultLoadPlanner
import ckptfs

ck, mode, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
SHAPES = {"a": (1024, 2048), "b": (512, 4096), "c": (2048, 1024),
          "d": (256, 333)}
if mode == "save":
    g = torch.Generator().manual_seed(22)
    sd = {k: torch.randn(s, generator=g) for k, s in SHAPES.items()}
    sd["e"] = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    sd["extra"] = {"step": 7, "note": "bytes item"}
    dcp.save_state_dict(sd, dcp.FileSystemWriter(ck), no_dist=True)
    raise SystemExit(0)


def targets():
    # Every destination not contiguous, or not of the saved dtype: each
    # key a transposed view of its own zeroed (resident) memory, "d" in
    # float64, "e" (int32) a column slice.
    sd = {k: torch.zeros(s[::-1]).t() for k, s in SHAPES.items()}
    sd["d"] = torch.zeros(333, 256, dtype=torch.float64).t()
    sd["e"] = torch.zeros(3, 8, dtype=torch.int32)[:, ::2]
    sd["extra"] = io.BytesIO()
    return sd


def status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10


got = targets()
assert not any(t.is_contiguous() for k, t in got.items() if k != "extra")
if mode == "fs":
    dcp.load_state_dict(got, dcp.FileSystemReader(ck), no_dist=True,
                        planner=DefaultLoadPlanner())
else:
    reader = ckptfs.StorageReader(ck, threads=2, staging_mb=budget)
    base = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5\n")         # VmHWM := VmRSS
    dcp.load_state_dict(got, reader, no_dist=True,
                        planner=DefaultLoadPlanner())
    print("peak", status("VmHWM") - base)
    reader.close()
out = {k: v.contiguous().numpy().tobytes() for k, v in got.items()
       if k != "extra"}
out["extra"] = got["extra"]
import pickle
with open(sys.argv[4], "wb") as fh:
    pickle.dump(out, fh)
"""


@pytest.fixture(scope="module")
def stage_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("stage") / "ckpt"
    run_py(STAGE_CODE, d, "save", 0)
    return str(d)


def test_staging_stays_within_its_budget_and_equals_filesystem_reader(
        stage_ckpt, tmp_path):
    # 24 MiB of strided or converted destinations, read with a 4 MiB
    # staging budget (each tensor of 8 MiB is read in parts): the peak of
    # resident memory during the load (the destinations were resident
    # before) stays under the budget and a fixed 8 MiB (the open
    # checkpoint, the batch's Python objects: 1.5 MiB measured), not the
    # 24 MiB the whole plan would stage (25 MiB measured before).
    pytest.importorskip("torch")
    import pickle
    want, got = tmp_path / "fs.pkl", tmp_path / "ck.pkl"
    run_py(STAGE_CODE, stage_ckpt, "fs", 0, want)
    p = run_py(STAGE_CODE, stage_ckpt, "ckptfs", 4, got)
    peak = int(p.stdout.split()[-1])
    a = pickle.load(open(want, "rb"))
    b = pickle.load(open(got, "rb"))
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k], k
    assert b["extra"] == {"step": 7, "note": "bytes item"}
    assert peak < (4 << 20) + (8 << 20), peak


HUGE_BUDGET = r"""
import os, sys
import torch_dcp_compat
torch_dcp_compat.install()
import torch
import torch.distributed._shard.checkpoint as dcp
from torch.distributed._shard.checkpoint.default_planner import \
    DefaultLoadPlanner
import ckptfs


def vm(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10


# A budget of 1 TiB for a plan of a few MiB of strided targets.
sd = {"a": torch.zeros(2048, 1024).t(), "d": torch.zeros(333, 256).t()}
reader = ckptfs.StorageReader(sys.argv[1], staging_mb=1 << 20)
before = vm("VmPeak")
dcp.load_state_dict(sd, reader, no_dist=True, planner=DefaultLoadPlanner())
reader.close()
g = torch.Generator().manual_seed(22)
want = {k: torch.randn(s, generator=g) for k, s in
        (("a", (1024, 2048)), ("b", (512, 4096)), ("c", (2048, 1024)),
         ("d", (256, 333)))}
assert torch.equal(sd["a"], want["a"]) and torch.equal(sd["d"], want["d"])
print(vm("VmPeak") - before)
"""


def test_a_budget_beyond_memory_stages_no_more_than_the_plan(stage_ckpt):
    # staging_mb is a bound, not an allocation: a budget larger than the
    # machine's memory loads a small plan (it asked torch.empty for the
    # whole budget: ENOMEM, or 1 TiB of address space), and the address
    # space grows by about the plan's 10 MiB, not by the budget.
    pytest.importorskip("torch")
    p = run_py(HUGE_BUDGET, stage_ckpt)
    grown = int(p.stdout.split()[-1])
    assert grown < (256 << 20), grown


def test_parts_of_a_box_cover_it_once():
    pytest.importorskip("torch")
    import itertools
    import torch_dcp_compat
    torch_dcp_compat.install()
    from ckptfs.torch import _parts
    for lengths, isz, budget in (([1000, 300], 4, 1 << 20),
                                 ([7, 5, 3], 8, 40), ([9], 2, 4),
                                 ([2, 3, 5, 7], 1, 10), ([], 4, 1),
                                 ([0, 5], 4, 1), ([4, 4], 4, 64)):
        seen = {}
        for off, size in _parts(lengths, isz, budget):
            n = isz
            for x in size:
                n *= x
            assert n <= max(budget, isz), (lengths, off, size)
            for idx in itertools.product(*(range(o, o + s)
                                           for o, s in zip(off, size))):
                seen[idx] = seen.get(idx, 0) + 1
        every = list(itertools.product(*(range(n) for n in lengths)))
        assert sorted(seen) == sorted(every), lengths
        assert set(seen.values()) <= {1}, lengths


# -- the tensors ckptfs.load allocates ---------------------------------

def mapping_of(addr):
    """(start, end, VmFlags) of this process's mapping holding addr."""
    start = end = None
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                a, b = (int(x, 16) for x in head.split("-"))
                start, end = (a, b) if a <= addr < b else (None, None)
            elif head == "VmFlags:" and start is not None:
                return start, end, line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


def test_load_puts_tensors_on_huge_pages_each_with_its_own_storage(
        stage_ckpt):
    torch = pytest.importorskip("torch")
    import gc
    import io
    import ckptfs
    sd = ckptfs.load(stage_ckpt)
    plain = ckptfs.load(stage_ckpt, huge_pages=False)
    arr = ckptfs.load(stage_ckpt, backend="numpy")
    maps = set()
    for k in ("a", "b", "c", "d", "e"):
        t, p = sd[k], plain[k]
        assert torch.equal(t, p) and t.dtype == p.dtype, k
        assert arr[k].tobytes() == p.numpy().tobytes(), k
        assert t.storage_offset() == 0
        assert t.storage().nbytes() == t.numel() * t.element_size(), k
        start, end, flags = mapping_of(t.data_ptr())
        assert "hg" in flags, (k, flags)        # MADV_HUGEPAGE
        assert "hg" in mapping_of(arr[k].ctypes.data)[2], k
        assert "hg" not in mapping_of(p.data_ptr())[2], k
        maps.add((start, end))
        buf = io.BytesIO()
        torch.save(t, buf)      # its own bytes, not its mapping's
        assert len(buf.getvalue()) < t.numel() * t.element_size() + 4096
    kept = sd["d"].clone()
    del sd, arr, t
    gc.collect()
    with open("/proc/self/maps") as fh:
        left = {tuple(int(x, 16) for x in line.split()[0].split("-"))
                for line in fh}
    assert not maps & left, "the mappings outlived their tensors"
    assert torch.equal(kept, plain["d"])


def test_default_threads_are_a_share_of_the_cpus_under_any_launcher(
        native_ckpt):
    # torchrun's LOCAL_WORLD_SIZE, else Open MPI's, MPICH's, MVAPICH's or
    # Slurm's count of the job's processes on this node.
    code = """
import os, ckptfs
print(len(os.sched_getaffinity(0)), ckptfs.open(os.environ["CK"]).threads)
"""
    clear = {v: "" for v in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                             "SLURM_NTASKS_PER_NODE")}
    for var, n in (("OMPI_COMM_WORLD_LOCAL_SIZE", 8), ("MPI_LOCALNRANKS", 2),
                   ("MV2_COMM_WORLD_LOCAL_SIZE", 64),
                   ("SLURM_NTASKS_PER_NODE", 4), ("LOCAL_WORLD_SIZE", 1)):
        env = dict(clear, CK=native_ckpt, **{var: str(n)})
        cpus, threads = map(int, run_py(code, env=env).stdout.split())
        assert threads == max(1, cpus // n), (var, n, cpus, threads)
    env = dict(clear, CK=native_ckpt, LOCAL_WORLD_SIZE="x",
               SLURM_NTASKS_PER_NODE="2(x3)", MPI_LOCALNRANKS="2")
    cpus, threads = map(int, run_py(code, env=env).stdout.split())
    assert threads == max(1, cpus // 2)


# -- direct_io ---------------------------------------------------------

def cached_pages(path):
    """Pages of path in the page cache (cachestat(2)), or None."""
    class Range(C.Structure):
        _fields_ = [("off", C.c_uint64), ("len", C.c_uint64)]
    stat = (C.c_uint64 * 5)()
    libc = C.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        r = Range(0, 0)
        if libc.syscall(C.c_long(451), C.c_int(fd), C.byref(r),
                        C.byref(stat), C.c_uint(0)) != 0:
            return None
        return stat[0]
    finally:
        os.close(fd)


def test_direct_io_reads_cold_ranges_around_the_page_cache(stage_ckpt,
                                                           tmp_path):
    # A cold copy of the checkpoint loaded with direct_io=True equals the
    # default load, and leaves its data files' tensors out of the page
    # cache (the default load puts them all in it).
    torch = pytest.importorskip("torch")
    import shutil
    import ckptfs
    d = str(tmp_path / "cold")
    shutil.copytree(stage_ckpt, d)
    data = [os.path.join(d, f) for f in os.listdir(d)
            if f.endswith(".distcp")]
    total = sum(os.path.getsize(p) for p in data) >> 12

    def drop():
        for p in data:
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        return [cached_pages(p) for p in data]

    if any(n != 0 for n in drop()):
        pytest.skip("this file system keeps the pages, or no cachestat")
    got = ckptfs.load(d, direct_io=True)
    after = sum(cached_pages(p) for p in data)
    assert after < total // 10, (after, total)
    drop()
    want = ckptfs.load(d)
    assert sum(cached_pages(p) for p in data) > total // 2
    assert got.keys() == want.keys()
    for k in want:
        if isinstance(want[k], torch.Tensor):
            assert torch.equal(got[k], want[k]), k
        else:
            assert got[k] == want[k], k
