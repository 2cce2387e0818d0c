# SPDX-License-Identifier: MIT
"""The package as users get it: pip install --no-build-isolation into a
fresh venv made with --system-site-packages, offline, then import and
load there with nothing pointing at the work tree; mypy --strict clean;
a docstring on every public name."""
import inspect
import os
import subprocess
import sys

import pytest

import ckptfs
from conftest import CKPTFS, ROOT


def test_pip_install_into_a_fresh_venv_offline(tmp_path, native_ckpt):
    venv = tmp_path / "venv"
    subprocess.check_call(["/usr/bin/python3", "-m", "venv",
                           "--system-site-packages", str(venv)])
    env = {k: v for k, v in os.environ.items()
           if k not in ("CKPTFS_LIB", "PYTHONPATH")}
    env["PIP_NO_INDEX"] = "1"           # offline: no package index at all
    p = subprocess.run([str(venv / "bin" / "pip"), "install",
                        "--no-build-isolation", os.path.join(ROOT, "scripts")],
                       env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    code = """
import sys, ckptfs
assert "/scripts" not in ckptfs.__file__, ckptfs.__file__
assert ckptfs._lib.lib.path.startswith(sys.prefix), ckptfs._lib.lib.path
sd = ckptfs.load(sys.argv[1], 3, 1, backend="numpy")
with ckptfs.open(sys.argv[1]) as c:
    n = len(c.info().keys)
print(ckptfs.__version__, n, len(sd) > 0)
"""
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code,
                        native_ckpt], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    version, n, ok = p.stdout.split()
    cli = subprocess.check_output([CKPTFS, "--version"], text=True).split()
    assert version == cli[1] and int(n) > 0 and ok == "True"
    site = subprocess.check_output([str(venv / "bin" / "python"), "-c",
                                    "import ckptfs, os; print(os.path."
                                    "dirname(ckptfs.__file__))"], env=env,
                                   cwd=str(tmp_path), text=True).strip()
    assert os.path.exists(os.path.join(site, "py.typed"))
    assert os.path.exists(os.path.join(site, "libckptfs.so.0"))


def test_mypy_strict_is_clean():
    p = subprocess.run([sys.executable, "-m", "mypy", "--strict",
                        "--config-file",
                        os.path.join(ROOT, "scripts", "pyproject.toml"),
                        "--cache-dir", os.path.join(ROOT, "build",
                                                    ".mypy_cache"),
                        os.path.join(ROOT, "scripts", "ckptfs")],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success" in p.stdout


def public_names():
    # torch 1.13 on Python 3.11 needs the test helper's hook for
    # ckptfs.StorageReader (see test_torch.py).
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import torch_dcp_compat
    torch_dcp_compat.install()
    import ckptfs.torch
    import ckptfs.errors
    import ckptfs.handle
    import ckptfs.view
    mods = [ckptfs, ckptfs.errors, ckptfs.handle, ckptfs.view,
            sys.modules["ckptfs.load"], ckptfs.torch]
    for mod in mods:
        for name in getattr(mod, "__all__", []):
            if name == "__version__":
                continue
            yield f"{mod.__name__}.{name}", getattr(mod, name)


@pytest.mark.parametrize("name,obj", list(public_names()))
def test_every_public_name_has_a_docstring(name, obj):
    assert inspect.getdoc(obj), name
    if inspect.isclass(obj):
        for attr, val in vars(obj).items():
            if not attr.startswith("_") and callable(val):
                assert inspect.getdoc(val), f"{name}.{attr}"
