#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The S3 paths under ThreadSanitizer (make tsan: build-tsan/), against a
# radosgw of its own (tests/s3/rgw.sh) behind the fault proxy
# (tests/s3/faultproxy.py, delaying some requests so that threads meet in
# other orders): read-ahead with joined reads, the S3 workers and the
# credential refresher run together.  A PyTorch checkpoint's files are
# read through a TSan daemon's mount of s3:// (read-ahead on, several
# readers); loaded lazily with ckptfs.load over s3:// by the TSan-built
# libckptfs (preloaded TSan runtime); and read through a mount whose
# short-lived credentials (credential_process) are refreshed while it
# reads, the credentials' clock moved past half-lives and expiries.
# Bytes equal a local mount's of the same checkpoint (and
# ckptfs.load's of it); any TSan report, or a daemon that does not exit
# 0, fails the test.  Prints TAP with a plan.
#     tests/tsan-s3.sh build-tsan
set -u
B=$(cd "${1:-build-tsan}" && pwd)
BIN=$B/ckptfs
LIB=$B/libckptfs.so
N=3
echo "1..$N"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/ckptfs-test.XXXXXX)
MNT=$TMP/mnt
mkdir -p "$MNT"
export AWS_EC2_METADATA_DISABLED=true
SCALE=${CKPTFS_TIME_SCALE:-1}
case $SCALE in '' | *[!0-9]* | 0) SCALE=1 ;; esac
TSANLIB=$(gcc -print-file-name=libtsan.so)
pid=
proxy_pid=
t=0
failed=0

