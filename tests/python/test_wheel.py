# SPDX-License-Identifier: MIT
"""The wheel of `make wheel` as a user gets it: its name's platform tag
tells the truth (the glibc its binaries need, read here with readelf, and
the machine), its RECORD hashes match; pip install --no-index into a fresh
venv made with --system-site-packages gives, with no environment
variables, `import ckptfs` with the bundled library and a working
`ckptfs` command on the venv's PATH (--version, a mount of the demo
checkpoint compared with the numpy reference)."""
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import time
import zipfile

import pytest

import reference
from conftest import BUILD, ROOT

DEMO = os.path.join(ROOT, "demo", "ckpt")


def makefile_version():
    with open(os.path.join(ROOT, "Makefile")) as fh:
        return re.search(r"^VERSION\s*:?=\s*(\S+)", fh.read(), re.M).group(1)


@pytest.fixture(scope="module")
def wheel():
    """build/wheel/*.whl, made by `make wheel` from the plain build."""
    subprocess.check_call(["make", "-C", ROOT, "--no-print-directory",
                           "O=" + BUILD, "wheel"], stdout=subprocess.DEVNULL)
    found = [f for f in os.listdir(os.path.join(BUILD, "wheel"))
             if f.endswith(".whl")]
    assert len(found) == 1, found
    return os.path.join(BUILD, "wheel", found[0])


def clean_env(venv=None):
    """A new user's environment: nothing pointing at the work tree."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CKPTFS") and k not in ("PYTHONPATH",)}
    env["PIP_NO_INDEX"] = "1"
    env["PATH"] = (str(venv / "bin") + os.pathsep if venv else "") + \
        "/usr/sbin:/usr/bin:/sbin:/bin"
    return env


def readelf_glibc(data, tmp_path):
    """The highest GLIBC_2.N an ELF file's version needs name (readelf)."""
    f = tmp_path / "elf"
    f.write_bytes(data)
    out = subprocess.check_output(["readelf", "--version-info", "--wide",
                                   str(f)], text=True)
    return max(int(m) for m in re.findall(r"Name: GLIBC_2\.(\d+)", out))


def test_wheel_name_tags_and_record(wheel, tmp_path):
    name = os.path.basename(wheel)
    m = re.fullmatch(r"ckptfs-([^-]+)-py3-none-manylinux_2_(\d+)_(\w+)\.whl",
                     name)
    assert m, name
    assert m.group(1) == makefile_version()
    assert m.group(3) == os.uname().machine
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        lib = z.read("ckptfs/libckptfs.so.0")
        cmd = z.read(f"ckptfs-{m.group(1)}.data/scripts/ckptfs")
        need = max(readelf_glibc(lib, tmp_path), readelf_glibc(cmd, tmp_path))
        assert int(m.group(2)) == need, (name, need)
        wheel_meta = z.read(f"ckptfs-{m.group(1)}.dist-info/WHEEL").decode()
        assert f"Tag: py3-none-manylinux_2_{need}_{m.group(3)}" in wheel_meta
        rec = z.read(f"ckptfs-{m.group(1)}.dist-info/RECORD").decode()
        rows = list(csv.reader(io.StringIO(rec)))
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, h, size in rows:
            if path.endswith("/RECORD"):
                assert h == "" and size == ""
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert h == "sha256=" + want and int(size) == len(data), path


def test_pip_install_wheel_into_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.check_call(["/usr/bin/python3", "-m", "venv",
                           "--system-site-packages", str(venv)])
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index",
                        wheel], env=clean_env(), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    env = clean_env(venv)
    work = tmp_path / "elsewhere"
    work.mkdir()

    # import ckptfs: the venv's package and its bundled library.
    code = ("import ckptfs, pickle, sys\n"
            "sd = ckptfs.load(sys.argv[1], world=8, rank=3, backend='numpy')\n"
            "def flat(d, p=''):\n"
            "    for k, v in d.items():\n"
            "        if isinstance(v, dict): yield from flat(v, p + k + '/')\n"
            "        else: yield p + k, (v if isinstance(v, bytes) else v.tobytes())\n"
            "pickle.dump((ckptfs.__file__, ckptfs._lib.lib.path, dict(flat(sd))),"
            " sys.stdout.buffer)\n")
    p = subprocess.run(["python", "-c", code, DEMO], env=env, cwd=str(work),
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    import pickle
    module, lib, got = pickle.loads(p.stdout)
    site = str(venv / "lib")
    assert module.startswith(site) and lib.startswith(site), (module, lib)
    assert lib.endswith("/ckptfs/libckptfs.so.0")
    want = reference.expected(DEMO, world=8, rank=3)
    assert want and got == want

    # The ckptfs command, on the venv's PATH.
    assert shutil.which("ckptfs", path=env["PATH"]) == str(venv / "bin" /
                                                            "ckptfs")
    out = subprocess.check_output(["ckptfs", "--version"], env=env,
                                  cwd=str(work), text=True)
    assert out.split()[:2] == ["ckptfs", makefile_version()]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(["ckptfs", "mount", DEMO, str(mnt), "--world", "8",
                        "--rank", "3"], env=env, cwd=str(work), check=True,
                       timeout=60)
        r = subprocess.run(["/usr/bin/python3",
                            os.path.join(ROOT, "tests", "reference.py"),
                            "check", DEMO, str(mnt), "--world", "8",
                            "--rank", "3"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        subprocess.run(["ckptfs", "umount", str(mnt)], env=env, check=True,
                       timeout=60)
        assert not os.path.ismount(mnt)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)])
        scale = int(os.environ.get("CKPTFS_TIME_SCALE", "1") or 1)
        for _ in range(100 * scale):
            if subprocess.run(["pgrep", "-f", f"ckptfs mount {DEMO} {mnt}"],
                              capture_output=True).returncode != 0:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the wheel's ckptfs daemon did not exit")

    # pip uninstall takes the command and the library away again.
    subprocess.check_call([str(venv / "bin" / "pip"), "uninstall", "-y",
                           "ckptfs"], env=env, stdout=subprocess.DEVNULL)
    assert not (venv / "bin" / "ckptfs").exists()
    assert not os.path.exists(lib)
