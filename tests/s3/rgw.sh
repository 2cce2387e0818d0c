#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A throw-away Ceph cluster for the S3 tests: one monitor, one memstore OSD
# and radosgw, all on 127.0.0.1 with free ports, no mgr, no systemd, all
# state in DIR.  Daemons stop in the order radosgw, OSD, monitor.
#
#   rgw.sh start DIR          make the cluster in DIR (new or empty), start
#                             it, create an S3 user; DIR/env holds the
#                             AWS_* exports for it; with RGW_STS=1,
#                             radosgw's STS is on (AssumeRole), with a
#                             role the user may assume, its ARN in
#                             DIR/role_arn (off by default: with it,
#                             radosgw answers a bad signature with
#                             AccessDenied, not SignatureDoesNotMatch);
#                             with RGW_TLS=1, radosgw also serves https
#                             on a second port (beast's ssl_endpoint),
#                             with a server certificate (IP:127.0.0.1,
#                             DNS:localhost) of a CA made here:
#                             DIR/https_url, DIR/tls/ca.pem, and another
#                             CA that did not sign it, DIR/tls/other-ca.pem
#                             RGW_DNS_NAME=NAME sets rgw_dns_name (default
#                             127.0.0.1): a request to Host BUCKET.NAME is
#                             virtual-hosted
#   rgw.sh stop DIR           stop radosgw, then the OSD, then the monitor
#   rgw.sh stop-rgw DIR       stop radosgw alone (objects are kept)
#   rgw.sh start-rgw DIR      start radosgw again, wait until it answers
#   rgw.sh env DIR            print DIR/env
#   rgw.sh mkbucket DIR B     create bucket B
#   rgw.sh put DIR B/KEY FILE upload FILE as object KEY of bucket B
#   rgw.sh rm DIR B/KEY       delete an object
#   rgw.sh url DIR B/KEY      the object's URL (path style)
#   rgw.sh oidc DIR URL THUMBPRINT CLIENT_ID
#                             (needs RGW_STS=1 at start) register the OpenID
#                             Connect provider at URL with radosgw's IAM
#                             (CreateOpenIDConnectProvider, signed by the
#                             user, given caps oidc-provider=*) and make a
#                             role that tokens of it for CLIENT_ID may
#                             assume (AssumeRoleWithWebIdentity; s3 reads);
#                             prints the role's ARN, also in
#                             DIR/webid_role_arn
set -euo pipefail

die() { echo "rgw.sh: $*" >&2; exit 1; }

free_port() {
	/usr/bin/python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# listen_ports PID: the TCP ports PID listens on, one per line (its
# sockets' inodes matched against /proc/net/tcp's LISTEN entries).
listen_ports() {
	/usr/bin/python3 - "$1" <<'PY'
import os, sys
pid = sys.argv[1]
inodes = set()
try:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
except OSError:
    sys.exit(1)
ports = set()
for line in open("/proc/net/tcp").read().splitlines()[1:]:
    f = line.split()
    if f[3] == "0A" and f[9] in inodes:
        ports.add(int(f[1].split(":")[1], 16))
for p in sorted(ports):
    print(p)
PY
}

# wait_listening SECONDS PIDFILE N: until the daemon of PIDFILE listens on
# N TCP ports (or is gone); prints them.
wait_listening() {
	local end=$((SECONDS + $1)) pidf=$2 n=$3 ports
	while [ $SECONDS -lt $end ]; do
		if [ -s "$pidf" ]; then
			kill -0 "$(cat "$pidf")" 2>/dev/null || return 1
			ports=$(listen_ports "$(cat "$pidf")")
			if [ "$(echo "$ports" | grep -c .)" -ge "$n" ]; then
				echo "$ports"
				return 0
			fi
		fi
		sleep 0.1
	done
	return 1
}

# wait_for SECONDS CMD...: run CMD until it succeeds, at most SECONDS.
wait_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.1
	done
}

