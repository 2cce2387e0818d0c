# SPDX-License-Identifier: MIT
"""The node-local index cache (index_cache=, CKPTFS_INDEX_CACHE): of the
processes opening a torch checkpoint without a .ckptfs-index, one indexes
it and the others reuse its index; a stale, damaged or untrusted cache is
ignored with a warning and the bytes stay right.  Expected tensors come
from the generator's own seeded torch tensors (gen_torch_ckpt.full_tensor),
not from ckptfs."""
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from conftest import PY, ROOT, run_py

pytest.importorskip("torch")

# One process: open CKPT with the cache argument given (a directory, "off"
# for index_cache=False, "-" for the default), load rank 1 of 2 and check
# every tensor against the generator's; print origin, I/O counters of the
# open and the warnings as JSON.  With a start file, wait for it first so
# that several processes open at once.
OPEN = r"""
import json, os, sys, time, warnings
import torch
import ckptfs
sys.path.insert(0, os.path.join(sys.argv[4], "scripts"))
import gen_torch_ckpt as g

ck, cache, start = sys.argv[1], sys.argv[2], sys.argv[3]
kw = {} if cache == "-" else {"index_cache": False if cache == "off"
                              else cache}
while start != "-" and not os.path.exists(start):
    time.sleep(0.001)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    with ckptfs.open(ck, **kw) as c:
        origin, stats = c.info().origin, c.io_stats()
        sd = c.load(2, 1)
bad, n = [], 0
for name, shape, dt, dim in g.SMALL:
    if len(shape) == 0 or shape[0] < 2:
        continue
    want = torch.chunk(g.full_tensor(torch, 5, name, shape,
                                     getattr(torch, dt)), 2, 0)[1]
    got = sd
    for part in name.split("."):
        got = got[part]
    n += 1
    if got.dtype != want.dtype or not torch.equal(got, want):
        bad.append(name)
print(json.dumps({"origin": origin, "stats": stats, "bad": bad,
                  "checked": n, "warnings": [str(w.message) for w in ws]}))
"""


def open_once(ck, cache, start="-", env=None):
    p = run_py(OPEN, ck, cache, start, ROOT, env=env)
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["checked"] >= 8 and r["bad"] == [], r
    return r


@pytest.fixture
def ckpt(torch_ckpts, tmp_path):
    """A copy of the torch 1.13 per_rank checkpoint, free to change."""
    dst = tmp_path / "ckpt"
    shutil.copytree(os.path.join(torch_ckpts, "per_rank"), dst)
    return str(dst)


def images(cache):
    return sorted(f for f in os.listdir(cache) if f.endswith(".ckptfs-index"))


def forms(cache):
    return sorted(f for f in os.listdir(cache)
                  if f.endswith(".ckptfs-parsed"))


def damage_file(f, damage):
    with open(f, "r+b") as fh:
        size = os.fstat(fh.fileno()).st_size
        if damage == "flip":
            fh.seek(size - 40)
            b = fh.read(1)
            fh.seek(size - 40)
            fh.write(bytes([b[0] ^ 0x55]))
        elif damage == "truncate":
            fh.truncate(size // 2)
        elif damage == "empty":  # as a crash may leave an unsynced file
            fh.truncate(0)
        elif damage == "zeros":
            fh.write(bytes(size))
        else:
            fh.seek(0)
            fh.write(b"\xde\xad\xbe\xef" * 64)


def test_second_process_reuses_the_first_ones_index(ckpt, tmp_path):
    cache = str(tmp_path / "cache")
    first = open_once(ckpt, cache)
    assert first["origin"] == "torch" and first["warnings"] == []
    assert len(images(cache)) == 1
    # ... and beside it the checkpoint parsed from it, which the next
    # opens take instead of parsing the image
    assert [f.replace(".ckptfs-parsed", ".ckptfs-index")
            for f in forms(cache)] == images(cache)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    second = open_once(ckpt, cache)
    assert second["origin"] == "torch-index-cache", second
    assert second["warnings"] == []
    # A lazy open (the default, on every store: issue 38 item 2) reads
    # .metadata alone, whether it parsed the pickle or read the image.
    a, b = first["stats"], second["stats"]
    assert a["requests"] <= 2 and b["requests"] <= 2, (a, b)
    # The eager pass (CKPTFS_EAGER_INDEX=1) reads every record's zip
    # windows at open and caches what it found; the cached open reads
    # only .metadata.
    cache = str(tmp_path / "eager")
    eager = {"CKPTFS_EAGER_INDEX": "1"}
    first = open_once(ckpt, cache, env=eager)
    second = open_once(ckpt, cache, env=eager)
    assert first["origin"] == "torch", first
    assert second["origin"] == "torch-index-cache", second
    a, b = first["stats"], second["stats"]
    assert a["requests"] >= 20 and b["requests"] <= 2, (a, b)
    assert b["bytes_fetched"] * 3 < a["bytes_fetched"], (a, b)
    # Without the cache, every process indexes.
    assert open_once(ckpt, "off")["origin"] == "torch"


def test_a_stale_cache_entry_is_ignored_and_rebuilt(ckpt, tmp_path):
    cache = str(tmp_path / "cache")
    open_once(ckpt, cache)
    # The same bytes written again: a new mtime, so a new version.
    data = sorted(f for f in os.listdir(ckpt) if f.endswith(".distcp"))[0]
    path = os.path.join(ckpt, data)
    with open(path, "rb") as fh:
        body = fh.read()
    time.sleep(0.01)
    with open(path + ".new", "wb") as fh:
        fh.write(body)
    os.replace(path + ".new", path)
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch", r
    assert len(r["warnings"]) == 1, r
    assert "index cache" in r["warnings"][0] and data in r["warnings"][0]
    # Rebuilt: the next open uses it, silently.
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch-index-cache" and r["warnings"] == [], r


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage",
                                    "empty", "zeros"])
