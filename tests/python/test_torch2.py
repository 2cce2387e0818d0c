# SPDX-License-Identifier: MIT
"""ckptfs.StorageReader with the newest torch (2.x, Debian sid's, in the
chroot scripts/sid-chroot.sh keeps): tests/python/torch2_reader.py run
there.  The multi-rank resume (4 ranks to 8) is the resume walkthrough
(docs/resume.md, run by test_docs.py); tests/bats/torch2.bats covers DTensor meshes."""
import os
import shutil
import subprocess
import tempfile

from conftest import ROOT

SID = os.path.join(ROOT, "scripts", "sid-chroot.sh")


def chroot_tmp():
    base = subprocess.check_output([SID, "path"], text=True).strip()
    subprocess.check_call([SID, "build"])
    d = tempfile.mkdtemp(prefix="ckptfs-pytest.", dir=os.path.join(base,
                                                                   "tmp"))
    return d, d[len(base):]


def test_storage_reader_with_torch2():
    host, inside = chroot_tmp()
    try:
        p = subprocess.run([SID, "run", "/usr/bin/python3",
                            "@ROOT@/tests/python/torch2_reader.py", inside],
                           capture_output=True, text=True, timeout=600)
        print(p.stdout, p.stderr[-3000:])
        assert p.returncode == 0
        assert "6 StorageReader checks ok" in p.stdout
    finally:
        shutil.rmtree(host, ignore_errors=True)
