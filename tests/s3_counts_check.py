#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""io_stats() against the fault proxy's own count (tests/bats/s3.bats): the
GETs, HEADs and LISTs and the object bytes that a handle and a
StorageReader report for their open and for their reads must equal, to
the request and the byte, what tests/s3/faultproxy.py saw go by.

Usage: s3_counts_check.py TORCH_S3ROOT TORCH_LOCAL ST_S3ROOT PROXY_URL
Prints one line per phase; exits 1 on the first difference.
"""

import json
import os
import sys
import urllib.request

# libckptfs names its process in its User-Agent only when a test asks:
# "ckptfs/VERSION (pid N)" (else "ckptfs/VERSION")
os.environ["CKPTFS_TEST_UA_PID"] = "1"

import torch_dcp_compat  # scripts/: torch 1.13's DCP on Python 3.11

torch_dcp_compat.install()
import torch  # noqa: E402

import ckptfs  # noqa: E402
from ckptfs.torch import dcp_modules  # noqa: E402

dcp = dcp_modules()[0]

KINDS = ("gets", "heads", "lists")
LOG_MAX = 20000     # the entries tests/s3/faultproxy.py keeps


def proxy(url, what, body=None):
    req = urllib.request.Request(
        "%s/__faultproxy/%s" % (url, what),
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def counted(p):
    """The proxy's counts of this process's requests, in io_stats()'s
    names, from its log: libckptfs names its process in its User-Agent
    ("ckptfs/VERSION (pid N)", as CKPTFS_TEST_UA_PID=1 asks), so a request another process sent to the same
    proxy meanwhile is told apart (printed, not counted)."""
    mine = "(pid %d)" % os.getpid()
    out = {k: 0 for k in KINDS}
    out["bytes_fetched"] = 0
    if len(p["log"]) >= LOG_MAX:
        sys.exit("FAIL: the proxy's log is full (%d entries)" % LOG_MAX)
    for e in p["log"]:
        if not e[8].endswith(mine):
            print("proxy saw another process's request: %s" % (e,))
            continue
        kind = ("lists" if e[0] == "GET" and "list-type=" in e[1] else
                {"GET": "gets", "HEAD": "heads"}.get(e[0]))
        if kind is None:
            continue
        out[kind] += 1
        if kind == "gets":
            out["bytes_fetched"] += e[4]
    return out


def minus(a, b):
    return {k: a[k] - b[k] for k in a}


def same(what, ours, theirs, url):
    line = "%s: ckptfs %s, proxy %s" % (what, ours, theirs)
    print(line)
    if ours != theirs:
        for e in proxy(url, "stats")["log"]:    # since its reset
            print("proxy log: %s" % (e,))
        sys.exit("FAIL " + line)


def phase(st, name):
    return {k: st["%s_%s" % (name, k)] for k in KINDS + ("bytes_fetched",)}


def check_totals(what, st):
    if st["requests"] != sum(st["open_" + k] + st["read_" + k]
                             for k in KINDS):
        sys.exit("FAIL %s: requests %d is not the GETs + HEADs + LISTs "
                 "of %s" % (what, st["requests"], st))
    for k in ("bytes_fetched", "bytes_delivered"):
        if st[k] != st["open_" + k] + st["read_" + k]:
            sys.exit("FAIL %s: %s is not open + read: %s" % (what, k, st))


def handle_case(root, url):
    """Open (indexing a torch checkpoint: no index cache), then a load."""
    proxy(url, "config", {"mode": "none"})
    proxy(url, "reset", {})
    with ckptfs.open(root, s3_endpoint=url, index_cache=False) as c:
        st = c.io_stats()
        p0 = counted(proxy(url, "stats"))
        same("handle open", phase(st, "open"), p0, url)
        same("handle reads before any", phase(st, "read"),
             {k: 0 for k in p0}, url)
        c.load(world=2, rank=1)
        st = c.io_stats()
        p1 = counted(proxy(url, "stats"))
        same("handle open after the load", phase(st, "open"), p0, url)
        same("handle load", phase(st, "read"), minus(p1, p0), url)
        if not st["read_gets"] or not st["open_gets"]:
            sys.exit("FAIL: no GETs counted (%s)" % st)
        check_totals("handle", st)


def reader_case(root, local, url):
    """A StorageReader: read_metadata reads .metadata alone, through a
    store of its own (the checkpoint is not opened: io_stats() stays
    zeros); a load then opens it at its first read; the bytes are checked
    against torch's FileSystemReader."""
    proxy(url, "reset", {})
    r = ckptfs.StorageReader(root, s3_endpoint=url, index_cache=False,
                             cooperative=False)
    md = r.read_metadata()
    pm = counted(proxy(url, "stats"))
    print("StorageReader read_metadata: proxy %s" % pm)
    if any(r.io_stats().values()):
        sys.exit("FAIL: read_metadata opened the checkpoint: %s"
                 % r.io_stats())
    size = os.path.getsize(os.path.join(local, ".metadata"))
    # one GET, of .metadata (and the store's probe of the root: a LIST)
    if pm["gets"] != 1 or pm["lists"] > 1 or pm["bytes_fetched"] != size:
        sys.exit("FAIL: read_metadata fetched more than .metadata (%d "
                 "bytes): %s" % (size, pm))
    if md != dcp.FileSystemReader(local).read_metadata() or \
            not md.storage_data:
        sys.exit("FAIL: read_metadata of %s is not FileSystemReader's of "
                 "its local copy" % root)
    mine, ref = {}, {}
    for k, m in md.state_dict_metadata.items():
        if hasattr(m, "size"):
            mine[k] = torch.zeros(m.size, dtype=m.properties.dtype)
            ref[k] = torch.zeros(m.size, dtype=m.properties.dtype)
    r.close()
    r = ckptfs.StorageReader(root, s3_endpoint=url, index_cache=False,
                             cooperative=False)
    proxy(url, "reset", {})
    dcp.load_state_dict(mine, storage_reader=r, no_dist=True)
    st = r.io_stats()
    p1 = counted(proxy(url, "stats"))
    # read_metadata's requests again (not the handle's), then the open
    # and the reads of the load.
    opened = phase(st, "open")
    if not opened["gets"]:
        sys.exit("FAIL: the load's open counted no GET (%s)" % st)
    both = {k: opened[k] + v for k, v in phase(st, "read").items()}
    same("StorageReader open and load", both, minus(p1, pm), url)
    if st["read_bytes_fetched"] == 0:
        sys.exit("FAIL: the load fetched nothing (%s)" % st)
    check_totals("StorageReader", st)
    r.close()
    if r.io_stats() != st:
        sys.exit("FAIL: io_stats() after close %s, before %s"
                 % (r.io_stats(), st))
    dcp.load_state_dict(ref, storage_reader=dcp.FileSystemReader(local),
                        no_dist=True)
    for k in ref:
        if not torch.equal(mine[k], ref[k]):
            sys.exit("FAIL: %s differs from FileSystemReader's" % k)
    print("StorageReader: %d tensors equal FileSystemReader's" % len(ref))


def listing_case(root, url):
    """A safetensors directory: the open lists it."""
    proxy(url, "reset", {})
    with ckptfs.open(root, s3_endpoint=url, index_cache=False) as c:
        st = c.io_stats()
        p0 = counted(proxy(url, "stats"))
        same("safetensors open", phase(st, "open"), p0, url)
        if st["open_lists"] < 2:    # the probe, then the listing
            sys.exit("FAIL: %d LISTs at open" % st["open_lists"])
        c.load()
        st = c.io_stats()
        p1 = counted(proxy(url, "stats"))
        same("safetensors load", phase(st, "read"), minus(p1, p0), url)
        check_totals("safetensors", st)


def main():
    troot, tlocal, stroot, url = sys.argv[1:5]
    handle_case(troot, url)
    reader_case(troot, tlocal, url)
    listing_case(stroot, url)
    print("ok")


if __name__ == "__main__":
    main()
