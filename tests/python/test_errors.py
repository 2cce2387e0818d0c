# SPDX-License-Identifier: MIT
"""Errors as classes carrying the library's fields (issue 18 item 6,
issue 21 item 5): CheckpointError (a ValueError) for bad checkpoints and
arguments, ReadError (an OSError with errno) for I/O, each with path, key
and offset, chosen from the code; a path containing "key '" changes
nothing."""
import errno
import os
import subprocess

import pytest

import ckptfs
from ckptfs import errors
from conftest import PY, ROOT, gen_native


def test_classes():
    assert issubclass(ckptfs.CheckpointError, ckptfs.Error)
    assert issubclass(ckptfs.CheckpointError, ValueError)
    assert issubclass(ckptfs.ReadError, ckptfs.Error)
    assert issubclass(ckptfs.ReadError, OSError)
    e = ckptfs.ReadError("m", path="p", key="k", offset=3)
    assert (e.errno, e.code, e.path, e.key, e.offset, str(e)) == \
        (errno.EIO, errno.EIO, "p", "k", 3, "m")
    e = ckptfs.CheckpointError("bad", code=errno.EINVAL, key="k")
    assert (e.code, e.key, e.path, e.offset, str(e)) == \
        (errno.EINVAL, "k", None, None, "bad")


def test_class_from_code_never_from_text():
    # The message says "lie past" and "no key", which the old module
    # searched for; the code decides.
    e = errors.from_code(errno.EIO, "request 0: bytes lie past its end, no key")
    assert type(e) is ckptfs.ReadError and e.errno == errno.EIO
    e = errors.from_code(errno.EINVAL, "read error: Input/output error")
    assert type(e) is ckptfs.CheckpointError
    assert type(errors.from_code(errno.ENOMEM, "x")) is MemoryError
    for code in (errno.ESTALE, errno.EMFILE):
        assert type(errors.from_code(code, "x")) is ckptfs.ReadError
    for code in (errno.EACCES, errno.EPERM):
        e = errors.from_code(code, "x")
        assert type(e) is ckptfs.PermissionDeniedError
        assert isinstance(e, ckptfs.ReadError) and \
            isinstance(e, PermissionError) and e.errno == code
    # ENOENT is FileNotFoundError only for the path opened itself
    e = errors.from_code(errno.ENOENT, "x", path="/a/b", opened="/a/b/")
    assert type(e) is ckptfs.NotFoundError and e.filename == "/a/b"
    for code in (errno.EBADMSG, errno.ENOENT, errno.EXDEV, errno.EFBIG):
        assert type(errors.from_code(code, "x")) is ckptfs.CheckpointError


def bad(kind, path):
    subprocess.check_call([PY, os.path.join(ROOT, "tests", "make_bad_ckpt.py"),
                           kind, str(path)], stdout=subprocess.DEVNULL)
    return str(path)


def test_bad_checkpoints_are_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        ckptfs.load(str(tmp_path / "none"))
    assert ei.value.code == errno.ENOENT
    assert ei.value.path == str(tmp_path / "none")
    c = bad("chunk_outside", tmp_path / "c1")
    with pytest.raises(ckptfs.CheckpointError) as ei:
        ckptfs.open(c)
    assert "optim.state.w.exp_avg" in str(ei.value)
    assert ei.value.code == errno.EINVAL and ei.value.path == c
    c = bad("file_short", tmp_path / "c2")
    with pytest.raises(ckptfs.CheckpointError) as ei:
        ckptfs.open(c)
    assert "data file has" in str(ei.value)
    assert ei.value.path.startswith(c + "/") and ei.value.key


BAD_CASES = subprocess.run(
    [PY, os.path.join(ROOT, "tests", "make_bad_ckpt.py"), "--list"],
    check=True, capture_output=True, text=True).stdout.split()
W = "optim.state.w.exp_avg"


