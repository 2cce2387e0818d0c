# SPDX-License-Identifier: MIT
"""Build hook of the ckptfs package (pyproject.toml holds the rest): the
version is the Makefile's VERSION, and libckptfs is built with the
project's Makefile (``make build/libckptfs.so``: offline, with the
packages of scripts/install-deps.sh) and shipped inside the package as
ckptfs/libckptfs.so.0.  Outside the project tree (no Makefile beside),
no library is shipped and the package uses the installed one."""
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAKEFILE = os.path.join(ROOT, "Makefile")


def version() -> str:
    try:
        with open(MAKEFILE) as fh:
            m = re.search(r"^VERSION\s*:?=\s*(\S+)", fh.read(), re.M)
    except OSError:
        m = None
    return m.group(1) if m else "0+unknown"


class BuildWithLib(build_py):
    """build_py, then libckptfs built by the Makefile into the package."""

    def run(self) -> None:
        super().run()
        if not os.path.exists(MAKEFILE):
            return
        subprocess.check_call(["make", "-C", ROOT, "--no-print-directory",
                               "SAN=", "O=build", "build/libckptfs.so"])
        dst = os.path.join(self.build_lib, "ckptfs", "libckptfs.so.0")
        shutil.copyfile(os.path.join(ROOT, "build", "libckptfs.so"), dst)
        os.chmod(dst, 0o755)


class BinaryDistribution(Distribution):
    """A wheel for this platform: it holds a shared library."""

    def has_ext_modules(self) -> bool:
        return os.path.exists(MAKEFILE)


BUILD = os.path.join(ROOT, "build", "pip-setuptools")
os.makedirs(BUILD, exist_ok=True)
setup(version=version(), cmdclass={"build_py": BuildWithLib},
      distclass=BinaryDistribution,
      options={"build": {"build_base": BUILD},
               "egg_info": {"egg_base": BUILD}})
