#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A small Entra ID token service for the Azure tests, on 127.0.0.1 with a
port the kernel picks (written to DIR/port once it listens).

It serves what ckptfs asks tokens of (core/io/az_token.c):
  POST /TENANT/oauth2/v2.0/token       the authority (AZURE_AUTHORITY_HOST):
      grant_type=client_credentials, client_id, scope
      https://storage.azure.com/.default, and either client_secret (must be
      --secret) or client_assertion_type jwt-bearer + client_assertion
      (must equal the --federated-file's contents, read at each request);
  GET /msi/token?api-version=2019-08-01&resource=...   IDENTITY_ENDPOINT:
      header X-IDENTITY-HEADER must be --identity-header;
  GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=...
      the instance metadata endpoint (AZURE_POD_IDENTITY_AUTHORITY_HOST):
      header Metadata: true; client_id, when --mi-client-id is given.
Anything else is 400 {"error": "invalid_request"} (401 invalid_client for
a wrong secret or assertion).  A token is a JWT that Azurite's
--oauth basic accepts (iss https://sts.windows.net/TENANT/, aud
https://storage.azure.com, nbf/iat/exp) with a signature that is not one;
it lives --lifetime seconds.  Each token request served is counted in
DIR/count (one line per request: its kind), and each token issued is
appended to DIR/tokens (for the tests' leak checks).  --hang: accept,
read the request, never answer (--hang-after N: once N tokens were
given).  --tls CERT KEY: serve https.
"""

import argparse
import base64
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCOPE = "https://storage.azure.com/.default"
RESOURCE = "https://storage.azure.com/"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

ARGS = None
LOCK = threading.Lock()
SERIAL = [0]


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def make_token(kind):
    now = int(time.time())
    with LOCK:
        SERIAL[0] += 1
        n = SERIAL[0]
    claims = {
        "aud": "https://storage.azure.com",
        "iss": "https://sts.windows.net/%s/" % ARGS.tenant,
        "iat": now - 60, "nbf": now - 60, "exp": now + ARGS.lifetime,
        "appid": ARGS.client_id, "tid": ARGS.tenant,
        "jti": "%s-%d-%d" % (kind, n, os.getpid()),
    }
    head = {"alg": "RS256", "typ": "JWT"}
    tok = ".".join([b64url(json.dumps(head).encode()),
                    b64url(json.dumps(claims).encode()),
                    b64url(b"not-a-signature-%d" % n)])
    with LOCK:
        with open(os.path.join(ARGS.dir, "tokens"), "a") as f:
            f.write(tok + "\n")
    return tok, now


def count(kind):
    with LOCK:
        with open(os.path.join(ARGS.dir, "count"), "a") as f:
            f.write(kind + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        sys.stderr.write("tokensrv: " + (fmt % a) + "\n")

    def answer(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def hang(self):
        count("hang")
        time.sleep(3600)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(n).decode(),
                                     keep_blank_values=True)
        if ARGS.hang or (ARGS.hang_after is not None and
                         SERIAL[0] >= ARGS.hang_after):
            return self.hang()
        path = "/%s/oauth2/v2.0/token" % ARGS.tenant
        one = {k: v[0] for k, v in form.items() if len(v) == 1}
        if (self.path != path or len(one) != len(form)
                or one.get("grant_type") != "client_credentials"
                or one.get("scope") != SCOPE
                or one.get("client_id") != ARGS.client_id):
            count("bad")
            return self.answer(400, {"error": "invalid_request"})
        if "client_secret" in one:
            kind = "secret"
            ok = ARGS.secret is not None and one["client_secret"] == ARGS.secret
        elif one.get("client_assertion_type") == ASSERTION_TYPE:
            kind = "federated"
            want = None
            if ARGS.federated_file:
                with open(ARGS.federated_file) as f:
                    want = f.read().strip()
            ok = want is not None and one.get("client_assertion") == want
        else:
            count("bad")
            return self.answer(400, {"error": "invalid_request"})
        count(kind if ok else kind + "-refused")
        if not ok:
            return self.answer(401, {
                "error": "invalid_client",
                "error_description": "AADSTS7000215: Invalid client "
                                     "secret provided."})
        tok, _ = make_token(kind)
        self.answer(200, {"token_type": "Bearer",
                          "expires_in": ARGS.lifetime,
                          "ext_expires_in": ARGS.lifetime,
                          "access_token": tok})

    def do_GET(self):
        if ARGS.hang:
            return self.hang()
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        q = {k: v[0] for k, v in q.items() if len(v) == 1}
        if u.path == "/msi/token":
            ok = (self.headers.get("X-IDENTITY-HEADER") ==
                  ARGS.identity_header and ARGS.identity_header and
                  q.get("api-version") == "2019-08-01" and
                  q.get("resource") == RESOURCE)
            kind = "appservice"
        elif u.path == "/metadata/identity/oauth2/token":
            ok = (self.headers.get("Metadata") == "true" and
                  q.get("api-version") == "2018-02-01" and
                  q.get("resource") == RESOURCE and
                  q.get("client_id") == ARGS.mi_client_id)
            kind = "imds"
        else:
            count("bad")
            return self.answer(404, {"error": "not_found"})
        count(kind if ok else kind + "-refused")
        if not ok:
            return self.answer(400, {"error": "invalid_request"})
        tok, now = make_token(kind)
        obj = {"access_token": tok, "resource": RESOURCE,
               "token_type": "Bearer",
               "expires_on": str(now + ARGS.lifetime)}
        if kind == "imds":
            obj["expires_in"] = str(ARGS.lifetime)
        self.answer(200, obj)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--tenant", default="tenant-1")
    p.add_argument("--client-id", default="client-1")
    p.add_argument("--secret")
    p.add_argument("--federated-file")
    p.add_argument("--identity-header")
    p.add_argument("--mi-client-id")
    p.add_argument("--lifetime", type=int, default=3600)
    p.add_argument("--hang", action="store_true")
    p.add_argument("--hang-after", type=int)
    p.add_argument("--max-seconds", type=float, default=1800)
    p.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ARGS = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    if ARGS.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*ARGS.tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    tmp = os.path.join(ARGS.dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, os.path.join(ARGS.dir, "port"))
    threading.Timer(ARGS.max_seconds, lambda: os._exit(0)).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