# stop_pid NAME PIDFILE: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
	local name=$1 pidf=$2 pid i
	[ -s "$pidf" ] || return 0
	pid=$(cat "$pidf")
	if ! kill -0 "$pid" 2>/dev/null; then
		rm -f "$pidf"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 300); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "rgw.sh: $name (pid $pid) did not stop in 30 s; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.2
	fi
	rm -f "$pidf"
}

ceph_() { ceph -c "$D/ceph.conf" --connect-timeout 10 "$@"; }

rgw_up() { curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$(cat "$D/rgw.port")/"; }

# start_rgw: radosgw; its first start binds port 0 (and 0 for TLS), and
# the ports it got are written into ceph.conf, so that a restart
# (start-rgw) serves the same URLs.
start_rgw() {
	local ports p plain= tls=
	radosgw -c "$D/ceph.conf" -n client.rgw </dev/null >>"$D/log/radosgw.out" 2>&1 ||
		die "radosgw did not start; see $D/log"
	if [ ! -s "$D/rgw.port" ]; then
		ports=$(wait_listening 60 "$D/run/client.rgw.pid" "$([ "${RGW_TLS:-0}" = 1 ] && echo 2 || echo 1)") ||
			die "radosgw does not listen; see $D/log"
		for p in $ports; do
			if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$p/"; then
				plain=$p
			else
				tls=$p
			fi
		done
		[ -n "$plain" ] || die "radosgw answers http on none of its ports ($ports); see $D/log"
		echo "$plain" > "$D/rgw.port"
		sed -i "s/endpoint=127.0.0.1:0 /endpoint=127.0.0.1:$plain /" "$D/ceph.conf"
		if [ "${RGW_TLS:-0}" = 1 ]; then
			[ -n "$tls" ] || die "radosgw has no TLS port ($ports); see $D/log"
			sed -i "s/ssl_endpoint=127.0.0.1:0 /ssl_endpoint=127.0.0.1:$tls /" "$D/ceph.conf"
			echo "https://127.0.0.1:$tls" >"$D/https_url"
		fi
	fi
	wait_for 60 rgw_up || die "radosgw does not answer on port $(cat "$D/rgw.port"); see $D/log"
}

# STS: a role the user may assume, allowed everything on S3.
make_role() {
	radosgw-admin -c "$D/ceph.conf" caps add --uid=ckptfs \
		--caps="roles=*" >>"$D/log/admin.out" 2>&1 ||
		die "radosgw-admin caps add failed"
	radosgw-admin -c "$D/ceph.conf" role create --role-name=ckptfs-reader \
		--path=/ --assume-role-policy-doc='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/ckptfs"]},"Action":["sts:AssumeRole"]}]}' \
		>"$D/log/role.json" 2>>"$D/log/admin.out" || die "radosgw-admin role create failed"
	radosgw-admin -c "$D/ceph.conf" role-policy put --role-name=ckptfs-reader \
		--policy-name=s3all --policy-doc='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":"arn:aws:s3:::*"}]}' \
		>>"$D/log/admin.out" 2>&1 || die "radosgw-admin role-policy put failed"
	/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["Arn"])' \
		"$D/log/role.json" >"$D/role_arn" || die "no role ARN in $D/log/role.json"
}

# make_certs (a CA and a server certificate for https)
. "$(dirname "${BASH_SOURCE[0]}")/../test_certs.sh"