@pytest.mark.parametrize("case,key,code", [
    ("chunk_outside", W, errno.EINVAL),      # model/native_parse.c
    ("bad_dtype", W, errno.EINVAL),          # the entry's "where"
    ("gap", W, errno.EINVAL),                # model/tiling.c
    ("record_unknown_key", "optim.state.nope", errno.EINVAL),
    ("offset_overflow", W, errno.EOVERFLOW),
    ("file_missing", "optim.state.w.step", errno.ENOENT),  # io/
    ("bad_version", None, errno.EOPNOTSUPP),  # names no key
])
def test_open_failures_carry_the_key(tmp_path, case, key, code):
    """Issue 18 item 6: the key a refusal at open names is a field, not
    only text; a path holding "key '" changes neither it nor the code."""
    for d in (tmp_path / "plain", tmp_path / "a key 'x.y' b"):
        c = bad(case, d)
        with pytest.raises(ckptfs.CheckpointError) as ei:
            ckptfs.open(c)
        e = ei.value
        assert (e.key, e.code) == (key, code), str(e)
        assert e.path.startswith(c)


@pytest.mark.parametrize("case", BAD_CASES)
def test_the_key_field_is_the_key_the_message_names(tmp_path, case):
    """Every refusal of make_bad_ckpt.py, at open or at load: the key is
    set exactly when the message (less the path) names one, and is the
    first one it names."""
    c = bad(case, tmp_path / "c")
    try:
        ckptfs.load(c, 1, 0, backend="numpy")
    except ckptfs.Error as e:
        assert e.key == first_key_named(str(e).replace(c, "CKPT")), str(e)
    else:
        assert case == "ok"


def first_key_named(text):
    """The first key a message names ("key 'K'" or "keys 'K' and"), or
    None."""
    at = [i for i in (text.find("key '"), text.find("keys '")) if i >= 0]
    return text[min(at):].split("'")[1] if at else None


def test_torch_refusals_carry_the_key_the_message_names(torch_ckpts,
                                                         tmp_path):
    """make_hostile_torch.py's cases, refused while indexing the pickle
    or locating a record in a .distcp (the message names the key through
    the record's "DIR/FILE: offset N: key 'K'" prefix): key is the key
    named, or None; under a path holding "key '" alike."""
    out = str(tmp_path / "key 'q' h")
    subprocess.check_call([PY, os.path.join(ROOT, "tests",
                                            "make_hostile_torch.py"),
                           "cases", os.path.join(torch_ckpts, "per_rank"),
                           out], stdout=subprocess.DEVNULL)
    keyed = 0
    with open(os.path.join(out, "expect.tsv")) as f:
        cases = [line.split("\t")[0] for line in f if line.strip()]
    for case in cases:
        c = os.path.join(out, case)
        with pytest.raises(ckptfs.Error) as ei:
            ckptfs.load(c, 1, 0, backend="numpy")
        e = ei.value
        assert e.key == first_key_named(str(e).replace(c, "CKPT")), str(e)
        keyed += e.key is not None
    assert keyed >= 10


@pytest.mark.parametrize("case,key", [
    ("bad_dtype", "x"), ("offsets_overlap", "x"), ("field_twice", "x"),
    ("index_missing_key", "model.ghost"),
    ("sharded_gap", "model.embed.weight"),
    ("sharded_missing_key", "model.embed.weight"),
    ("sharded_unknown_key", "model.ghost"),
    # the header's "__metadata__" is named like a key but is none
    ("metadata_key_twice", None), ("metadata_not_object", None),
    ("key_not_utf8", None), ("truncated_header", None),
])
def test_safetensors_refusals_carry_the_key(tmp_path, case, key):
    d = str(tmp_path / "st")
    subprocess.check_call([PY, os.path.join(ROOT, "tests",
                                            "make_safetensors.py"),
                           case, d], stdout=subprocess.DEVNULL)
    with pytest.raises(ckptfs.CheckpointError) as ei:
        ckptfs.load(d, 1, 0, backend="numpy")
    assert (ei.value.key, ei.value.code) == (key, errno.EINVAL), \
        str(ei.value)
    if key:
        assert first_key_named(str(ei.value)) == key


def truncated_load(ckpt):
    """Load ckpt after cutting its first data file short once it is open:
    the ReadError.  One thread, so the first failing read (and so the key
    and offset reported) does not depend on scheduling."""
    with ckptfs.open(ckpt, threads=1) as c:
        files = sorted(f for f in os.listdir(ckpt) if f.endswith(".distcp"))
        victim = os.path.join(ckpt, files[0])
        os.truncate(victim, 64)
        with pytest.raises(ckptfs.ReadError) as ei:
            c.load(1, 0, backend="numpy")
    return ei.value, victim


