#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A WAN-like HTTP proxy for the S3 bench, in front of radosgw: loopback
only, stdlib only (a thread per connection; bodies move by splice(2), so
it carries several hundred MB/s at 0 ms on loopback).

Each client connection gets its own upstream connection, so keep-alive
and connection counts are the client's.  Every request is forwarded as it
came (Host header included, so SigV4 signatures stay valid).  The answer's
first byte leaves no sooner than delay_ms after the request arrived (the
round trip and first-byte latency of a real object store), and each
connection's answers flow at most rate_mbps MB/s (10^6 bytes; 0: no cap).

Control (JSON over HTTP on the same port):
  POST /__wan/config  {"delay_ms": 20, "rate_mbps": 100}
  POST /__wan/reset   zero the statistics
  GET  /__wan/stats   {"requests", "by_method": {"GET": n, ...},
                       "bytes" (answer bytes sent, headers included),
                       "connections" (client connections accepted),
                       "log": [[method, path, range, status, bytes], ...]
                       (range: Range, else Azure's x-ms-range)
                       (the last 20000)}

Usage: wanproxy.py --upstream http://127.0.0.1:PORT --port-file FILE
       [--port 0] [--delay-ms 0] [--rate-mbps 0] [--max-seconds 7200]
"""

import argparse
import json
import os
import signal
import socket
import threading
import time
import urllib.parse

CHUNK = 1 << 20
LOG_MAX = 20000


class State:
    def __init__(self, delay_ms, rate_mbps):
        self.lock = threading.Lock()
        self.delay_ms = delay_ms
        self.rate_mbps = rate_mbps
        self.reset()

    def reset(self):
        with self.lock:
            self.requests = 0
            self.by_method = {}
            self.bytes = 0
            self.connections = 0
            self.log = []

    def record(self, method, path, rng, status, nbytes):
        with self.lock:
            self.requests += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            self.bytes += nbytes
            self.log.append([method, path, rng, status, nbytes])
            if len(self.log) > LOG_MAX:
                del self.log[: len(self.log) - LOG_MAX]

    def stats(self):
        with self.lock:
            return {"requests": self.requests,
                    "by_method": dict(self.by_method),
                    "bytes": self.bytes, "connections": self.connections,
                    "delay_ms": self.delay_ms, "rate_mbps": self.rate_mbps,
                    "log": list(self.log)}


STATE = None
UPSTREAM = None


def parse_head(raw):
    """(first line, {lowercased name: value})."""
    lines = raw.decode("latin-1").split("\r\n")
    hd = {}
    for ln in lines[1:]:
        if ln:
            k, _, v = ln.partition(":")
            hd[k.strip().lower()] = v.strip()
    return lines[0], hd


class Conn:
    """A socket and the bytes read past what was asked for."""

    def __init__(self, sock):
        self.s = sock
        self.buf = b""

    def head(self):
        """The next head (through CRLF CRLF), or None at EOF."""
        while b"\r\n\r\n" not in self.buf:
            b = self.s.recv(65536)
            if not b:
                return None
            self.buf += b
        i = self.buf.index(b"\r\n\r\n") + 4
        h, self.buf = self.buf[:i], self.buf[i:]
        return h

    def exactly(self, n):
        while len(self.buf) < n:
            b = self.s.recv(max(65536, n - len(self.buf)))
            if not b:
                raise ConnectionError("closed early")
            self.buf += b
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def line(self):
        while b"\r\n" not in self.buf:
            b = self.s.recv(65536)
            if not b:
                raise ConnectionError("closed early")
            self.buf += b
        i = self.buf.index(b"\r\n") + 2
        out, self.buf = self.buf[:i], self.buf[i:]
        return out


class Pacer:
    """A connection's rate cap: each send waits so that the bytes sent
    since the answer began stay within rate_mbps."""

    def __init__(self, sock):
        self.s = sock
        self.t0 = time.monotonic()
        self.n = 0
        self.pipe = None

    def _pace(self):
        rate = STATE.rate_mbps * 1e6
        if rate > 0:
            ahead = self.t0 + self.n / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)

    def send(self, data):
        self.s.sendall(data)
        self.n += len(data)
        self._pace()

    def splice(self, src, n):
        """Move n bytes from src (a Conn, its buffer first) to the
        client, kernel to kernel."""
        if src.buf:
            b = src.buf[:n]
            src.buf = src.buf[len(b):]
            self.send(b)
            n -= len(b)
        if n and self.pipe is None:
            self.pipe = os.pipe()
        rate = STATE.rate_mbps * 1e6
        step = CHUNK if rate <= 0 else max(16384, min(CHUNK, int(rate / 100)))
        while n:
            got = os.splice(src.s.fileno(), self.pipe[1], min(n, step))
            if got == 0:
                raise ConnectionError("upstream closed mid-body")
            left = got
            while left:
                left -= os.splice(self.pipe[0], self.s.fileno(), left)
            n -= got
            self.n += got
            self._pace()

    def close(self):
        if self.pipe:
            os.close(self.pipe[0])
            os.close(self.pipe[1])


def relay_body(up, pacer, hd, method, status):
    """Relay the answer's body as framed: Content-Length, chunked, or to
    EOF.  Returns False when the connection must close after it."""
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return True
    if "chunked" in hd.get("transfer-encoding", "").lower():
        while True:
            line = up.line()
            pacer.send(line)
            size = int(line.split(b";")[0], 16)
            if size == 0:
                while True:
                    t = up.line()
                    pacer.send(t)
                    if t == b"\r\n":
                        return True
            pacer.send(up.exactly(size + 2))
    if "content-length" in hd:
        pacer.splice(up, int(hd["content-length"]))
        return True
    while True:
        b = up.buf or up.s.recv(CHUNK)
        up.buf = b""
        if not b:
            return False
        pacer.send(b)


def control(method, path, body, sock):
    if method == "POST" and path == "/__wan/config":
        c = json.loads(body or b"{}")
        STATE.delay_ms = float(c.get("delay_ms", STATE.delay_ms))
        STATE.rate_mbps = float(c.get("rate_mbps", STATE.rate_mbps))
        out = b"{}"
    elif method == "POST" and path == "/__wan/reset":
        STATE.reset()
        out = b"{}"
    else:
        out = json.dumps(STATE.stats()).encode()
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(out) + out)


def serve(csock):
    with STATE.lock:
        STATE.connections += 1
    cl = Conn(csock)
    up = None
    try:
        while True:
            raw = cl.head()
            if raw is None:
                return
            t_req = time.monotonic()
            first, hd = parse_head(raw[:-4])
            method, path = first.split(" ")[:2]
            n = int(hd.get("content-length", "0") or 0)
            body = cl.exactly(n) if n else b""
            if path.startswith("/__wan/"):
                control(method, path, body, csock)
                continue
            if up is None:
                us = socket.create_connection(UPSTREAM)
                us.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                up = Conn(us)
            up.s.sendall(raw + body)
            head = up.head()
            if head is None:
                return
            status_line, rhd = parse_head(head[:-4])
            status = int(status_line.split(" ")[1])
            wait = t_req + STATE.delay_ms / 1000 - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            pacer = Pacer(csock)
            try:
                pacer.send(head)
                keep = relay_body(up, pacer, rhd, method, status)
            finally:
                pacer.close()
            STATE.record(method, path,
                         hd.get("range", hd.get("x-ms-range", "")),
                         status, pacer.n)
            if (not keep or rhd.get("connection", "").lower() == "close" or
                    hd.get("connection", "").lower() == "close"):
                return
    except (OSError, ValueError, IndexError):
        return
    finally:
        csock.close()
        if up is not None:
            up.s.close()


def main():
    global STATE, UPSTREAM
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--rate-mbps", type=float, default=0)
    ap.add_argument("--max-seconds", type=float, default=7200)
    args = ap.parse_args()
    u = urllib.parse.urlsplit(args.upstream)
    if u.scheme != "http" or u.hostname not in ("127.0.0.1", "localhost",
                                                "::1"):
        ap.error("--upstream must be http:// on loopback")
    UPSTREAM = (u.hostname, u.port or 80)
    STATE = State(args.delay_ms, args.rate_mbps)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    threading.Timer(args.max_seconds, lambda: os._exit(0)).start()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(256)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(ls.getsockname()[1]))
    os.rename(tmp, args.port_file)
    while True:
        c, _ = ls.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
