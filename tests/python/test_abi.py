# SPDX-License-Identifier: MIT
"""The ABI check at load: the library exports its ABI version and every
public struct's size and field offsets; the package checks them all, and
a library that differs is an ImportError naming both versions."""
import ctypes
import os
import re
import subprocess

import pytest

from conftest import ROOT, run_py

HEADER = os.path.join(ROOT, "core", "ckptfs.h")


def header_structs():
    """{struct name: [field names]} of core/ckptfs.h, parsed."""
    text = open(HEADER).read()
    out = {}
    for name, body in re.findall(r"^struct (ckpt_\w+) \{\n(.*?)^\};", text,
                                 re.S | re.M):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        fields = []
        for stmt in body.split(";"):
            stmt = stmt.strip()
            if not stmt:
                continue
            m = re.search(r"\(\*\s*(\w+)\)\s*\(", stmt)
            if m:
                fields.append(m.group(1))
                continue
            parts = re.sub(r"\[[^\]]*\]", "", stmt).split(",")
            fields.append(parts[0].split()[-1].lstrip("*"))
            fields += [p.strip().lstrip("*") for p in parts[1:]]
        out[name] = fields
    return out


def test_library_knows_every_struct_and_field_of_the_header():
    import ckptfs._lib as L
    lib = L.lib.cdll
    lib.ckpt_abi_struct_size.restype = ctypes.c_size_t
    lib.ckpt_abi_struct_size.argtypes = [ctypes.c_char_p]
    lib.ckpt_abi_field_offset.restype = ctypes.c_long
    lib.ckpt_abi_field_offset.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    structs = header_structs()
    assert len(structs) >= 14
    for name, fields in structs.items():
        assert lib.ckpt_abi_struct_size(name.encode()) > 0, name
        for f in fields:
            assert lib.ckpt_abi_field_offset(name.encode(), f.encode()) >= 0, \
                (name, f)
    assert lib.ckpt_abi_struct_size(b"no_such") == 0
    assert lib.ckpt_abi_field_offset(b"ckpt_view_opts", b"nope") == -1


def test_package_mirrors_every_struct_it_passes_with_all_fields():
    import ckptfs._lib as L
    structs = header_structs()
    for name, cls in L.STRUCTS.items():
        assert [f[0] for f in cls._fields_] == structs[name], name
    assert L.lib.cdll.ckpt_abi_version() == L.ABI_VERSION


def build_stub(tmp_path, abi=None, size_delta=0, exports_abi=True):
    """A libckptfs stand-in: the real library's ABI answers, but with
    another ABI version or one struct's size off."""
    import ckptfs._lib as L
    if abi is None:
        abi = L.ABI_VERSION
    src = tmp_path / "stub.c"
    body = f"""
#include <stddef.h>
#include <string.h>
const char *ckpt_version(void) {{ return "9.9.9-stub"; }}
"""
    if exports_abi:
        body += f"""
unsigned ckpt_abi_version(void) {{ return {abi}; }}
extern size_t real_size(const char *name);
size_t ckpt_abi_struct_size(const char *name)
{{
	size_t s = real_size(name);
	return strcmp(name, "ckpt_view_opts") == 0 ? s + {size_delta} : s;
}}
extern long real_offset(const char *name, const char *field);
long ckpt_abi_field_offset(const char *n, const char *f) {{ return real_offset(n, f); }}
"""
    src.write_text(body)
    # real_size/real_offset: the real library's answers, through dlopen.
    shim = tmp_path / "shim.c"
    shim.write_text(f"""
#include <dlfcn.h>
#include <stddef.h>
static void *h(void) {{ static void *l; if (!l) l = dlopen("{os.environ['CKPTFS_LIB']}", RTLD_NOW | RTLD_LOCAL); return l; }}
size_t real_size(const char *name) {{ size_t (*f)(const char *) = (size_t (*)(const char *))dlsym(h(), "ckpt_abi_struct_size"); return f(name); }}
long real_offset(const char *n, const char *x) {{ long (*f)(const char *, const char *) = (long (*)(const char *, const char *))dlsym(h(), "ckpt_abi_field_offset"); return f(n, x); }}
""")
    out = tmp_path / "libstub.so"
    subprocess.check_call(["cc", "-shared", "-fPIC", "-o", str(out), str(src),
                           str(shim), "-ldl"])
    return str(out)


IMPORT = "import ckptfs"


@pytest.mark.parametrize("kind", ["abi", "size", "none"])
def test_mismatched_library_is_an_import_error_naming_both_versions(
        tmp_path, kind):
    import ckptfs._lib as L
    if kind == "abi":
        stub = build_stub(tmp_path, abi=99)
        want = ["ABI version is 99", f"package's is {L.ABI_VERSION}",
                "9.9.9-stub"]
    elif kind == "size":
        stub = build_stub(tmp_path, size_delta=8)
        want = ["struct ckpt_view_opts has", "9.9.9-stub",
                f"ABI {L.ABI_VERSION}"]
    else:
        stub = build_stub(tmp_path, exports_abi=False)
        want = ["exports no ckpt_abi_version", f"ABI {L.ABI_VERSION}"]
    p = run_py(IMPORT, env={"CKPTFS_LIB": stub}, check=False)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ckptfs: the library " + stub), last
    for w in want:
        assert w in last, (w, last)


def test_missing_library_is_an_import_error(tmp_path):
    p = run_py(IMPORT, env={"CKPTFS_LIB": str(tmp_path / "nope.so")},
               check=False)
    assert "ImportError: ckptfs: libckptfs not found" in p.stderr


def test_version_is_the_clis(tmp_path):
    import ckptfs
    from conftest import CKPTFS
    out = subprocess.check_output([CKPTFS, "--version"], text=True).split()
    assert out == ["ckptfs", ckptfs.__version__]
    mk = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^VERSION := (\S+)", mk, re.M).group(1) == \
        ckptfs.__version__