def test_truncated_data_file_is_a_read_error_with_fields(fresh_ckpt):
    e, victim = truncated_load(fresh_ckpt)
    assert e.errno == errno.EIO and e.code == errno.EIO
    assert e.path == victim
    assert e.offset is not None and e.offset >= 0
    assert e.key and f"key '{e.key}'" in str(e)
    assert victim in str(e)


def test_a_path_containing_key_quote_behaves_the_same(tmp_path):
    """Once the C library decided whether to add the key by searching
    the message for "key '": a directory so named lost it."""
    plain = gen_native(tmp_path / "plain", seed=11, keys=12)
    odd = gen_native(tmp_path / "a key 'x' b", seed=11, keys=12)
    e1, v1 = truncated_load(plain)
    e2, v2 = truncated_load(odd)
    assert (type(e1), e1.errno, e1.key, e1.offset) == \
        (type(e2), e2.errno, e2.key, e2.offset)
    assert e2.path == v2 and str(e2).count(f"key '{e2.key}'") == 1
    assert str(e1).replace(str(tmp_path / "plain"), "D") == \
        str(e2).replace(str(tmp_path / "a key 'x' b"), "D")


def test_box_read_outside_the_shape_is_a_checkpoint_error(native_ckpt):
    import ctypes
    from ckptfs import _lib
    from ckptfs.load import read_batch
    with ckptfs.open(native_ckpt) as c:
        info = c.info()
        name, k = next((n, k) for n, k in info.keys.items()
                       if k.kind == "tensor" and k.shape and k.shape[0] > 1)
        reqs = (_lib.BoxReq * 1)()
        reqs[0].key = c.key_index(name)
        for d, s in enumerate(k.shape):
            reqs[0].size[d] = s
        reqs[0].off[0] = 1
        buf = ctypes.create_string_buffer(k.nbytes)
        reqs[0].dst = ctypes.addressof(buf)
        m = c._acquire()
        try:
            with pytest.raises(ckptfs.CheckpointError) as ei:
                read_batch(m, reqs, 1, 2, boxes=True)
        finally:
            c._release()
    assert ei.value.key == name and "lies outside the shape" in str(ei.value)



def test_an_empty_prefix_is_refused_as_the_cli_refuses_it(native_ckpt):
    """Issue 27 item 5: "" is refused before the library, with the
    command's message for --prefix ''."""
    with pytest.raises(ckptfs.CheckpointError, match="^prefix must not be "
                       "empty$"):
        ckptfs.load(native_ckpt, 2, 0, prefix="", backend="numpy")


@pytest.mark.parametrize("prefix", ["nope"])
def test_a_prefix_matching_nothing_lists_the_prefixes(native_ckpt, prefix):
    """Issue 19 item 9: a typo must not resume from an empty state; the
    library refuses it and the class comes from its code."""
    with pytest.raises(ckptfs.CheckpointError) as ei:
        ckptfs.load(native_ckpt, 2, 0, prefix=prefix, backend="numpy")
    e = ei.value
    assert e.code in (errno.EINVAL, errno.ENOENT)
    assert f"prefix '{prefix}' matches no key" in str(e)
    assert "'model'" in str(e) and "'optim'" in str(e)
    with ckptfs.open(native_ckpt) as c:
        with pytest.raises(ckptfs.CheckpointError):
            c.plan(2, 0, prefix=prefix)
        assert c.load(2, 0, prefix="optim", backend="numpy").keys() == \
            {"optim"}


def test_core_messages_naming_a_key_record_it():
    """A lint of core/: every ckpt_errf() whose format names a key ("key
    '") is a ckpt_errf_key(), which records it as the field (the header's
    "__metadata__" and the format's top-level keys are no checkpoint
    keys)."""
    import glob
    import re
    found = []
    for path in glob.glob(os.path.join(ROOT, "core", "**", "*.c"),
                          recursive=True):
        with open(path) as f:
            src = f.read()
        for m in re.finditer(r"\bckpt_errf\s*\(", src):
            i, depth = m.end(), 1
            while depth:
                ch = src[i]
                if ch == '"':
                    i += 1
                    while src[i] != '"':
                        i += 2 if src[i] == "\\" else 1
                depth += {"(": 1, ")": -1}.get(ch, 0)
                i += 1
            fmt = "".join(re.findall(r'"((?:\\.|[^"\\])*)"', src[m.end():i]))
            if re.search(r"keys? '(?!__metadata__)", fmt) and \
                    "top-level key" not in fmt:
                found.append(f"{os.path.relpath(path, ROOT)}:"
                             f"{src.count(chr(10), 0, m.start()) + 1}")
    assert not found, found


