# SPDX-License-Identifier: MIT
"""A small S3 server on 127.0.0.1 for the cancellation tests: it serves a
local directory as one bucket (ListObjectsV2, HEAD, GET with Range) and,
for the requests a rule picks, accepts and never answers, or answers the
headers and a few bytes and then stalls.  Stdlib only; no credentials are
checked.

    srv = StallS3(root_dir, bucket="b")
    srv.stall(lambda r: r.method == "GET" and r.ranged, count=1)
    ... srv.stalled.wait(); ...; srv.close()

A rule sees a Req (method, key, query dict, ranged).  count: how many
matching requests stall (then they are served again).  Stalled handlers
wait until close().  With busy=True the picked requests are answered
503 SlowDown at once instead (a server the client keeps retrying).
"""
import email.utils
import http.server
import os
import socketserver
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Dict, Optional


@dataclass
class Req:
    method: str
    key: str            # "" for the bucket
    query: Dict[str, str]
    ranged: bool


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class StallS3:
    def __init__(self, root: str, bucket: str = "b") -> None:
        self.root = root
        self.bucket = bucket
        self.rule: Optional[Callable[[Req], bool]] = None
        self.count = 0
        self.headers_first = False
        self.busy = False
        self.picked = 0
        self.stalled = threading.Event()
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.log = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # quiet
                pass

            def do_HEAD(self):
                outer._serve(self, head=True)

            def do_GET(self):
                outer._serve(self, head=False)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()

    def stall(self, rule: Callable[[Req], bool], count: int = 1,
              headers_first: bool = False, busy: bool = False) -> None:
        """Stall the next count requests rule picks (headers_first:
        answer 206/200 headers and 16 body bytes first; busy: answer 503
        instead)."""
        with self.lock:
            self.rule, self.count = rule, count
            self.headers_first = headers_first
            self.busy = busy
            self.picked = 0
            self.stalled.clear()

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- serving ------------------------------------------------------
    def _pick(self, r: Req) -> bool:
        with self.lock:
            self.log.append((r.method, r.key, sorted(r.query), r.ranged))
            if self.rule is None or self.count <= 0 or not self.rule(r):
                return False
            self.count -= 1
            self.picked += 1
            return True

    def _path(self, key: str) -> Optional[str]:
        p = os.path.normpath(os.path.join(self.root, key))
        if not p.startswith(os.path.abspath(self.root) + os.sep) or \
                not os.path.isfile(p):
            return None
        return p

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        return f'"{st.st_size:x}-{st.st_mtime_ns:x}"'

    def _send(self, h, status, headers, body=b"", head=False):
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _error(self, h, status, code, head):
        body = (f"<?xml version=\"1.0\"?><Error><Code>{code}</Code>"
                f"</Error>").encode()
        self._send(h, status, {"Content-Type": "application/xml"}, body,
                   head)

    def _serve(self, h, head: bool) -> None:
        u = urllib.parse.urlsplit(h.path)
        parts = urllib.parse.unquote(u.path).lstrip("/").split("/", 1)
        query = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        rng = h.headers.get("Range")
        if parts[0] != self.bucket:
            return self._error(h, 404, "NoSuchBucket", head)
        key = parts[1] if len(parts) > 1 else ""
        r = Req("HEAD" if head else "GET", key, query, rng is not None)
        picked = self._pick(r)
        if picked and self.busy:
            self.stalled.set()
            return self._error(h, 503, "SlowDown", head)
        if picked:
            self.stalled.set()
            if self.headers_first and not head and key:
                self._stall_after_headers(h, key, rng)
            self.released.wait()
            h.close_connection = True
            return
        if not key:
            return self._list(h, query, head)
        p = self._path(key)
        if p is None:
            return self._error(h, 404, "NoSuchKey", head)
        st = os.stat(p)
        hd = {"ETag": self._etag(st),
              "Last-Modified": email.utils.formatdate(st.st_mtime,
                                                      usegmt=True)}
        if head:
            h.send_response(200)
            for k, v in hd.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(st.st_size))
            h.end_headers()
            return
        with open(p, "rb") as f:
            data = f.read()
        if rng:
            a, b = rng.split("=", 1)[1].split("-")
            first, last = int(a), min(int(b), len(data) - 1)
            hd["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
            return self._send(h, 206, hd, data[first:last + 1])
        self._send(h, 200, hd, data)

    def _stall_after_headers(self, h, key, rng):
        p = self._path(key)
        if p is None:
            return
        size = os.path.getsize(p)
        first, last = 0, size - 1
        if rng:
            a, b = rng.split("=", 1)[1].split("-")
            first, last = int(a), min(int(b), size - 1)
        h.send_response(206 if rng else 200)
        h.send_header("ETag", self._etag(os.stat(p)))
        if rng:
            h.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        h.send_header("Content-Length", str(last - first + 1))
        h.end_headers()
        with open(p, "rb") as f:
            f.seek(first)
            h.wfile.write(f.read(min(16, last - first + 1)))
        h.wfile.flush()

    def _list(self, h, query, head):
        prefix = query.get("prefix", "")
        limit = int(query.get("max-keys", "1000"))
        d = os.path.join(self.root, prefix)
        items = []
        if os.path.isdir(d):
            for name in sorted(os.listdir(d)):
                p = os.path.join(d, name)
                if os.path.isfile(p):
                    items.append((prefix + name, os.stat(p)))
        items = items[:limit]
        out = ["<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
               "<ListBucketResult><IsTruncated>false</IsTruncated>"]
        for k, st in items:
            when = time.strftime("%Y-%m-%dT%H:%M:%S.000Z",
                                 time.gmtime(st.st_mtime))
            out.append("<Contents><Key>%s</Key><Size>%d</Size>"
                       "<ETag>%s</ETag><LastModified>%s</LastModified>"
                       "</Contents>" % (urllib.parse.quote(k, safe="/"),
                                        st.st_size,
                                        self._etag(st).replace(
                                            '"', "&quot;"), when))
        out.append("</ListBucketResult>")
        self._send(h, 200, {"Content-Type": "application/xml"},
                   "".join(out).encode(), head)