cleanup() {
	mountpoint -q "$MNT" && { fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"; }
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	[ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null
	[ -d "$TMP/rgw" ] && "$ROOT/tests/s3/rgw.sh" stop "$TMP/rgw" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' TERM INT

# ok NAME / not_ok NAME WHY: one TAP line (not_ok prints the TSan reports
# and the daemon's log after it).
ok() { t=$((t + 1)); echo "ok $t tsan s3: $*"; }
not_ok() {
	t=$((t + 1))
	failed=1
	echo "not ok $t tsan s3: $1"
	shift
	echo "# $*"
	cat "$TMP"/tsan.* 2>/dev/null | head -80
	[ -s "$TMP/daemon.log" ] && tail -40 "$TMP/daemon.log"
	rm -f "$TMP"/tsan.* "$TMP/daemon.log"
}
# reports: whether TSan wrote any report.
reports() { ls "$TMP"/tsan.* >/dev/null 2>&1; }

# start_daemon CKPT ARGS...: the TSan daemon in the foreground, in the
# background, until its mount is up; env's arguments "${DENV[@]}" first.
DENV=()
start_daemon() {
	local ckpt=$1 i
	shift
	env "${DENV[@]}" TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$TMP/tsan" \
		"$BIN" mount "$ckpt" "$MNT" -f "$@" >>"$TMP/daemon.log" 2>&1 &
	pid=$!
	for i in $(seq $((600 * SCALE))); do
		mountpoint -q "$MNT" && return 0
		kill -0 $pid 2>/dev/null || break
		sleep 0.05
	done
	return 1
}

# stop_daemon: unmount, then the daemon's exit status (124: still
# running 20 s after; killed).
stop_daemon() {
	local i rc
	fusermount3 -u "$MNT" 2>/dev/null || { sleep 0.5; fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"; }
	for i in $(seq $((400 * SCALE))); do
		kill -0 $pid 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 $pid 2>/dev/null; then
		kill -9 $pid
		wait $pid
		pid=
		return 124
	fi
	wait $pid
	rc=$?
	pid=
	return $rc
}

# sums: "sha256  path" of every view file of the mount, read by three
# readers at once: one in the view's order (read-ahead across files),
# two in reverse and shuffled order; each must see the same bytes.
sums() {
	local f
	(cd "$MNT" && find . -path ./.ckptfs -prune -o -type f -print | sort >"$TMP/files")
	local r=()
	(cd "$MNT" && xargs -r sha256sum <"$TMP/files" >"$TMP/s.a") &
	r+=($!)
	(cd "$MNT" && tac "$TMP/files" | xargs -r sha256sum | sort -k2 >"$TMP/s.b") &
	r+=($!)
	(cd "$MNT" && shuf --random-source=/dev/zero "$TMP/files" | xargs -r sha256sum | sort -k2 >"$TMP/s.c") &
	r+=($!)
	wait "${r[@]}"	# (not the proxy)
	sort -k2 "$TMP/s.a" >"$TMP/s.a2"
	for f in b c; do
		cmp -s "$TMP/s.a2" "$TMP/s.$f" || { echo "readers saw other bytes"; return 1; }
	done
	cat "$TMP/s.a2"
}

setup_fail() {
	local i
	echo "# setup: $*"
	for i in $(seq $N); do echo "not ok $i tsan s3: setup failed: $1"; done
	exit 1
}

[ -x "$BIN" ] && [ -f "$LIB" ] || setup_fail "no $BIN or $LIB (make tsan)"
# A PyTorch checkpoint (torch 1.13's FileSystemWriter, 4 ranks, about
# 800 records): a lazy open locates records on first read.
$PY "$ROOT/scripts/gen_torch_ckpt.py" "$TMP/t" --large 0.005 --world 4 \
	>"$TMP/gen.log" 2>&1 || setup_fail "gen_torch_ckpt.py" "$(tail -5 "$TMP/gen.log")"
CK=$TMP/t/large
"$ROOT/tests/s3/rgw.sh" start "$TMP/rgw" >"$TMP/rgw.log" 2>&1 ||
	setup_fail "rgw.sh start" "$(tail -5 "$TMP/rgw.log")"
# shellcheck disable=SC1091
. "$TMP/rgw/env"
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL AWS_REGION
"$ROOT/tests/s3/rgw.sh" mkbucket "$TMP/rgw" ck-tsan >/dev/null 2>&1
for f in "$CK"/* "$CK"/.[!.]*; do
	[ -f "$f" ] || continue
	"$ROOT/tests/s3/rgw.sh" put "$TMP/rgw" "ck-tsan/big/$(basename "$f")" "$f" ||
		setup_fail "upload $f"
done
setsid $PY "$ROOT/tests/s3/faultproxy.py" --upstream "$AWS_ENDPOINT_URL" \
	--port-file "$TMP/proxy.port" --max-seconds 3600 \
	</dev/null >"$TMP/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq $((200 * SCALE))); do [ -s "$TMP/proxy.port" ] && break; sleep 0.05; done
[ -s "$TMP/proxy.port" ] || setup_fail "fault proxy" "$(tail -5 "$TMP/proxy.log")"
PROXY=http://127.0.0.1:$(cat "$TMP/proxy.port")
# A fifth of the requests wait 20 ms: replies come back out of order.
curl -sf -X POST -d '{"mode": "delay", "rate": 0.2, "delay_ms": 20, "seed": 3}' \
	"$PROXY/__faultproxy/config" >/dev/null || setup_fail "fault proxy config"

# The expected bytes: a mount of the local copy (ahead_kb=0: no window).
start_daemon "$CK" --world 8 --rank 3 -o ahead_kb=0 || setup_fail "local mount" "$(tail -20 "$TMP/daemon.log")"
(cd "$MNT" && find . -path ./.ckptfs -prune -o -type f -print | sort | xargs -r sha256sum) >"$TMP/want"
stop_daemon || setup_fail "local mount's daemon exited $?"
[ "$(wc -l <"$TMP/want")" -gt 100 ] || setup_fail "local mount has $(wc -l <"$TMP/want") files"
reports && setup_fail "TSan reports from the local mount" "$(head -40 "$TMP"/tsan.*)"
rm -f "$TMP/daemon.log"

# 1. Read-ahead, joined reads and the S3 workers: three readers at once.
if ! start_daemon s3://ck-tsan/big --world 8 --rank 3 -o s3_endpoint="$PROXY"; then
	not_ok "mount of s3:// with read-ahead" "the mount did not come up"
else
	sums >"$TMP/got" 2>&1
	src=$?
	stop_daemon
	drc=$?
	if [ $src -ne 0 ] || ! cmp -s "$TMP/want" "$TMP/got"; then
		not_ok "cat of a mount of s3:// with read-ahead" "bytes differ from the local mount's: $(diff "$TMP/want" "$TMP/got" | head -5)"
	elif [ $drc -ne 0 ] || reports; then
		not_ok "cat of a mount of s3:// with read-ahead" "daemon exited $drc, TSan reports below"
	else
		ok "cat of a mount of s3:// with read-ahead ($(wc -l <"$TMP/got") files, 3 readers at once): bytes of the local mount, no data race"
	fi
fi

# 2. A lazy load by the TSan-built library (the TSan runtime preloaded
# into Python), equal to ckptfs.load of the local copy.
out=$(cd "$TMP" && LD_PRELOAD=$TSANLIB CKPTFS_LIB=$LIB PYTHONPATH=$ROOT/scripts \
	TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$TMP/tsan" \
	$PY "$ROOT/tests/lazy_check.py" counts s3://ck-tsan/big "$CK" "$PROXY" 8 3 2>&1)
lrc=$?
if [ $lrc -ne 0 ] || reports; then
	not_ok "lazy ckptfs.load of s3:// by the TSan library" "exit $lrc: $(echo "$out" | tail -5)"
else
	ok "lazy ckptfs.load of s3:// by the TSan library equals the local load, no data race ($(echo "$out" | tail -n 1))"
fi

# 3. Credentials refreshed while readers read: credential_process hands
# out the user's keys expiring in LIFE s of the credentials' clock
# (CKPTFS_TEST_CLOCK_FILE, docs/testing.md), which is moved on by LIFE/2
# + 1 before each round of reads: each round's reads find the set due
# for a refresh (in the background) or expired (a refresh they wait for).
LIFE=600
export CKPTFS_TEST_CLOCK_FILE=$TMP/clock
echo 0 >"$CKPTFS_TEST_CLOCK_FILE"
cat >"$TMP/creds.sh" <<'EOF'
#!/bin/sh
echo call >>"$(dirname "$0")/runs"
exp=$(date -u -d "@$(($(date +%s) + $(cat "$CKPTFS_TEST_CLOCK_FILE") + $1))" +%Y-%m-%dT%H:%M:%SZ)
printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "Expiration": "%s"}\n' "$K" "$S" "$exp"
EOF
chmod +x "$TMP/creds.sh"
printf '[default]\ncredential_process = %s %s\n' "$TMP/creds.sh" "$LIFE" >"$TMP/config"
why=
drc=0
DENV=(-u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN
	K="$AWS_ACCESS_KEY_ID" S="$AWS_SECRET_ACCESS_KEY" AWS_CONFIG_FILE="$TMP/config")
if ! start_daemon s3://ck-tsan/big --world 8 --rank 3 -o s3_endpoint="$PROXY"; then
	why="the mount did not come up"
else
	for round in 1 2 3 4; do
		echo $(($(cat "$CKPTFS_TEST_CLOCK_FILE") + LIFE / 2 + 1)) >"$TMP/clock.new"
		mv "$TMP/clock.new" "$CKPTFS_TEST_CLOCK_FILE"
		sync
		echo 1 >/proc/sys/vm/drop_caches 2>/dev/null
		if ! sums >"$TMP/got" 2>&1 || ! cmp -s "$TMP/want" "$TMP/got"; then
			why="round $round: bytes differ from the local mount's: $(diff "$TMP/want" "$TMP/got" | head -5)"
			break
		fi
	done
	stop_daemon
	drc=$?
fi
runs=$(cat "$TMP/runs" 2>/dev/null | wc -l)
if [ -z "$why" ] && [ "$runs" -lt 3 ]; then
	why="credential_process ran $runs times (a refresh each round or two expected)"
fi
if [ -n "$why" ]; then
	not_ok "credential refresh during reads" "$why"
elif [ $drc -ne 0 ] || reports; then
	not_ok "credential refresh during reads" "daemon exited $drc, TSan reports below"
else
	ok "credentials refreshed $((runs - 1)) times while 3 readers read a mount of s3:// (4 rounds): bytes of the local mount, no data race"
fi
exit $failed
