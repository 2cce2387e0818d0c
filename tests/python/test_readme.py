# SPDX-License-Identifier: MIT
"""README's "Resuming a PyTorch job on a new world size", run as written:
every code block of the section, in order, in one scratch directory that
holds this checkout as ckptfs/.  A "<!-- walkthrough: KIND -->" line
before each block says how: "file NAME" writes it to NAME, "torch2" runs
it with bash in the sid chroot (torch 2.x; the package from the work
tree), "host" with bash here (the venv the section makes first on PATH,
the build's ckptfs command).  A block without a marker fails the test, so
the docs cannot rot."""
import os
import re
import shutil
import subprocess
import tempfile

from conftest import BUILD, ROOT

SID = os.path.join(ROOT, "scripts", "sid-chroot.sh")
TITLE = "## Resuming a PyTorch job on a new world size"


def blocks():
    text = open(os.path.join(ROOT, "README.md")).read()
    start = text.index(TITLE)
    end = text.find("\n## ", start + len(TITLE))
    sect = text[start:end if end > 0 else len(text)]
    out = []
    for m in re.finditer(r"(?:<!-- walkthrough: ([^>]*?) -->\n)?```(\w*)\n"
                         r"(.*?)^```", sect, re.S | re.M):
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def unmount_under(d):
    for line in open("/proc/mounts"):
        point = line.split()[1].encode().decode("unicode_escape")
        if point.startswith(d + "/"):
            if subprocess.call(["fusermount3", "-u", point]):
                subprocess.call(["fusermount3", "-uz", point])


def test_every_block_is_marked():
    bs = blocks()
    assert len(bs) >= 6
    for kind, lang, body in bs:
        assert kind, f"a ```{lang} block without a walkthrough marker:\n" \
                     f"{body[:200]}"


def test_the_walkthrough_runs():
    base = subprocess.check_output([SID, "path"], text=True).strip()
    subprocess.check_call([SID, "build"])
    host = tempfile.mkdtemp(prefix="ckptfs-readme.",
                            dir=os.path.join(base, "tmp"))
    inside = host[len(base):]
    binp = os.path.join(host, ".bin")
    os.makedirs(binp)
    os.symlink(os.path.join(BUILD, "ckptfs"), os.path.join(binp, "ckptfs"))
    os.symlink("/usr/bin/python3", os.path.join(binp, "python3"))
    os.symlink(ROOT, os.path.join(host, "ckptfs"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("CKPTFS_LIB", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([os.path.join(host, "venv", "bin"), binp,
                                   os.environ["PATH"]])
    env["PIP_NO_INDEX"] = "1"
    log = []
    try:
        for kind, lang, body in blocks():
            if kind.startswith("file "):
                with open(os.path.join(host, kind[5:].strip()), "w") as fh:
                    fh.write(body)
                continue
            if kind == "host":
                p = subprocess.run(["bash", "-ec", body], cwd=host, env=env,
                                   capture_output=True, text=True,
                                   timeout=900)
            elif kind == "torch2":
                p = subprocess.run(
                    [SID, "run", "/bin/bash", "-ec",
                     f"cd {inside} && export PYTHONPATH=@ROOT@/scripts\n" +
                     body], capture_output=True, text=True, timeout=1800)
            else:
                raise AssertionError(f"unknown walkthrough marker {kind!r}")
            log.append(p.stdout)
            assert p.returncode == 0, \
                f"{kind} block failed:\n{body}\n{p.stdout}\n{p.stderr[-4000:]}"
    finally:
        unmount_under(host)
        shutil.rmtree(host, ignore_errors=True)
    out = "".join(log)
    print(out)
    for r in range(8):
        assert f"rank {r}/8: resumed after step 1" in out
    assert "format\ttorch-dcp" in out
    assert "(32, 64)" in out        # rank 3 of 8's rows of [256, 64]