def test_a_damaged_cache_file_is_ignored_with_a_warning(ckpt, tmp_path,
                                                       damage):
    cache = str(tmp_path / "cache")
    open_once(ckpt, cache)
    # (Its parsed form, which stands in for the image's records, gone.)
    os.remove(os.path.join(cache, forms(cache)[0]))
    f = os.path.join(cache, images(cache)[0])
    damage_file(f, damage)
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch", r
    assert len(r["warnings"]) == 1 and f in r["warnings"][0], r
    assert open_once(ckpt, cache)["origin"] == "torch-index-cache"


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage",
                                    "empty", "zeros"])
def test_a_damaged_parsed_form_is_ignored_with_a_warning(ckpt, tmp_path,
                                                        damage):
    """The image is parsed instead (the tensors are checked), and the
    form written again: the next open takes it silently."""
    cache = str(tmp_path / "cache")
    open_once(ckpt, cache)
    f = os.path.join(cache, forms(cache)[0])
    damage_file(f, damage)
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch-index-cache", r
    assert len(r["warnings"]) == 1 and f in r["warnings"][0], r
    assert "parsed again" in r["warnings"][0], r
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch-index-cache" and r["warnings"] == [], r


def test_a_damaged_form_and_image_index_the_pickle_read_again(ckpt,
                                                              tmp_path):
    """A form of this image (its head fits) takes the pickle's place in
    memory before it is checked; when it then fails, and the image too,
    the pickle is read again to index it (the tensors are checked)."""
    cache = str(tmp_path / "cache")
    open_once(ckpt, cache)
    form = os.path.join(cache, forms(cache)[0])
    image = os.path.join(cache, images(cache)[0])
    damage_file(form, "flip")
    damage_file(image, "flip")
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch", r
    # (an open keeps its first warning: the form's)
    assert len(r["warnings"]) == 1, r
    assert form in r["warnings"][0] and "parsed again" in r["warnings"][0]
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch-index-cache" and r["warnings"] == [], r


def test_a_parsed_form_of_another_image_is_replaced(ckpt, tmp_path):
    """A form tagged for another image (the image rewritten since, as a
    close that stores what it located does) is not taken: the image is
    parsed, and its own form written."""
    cache = str(tmp_path / "cache")
    other = str(tmp_path / "other")
    open_once(ckpt, cache)
    # The same checkpoint's form, made for an eager image: same key,
    # another image.
    open_once(ckpt, other, env={"CKPTFS_EAGER_INDEX": "1"})
    open_once(ckpt, other, env={"CKPTFS_EAGER_INDEX": "1"})
    (name,) = forms(cache)
    shutil.copy(os.path.join(other, name), os.path.join(cache, name))
    before = open(os.path.join(cache, name), "rb").read()
    r = open_once(ckpt, cache)
    assert r["origin"] == "torch-index-cache" and r["warnings"] == [], r
    assert open(os.path.join(cache, name), "rb").read() != before


