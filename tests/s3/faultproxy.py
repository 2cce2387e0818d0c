#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A fault-injecting HTTP proxy for the S3 tests, in front of radosgw.

Loopback only, stdlib only.  It forwards each request as it came (the Host
header included, so SigV4 signatures stay valid) and relays the answer,
counting the body bytes it sends back.  Told through its control endpoint,
it can instead, for a fraction of the requests or the first N of them:

  delay     wait delay_ms, then forward
  reset     read the request, then reset the connection (RST), no answer
  503 500 429 412   answer that status with an S3 error body (SlowDown,
            InternalError, SlowDown, PreconditionFailed)
  truncate  forward, send the headers as they are and only a fraction
            (frac) of the body, then close the connection
  short     forward, but say and send a shorter body (Content-Length
            lowered), keeping the connection
  long      forward, but append extra bytes (Content-Length raised)
  shift     forward, but move the Content-Range one byte on
  noifmatch forward without the If-Match header (a server that ignores it)
  noversion the same, and drop the answer's ETag header too
  norange   forward without the Range header (a server that ignores it:
            200 and the whole object)
  drip      forward, send the headers at once and the body one byte at a
            time, "bps" bytes a second (1): a drip, or a steady slow
            server (a server that never answers: delay with a long
            delay_ms)
  tokencycle  answer every listing (GET ?list-type=2) itself: one key
            a page, truncated, continuation tokens A, B, A, B, ...
  endless   answer every listing itself: "keys" keys a page (1000),
            truncated, a fresh continuation token each time
  azmarkercycle  answer every Azure listing (GET ?comp=list) itself: one
            blob a page, NextMarker A, B, A, B, ...
  badetag   forward, but a HEAD or GET answer's ETag gets an escape
            sequence ('"v1"ESC[31m') and every <ETag> of a listing
            decodes to '"v1"CR LF X-Injected: yes'

Control (JSON over HTTP on the same port):
  POST /__faultproxy/config  {"mode": "503", "rate": 0.3, "first": 0,
       "only": "ranged"|"get"|"all", "delay_ms": 0, "frac": 0.5,
       "seed": 1, "path": "text"}  set the fault (mode "none": forward everything);
                       resets the count of faults injected
  GET  /__faultproxy/stats   {"requests", "faults", "bytes", "by_status",
                              "injected" (requests that carried an
                              X-Injected header),
                              "inflight_max" (the most requests served at
                              once, control requests not counted),
                              "by_method": {"GET": n, "HEAD": n, "LIST": n,
                              ...} (every request answered, faults
                              included; LIST: a GET of a listing, with
                              list-type= in its query; not in GET),
                              "bytes_by_method" (body bytes sent back,
                              the same keys),
                              "log": [[method, path, range, status,
                              bytes, signed headers, has token, Host
                              header, User-Agent header], ...]
                              (the last 20000; "signed headers" is the
                              SignedHeaders list of the Authorization
                              header, never a credential or signature)}
  POST /__faultproxy/reset   zero the statistics

Usage: faultproxy.py --upstream http://127.0.0.1:PORT --port-file FILE
       [--port 0] [--max-seconds 3600]
