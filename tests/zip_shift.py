# SPDX-License-Identifier: MIT
"""Rewrite a .distcp file in place so that one record's tensor bytes start
64 bytes later, as issue 26 item 1 describes: the torch.save archive keeps
its offset and length in the file (so .metadata stays right), the file its
size, and the tensor its values; only where the storage's bytes lie inside
the archive changes.  The storage's zip local header stays where it was,
with an extra field 64 bytes longer, so only a check of the whole header
(not its signature and name alone) sees the move.

Usage: zip_shift.py FILE  (prints the shifted record's archive offset)."""
import re
import struct
import sys
import zlib

SHIFT = 64


def _archives(b):
    """(start, end) of each zip archive of the concatenation b."""
    out, start = [], 0
    for m in re.finditer(rb"PK\x05\x06", b):
        e = m.start()
        n, cd_size, cd_off, clen = struct.unpack("<HII H", b[e + 10:e + 22])
        if cd_off == 0xFFFFFFFF:   # zip64: offsets in the zip64 record
            z = b.rfind(b"PK\x06\x06", start, e)
            cd_size, cd_off = struct.unpack("<QQ", b[z + 40:z + 56])
        if b[start + cd_off:start + cd_off + 4] != b"PK\x01\x02":
            continue
        out.append((start, e + 22 + clen))
        start = e + 22 + clen
    return out


def _entries(a):
    """The entries of archive a: (name, lho, size, crc, local extra)."""
    e = a.rfind(b"PK\x05\x06")
    n = struct.unpack("<H", a[e + 10:e + 12])[0]
    cd_off = struct.unpack("<I", a[e + 16:e + 20])[0]
    if cd_off == 0xFFFFFFFF:
        z = a.rfind(b"PK\x06\x06", 0, e)
        cd_off = struct.unpack("<Q", a[z + 48:z + 56])[0]
    out, at = [], cd_off
    for _ in range(n):
        assert a[at:at + 4] == b"PK\x01\x02"
        crc, csz, usz, nl, xl, cl = struct.unpack("<IIIHHH", a[at + 16:at + 34])
        lho = struct.unpack("<I", a[at + 42:at + 46])[0]
        name = a[at + 46:at + 46 + nl]
        assert csz == usz and lho != 0xFFFFFFFF and usz != 0xFFFFFFFF
        lnl, lxl = struct.unpack("<HH", a[lho + 26:lho + 30])
        extra = a[lho + 30 + lnl:lho + 30 + lnl + lxl]
        out.append((name, lho, usz, crc, extra))
        at += 46 + nl + xl + cl
    return out


def _local(name, size, crc, extra):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x800, 0, 0, 0, crc,
                       size, size, len(name), len(extra)) + name + extra


def _central(name, size, crc, lho):
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0x800, 0, 0,
                       0, crc, size, size, len(name), 0, 0, 0, 0, 0,
                       lho) + name


def shift_archive(a):
    """Archive a rebuilt, of the same length, with its data/N storage's
    bytes SHIFT bytes later and its local header where it was."""
    ents = _entries(a)
    k = next(i for i, e in enumerate(ents) if b"/data/" in e[0])
    out = bytearray(a[:ents[k][1]])     # everything before it, as it was
    cd = [_central(n, s, c, lho) for n, lho, s, c, _ in ents[:k]]
    for i, (name, lho, size, crc, extra) in enumerate(ents[k:]):
        start = len(out)
        data_at = lho + 30 + len(name) + len(extra)
        if i == 0:
            # torch's own padding field ("FB"), SHIFT bytes longer
            pad = extra + b"\0" * SHIFT
            if pad[:2] == b"FB":
                pad = b"FB" + struct.pack("<H", len(pad) - 4) + pad[4:]
        else:
            pad = b""
        out += _local(name, size, crc, pad) + a[data_at:data_at + size]
        cd.append(_central(name, size, crc, start))
    cdb = b"".join(cd)
    room = len(a) - len(out) - len(cdb) - 22
    assert room >= 0, "no room to shift the record"
    out += b"\0" * room          # what the saved bytes free: a gap
    cd_off = len(out)
    out += cdb
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(ents), len(ents),
                       len(cdb), cd_off, 0)
    assert len(out) == len(a)
    return bytes(out)


def shift_record(path):
    """Shift the largest tensor record of the .distcp file path in place
    (same inode, size and, with the caller's touch -r, mtime).  Returns
    the archive's offset in the file."""
    with open(path, "rb") as f:
        b = f.read()
    best = None
    for s, e in _archives(b):
        try:
            ents = _entries(b[s:e])
        except AssertionError:
            continue
        data = [x for x in ents if b"/data/" in x[0]]
        if data and (best is None or data[0][2] > best[2]):
            best = (s, e, data[0][2])
    s, e, _ = best
    new = shift_archive(b[s:e])
    with open(path, "r+b") as f:
        f.seek(s)
        f.write(new)
    assert zlib.crc32(new) != zlib.crc32(b[s:e])
    return s


if __name__ == "__main__":
    print(shift_record(sys.argv[1]))
