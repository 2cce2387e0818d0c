#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An OpenID Connect provider for the web identity tests, on 127.0.0.1, for
radosgw's own STS AssumeRoleWithWebIdentity to check tokens against.

  oidcserver.py serve --dir DIR --port-file F
      makes an RSA key and a self-signed certificate of it in DIR, writes
      DIR/issuer (http://127.0.0.1:PORT) and DIR/thumbprint (the SHA-1 of
      the certificate's DER, which radosgw compares with the provider's
      ThumbprintList), then serves GET /.well-known/openid-configuration
      (issuer, jwks_uri) and GET /jwks (one RSA key: kid, n, e, x5c);
      GET /__stats counts the requests of each.
  oidcserver.py token --dir DIR --aud ID --sub S [--expire SECONDS]
                      [--foreign]
      prints an RS256 token of DIR's issuer (iss, aud, sub, iat, exp,
      kid), signed with DIR's key, or with --foreign by a key made for the
      occasion (same kid and claims: a token the provider did not sign)."""
import argparse
import base64
import datetime
import hashlib
import http.server
import json
import os
import sys
import threading
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

KID = "ckptfs-test-key"
lock = threading.Lock()
stats = {"config": 0, "jwks": 0}


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def uint_b64(i):
    return b64url(i.to_bytes((i.bit_length() + 7) // 8, "big"))


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def self_signed(key):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                         "ckptfs test OIDC provider")])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .sign(key, hashes.SHA256()))


def write(path, data, mode=0o644):
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode),
              "wb") as f:
        f.write(data)
    os.rename(tmp, path)


def serve(args):
    key = new_key()
    cert = self_signed(key)
    der = cert.public_bytes(serialization.Encoding.DER)
    pub = key.public_key().public_numbers()
    jwks = {"keys": [{"kty": "RSA", "alg": "RS256", "use": "sig",
                      "kid": KID, "n": uint_b64(pub.n), "e": uint_b64(pub.e),
                      "x5c": [base64.b64encode(der).decode()]}]}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), None)
    issuer = "http://127.0.0.1:%d" % srv.server_address[1]
    config = {"issuer": issuer, "jwks_uri": issuer + "/jwks",
              "response_types_supported": ["id_token"],
              "subject_types_supported": ["public"],
              "id_token_signing_alg_values_supported": ["RS256"]}
    answers = {"/.well-known/openid-configuration": ("config", config),
               "/jwks": ("jwks", jwks)}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            sys.stderr.write("oidcserver: " + (fmt % a) + "\n")

        def reply(self, code, obj):
            b = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/__stats":
                with lock:
                    return self.reply(200, dict(stats))
            if path not in answers:
                return self.reply(404, {"error": "no such path"})
            name, obj = answers[path]
            with lock:
                stats[name] += 1
            self.reply(200, obj)

    srv.RequestHandlerClass = Handler
    write(os.path.join(args.dir, "key.pem"), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()), 0o600)
    write(os.path.join(args.dir, "issuer"), (issuer + "\n").encode())
    write(os.path.join(args.dir, "thumbprint"),
          (hashlib.sha1(der).hexdigest() + "\n").encode())
    write(args.port_file, ("%d\n" % srv.server_address[1]).encode())
    srv.serve_forever()


def token(args):
    with open(os.path.join(args.dir, "issuer")) as f:
        issuer = f.read().strip()
    if args.foreign:
        key = new_key()
    else:
        with open(os.path.join(args.dir, "key.pem"), "rb") as f:
            key = serialization.load_pem_private_key(f.read(), None)
    now = int(time.time())
    head = {"alg": "RS256", "typ": "JWT", "kid": KID}
    claims = {"iss": issuer, "aud": args.aud, "sub": args.sub,
              "iat": now, "exp": now + args.expire}
    signing = (b64url(json.dumps(head).encode()) + "." +
               b64url(json.dumps(claims).encode()))
    sig = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    print(signing + "." + b64url(sig))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--dir", required=True)
    s.add_argument("--port-file", required=True)
    t = sub.add_parser("token")
    t.add_argument("--dir", required=True)
    t.add_argument("--aud", required=True)
    t.add_argument("--sub", required=True)
    t.add_argument("--expire", type=int, default=3600)
    t.add_argument("--foreign", action="store_true")
    args = ap.parse_args()
    serve(args) if args.cmd == "serve" else token(args)


if __name__ == "__main__":
    main()
