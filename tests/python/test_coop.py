# SPDX-License-Identifier: MIT
"""Cooperative reads of ckptfs.StorageReader (ckptfs/_coop.py), by gloo
ranks in tests/coop_check.py, against torch's own FileSystemReader:
torch 1.13 here, torch 2.x in the sid chroot (DDP and HSDP).  Each run
prints the bytes all ranks fetched against the checkpoint's unique bytes;
cooperative runs must stay within 1.05x, and the independent ones show
the replication they avoid (W x for DDP, 2x for HSDP 2x4)."""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import PY, ROOT

CHECK = os.path.join(ROOT, "tests", "coop_check.py")
SID = os.path.join(ROOT, "scripts", "sid-chroot.sh")


def ratio(out):
    m = re.search(r"([0-9.]+)x the [0-9]+ unique", out)
    assert m, out
    return float(m.group(1))


@pytest.fixture(scope="module")
def ckpt113(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("coop") / "ck")
    subprocess.check_call([PY, CHECK, "gen", out])
    return out


@pytest.mark.parametrize("world,mode,coop", [
    (4, "ddp", "on"), (4, "fail", "on")])
def test_coop_torch113(ckpt113, world, mode, coop):
    p = subprocess.run([PY, CHECK, "load", ckpt113, str(world), mode, coop],
                       capture_output=True, text=True, timeout=900)
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0
    if mode == "fail":
        assert f"{world} of {world} ranks raised" in p.stdout
        return
    r = ratio(p.stdout)
    assert r <= 1.05 if coop == "on" else r >= world * 0.95


@pytest.fixture(scope="module")
def ckpt2():
    base = subprocess.check_output([SID, "path"], text=True).strip()
    subprocess.check_call([SID, "build"])
    d = tempfile.mkdtemp(prefix="ckptfs-coop.", dir=os.path.join(base,
                                                                 "tmp"))
    inside = d[len(base):] + "/ck"
    subprocess.check_call([SID, "run", "/usr/bin/python3",
                           "@ROOT@/tests/coop_check.py", "gen", inside])
    yield inside
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("world,mode,coop,most", [
    (8, "hsdp", "on", 1.05), (8, "hsdp", "off", None)])
def test_coop_torch2(ckpt2, world, mode, coop, most):
    p = subprocess.run([SID, "run", "/usr/bin/python3",
                        "@ROOT@/tests/coop_check.py", "load", ckpt2,
                        str(world), mode, coop],
                       capture_output=True, text=True, timeout=900)
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0
    r = ratio(p.stdout)
    assert r <= most if most else r >= 1.9
