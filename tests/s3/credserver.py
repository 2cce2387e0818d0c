#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Credential endpoints for the S3 credential tests, on 127.0.0.1:

  EC2 instance metadata (IMDSv2): PUT /latest/api/token, then
      GET /latest/meta-data/iam/security-credentials/[ROLE] with the token
  container credentials: GET /creds (Authorization checked when --auth)
  an STS stand-in for AssumeRoleWithWebIdentity: POST / (the token must
      be the one in --web-token-file)

Every credential answer is a fresh set of real temporary credentials from
radosgw's STS (AssumeRole of --role-arn, signed with the static user's
keys from $CRED_AK / $CRED_SK, by curl), with an Expiration --expire
seconds ahead, so that a refresh shows as another request.  GET /__stats
gives the counts; POST /__mode with "ok", "deny" or "garbage" changes
what credential requests get."""
import argparse
import datetime
import http.server
import json
import os
import secrets
import subprocess
import sys
import threading
import urllib.parse

ROLE = "ckptfs-role"
lock = threading.Lock()
stats = {"token": 0, "role": 0, "creds": 0, "container": 0, "webid": 0,
         "refused": 0}
state = {"mode": "ok", "tokens": set()}


def fresh(args):
    """A new set from radosgw's STS: (key id, secret, token)."""
    body = urllib.parse.urlencode({
        "Action": "AssumeRole", "Version": "2011-06-15",
        "RoleArn": args.role_arn, "RoleSessionName": "credserver"})
    r = subprocess.run(
        ["curl", "-sS", "--fail", "-X", "POST", "--aws-sigv4",
         "aws:amz:us-east-1:sts", "--user",
         os.environ["CRED_AK"] + ":" + os.environ["CRED_SK"],
         "-d", body, args.sts + "/"], capture_output=True, text=True)
    if r.returncode:        # no command line in the log: it has the keys
        raise RuntimeError("STS AssumeRole at %s failed" % args.sts)
    out = r.stdout

    def tag(t):
        return out.split("<%s>" % t, 1)[1].split("</%s>" % t, 1)[0]
    return tag("AccessKeyId"), tag("SecretAccessKey"), tag("SessionToken")


def clock_offset():
    """The tests' clock (CKPTFS_TEST_CLOCK_FILE, docs/testing.md): whole
    seconds added to the wall clock, as the library adds them."""
    try:
        with open(os.environ["CKPTFS_TEST_CLOCK_FILE"]) as f:
            return int(f.read().strip() or 0)
    except (KeyError, OSError, ValueError):
        return 0


def expiration(args):
    t = datetime.datetime.now(datetime.timezone.utc) + \
        datetime.timedelta(seconds=args.expire + clock_offset())
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        sys.stderr.write("credserver: " + (fmt % a) + "\n")

    def reply(self, code, body, ctype="application/json"):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def creds_json(self, key):
        """A set, counted once its answer is written (a test that waits
        for the count sees an answered request)."""
        with lock:
            mode = state["mode"]
        if mode == "deny":
            with lock:
                stats["refused"] += 1
            self.reply(403, '{"message": "denied"}')
        elif mode == "garbage":
            self.reply(200, "not json at all")
        else:
            ak, sk, tok = fresh(self.server.args)
            d = {"AccessKeyId": ak, "SecretAccessKey": sk, "Token": tok,
                 "Expiration": expiration(self.server.args)}
            if key == "creds":
                d.update(Code="Success", Type="AWS-HMAC")
            self.reply(200, json.dumps(d))
        with lock:
            stats[key] += 1

    def do_PUT(self):
        if self.path == "/latest/api/token" and \
                self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            tok = secrets.token_hex(16)
            with lock:
                stats["token"] += 1
                state["tokens"].add(tok)
            return self.reply(200, tok, "text/plain")
        return self.reply(400, "bad request", "text/plain")

    def do_GET(self):
        a = self.server.args
        if self.path == "/__stats":
            with lock:
                return self.reply(200, json.dumps(stats))
        if self.path.startswith("/latest/meta-data/iam/security-credentials/"):
            with lock:
                ok = self.headers.get("X-aws-ec2-metadata-token") in \
                    state["tokens"]
            if not ok:
                return self.reply(401, "", "text/plain")
            rest = self.path[len("/latest/meta-data/iam/security-credentials/"):]
            if rest == "":
                with lock:
                    stats["role"] += 1
                return self.reply(200, ROLE, "text/plain")
            if rest == ROLE:
                return self.creds_json("creds")
            return self.reply(404, "", "text/plain")
        if self.path == "/creds":
            if a.auth and self.headers.get("Authorization") != a.auth:
                with lock:
                    stats["refused"] += 1
                return self.reply(401, '{"message": "bad token"}')
            return self.creds_json("container")
        return self.reply(404, "", "text/plain")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode()
        if self.path == "/__mode":
            with lock:
                state["mode"] = body.strip()
            return self.reply(200, "{}")
        q = urllib.parse.parse_qs(body)
        if q.get("Action") != ["AssumeRoleWithWebIdentity"]:
            return self.reply(400, "<Error><Code>InvalidAction</Code></Error>",
                              "text/xml")
        with lock:
            stats["webid"] += 1
            mode = state["mode"]
        want = open(self.server.args.web_token_file).read().strip() \
            if self.server.args.web_token_file else None
        if mode == "deny" or q.get("WebIdentityToken") != [want] or \
                not q.get("RoleArn") or not q.get("RoleSessionName"):
            with lock:
                stats["refused"] += 1
            return self.reply(
                400, "<ErrorResponse><Error><Code>InvalidIdentityToken"
                "</Code><Message>no</Message></Error></ErrorResponse>",
                "text/xml")
        ak, sk, tok = fresh(self.server.args)
        return self.reply(200, (
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentity"
            "Result><Credentials><AccessKeyId>%s</AccessKeyId>"
            "<SecretAccessKey>%s</SecretAccessKey><SessionToken>%s"
            "</SessionToken><Expiration>%s</Expiration></Credentials>"
            "</AssumeRoleWithWebIdentityResult>"
            "</AssumeRoleWithWebIdentityResponse>") %
            (ak, sk, tok, expiration(self.server.args)), "text/xml")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--sts", required=True, help="radosgw's URL")
    p.add_argument("--role-arn", required=True)
    p.add_argument("--expire", type=int, default=3600)
    p.add_argument("--auth", help="the container endpoint's token")
    p.add_argument("--web-token-file")
    args = p.parse_args()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.args = args
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