cmd_start() {
	local monport fsid ak sk frontends old
	mkdir -p "$D"
	[ -z "$(ls -A "$D")" ] || die "$D is not empty"
	D=$(cd "$D" && pwd)
	# A start that fails half-way stops what it started.
	trap 'cmd_stop' ERR EXIT
	mkdir -p "$D/mon" "$D/osd" "$D/run" "$D/log" "$D/rgw"
	# radosgw binds port 0 (start_rgw reads what it got); the
	# monitor's address is in its map, so it is picked, and picked
	# again when another process took it first (below).
	monport=$(free_port)
	frontends="beast endpoint=127.0.0.1:0 "
	if [ "${RGW_TLS:-0}" = 1 ]; then
		make_certs "$D/tls" "$D/log/tls.out"
		frontends+=" ssl_endpoint=127.0.0.1:0 "
		frontends+=" ssl_certificate=$D/tls/server.pem"
		frontends+=" ssl_private_key=$D/tls/server.key"
	fi
	fsid=$(cat /proc/sys/kernel/random/uuid)
	cat > "$D/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$monport
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms bind ipv6 = false
ms mon client mode = crc
ms client mode = crc
ms mon service mode = crc
ms service mode = crc
ms cluster mode = crc
ms mon cluster mode = crc
run dir = $D/run
admin socket = $D/run/\$name.asok
pid file = $D/run/\$name.pid
log file = $D/log/\$name.log
crash dir = $D/crash
keyring = $D/keyring
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
paxos propose interval = 0.01
paxos min wait = 0.01
objecter tick interval = 0.1
osd objectstore = memstore
memstore device bytes = 8589934592
osd fast shutdown = false
osd crush chooseleaf type = 0
[mon.a]
mon data = $D/mon
[osd.0]
osd data = $D/osd
[client.rgw]
rgw frontends = $frontends
rgw data = $D/rgw
rgw dns name = ${RGW_DNS_NAME:-127.0.0.1}
CONF
	if [ "${RGW_STS:-0}" = 1 ]; then
		cat >> "$D/ceph.conf" <<CONF
rgw sts key = $(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
rgw s3 auth use sts = true
CONF
	fi
	local try
	for try in 1 2 3 4 5; do
		monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$monport]" \
			"$D/monmap" >/dev/null
		ceph-mon -c "$D/ceph.conf" --mkfs -i a --monmap "$D/monmap" \
			>>"$D/log/mkfs.out" 2>&1 || die "ceph-mon --mkfs failed; see $D/log"
		ceph-mon -c "$D/ceph.conf" -i a </dev/null >>"$D/log/mon.out" 2>&1 ||
			die "ceph-mon did not start; see $D/log"
		if wait_listening 30 "$D/run/mon.a.pid" 1 | grep -qx "$monport"; then
			break
		fi
		# its port was taken between free_port and the bind
		echo "rgw.sh: the monitor did not get port $monport (try $try): another process took it" >&2
		stop_pid ceph-mon "$D/run/mon.a.pid"
		[ "$try" -lt 5 ] || die "the monitor found no free port in 5 tries; see $D/log"
		rm -rf "$D/mon" "$D/monmap"
		mkdir -p "$D/mon"
		old=$monport
		monport=$(free_port)
		sed -i "s/^mon host = v2:127.0.0.1:$old\$/mon host = v2:127.0.0.1:$monport/" "$D/ceph.conf"
	done
	wait_for 60 ceph_ mon stat || die "the monitor does not answer; see $D/log"
	ceph_ osd create >/dev/null
	ceph-osd -c "$D/ceph.conf" -i 0 --mkfs >>"$D/log/mkfs.out" 2>&1 ||
		die "ceph-osd --mkfs failed; see $D/log"
	ceph-osd -c "$D/ceph.conf" -i 0 </dev/null >>"$D/log/osd.out" 2>&1 ||
		die "ceph-osd did not start; see $D/log"
	start_rgw
	if [ "${RGW_TLS:-0}" = 1 ]; then
		wait_for 30 curl -s -o /dev/null --max-time 2 --cacert \
			"$D/tls/ca.pem" "$(cat "$D/https_url")/" ||
			die "radosgw does not answer at $(cat "$D/https_url"); see $D/log"
	fi
	ak=$(head -c 15 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)
	sk=$(head -c 30 /dev/urandom | od -An -tx1 | tr -d ' \n')
	radosgw-admin -c "$D/ceph.conf" user create --uid=ckptfs \
		--display-name=ckptfs --access-key="$ak" --secret="$sk" \
		>>"$D/log/admin.out" 2>&1 || die "radosgw-admin user create failed"
	if [ "${RGW_STS:-0}" = 1 ]; then make_role; fi
	cat > "$D/env" <<ENV
export AWS_ACCESS_KEY_ID=$ak
export AWS_SECRET_ACCESS_KEY=$sk
export AWS_ENDPOINT_URL=http://127.0.0.1:$(cat "$D/rgw.port")
export AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION
ENV
	chmod 600 "$D/env"
	trap - ERR EXIT
}

