# SPDX-License-Identifier: MIT
"""Cooperative reads of ckptfs.StorageReader (ckptfs/_coop.py), by gloo
ranks in tests/coop_check.py, against torch's own FileSystemReader:
torch 1.13 here, torch 2.x in the sid chroot (DDP and HSDP).  Each run
prints the bytes all ranks fetched against the checkpoint's unique bytes;
cooperative runs must stay within 1.05x, and the independent ones show
the replication they avoid (W x for DDP, 2x for HSDP 2x2).

Every case (DDP, HSDP, uneven needs, a failed read, a peer that raises)
runs twice: on plain gloo, and under tests/nccl_rules.py, which enforces
NCCL's point-to-point rules on gloo (tags ignored, posting order,
blocking sends, sizes; a wait cycle is an error naming the pair).  The
rules' steps use one round (mb16), where two ranks each own parts the
other needs: the exchange that posted tagged isend/irecv pairs one by
one fails them with a wait cycle.  A SIGKILLed rank ends the others with
an error naming it within the process group's timeout.  Subprocess
timeouts are liveness bounds only (x CKPTFS_TIME_SCALE)."""
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


SCALE = float(os.environ.get("CKPTFS_TIME_SCALE", "1") or 1)
STEPS = ["ddp", "ddp:rules:mb16", "uneven", "uneven:rules:mb16", "fail",
         "fail:rules:mb16", "failpeer", "failpeer:rules:mb16"]


def check_steps(out, world, steps):
    """Every step's line is there and says what it must."""
    assert "NCCL rules" not in out, out
    for st in steps:
        mode = st.split(":")[0]
        line = [ln for ln in out.splitlines()
                if re.search(f"W={world} {re.escape(st)}[ :]", ln)]
        assert line, (st, out)
        if mode == "fail":
            assert f"{world} of {world} ranks raised" in line[0]
        elif mode not in ("failpeer",):
            r = ratio(line[0])
            if ":off" in st:
                assert r >= (1.9 if mode == "hsdp" else world * 0.95)
            elif mode != "uneven":
                assert r <= 1.05, line[0]


def test_coop_torch113(ckpt113):
    """DDP, uneven, failed read, failed peer: gloo and NCCL's rules."""
    p = subprocess.run([PY, CHECK, "load", ckpt113, "4", *STEPS],
                       capture_output=True, text=True,
                       timeout=600 * SCALE)
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0
    check_steps(p.stdout, 4, STEPS)


def test_nccl_rules_bite():
    """The stand-in itself: a correct batch passes; both ranks posting a
    tagged isend first is a wait cycle; receives posted by tag in
    another order than the sends (gloo matches them) a size mismatch."""
    p = subprocess.run([PY, os.path.join(ROOT, "tests", "nccl_rules.py")],
                       capture_output=True, text=True,
                       timeout=300 * SCALE)
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0
    assert "good batch passes: True; tagged isend first on both: a wait " \
        "cycle: True; receives by tag in another order: a size mismatch " \
        "on both: True" in p.stdout


def test_coop_kill(ckpt113):
    """Rank 1 SIGKILLed mid-exchange: ranks 0, 2, 3 raise naming it
    within the group's timeout (10 s; gloo's closed connection usually
    ends them at once) instead of hanging."""
    env = dict(os.environ, COOP_PG_TIMEOUT="10")
    p = subprocess.run([PY, CHECK, "load", ckpt113, "4", "kill"],
                       capture_output=True, text=True, env=env,
                       timeout=300 * SCALE)
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0
    assert "raised naming rank 1 [0, 2, 3]" in p.stdout


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


def test_coop_torch2(ckpt2):
    """HSDP on a (2, 2) mesh: gloo, NCCL's rules, cooperative off."""
    steps = ["hsdp", "hsdp:rules:mb16", "hsdp:off"]
    p = subprocess.run([SID, "run", "/usr/bin/python3",
                        "@ROOT@/tests/coop_check.py", "load", ckpt2, "4",
                        *steps],
                       capture_output=True, text=True, timeout=900 * SCALE)
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0
    check_steps(p.stdout, 4, steps)
