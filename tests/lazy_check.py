#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Requests of a lazy open of a PyTorch checkpoint in an object store
(tests/bats/s3lazy.bats), counted by the fault proxy in front of radosgw.

    lazy_check.py records CKPT W R
        how many storage records (saved chunks) of local torch checkpoint
        CKPT rank R of W reads: the chunks its rows of each tensor
        (torch.chunk(t, W, 0)[R]; a one-element tensor whole) meet, from
        torch's own read_metadata().
    lazy_check.py share CKPT W R
        "records N bytes B": records(), and the bytes of those records
        (their storage records' lengths: a torch.save archive each).
    lazy_check.py counts S3URL LOCAL PROXY W R
        through PROXY: the GETs of ckptfs.open(S3URL) alone, then of
        ckptfs.load(S3URL, W, R) (open, locate, data), printed as
        "open_gets N load_gets M" (GETs of objects; a listing's GET is
        not counted); and the load must equal
        ckptfs.load(LOCAL, W, R) byte for byte.
    lazy_check.py broken S3URL PROXY W R KEY
        through PROXY: ckptfs.load(S3URL, W, R), which reads the broken
        record of KEY, must fail with an error naming KEY.
    lazy_check.py opencounts S3URL PROXY
        through PROXY: the requests of ckptfs.open(S3URL) (which opens
        the data files too), by kind, as the proxy counts them: "gets G
        heads H lists L" (a GET of a listing is a LIST, not a GET).
    lazy_check.py cached S3URL LOCAL PROXY W R CACHEDIR N
        N times through PROXY: ckptfs.load(S3URL, W, R) with the index
        cache CACHEDIR, each equal to ckptfs.load(LOCAL, W, R); prints
        "gets G1 G2 ..." (GETs of objects of each load, open included),
        "bytes B1 B2 ..." (their body bytes) and then each warning the
        loads gave, one a line.
    lazy_check.py lazyeager CKPT PROXY W R [W R ...]
        for each (W, R): ckptfs.load(CKPT, W, R) opened lazily (the
        default, on every store) and eagerly (CKPTFS_EAGER_INDEX=1), no
        index cache, through PROXY when CKPT is s3:// ("-": none); the
        two must be equal byte for byte.  Prints one line per (W, R):
        the files, and the bytes each read (io_stats: bytes_fetched).
    lazy_check.py side S3URL LOCAL PROXY W R [CACHE_MB]
        through PROXY: ckptfs.load(S3URL, W, R) of one handle (opened
        with cache_mb=CACHE_MB when given), equal to
        ckptfs.load(LOCAL, W, R); prints "side S data D": the handle's
        io_stats()["side_bytes_peak"] (the most bytes its joined reads
        held in buffers of their own) and the loaded arrays' bytes
        (numpy's nbytes).
    lazy_check.py corrupt CKPT
        breaks the zip of one record (its end of central directory) of
        local checkpoint CKPT, in place, and prints its key.
"""
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))


def read_metadata(ckpt):
    import torch_dcp_compat
    torch_dcp_compat.install()
    import torch.distributed._shard.checkpoint as dcp
    return dcp.FileSystemReader(ckpt).read_metadata()


def records(ckpt, world, rank):
    return share(ckpt, world, rank)[0]


def share(ckpt, world, rank):
    """records(), and the bytes of those records (their storage
    records' lengths: archive and all)."""
    md = read_metadata(ckpt)
    from torch.distributed._shard.checkpoint.metadata import \
        BytesStorageMetadata, MetadataIndex
    n = nbytes = 0

    def count(fqn, c):
        nonlocal n, nbytes
        n += 1
        nbytes += md.storage_data[MetadataIndex(fqn, c.offsets)].length

    for fqn, v in md.state_dict_metadata.items():
        if isinstance(v, BytesStorageMetadata):
            continue
        size = tuple(v.size)
        numel = 1
        for d in size:
            numel *= d
        if numel == 0:
            continue
        if numel == 1:
            for c in v.chunks:
                count(fqn, c)
            continue
        rows = -(-size[0] // world)
        lo, hi = rank * rows, min(size[0], (rank + 1) * rows)
        for c in v.chunks:
            if hi > lo and c.offsets[0] < hi and lo < c.offsets[0] + c.sizes[0]:
                count(fqn, c)
    return n, nbytes


def proxy_gets(proxy):
    with urllib.request.urlopen(proxy + "/__faultproxy/stats") as r:
        log = json.load(r)["log"]
    # a GET of a listing (list-type= in its query) is not an object's
    return sum(1 for e in log if e[0] == "GET" and "list-type=" not in e[1])


def proxy_get_bytes(proxy):
    """Body bytes of the GETs of objects (listings not counted)."""
    with urllib.request.urlopen(proxy + "/__faultproxy/stats") as r:
        log = json.load(r)["log"]
    return sum(e[4] for e in log if e[0] == "GET" and "list-type=" not in e[1])


def proxy_by_method(proxy):
    with urllib.request.urlopen(proxy + "/__faultproxy/stats") as r:
        return json.load(r)["by_method"]


def opencounts(url, proxy):
    import ckptfs
    proxy_reset(proxy)
    with ckptfs.open(url, s3_endpoint=proxy, index_cache=False):
        pass
    m = proxy_by_method(proxy)
    print(f"gets {m.get('GET', 0)} heads {m.get('HEAD', 0)} "
          f"lists {m.get('LIST', 0)}")
    return 0


def same_load(got, want):
    a = {p: as_bytes(v) for p, v in flat(got)}
    b = {p: as_bytes(v) for p, v in flat(want)}
    if a.keys() != b.keys():
        print("keys differ:", sorted(a.keys() ^ b.keys())[:5])
        return False
    bad = [p for p in a if a[p] != b[p]]
    if bad:
        print(f"{len(bad)} of {len(a)} files differ, e.g. {bad[:3]}")
        return False
    return True


def cached(url, local, proxy, world, rank, cdir, n):
    import warnings
    import ckptfs
    want = ckptfs.load(local, world, rank, backend="numpy",
                       index_cache=False)
    gets, nbytes, said = [], [], []
    for _ in range(n):
        proxy_reset(proxy)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = ckptfs.load(url, world, rank, backend="numpy",
                              index_cache=cdir, s3_endpoint=proxy,
                              trust_pickles=False)
        said += [str(x.message) for x in w]
        gets.append(proxy_gets(proxy))
        nbytes.append(proxy_get_bytes(proxy))
        if not same_load(got, want):
            return 1
    print("gets " + " ".join(str(g) for g in gets))
    print("bytes " + " ".join(str(b) for b in nbytes))
    for x in said:
        print(x)
    return 0


def proxy_reset(proxy):
    req = urllib.request.Request(proxy + "/__faultproxy/reset", data=b"{}",
                                 method="POST")
    urllib.request.urlopen(req).read()


def flat(d, path=()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, path + (k,))
        else:
            yield path + (k,), v


def as_bytes(v):
    import numpy as np
    if isinstance(v, np.ndarray):
        return np.ascontiguousarray(v).tobytes()
    return bytes(v)


def counts(url, local, proxy, world, rank):
    import ckptfs
    proxy_reset(proxy)
    t0 = time.monotonic()
    with ckptfs.open(url, s3_endpoint=proxy, index_cache=False):
        t_open = time.monotonic() - t0
    open_gets = proxy_gets(proxy)
    proxy_reset(proxy)
    t0 = time.monotonic()
    got = ckptfs.load(url, world, rank, backend="numpy", index_cache=False,
                      s3_endpoint=proxy, trust_pickles=False)
    t_load = time.monotonic() - t0
    load_gets = proxy_gets(proxy)
    want = ckptfs.load(local, world, rank, backend="numpy",
                       index_cache=False)
    a = {p: as_bytes(v) for p, v in flat(got)}
    b = {p: as_bytes(v) for p, v in flat(want)}
    if a.keys() != b.keys():
        print("keys differ:", sorted(a.keys() ^ b.keys())[:5])
        return 1
    bad = [p for p in a if a[p] != b[p]]
    if bad:
        print(f"{len(bad)} of {len(a)} files differ, e.g. {bad[:3]}")
        return 1
    print(f"open_gets {open_gets} load_gets {load_gets} files {len(a)} "
          f"(open {t_open:.3f} s, load {t_load:.3f} s)")
    return 0


def load_as(ckpt, proxy, world, rank, eager):
    """ckptfs.load of CKPT's rank RANK of WORLD, opened lazily or
    eagerly (CKPTFS_EAGER_INDEX, read by each open): its files' bytes and
    the bytes its handle fetched."""
    import ckptfs
    if eager:
        os.environ["CKPTFS_EAGER_INDEX"] = "1"
    else:
        os.environ.pop("CKPTFS_EAGER_INDEX", None)
    kw = {"s3_endpoint": proxy} if proxy != "-" else {}
    try:
        with ckptfs.open(ckpt, index_cache=False, **kw) as h:
            got = h.load(world, rank, backend="numpy")
            fetched = h.io_stats()["bytes_fetched"]
    finally:
        os.environ.pop("CKPTFS_EAGER_INDEX", None)
    return {p: as_bytes(v) for p, v in flat(got)}, fetched


def lazyeager(ckpt, proxy, pairs):
    for world, rank in pairs:
        a, fa = load_as(ckpt, proxy, world, rank, False)
        b, fb = load_as(ckpt, proxy, world, rank, True)
        if a.keys() != b.keys():
            print(f"W={world} R={rank}: keys differ:",
                  sorted(a.keys() ^ b.keys())[:5])
            return 1
        bad = [p for p in a if a[p] != b[p]]
        if bad:
            print(f"W={world} R={rank}: {len(bad)} of {len(a)} files "
                  f"differ, e.g. {bad[:3]}")
            return 1
        print(f"W={world} R={rank}: {len(a)} files equal; bytes read "
              f"lazy {fa} eager {fb}")
    return 0


def side(url, local, proxy, world, rank, cache_mb=None):
    import ckptfs
    with ckptfs.open(url, s3_endpoint=proxy, index_cache=False,
                     cache_mb=cache_mb) as ck:
        got = ck.load(world, rank, backend="numpy")
        peak = ck.io_stats()["side_bytes_peak"]
    want = ckptfs.load(local, world, rank, backend="numpy",
                       index_cache=False)
    a = {p: as_bytes(v) for p, v in flat(got)}
    b = {p: as_bytes(v) for p, v in flat(want)}
    if a != b:
        print("the load differs from the local load")
        return 1
    data = sum(v.nbytes for _, v in flat(want) if hasattr(v, "nbytes"))
    print(f"side {peak} data {data}")
    return 0


def broken(url, proxy, world, rank, key):
    """ckptfs.load of a rank that reads the broken record `key` from
    s3:// must fail naming it (never return other bytes)."""
    import ckptfs
    try:
        ckptfs.load(url, world, rank, backend="numpy", index_cache=False,
                    s3_endpoint=proxy, trust_pickles=False)
    except Exception as e:  # noqa: BLE001 - any error, checked below
        if key not in str(e):
            print(f"error does not name {key}: {e}")
            return 1
        print(f"refused: {str(e)[:300]}")
    else:
        print("the load of a broken record succeeded")
        return 1
    return 0


def corrupt(ckpt):
    md = read_metadata(ckpt)
    from torch.distributed._shard.checkpoint.metadata import \
        BytesStorageMetadata
    for mi, si in sorted(md.storage_data.items(),
                         key=lambda x: (x[1].relative_path, x[1].offset)):
        if isinstance(md.state_dict_metadata[mi.fqn], BytesStorageMetadata):
            continue
        path = os.path.join(ckpt, si.relative_path)
        with open(path, "r+b") as f:
            f.seek(si.offset + si.length - 4096 if si.length > 4096
                   else si.offset)
            tail = f.read(min(si.length, 4096))
            at = tail.rfind(b"PK\x05\x06")
            if at < 0:
                continue
            f.seek(si.offset + si.length - len(tail) + at)
            f.write(b"XX\x05\x06")
        print(mi.fqn)
        return 0
    return 1


def main(argv):
    if argv[0] == "records":
        print(records(argv[1], int(argv[2]), int(argv[3])))
        return 0
    if argv[0] == "share":
        n, nbytes = share(argv[1], int(argv[2]), int(argv[3]))
        print(f"records {n} bytes {nbytes}")
        return 0
    if argv[0] == "broken":
        return broken(argv[1], argv[2], int(argv[3]), int(argv[4]),
                      argv[5])
    if argv[0] == "counts":
        return counts(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))
    if argv[0] == "opencounts":
        return opencounts(argv[1], argv[2])
    if argv[0] == "cached":
        return cached(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]),
                      argv[6], int(argv[7]))
    if argv[0] == "side":
        return side(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]),
                    int(argv[6]) if len(argv) > 6 else None)
    if argv[0] == "corrupt":
        return corrupt(argv[1])
    if argv[0] == "lazyeager":
        nums = [int(x) for x in argv[3:]]
        if not nums or len(nums) % 2:
            print(__doc__)
            return 2
        return lazyeager(argv[1], argv[2], list(zip(nums[::2], nums[1::2])))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