cmd_stop() {
	stop_pid radosgw "$D/run/client.rgw.pid"
	stop_pid ceph-osd "$D/run/osd.0.pid"
	stop_pid ceph-mon "$D/run/mon.a.pid"
}

# s3 METHOD PATH [CURL ARGS...]: a signed request to radosgw.
s3() {
	local method=$1 path=$2
	shift 2
	# shellcheck disable=SC1091
	. "$D/env"
	curl -sS --fail-with-body -X "$method" --aws-sigv4 "aws:amz:us-east-1:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" \
		"$AWS_ENDPOINT_URL/$path"
}

# oidc URL THUMBPRINT CLIENT_ID: see the header.  The provider is known by
# URL without its scheme (radosgw strips http:// or https:// from the
# token's iss too); the role is named after it, so that one cluster can
# hold several.
cmd_oidc() {
	local url=$1 thumb=$2 client=$3 host role arn
	host=${url#http://}
	host=${host#https://}
	role=ckptfs-webid-$(printf '%s' "$host" | tr -c 'A-Za-z0-9\n' -)
	radosgw-admin -c "$D/ceph.conf" caps add --uid=ckptfs \
		--caps="oidc-provider=*" >>"$D/log/admin.out" 2>&1 ||
		die "radosgw-admin caps add oidc-provider failed"
	# shellcheck disable=SC1091
	. "$D/env"
	curl -sS --fail-with-body -X POST --aws-sigv4 "aws:amz:us-east-1:iam" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		--data-urlencode Action=CreateOpenIDConnectProvider \
		--data-urlencode Version=2010-05-08 --data-urlencode "Url=$url" \
		--data-urlencode "ClientIDList.member.1=$client" \
		--data-urlencode "ThumbprintList.member.1=$thumb" \
		"$AWS_ENDPOINT_URL/" >>"$D/log/admin.out" 2>&1 ||
		die "CreateOpenIDConnectProvider of $url failed; see $D/log/admin.out"
	radosgw-admin -c "$D/ceph.conf" role create --role-name="$role" --path=/ \
		--assume-role-policy-doc='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":["arn:aws:iam:::oidc-provider/'"$host"'"]},"Action":["sts:AssumeRoleWithWebIdentity"],"Condition":{"StringEquals":{"'"$host"':app_id":"'"$client"'"}}}]}' \
		>"$D/log/$role.json" 2>>"$D/log/admin.out" ||
		die "radosgw-admin role create $role failed"
	radosgw-admin -c "$D/ceph.conf" role-policy put --role-name="$role" \
		--policy-name=s3read --policy-doc='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject","s3:ListBucket","s3:GetBucketLocation"],"Resource":"arn:aws:s3:::*"}]}' \
		>>"$D/log/admin.out" 2>&1 || die "radosgw-admin role-policy put failed"
	arn=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["Arn"])' \
		"$D/log/$role.json") || die "no role ARN in $D/log/$role.json"
	echo "$arn" >"$D/webid_role_arn"
	echo "$arn"
}

[ $# -ge 2 ] || die "usage: rgw.sh start|stop|stop-rgw|start-rgw|env|mkbucket|put|rm|url|oidc DIR ..."
cmd=$1
D=$2
shift 2
case $cmd in
start) cmd_start ;;
stop) cmd_stop ;;
stop-rgw) stop_pid radosgw "$D/run/client.rgw.pid" ;;
start-rgw) start_rgw ;;
env) cat "$D/env" ;;
mkbucket) s3 PUT "$1" -o /dev/null ;;
put) s3 PUT "$1" -T "$2" -o /dev/null ;;
rm) s3 DELETE "$1" -o /dev/null ;;
url) . "$D/env"; echo "$AWS_ENDPOINT_URL/$1" ;;
oidc) [ $# -eq 3 ] || die "usage: rgw.sh oidc DIR URL THUMBPRINT CLIENT_ID"
	cmd_oidc "$@" ;;
*) die "unknown command '$cmd'" ;;
esac