"""

import argparse
import os
import signal
import http.client
import http.server
import json
import random
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

LOG_MAX = 20000
CHUNK = 256 * 1024
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}
S3_CODES = {503: "SlowDown", 500: "InternalError", 429: "SlowDown",
            412: "PreconditionFailed"}


# The request this thread serves: the statistics' epoch it began in.
_REQUEST = threading.local()


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.cfg = {"mode": "none"}
        self.rng = random.Random(1)
        self.injected = 0
        self.zero()

    def zero(self):
        self.requests = 0
        self.faults = 0
        self.bytes = 0
        self.by_status = {}
        self.by_method = {}
        self.bytes_by_method = {}
        self.injected_headers = 0
        self.log = []
        # Requests begun before a reset are another test's: their
        # threads carry the epoch they began in (enter()), and record()
        # drops them (one held by a 60 s delay ends long after its test).
        self.epoch = getattr(self, "epoch", 0) + 1
        self.inflight = getattr(self, "inflight", 0)
        self.delayed = getattr(self, "delayed", 0)     # of them, held
        self.inflight_max = 0

    def configure(self, cfg):
        with self.lock:
            mode = cfg.get("mode", "none")
            if mode not in ("none", "delay", "reset", "503", "500", "429",
                            "412",
                            "truncate", "short", "long", "shift",
                            "noifmatch", "noversion", "norange",
                            "badetag", "tokencycle", "endless", "drip",
                            "azmarkercycle"):
                raise ValueError("unknown mode %r" % mode)
            self.cfg = dict(cfg)
            self.rng = random.Random(cfg.get("seed", 1))
            self.injected = 0

    def pick(self, method, ranged, path=""):
        """The fault for this request, or None.  "path" in the config: only
        requests whose path holds that text."""
        with self.lock:
            self.requests += 1
            c = self.cfg
            mode = c.get("mode", "none")
            if mode == "none":
                return None
            only = c.get("only", "ranged")
            if only == "ranged" and not (method == "GET" and ranged):
                return None
            if only == "get" and method != "GET":
                return None
            if c.get("path") and c["path"] not in path:
                return None
            first = int(c.get("first", 0))
            if first and self.injected >= first:
                return None
            if self.rng.random() >= float(c.get("rate", 1.0)):
                return None
            self.injected += 1
            self.faults += 1
            return dict(c)

    def record(self, method, path, rng, status, nbytes, headers=None):
        signed, token, host, agent = "", False, "", ""
        if headers is not None:
            host = headers.get("Host") or ""
            agent = headers.get("User-Agent") or ""
            auth = headers.get("Authorization") or ""
            for part in auth.split(","):
                part = part.strip()
                if part.startswith("SignedHeaders="):
                    signed = part[len("SignedHeaders="):]
            token = headers.get("x-amz-security-token") is not None
        with self.lock:
            if getattr(_REQUEST, "epoch", self.epoch) != self.epoch:
                return          # begun before the last reset
            self.bytes += nbytes
            self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1
            kind = kind_of(method, path)
            self.by_method[kind] = self.by_method.get(kind, 0) + 1
            self.bytes_by_method[kind] = \
                self.bytes_by_method.get(kind, 0) + nbytes
            self.log.append([method, path, rng, status, nbytes, signed, token,
                             host, agent])
            if len(self.log) > LOG_MAX:
                del self.log[: len(self.log) - LOG_MAX]

    def stats(self):
        with self.lock:
            return {"requests": self.requests, "faults": self.faults,
                    "bytes": self.bytes, "by_status": dict(self.by_status),
                    "by_method": dict(self.by_method),
                    "bytes_by_method": dict(self.bytes_by_method),
                    "inflight_max": self.inflight_max,
                    "injected": self.injected_headers,
                    "log": list(self.log)}

    def enter(self):
        with self.lock:
            _REQUEST.epoch = self.epoch
            self.inflight += 1
            self.inflight_max = max(self.inflight_max, self.inflight)

    def leave(self):
        with self.lock:
            self.inflight -= 1

    def hold(self, seconds):
        """Hold a request in progress (a delay): counted in flight, but
        not waited for by settle()."""
        with self.lock:
            self.delayed += 1
        try:
            time.sleep(seconds)
        finally:
            with self.lock:
                self.delayed -= 1


def kind_of(method, path):
    """GET, HEAD, ... or LIST: a GET whose query asks for a listing
    (ListObjectsV2: list-type=2)."""
    query = urllib.parse.urlsplit(path).query
    if method == "GET" and "list-type" in urllib.parse.parse_qs(query):
        return "LIST"
    return method


STATE = State()
UPSTREAM = None  # (host, port)


def rst_close(sock):
    """Close with a TCP reset."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                        struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()



