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
