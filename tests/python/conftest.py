# SPDX-License-Identifier: MIT
"""Shared fixtures of the ckptfs package's pytest suite (tests/python/),
run by tests/run-all.sh (make check) against the work tree's package
(scripts/ckptfs/) and the library CKPTFS_LIB names (default: the plain
build's).  Checkpoints are generated at run time."""
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("CKPTFS_BUILD", os.path.join(ROOT, "build"))
os.environ.setdefault("CKPTFS_LIB", os.path.join(BUILD, "libckptfs.so"))
# The S3 credential chain ends at EC2 instance metadata on a link-local
# address: never from a test (loopback only).
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
PY = "/usr/bin/python3"
CKPTFS = os.path.join(BUILD, "ckptfs")


def run_py(code, *args, env=None, timeout=300, check=True):
    """Run code in a fresh /usr/bin/python3 that imports the work tree's
    package; returns the CompletedProcess."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(ROOT, "scripts") + os.pathsep + \
        os.path.join(ROOT, "tests")
    e.update(env or {})
    p = subprocess.run([PY, "-c", code, *map(str, args)], env=e,
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def gen_native(path, seed=7, keys=30):
    subprocess.check_call([PY, os.path.join(ROOT, "scripts", "gen_ckpt.py"),
                           str(path), "--seed", str(seed), "--keys",
                           str(keys)], stdout=subprocess.DEVNULL)
    return str(path)


@pytest.fixture(scope="session")
def native_ckpt(tmp_path_factory):
    """A native checkpoint (scripts/gen_ckpt.py), shared, never changed."""
    return gen_native(tmp_path_factory.mktemp("native") / "ckpt")


@pytest.fixture
def fresh_ckpt(tmp_path):
    """A native checkpoint of this test's own, free to damage."""
    return gen_native(tmp_path / "ckpt", seed=11, keys=12)


@pytest.fixture(scope="session")
def torch_ckpts(tmp_path_factory):
    """Torch 1.13 DCP checkpoints saved by 4 gloo ranks
    (scripts/gen_torch_ckpt.py): per_item/ and per_rank/."""
    out = tmp_path_factory.mktemp("torch") / "w4"
    subprocess.check_call([PY, os.path.join(ROOT, "scripts",
                                            "gen_torch_ckpt.py"),
                           str(out), "--world", "4", "--seed", "5"],
                          stdout=subprocess.DEVNULL)
    return str(out)


class Mount:
    """A ckptfs mount in the foreground, unmounted in teardown even on
    failure (fusermount3 -u, then -uz), the daemon waited for."""

    def __init__(self, ckpt, mnt, *args):
        os.makedirs(mnt, exist_ok=True)
        self.mnt = str(mnt)
        self.log = open(str(mnt) + ".log", "wb")
        self.proc = subprocess.Popen([CKPTFS, "mount", str(ckpt), self.mnt,
                                      "-f", *args], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None:
                raise AssertionError("daemon died: " +
                                     open(self.log.name).read())
            if time.monotonic() > deadline:
                self.close()
                raise AssertionError("mount did not appear within 20 s")
            time.sleep(0.05)

    def close(self):
        if os.path.ismount(self.mnt):
            if subprocess.call(["fusermount3", "-u", self.mnt]):
                time.sleep(0.5)
                if subprocess.call(["fusermount3", "-u", self.mnt]):
                    subprocess.call(["fusermount3", "-uz", self.mnt])
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"daemon for {self.mnt} did not exit")
        self.log.close()
        assert rc == 0, open(self.log.name).read()


@pytest.fixture
def mount():
    """mount(ckpt, mnt, *args) -> Mount; all unmounted at teardown."""
    made = []

    def make(ckpt, mnt, *args):
        m = Mount(ckpt, mnt, *args)
        made.append(m)
        return m
    yield make
    for m in made:
        m.close()


def open_fds():
    return len(os.listdir("/proc/self/fd"))
