# SPDX-License-Identifier: MIT
"""The documentation cannot rot: every block of README.md and docs/*.md
marked runnable runs here, as a new user would run it (docs/testing.md,
"Runnable documentation").

Each file gets a fresh `git clone` of this checkout (with its uncommitted
changes to tracked files applied, and the build copied in as `make`
would leave it), and one bash session (`bash -e`) started with `env -i`:
HOME a new empty directory, the default PATH, LANG, nothing else; no
PYTHONPATH, no CKPTFS_LIB.  Its blocks run in order in that session,
from the top of the clone, so a `cd` or an `export` carries over.

Markers, an HTML comment on the line just before the fence:
  <!-- runnable -->            a ```sh block, run in the session
  <!-- runnable: file NAME --> the block is written to NAME (relative to
                               the session's working directory)
  <!-- runnable: s3 -->        a ```sh block that needs an S3 endpoint: the
                               test starts radosgw (tests/s3/rgw.sh) and
                               exports exactly AWS_ENDPOINT_URL,
                               AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
                               into the session first, which is what the
                               text tells the reader to set
A ```sh or ```python block without a marker fails the test: examples
that are not run are written without an info string."""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import BUILD, ROOT

sys.path.insert(0, os.path.join(ROOT, "tests"))
import reference  # noqa: E402

CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RGW = os.path.join(ROOT, "tests", "s3", "rgw.sh")
S3_VARS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
FENCE = re.compile(r"^(?:<!-- (runnable(?::[^>]*?)?) -->\n)?"
                   r"```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def doc_files():
    return ["README.md"] + sorted(
        os.path.relpath(p, ROOT)
        for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def blocks(rel):
    """[(marker or None, info string, body, line)] of one file, in order."""
    text = open(os.path.join(ROOT, rel), encoding="utf-8").read()
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start(2) if m.group(1) else
                          m.start()) + 1
        out.append((m.group(1), m.group(2).strip(), m.group(3), line))
    return out


def runnable(rel):
    return [b for b in blocks(rel) if b[0]]


def kind_of(marker):
    """'sh', 's3' or ('file', NAME); raises on anything else."""
    arg = marker[len("runnable"):].lstrip(":").strip()
    if arg == "":
        return "sh"
    if arg == "s3":
        return "s3"
    if arg.startswith("file "):
        name = arg[5:].strip()
        assert name and "'" not in name, f"bad file name in {marker!r}"
        return ("file", name)
    raise AssertionError(f"unknown marker <!-- {marker} -->")


@pytest.mark.parametrize("rel", doc_files())
def test_blocks_are_marked(rel):
    """Every sh/python block is marked (runnable); markers are known; a
    runnable sh block is ```sh."""
    for marker, info, body, line in blocks(rel):
        lang = info.split()[0] if info else ""
        if marker is None:
            assert lang not in ("sh", "bash", "python", "console"), \
                f"{rel}:{line}: a ```{lang} block without a runnable " \
                f"marker (examples that are not run have no info string)"
            continue
        k = kind_of(marker)
        if k in ("sh", "s3"):
            assert lang == "sh", f"{rel}:{line}: <!-- {marker} --> " \
                f"on a ```{lang} block"


def script_of(rel, env_s3):
    """The bash script of one file's runnable blocks, in order."""
    parts = []
    for marker, info, body, line in runnable(rel):
        k = kind_of(marker)
        parts.append(f"echo '=== {rel}:{line}'; echo '=== {rel}:{line}' >&2\n")
        if isinstance(k, tuple):
            eof = "CKPTFS_DOC_EOF"
            assert eof not in body
            parts.append(f"cat > '{k[1]}' <<'{eof}'\n{body}{eof}\n")
            continue
        if k == "s3":
            for v in S3_VARS:
                parts.append(f"export {v}={shlex.quote(env_s3[v])}\n")
        parts.append(body)
    return "".join(parts)


def fresh_clone(dest):
    """A git clone of this checkout, its uncommitted changes to tracked
    files applied, and the build copied in newer than the sources (so
    `make` has nothing to do), as if it had been built there."""
    subprocess.check_call(["git", "clone", "-q", ROOT, dest])
    diff = subprocess.run(["git", "-C", ROOT, "diff", "--binary", "HEAD"],
                          check=True, capture_output=True).stdout
    if diff:
        subprocess.run(["git", "-C", dest, "apply", "--whitespace=nowarn"],
                       input=diff, check=True)
    # Not pip's own build tree, the packages or the wheel: pip's
    # build_py skips a module whose copy there is newer, so a stale tree
    # (an earlier pip install's) would install an older package.
    shutil.copytree(BUILD, os.path.join(dest, "build"), symlinks=True,
                    copy_function=shutil.copy,
                    ignore=shutil.ignore_patterns("pip-setuptools", "deb",
                                                  "wheel"))
    # Objects first, then what is linked from them, all newer than the
    # sources: a build as make leaves it.
    b = os.path.join(dest, "build")
    files = [os.path.join(d, f) for d, _, fs in os.walk(b) for f in fs]
    for f in sorted(files, key=lambda p: (not p.endswith((".o", ".d")), p)):
        if not os.path.islink(f):
            os.utime(f)


def unmount_under(d):
    for line in open("/proc/mounts"):
        point = line.split()[1].encode().decode("unicode_escape")
        if point.startswith(d + "/"):
            if subprocess.call(["fusermount3", "-u", point]):
                subprocess.call(["fusermount3", "-uz", point])


@pytest.fixture(scope="module")
def s3_env():
    """A radosgw of the test's own, started on first use; its AWS_*."""
    state = {}

    def get():
        if "env" not in state:
            d = tempfile.mkdtemp(prefix="ckptfs-docs-rgw.")
            state["dir"] = d
            subprocess.run([RGW, "start", os.path.join(d, "rgw")],
                           check=True, timeout=600)
            env = {}
            for line in subprocess.check_output(
                    [RGW, "env", os.path.join(d, "rgw")], text=True
                    ).splitlines():
                m = re.match(r"export (\w+)=(.*)$", line)
                if m:
                    env[m.group(1)] = m.group(2)
            state["env"] = env
        return state["env"]
    yield get
    if "dir" in state:
        subprocess.call([RGW, "stop", os.path.join(state["dir"], "rgw")])
        shutil.rmtree(state["dir"], ignore_errors=True)


def run_doc(rel, s3_env):
    """Run one file's runnable blocks; returns (stdout, stderr)."""
    bs = runnable(rel)
    env_s3 = s3_env() if any(kind_of(b[0]) == "s3" for b in bs) else None
    # Inside /var/tmp-like storage the sid chroot can see: the clone is
    # bound into it by scripts/sid-chroot.sh run, from wherever it is.
    top = tempfile.mkdtemp(prefix="ckptfs-docs.")
    clone = os.path.join(top, "ckptfs")
    home = os.path.join(top, "home")
    os.mkdir(home)
    try:
        fresh_clone(clone)
        script = os.path.join(top, "session.sh")
        with open(script, "w") as fh:
            fh.write(script_of(rel, env_s3))
        p = subprocess.run(
            ["env", "-i", f"HOME={home}", f"PATH={CLEAN_PATH}",
             "LANG=C.UTF-8", "/bin/bash", "-e", script],
            cwd=clone, capture_output=True, text=True, timeout=1800)
    finally:
        unmount_under(top)
    try:
        assert p.returncode == 0, \
            f"{rel}: a block failed (exit {p.returncode}); the last " \
            f"'=== FILE:LINE' below is it\n--- stdout\n{p.stdout[-6000:]}" \
            f"\n--- stderr\n{p.stderr[-6000:]}"
    finally:
        unmount_under(top)
        shutil.rmtree(top, ignore_errors=True)
    return p.stdout, p.stderr


def by_block(out):
    """[(block's first line, its stdout)] from a session's stdout."""
    parts = re.split(r"^=== README\.md:(\d+)\n", out, flags=re.M)
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    lines = text.split("\n")
    res = []
    for i in range(1, len(parts), 2):
        n = int(parts[i])         # the fence's line; the body follows it
        body = "\n".join(lines[n:n + 40]).split("```")[0]
        res.append((body, parts[i + 1]))
    return res


RUNNABLE = [f for f in doc_files() if runnable(f)]


@pytest.mark.parametrize("rel", RUNNABLE)
def test_runnable_blocks_run(rel, s3_env):
    out, _ = run_doc(rel, s3_env)
    print(out)
    if rel == "README.md":
        # The demo's rank 3 of 8 as the independent reference has it:
        # numpy from the mount, ckptfs.load, and ckptfs.load from S3.
        want = reference.expected(os.path.join(ROOT, "demo", "ckpt"), 8, 3)
        import numpy as np
        rows = str(np.frombuffer(
            want["optim/state/layer1.weight/exp_avg"], "<f4").reshape(-1, 4))
        segs = by_block(out)
        for kind, want_in in (("numpy", "np.memmap"),
                              ("load", "quick_numpy.py"),
                              ("s3", "s3://ckptfs-demo/demo")):
            seg = [o for body, o in segs if want_in in body and
                   "cat >" not in body]
            assert seg and rows in seg[-1], \
                f"{kind}: expected {rows} in the output of that block"
        ckpt = os.path.join(ROOT, "demo", "ckpt")
        for r in range(8):
            b = reference.expected(ckpt, 8, r)[
                "optim/state/layer1.weight/exp_avg"]
            assert f"{r} ({len(b) // 16}, 4) torch.float32" in out
    if rel == "docs/resume.md":
        for r in range(8):
            assert f"rank {r}/8: resumed after step 1" in out
        assert "format\ttorch-dcp" in out
        assert "(32, 64)" in out        # rank 3 of 8's rows of [256, 64]


def test_every_runnable_file_is_found():
    """The quick start and the resume walkthrough are runnable."""
    assert "README.md" in RUNNABLE and "docs/resume.md" in RUNNABLE