def test_errors_pickle_with_their_fields():
    """torch.distributed.checkpoint gathers each rank's exception to every
    rank by pickling it: a ReadError or CheckpointError must come back
    whole (it raised TypeError in __init__ before)."""
    import pickle
    from ckptfs.errors import CheckpointError, ReadError
    for e in (ReadError("d: short read", code=5, path="/x/__0_0.distcp",
                        key="model.w", offset=64),
              CheckpointError("bad", code=22, path="/x/.metadata")):
        b = pickle.loads(pickle.dumps(e))
        assert type(b) is type(e)
        assert (str(b), b.code, b.path, b.key, b.offset) == \
            (str(e), e.code, e.path, e.key, e.offset)
    r = pickle.loads(pickle.dumps(ReadError("m", code=5)))
    assert isinstance(r, OSError) and r.errno == 5


def test_open_errno_classes(tmp_path, native_ckpt):
    """Issue 26 item 13: a checkpoint path that does not exist is a
    FileNotFoundError (not a CheckpointError/ValueError); a directory that
    holds no checkpoint is a CheckpointError; a missing data file stays a
    CheckpointError."""
    missing = str(tmp_path / "nonexistent")
    for call in (lambda: ckptfs.open(missing),
                 lambda: ckptfs.load(missing),
                 lambda: ckptfs.open(missing).load(2, 0)):
        with pytest.raises(FileNotFoundError) as ei:
            call()
        e = ei.value
        assert not isinstance(e, ValueError)
        assert isinstance(e, ckptfs.Error) and isinstance(e, OSError)
        assert e.errno == errno.ENOENT and e.filename == missing
        assert str(e) == f"{missing}: cannot open: No such file or directory"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    with pytest.raises(ckptfs.CheckpointError) as ei:
        ckptfs.open(str(empty))
    assert not isinstance(ei.value, OSError)
    assert str(ei.value).startswith(f"{empty}: not a checkpoint: it holds "
                                    "none of .metadata")
    c = bad("file_missing", tmp_path / "fm")
    with pytest.raises(ckptfs.CheckpointError) as ei:
        ckptfs.open(c)
    assert not isinstance(ei.value, FileNotFoundError)
    assert ei.value.code == errno.ENOENT


def test_permission_denied_is_a_permission_error(tmp_path, native_ckpt):
    """A checkpoint directory the caller may not read: PermissionError
    (also a ReadError), run as nobody since root reads everything."""
    import shutil
    import tempfile
    # pytest's tmp_path lies under a 0700 directory, and so may the
    # clone itself: nobody gets a path, the package and the library of
    # its own
    top = tempfile.mkdtemp(prefix="ckptfs-perm-")
    try:
        os.chmod(top, 0o755)
        locked = os.path.join(top, "locked")
        shutil.copytree(native_ckpt, locked)
        os.chmod(locked, 0o700)
        shutil.copytree(os.path.join(ROOT, "scripts", "ckptfs"),
                        os.path.join(top, "py", "ckptfs"))
        lib = os.path.join(top, "libckptfs.so")
        shutil.copy(os.environ.get("CKPTFS_LIB") or
                    os.path.join(ROOT, "build", "libckptfs.so"), lib)
        for d, _, files in os.walk(top):
            if d != locked and not d.startswith(locked + os.sep):
                os.chmod(d, 0o755)
                for f in files:
                    os.chmod(os.path.join(d, f), 0o644)
        run_as_nobody(locked, os.path.join(top, "py"), lib)
    finally:
        shutil.rmtree(top)


def run_as_nobody(locked, pypath, lib):
    code = '''
import sys, ckptfs
try:
    ckptfs.open(sys.argv[1])
except PermissionError as e:
    print(type(e).__name__, e.errno, isinstance(e, ckptfs.ReadError), e)
'''
    env = dict(os.environ, PYTHONPATH=pypath, CKPTFS_LIB=lib,
               CKPTFS_INDEX_CACHE="")
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                        "--clear-groups", PY, "-c", code, str(locked)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (f"PermissionDeniedError {errno.EACCES} True "
                                f"{locked}: cannot open: Permission denied")