def settle(seconds):
    """Wait, at most seconds (scaled by CKPTFS_TIME_SCALE), for the
    requests in progress to end (not for ones held by a delay)."""
    scale = max(1, int(os.environ.get("CKPTFS_TIME_SCALE", "1") or 1))
    deadline = time.monotonic() + seconds * scale
    while STATE.inflight > STATE.delayed and time.monotonic() < deadline:
        time.sleep(0.005)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None

    def log_message(self, fmt, *args):  # quiet
        pass

    def do_any(self):
        if self.path.startswith("/__faultproxy/"):
            return self.control()
        STATE.enter()
        try:
            self.serve()
        finally:
            STATE.leave()

    def serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        # (Azure sends its range as x-ms-range)
        rng = self.headers.get("Range") or self.headers.get("x-ms-range")
        if self.headers.get("X-Injected") is not None:
            with STATE.lock:
                STATE.injected_headers += 1
        fault = STATE.pick(self.command, rng is not None, self.path)
        mode = fault["mode"] if fault else "none"
        if mode == "delay":
            STATE.hold(float(fault.get("delay_ms", 100)) / 1000.0)
        elif mode == "reset":
            STATE.record(self.command, self.path, rng, "reset", 0,
                         self.headers)
            self.close_connection = True
            rst_close(self.connection)
            return
        elif mode in ("503", "500", "429", "412"):
            st = int(mode)
            msg = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s"
                   "</Code><Message>injected by faultproxy</Message></Error>"
                   % S3_CODES[st]).encode()
            self.send_response_only(st)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(msg)
            STATE.record(self.command, self.path, rng, st, 0, self.headers)
            return
        if (mode in ("tokencycle", "endless") and self.command == "GET"
                and "list-type=2" in self.path):
            return self.fake_listing(fault, mode, rng)
        if (mode == "azmarkercycle" and self.command == "GET"
                and "comp=list" in self.path):
            return self.fake_az_listing(rng)
        self.forward(body, rng, fault, mode)

    def fake_az_listing(self, rng):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        prefix = q.get("prefix", [""])[0]
        marker = q.get("marker", [""])[0]
        nxt = {"": "A", "A": "B"}.get(marker, "A")
        msg = ("<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults"
               " ContainerName=\"c\"><Prefix>%s</Prefix><Blobs><Blob><Name>"
               "%sb%s</Name><Properties><Content-Length>1</Content-Length>"
               "<Etag>0x8D0000000000000</Etag></Properties></Blob></Blobs>"
               "<NextMarker>%s</NextMarker></EnumerationResults>"
               % (prefix, prefix, nxt, nxt)).encode()
        self.send_response_only(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(msg)))
        self.end_headers()
        self.wfile.write(msg)
        STATE.record(self.command, self.path, rng, 200, len(msg),
                     self.headers)

    def fake_listing(self, fault, mode, rng):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        prefix = q.get("prefix", [""])[0]
        token = q.get("continuation-token", [""])[0]
        if mode == "tokencycle":
            n, nxt = 1, {"": "A", "A": "B"}.get(token, "A")
        else:
            n = int(fault.get("keys", 1000))
            nxt = "t%d" % (int(token[1:] or 0) + 1)
        page = nxt
        ents = "".join(
            "<Contents><Key>%s</Key><LastModified>2026-01-01T00:00:00.000Z"
            "</LastModified><ETag>&quot;0123456789abcdef&quot;</ETag>"
            "<Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>"
            % urllib.parse.quote("%sk%s_%06d" % (prefix, page, i))
            for i in range(n))
        msg = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult "
               "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b"
               "</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount><MaxKeys>"
               "1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true"
               "</IsTruncated><EncodingType>url</EncodingType>%s"
               "<NextContinuationToken>%s</NextContinuationToken>"
               "</ListBucketResult>" % (urllib.parse.quote(prefix), n, ents,
                                        nxt)).encode()
        self.send_response_only(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(msg)))
        self.end_headers()
        self.wfile.write(msg)
        STATE.record(self.command, self.path, rng, 200, len(msg),
                     self.headers)

    def upstream_conn(self):
        if self.upstream is None:
            self.upstream = http.client.HTTPConnection(*UPSTREAM, timeout=60)
        return self.upstream

    def send_upstream(self, body, mode):
        conn = self.upstream_conn()
        conn.putrequest(self.command, self.path, skip_host=True,
                        skip_accept_encoding=True)
        for k, v in self.headers.items():
            if k.lower() in HOP or (k.lower() == "if-match" and mode in
                                    ("noifmatch", "noversion")):
                continue
            if k.lower() == "range" and mode == "norange":
                continue
            conn.putheader(k, v)
        conn.endheaders(body)
        return conn.getresponse()

    def forward(self, body, rng, fault, mode):
        try:
            try:
                reused = self.upstream is not None
                resp = self.send_upstream(body, mode)
            except (OSError, http.client.HTTPException):
                # A kept-alive upstream connection the server closed (a
                # radosgw restarted): once more on a new one, as HTTP
                # clients do; a server that is down still gives 502.
                self.upstream = None
                if not reused:
                    raise
                resp = self.send_upstream(body, mode)
        except (OSError, http.client.HTTPException) as e:
            self.upstream = None
            msg = ("upstream: %s" % e).encode()
            self.send_response_only(502)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            STATE.record(self.command, self.path, rng, 502, 0, self.headers)
            return
        headers = [(k, v) for k, v in resp.getheaders()
                   if k.lower() not in HOP and not
                   (k.lower() == "etag" and mode == "noversion")]
        clen = resp.getheader("Content-Length")
        data = None
        if mode == "badetag":
            headers = [(k, '"v1"\x1b[31m' if k.lower() == "etag" else v)
                       for k, v in headers]
        if (mode == "badetag" and self.command == "GET" and
                "list-type=2" in self.path):
            data = re.sub(rb"<ETag>[^<]*</ETag>",
                          b"<ETag>&quot;v1&quot;&#13;&#10;X-Injected: yes"
                          b"</ETag>", resp.read())
            total = len(data)
            headers = [(k, v) for k, v in headers
                       if k.lower() != "content-length"]
            headers.append(("Content-Length", str(total)))
        elif self.command == "HEAD":
            resp.read()  # no body: lets the connection take a request
            total = 0
        elif clen is None:
            data = resp.read()
            total = len(data)
            headers.append(("Content-Length", str(total)))
        else:
            total = int(clen)
        send = total
        extra = b""
        if mode in ("truncate", "short") and total > 0:
            send = int(total * float(fault.get("frac", 0.5)))
        if mode == "short":
            headers = [(k, str(send) if k.lower() == "content-length" else v)
                       for k, v in headers]
        if mode == "long":
            extra = b"X" * 1000
            headers = [(k, str(total + len(extra))
                        if k.lower() == "content-length" else v)
                       for k, v in headers]
        if mode == "shift":
            headers = [(k, shift_range(v) if k.lower() == "content-range"
                        else v) for k, v in headers]
        self.send_response_only(resp.status, resp.reason)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        sent = 0
        if mode == "drip" and data is None and self.command != "HEAD":
            data = resp.read(total)
        try:
            if mode == "drip" and data is not None:
                gap = 1.0 / float(fault.get("bps", 1))
                for i in range(min(send, len(data))):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    sent += 1
                    if i + 1 < send:
                        time.sleep(gap)
            elif data is not None:
                self.wfile.write(data[:send])
                sent = min(send, len(data))
            else:
                while sent < total:
                    chunk = resp.read(min(CHUNK, total - sent))
                    if not chunk:
                        break
                    keep = chunk[: max(0, send - sent)]
                    if keep:
                        self.wfile.write(keep)
                    sent += len(keep)
                    if len(keep) < len(chunk):
                        break
                if extra:
                    self.wfile.write(extra)
                    sent += len(extra)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
        if sent < total + len(extra) and mode in ("truncate", "short"):
            # The rest of the upstream body is not wanted: drop that
            # connection rather than drain it.
            if self.upstream is not None:
                self.upstream.close()
            self.upstream = None
        if mode == "truncate":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        STATE.record(self.command, self.path, rng, resp.status, sent,
                     self.headers)

    def control(self):
        what = self.path[len("/__faultproxy/"):]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, out = 200, {}
        try:
            if what == "config" and self.command in ("POST", "PUT"):
                STATE.configure(json.loads(body or b"{}"))
                out = {"ok": True}
            elif what == "stats":
                # A client that has its answer may ask before the thread
                # that sent it has counted it: wait a little for the
                # requests in progress (not for ones held by a delay).
                settle(2.0)
                out = STATE.stats()
            elif what == "reset":
                # An answer the client gave up on may still be going out:
                # counted after the reset, its bytes were charged to the
                # next test (seen under load: 256 KiB more than asked).
                settle(5.0)
                with STATE.lock:
                    STATE.zero()
                out = {"ok": True}
            else:
                status, out = 404, {"error": "unknown control %r" % what}
        except (ValueError, TypeError) as e:
            status, out = 400, {"error": str(e)}
        msg = json.dumps(out).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(msg)))
        self.end_headers()
        self.wfile.write(msg)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_any


def shift_range(v):
    try:
        unit, rest = v.split(" ", 1)
        span, total = rest.split("/", 1)
        a, b = span.split("-", 1)
        return "%s %d-%d/%s" % (unit, int(a) + 1, int(b) + 1, total)
    except ValueError:
        return v


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    global UPSTREAM
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--max-seconds", type=float, default=3600)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.upstream)
    if u.scheme != "http" or u.hostname not in ("127.0.0.1", "localhost",
                                                "::1"):
        sys.exit("faultproxy: the upstream must be http:// on loopback")
    UPSTREAM = (u.hostname, u.port or 80)
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % srv.server_address[1])
        os.rename(a.port_file + ".tmp", a.port_file)
    timer = threading.Timer(a.max_seconds, srv.shutdown)
    timer.daemon = True
    timer.start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(
        target=srv.shutdown, daemon=True).start())
    srv.serve_forever(poll_interval=0.2)
    srv.server_close()


if __name__ == "__main__":
    main()