def test_an_untrusted_cache_is_not_used(ckpt, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    r = open_once(ckpt, str(cache))
    assert r["origin"] == "torch", r
    assert len(r["warnings"]) == 1, r
    assert "writable by group or others" in r["warnings"][0], r
    assert images(cache) == []
    # Owned by someone else (the tests run as root: chown works).
    if os.geteuid() == 0:
        os.chmod(cache, 0o700)
        os.chown(cache, 65534, 65534)
        r = open_once(ckpt, str(cache))
        assert r["origin"] == "torch" and images(cache) == []
        assert "not owned by this user" in r["warnings"][0], r
        os.chown(cache, 0, 0)
    # A symlinked cache file is not followed.
    os.chmod(cache, 0o700)
    open_once(ckpt, str(cache))
    f = cache / images(cache)[0]
    real = tmp_path / "elsewhere"
    os.replace(f, real)
    os.symlink(real, f)
    r = open_once(ckpt, str(cache))
    assert r["origin"] == "torch" and "symlink" in r["warnings"][0], r


def test_a_cache_that_cannot_be_written_falls_back(ckpt, tmp_path):
    # A read-only directory (root ignores modes: a file where it is made).
    cache = tmp_path / "not-a-dir"
    cache.write_bytes(b"")
    r = open_once(ckpt, str(cache))
    assert r["origin"] == "torch" and len(r["warnings"]) == 1, r
    assert str(cache) in r["warnings"][0]


def test_default_directory_and_switches(ckpt, tmp_path):
    xdg = tmp_path / "xdg"
    env = {"XDG_CACHE_HOME": str(xdg)}
    # CKPTFS_INDEX_CACHE unset: $XDG_CACHE_HOME/ckptfs.
    base = dict(os.environ)
    base.pop("CKPTFS_INDEX_CACHE", None)
    r = run_py(OPEN, ckpt, "-", "-", ROOT,
               env={**env, "CKPTFS_INDEX_CACHE": str(tmp_path / "env")})
    assert json.loads(r.stdout.splitlines()[-1])["origin"] == "torch"
    assert len(images(tmp_path / "env")) == 1
    p = subprocess.run([PY, "-c", OPEN, ckpt, "-", "-", ROOT], env={
        **base, **env,
        "PYTHONPATH": os.path.join(ROOT, "scripts")},
        capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(p.stdout.splitlines()[-1])["origin"] == "torch"
    assert len(images(xdg / "ckptfs")) == 1
    # Set but empty: no cache.
    r = open_once(ckpt, "-", env={**env, "CKPTFS_INDEX_CACHE": ""})
    assert r["origin"] == "torch"
    # index_cache=False wins over the environment.
    r = open_once(ckpt, "off",
                  env={"CKPTFS_INDEX_CACHE": str(tmp_path / "env")})
    assert r["origin"] == "torch"


def test_index_cache_argument_is_type_checked(native_ckpt):
    import ckptfs
    with pytest.raises(TypeError, match="index_cache"):
        ckptfs.open(native_ckpt, index_cache=3)
    with pytest.raises(ValueError, match="index_cache"):
        ckptfs.load(native_ckpt, index_cache="")


def lock_waiters(procs, lock):
    """How many of procs have the lock file open (they wait for it: the
    library polls flock(LOCK_NB) rather than blocking in it)."""
    n = 0
    for p in procs:
        fds = f"/proc/{p.pid}/fd"
        try:
            n += any(os.readlink(os.path.join(fds, f)) == lock
                     for f in os.listdir(fds))
        except OSError:
            pass
    return n


def test_concurrent_first_opens_index_once(ckpt, tmp_path):
    # The key's lock file is made by a first open; its image removed, the
    # cache is empty again.  This test holds the lock while 4 processes
    # start, so that all of them find no image and wait for the lock at
    # once; then lets them go: one indexes, three reuse its index.
    cache = str(tmp_path / "cache")
    open_once(ckpt, cache)
    img = images(cache)[0]
    os.unlink(os.path.join(cache, img))
    lock = os.path.join(cache, img[:-len(".ckptfs-index")] + ".lock")
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(ROOT, "scripts") + os.pathsep + \
        os.path.join(ROOT, "tests")
    fd = os.open(lock, os.O_RDWR)
    procs = []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        procs = [subprocess.Popen([PY, "-c", OPEN, ckpt, cache, "-", ROOT],
                                  env=e, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
        deadline = time.monotonic() + 100
        while lock_waiters(procs, lock) < 4 and \
                time.monotonic() < deadline and \
                all(p.poll() is None for p in procs):
            time.sleep(0.05)
        time.sleep(0.2)     # past their first look for an image
        waiting = lock_waiters(procs, lock)
        fcntl.flock(fd, fcntl.LOCK_UN)
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        os.close(fd)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert waiting == 4
    res = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        res.append(json.loads(out.splitlines()[-1]))
    origins = sorted(r["origin"] for r in res)
    assert origins == ["torch"] + ["torch-index-cache"] * 3, res
    assert all(r["bad"] == [] and r["warnings"] == [] for r in res), res
    assert images(cache) == [img]


def test_a_lock_held_too_long_falls_back(ckpt, tmp_path):
    # A holder that never lets go (stopped, hung): the others wait at most
    # CKPTFS_INDEX_CACHE_WAIT_MS, then index in memory with a warning.
    cache = str(tmp_path / "cache")
    open_once(ckpt, cache)
    img = images(cache)[0]
    os.unlink(os.path.join(cache, img))
    lock = os.path.join(cache, img[:-len(".ckptfs-index")] + ".lock")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = open_once(ckpt, cache,
                      env={"CKPTFS_INDEX_CACHE_WAIT_MS": "300"})
    finally:
        os.close(fd)
    assert r["origin"] == "torch" and r["bad"] == [], r
    assert len(r["warnings"]) == 1, r
    assert "held by another process" in r["warnings"][0], r
    assert images(cache) == []


def test_at_most_64_images_the_oldest_removed(torch_ckpts, tmp_path):
    # 65 checkpoints (the same files under other names): the oldest image
    # goes when the 65th is written.
    cache = str(tmp_path / "cache")
    src = os.path.join(torch_ckpts, "per_rank")
    code = r"""
import sys, ckptfs
for ck in sys.argv[2:]:
    ckptfs.open(ck, index_cache=sys.argv[1]).close()
"""
    cks = []
    for i in range(66):
        d = tmp_path / f"c{i}"
        d.mkdir()
        for f in os.listdir(src):
            os.link(os.path.join(src, f), d / f)
        cks.append(str(d))
    run_py(code, cache, *cks[:64])
    first = images(cache)
    assert len(first) == 64
    oldest = min(first, key=lambda f: os.stat(os.path.join(cache, f))
                 .st_mtime_ns)
    os.utime(os.path.join(cache, oldest), (1, 1))
    run_py(code, cache, cks[64])
    now = images(cache)
    assert len(now) == 64 and oldest not in now
    assert not os.path.exists(os.path.join(cache, oldest[:-13] + "lock"))
    # Kept by use, not by write: all made old, one opened again (a hit),
    # then a new one written: the one used stays.
    for f in now:
        os.utime(os.path.join(cache, f), (1, 1))
    run_py(code, cache, cks[1])
    used = [f for f in now
            if os.stat(os.path.join(cache, f)).st_mtime_ns > 10**9]
    assert len(used) == 1
    # cks[1]'s image the oldest of all, then used again: the next write
    # removes the next oldest instead.
    others = sorted(f for f in now if f != used[0])
    os.utime(os.path.join(cache, used[0]), (1, 1))
    for i, f in enumerate(others):
        os.utime(os.path.join(cache, f), (2 + i, 2 + i))
    run_py(code, cache, cks[1])
    run_py(code, cache, cks[65])
    after = images(cache)
    assert len(after) == 64 and used[0] in after and others[0] not in after


def test_checkpoints_that_fail_to_index_leave_nothing_in_the_cache(
        torch_ckpts, tmp_path):
    # 70 checkpoints whose first data file is cut short: each open is
    # refused, and no lock file is left for it (they piled up beyond the
    # bound of 64, which counts images), while a good one is still cached.
    # (A lazy open, which reads no record at open, refuses the short file
    # when it opens the data files: what an image it stored would say.)
    cache = str(tmp_path / "cache")
    src = os.path.join(torch_ckpts, "per_rank")
    code = r"""
import sys, ckptfs
refused = 0
for ck in sys.argv[2:]:
    try:
        ckptfs.open(ck, index_cache=sys.argv[1]).close()
    except ckptfs.Error as e:
        refused += 1
        assert "runs past the end" in str(e) or \
            "its record ends at" in str(e), e
print(refused)
"""
    cks = []
    for i in range(70):
        d = tmp_path / f"bad{i}"
        shutil.copytree(src, d)
        os.truncate(d / "__0_0.distcp", 100)
        cks.append(str(d))
    p = run_py(code, cache, *cks)
    assert p.stdout.split()[-1] == "70"
    assert os.listdir(cache) == []
    run_py(code, cache, src)
    assert len(images(cache)) == 1


def test_default_cache_leaves_a_network_filesystem(tmp_path):
    """Issue 26 item 9: a home on a network filesystem (here a FUSE one:
    a ckptfs mount of the demo) is no place for a node-local cache: the
    default moves to /var/tmp/ckptfs-UID with one warning; a local home
    keeps ~/.cache/ckptfs, silently."""
    import time
    from conftest import CKPTFS
    code = ("import warnings, ckptfs._args as a\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    print(a.default_index_cache().decode())\n"
            "    print(len(w), w[0].message if w else '')\n")
    env = {"CKPTFS_INDEX_CACHE": None, "XDG_CACHE_HOME": None}

    def default_for(home):
        e = {k: v for k, v in os.environ.items() if k not in env}
        e["HOME"] = str(home)
        e["PYTHONPATH"] = os.path.join(ROOT, "scripts")
        p = subprocess.run([PY, "-c", code], env=e, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout.splitlines()

    out = default_for(tmp_path)
    assert out[0] == str(tmp_path / ".cache" / "ckptfs")
    assert out[1].startswith("0")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([CKPTFS, "mount", os.path.join(ROOT, "demo",
                                                           "ckpt"),
                             str(mnt), "-f"])
    try:
        for _ in range(400):
            if os.path.ismount(mnt) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert os.path.ismount(mnt)
        out = default_for(mnt)
        assert out[0] == f"/var/tmp/ckptfs-{os.getuid()}"
        assert out[1].startswith("1 ") and "network filesystem (fuse)" \
            in out[1], out
    finally:
        subprocess.call(["fusermount3", "-u", str(mnt)])
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            subprocess.call(["fusermount3", "-uz", str(mnt)])
            proc.kill()
            proc.wait()


# One process: open CKPT with cache directory CACHE, note the size of the
# cache's image, load rank 1 of 2 (locating its records), close; print the
# image's size at open and after the close, and the bytes the load read.
LOAD_AND_CLOSE = r"""
import json, os, sys
import ckptfs
ck, cache = sys.argv[1], sys.argv[2]
def size():
    return sum(os.path.getsize(os.path.join(cache, f))
               for f in os.listdir(cache) if f.endswith(".ckptfs-index"))
c = ckptfs.open(ck, index_cache=cache)
origin, at_open, before = c.info().origin, size(), c.io_stats()
c.load(2, 1)
after = c.io_stats()
c.close()
print(json.dumps({"origin": origin, "at_open": at_open, "closed": size(),
                  "load_bytes": after["bytes_fetched"] -
                  before["bytes_fetched"]}))
"""


def test_a_local_lazy_open_stores_what_it_located_at_close(ckpt, tmp_path):
    """A local lazy open does not keep the pickle for the cache (it reads
    .metadata again at close, and stores nothing if it changed): what it
    located still reaches the cache, and the next process's load reads
    no locating window."""
    cache = str(tmp_path / "cache")
    os.mkdir(cache, 0o700)

    def run():
        return json.loads(run_py(LOAD_AND_CLOSE, ckpt,
                                 cache).stdout.splitlines()[-1])

    first = run()
    assert first["origin"] == "torch", first
    assert first["closed"] > first["at_open"], first
    second = run()
    assert second["origin"] == "torch-index-cache", second
    assert second["closed"] == first["closed"], (first, second)
    # no locating windows: only the records' bytes
    assert second["load_bytes"] < first["load_bytes"], (first, second)
    # .metadata replaced (same size, other bytes) while a process has it
    # open: what that process located is not stored under the new one's
    # entry, nor under its own (the pickle is not the one it opened).
    shutil.rmtree(cache)
    os.mkdir(cache, 0o700)
    meta = os.path.join(ckpt, ".metadata")
    swap = r"""
import json, os, sys
import ckptfs
ck, cache, meta = sys.argv[1], sys.argv[2], sys.argv[3]
c = ckptfs.open(ck, index_cache=cache)
c.load(2, 1)
with open(meta, "rb") as f:      # still a pickle, naming another file
    b = f.read()
with open(meta, "r+b") as f:
    f.write(b.replace(b".distcp", b".distcq", 1))
c.close()
print(json.dumps(sorted(os.path.getsize(os.path.join(cache, f))
                        for f in os.listdir(cache)
                        if f.endswith(".ckptfs-index"))))
"""
    sizes = json.loads(run_py(swap, ckpt, cache, meta).stdout.splitlines()[-1])
    assert sizes == [first["at_open"]], (sizes, first)
