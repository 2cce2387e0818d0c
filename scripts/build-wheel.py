#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`make wheel`: write build/wheel/ckptfs-VERSION-py3-none-PLAT.whl, the
Python package (scripts/ckptfs/) with libckptfs.so.0 beside it and the
ckptfs command as a script pip puts on the venv's PATH, with its METADATA,
WHEEL and RECORD (sha256 of every file).

py3-none: the Python part is pure and loads the library with ctypes.
PLAT is manylinux_2_XX_ARCH, XX the highest GLIBC_2.XX symbol version the
two binaries need (objdump -T) and ARCH the machine's (uname -m).  The
other shared libraries they link (libfuse3, libmsgpackc, libxxhash,
libzstd, libcurl) are the system's, not bundled: see docs/install.md.

    build-wheel.py --version V --lib build/libckptfs.so --bin build/ckptfs
                   --out build/wheel
"""
import argparse
import base64
import glob
import hashlib
import os
import re
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "ckptfs")
SUMMARY = ("Load a rank's resharded slice of a distributed-training "
           "checkpoint (PyTorch DCP, safetensors) straight from its data "
           "files")


def glibc_needed(path):
    """The highest (major, minor) of the GLIBC_ symbol versions path's
    dynamic symbols need (objdump -T), or None when it needs none."""
    out = subprocess.check_output(["objdump", "-T", path], text=True)
    found = [tuple(map(int, m))
             for m in re.findall(r"\bGLIBC_(\d+)\.(\d+)", out)]
    return max(found) if found else None


def record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return f"{arc},sha256={digest.rstrip(b'=').decode()},{len(data)}"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    needs = [v for v in (glibc_needed(a.lib), glibc_needed(a.bin)) if v]
    if not needs:
        sys.exit("build-wheel: no GLIBC_ symbol version in the binaries")
    major, minor = max(needs)
    arch = os.uname().machine
    plat = f"manylinux_{major}_{minor}_{arch}"
    tag = f"py3-none-{plat}"
    name = f"ckptfs-{a.version}"
    dist = f"{name}.dist-info"
    data = f"{name}.data"

    with open(os.path.join(PKG, "README.txt")) as fh:
        readme = fh.read()
    metadata = (f"Metadata-Version: 2.1\nName: ckptfs\nVersion: {a.version}\n"
                f"Summary: {SUMMARY}\nLicense: MIT\n"
                "Classifier: Operating System :: POSIX :: Linux\n"
                "Classifier: Programming Language :: Python :: 3\n"
                "Requires-Python: >=3.9\n"
                "Provides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
                "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n"
                "Description-Content-Type: text/plain\n\n" + readme)
    wheel = ("Wheel-Version: 1.0\nGenerator: ckptfs build-wheel.py\n"
             f"Root-Is-Purelib: false\nTag: {tag}\n")

    # (name in the archive, bytes, executable)
    files = []
    for f in sorted(glob.glob(os.path.join(PKG, "*.py"))) + \
            [os.path.join(PKG, "py.typed")]:
        with open(f, "rb") as fh:
            files.append((f"ckptfs/{os.path.basename(f)}", fh.read(), False))
    with open(a.lib, "rb") as fh:
        files.append(("ckptfs/libckptfs.so.0", fh.read(), True))
    with open(a.bin, "rb") as fh:
        files.append((f"{data}/scripts/ckptfs", fh.read(), True))
    files.append((f"{dist}/METADATA", metadata.encode(), False))
    files.append((f"{dist}/WHEEL", wheel.encode(), False))
    record = "\n".join([record_line(n, b) for n, b, _ in files] +
                       [f"{dist}/RECORD,,"]) + "\n"
    files.append((f"{dist}/RECORD", record.encode(), False))

    os.makedirs(a.out, exist_ok=True)
    for old in glob.glob(os.path.join(a.out, "ckptfs-*.whl")):
        os.unlink(old)
    path = os.path.join(a.out, f"{name}-{tag}.whl")
    # A fixed date: the same inputs give the same wheel.
    when = (1980, 1, 1, 0, 0, 0)
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for n, b, exe in files:
            info = zipfile.ZipInfo(n, when)
            info.external_attr = ((0o755 if exe else 0o644) | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, b)
    os.replace(path + ".tmp", path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
