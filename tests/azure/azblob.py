#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A small Azure Blob client for the tests, with the standard library only:
Shared Key signing written from Azure's rules (independent of the C
signer in core/io/az_sign.c) and SAS tokens made with hmac.

The account comes from AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY and
AZURE_STORAGE_BLOB_ENDPOINT (the account's blob endpoint, e.g. Azurite's
http://127.0.0.1:PORT/devstoreaccount1).

    azblob.py mkcontainer C
    azblob.py put C/NAME FILE
    azblob.py putdir C/PREFIX DIR       every file under DIR, recursively
    azblob.py rm C/NAME
    azblob.py get C/NAME                the blob's bytes to stdout
    azblob.py sas account|container[:C] PERMS
                                        a SAS token (no '?') valid for an
                                        hour, for blobs (account SAS: service
                                        b, resource types s/c/o)
"""
import base64
import datetime
import email.utils
import hashlib
import hmac
import http.client
import os
import ssl
import sys
import urllib.parse

VERSION = "2021-08-06"


def env():
    ep = os.environ["AZURE_STORAGE_BLOB_ENDPOINT"].rstrip("/")
    return (os.environ["AZURE_STORAGE_ACCOUNT"],
            base64.b64decode(os.environ["AZURE_STORAGE_KEY"]), ep)


def sign(method, url, headers, key, account):
    u = urllib.parse.urlsplit(url)
    xms = sorted((k.lower(), v) for k, v in headers.items()
                 if k.lower().startswith("x-ms-"))
    canon_h = "".join(f"{k}:{v}\n" for k, v in xms)
    res = f"/{account}{u.path}"
    q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
    for k in sorted(q, key=str.lower):
        res += f"\n{k.lower()}:{','.join(sorted(q[k]))}"
    h = {k.lower(): v for k, v in headers.items()}
    clen = h.get("content-length", "")
    if clen == "0":
        clen = ""
    sts = "\n".join([method, h.get("content-encoding", ""),
                     h.get("content-language", ""), clen,
                     h.get("content-md5", ""), h.get("content-type", ""),
                     "", h.get("if-modified-since", ""),
                     h.get("if-match", ""), h.get("if-none-match", ""),
                     h.get("if-unmodified-since", ""),
                     h.get("range", "")]) + "\n" + canon_h + res
    mac = hmac.new(key, sts.encode(), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(mac).decode()}"


def request(method, path, body=b"", extra=None, query=""):
    account, key, ep = env()
    url = f"{ep}/{urllib.parse.quote(path)}" + (f"?{query}" if query else "")
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True),
               "x-ms-version": VERSION,
               "Content-Length": str(len(body))}
    headers.update(extra or {})
    headers["Authorization"] = sign(method, url, headers, key, account)
    u = urllib.parse.urlsplit(url)
    if u.scheme == "https":
        # AZBLOB_CAFILE: the test CA (tests/azure/azurite.sh, AZURITE_TLS)
        ctx = ssl.create_default_context(
            cafile=os.environ.get("AZBLOB_CAFILE") or None)
        c = http.client.HTTPSConnection(u.hostname, u.port, timeout=60,
                                        context=ctx)
    else:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request(method, u.path + (f"?{u.query}" if u.query else ""), body,
              headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status >= 300:
        sys.exit(f"azblob.py: {method} {path}: HTTP {r.status} "
                 f"{data[:300]!r}")
    return data


def put(path, data):
    request("PUT", path, data, {"x-ms-blob-type": "BlockBlob",
                                "Content-Type": "application/octet-stream"})


def sas(kind, perms):
    account, key, _ = env()
    exp = (datetime.datetime.now(datetime.timezone.utc) +
           datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "account":
        # Account SAS (version 2020-12-06 and later: with an encryption
        # scope, here empty).
        sts = "\n".join([account, perms, "b", "sco", "", exp, "",
                         "http,https", VERSION, "", ""])
        sig = base64.b64encode(hmac.new(key, sts.encode(),
                                        hashlib.sha256).digest()).decode()
        q = {"sv": VERSION, "ss": "b", "srt": "sco", "sp": perms,
             "se": exp, "spr": "http,https", "sig": sig}
    else:
        # Service SAS for a container (version 2020-12-06 and later).
        container = kind.split(":", 1)[1]
        canon = f"/blob/{account}/{container}"
        sts = "\n".join([perms, "", exp, canon, "", "", "http,https",
                         VERSION, "c", "", "", "", "", "", "", ""])
        sig = base64.b64encode(hmac.new(key, sts.encode(),
                                        hashlib.sha256).digest()).decode()
        q = {"sv": VERSION, "sr": "c", "sp": perms, "se": exp,
             "spr": "http,https", "sig": sig}
    return urllib.parse.urlencode(q)


def main(argv):
    cmd = argv[1]
    if cmd == "mkcontainer":
        request("PUT", argv[2], query="restype=container")
    elif cmd == "put":
        with open(argv[3], "rb") as f:
            put(argv[2], f.read())
    elif cmd == "putdir":
        base = argv[3]
        for d, _, files in os.walk(base):
            for fn in files:
                p = os.path.join(d, fn)
                rel = os.path.relpath(p, base)
                with open(p, "rb") as f:
                    put(f"{argv[2]}/{rel}", f.read())
    elif cmd == "rm":
        request("DELETE", argv[2])
    elif cmd == "get":
        sys.stdout.buffer.write(request("GET", argv[2]))
    elif cmd == "sas":
        print(sas(argv[2], argv[3]))
    else:
        sys.exit(f"azblob.py: unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
