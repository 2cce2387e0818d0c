#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The concurrency stress test against a ThreadSanitizer build of the daemon
# (make SAN=thread O=build-tsan), with 500 data files under `ulimit -n 64`
# so the locked fd-cache path is exercised too, and -o prefetch, so the
# prefetch thread runs beside the readers: stopped once by an unmount
# after the readers are done, and once by SIGTERM while they read (the
# control thread's ordered shutdown).  Then the S3 credential refresher's
# unit test, when built.  Prints a TAP plan and line.
#     tests/tsan-stress.sh build-tsan/ckptfs
set -u
BIN=$1
echo "1..1"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/ckptfs-test.XXXXXX)
MNT=$TMP/mnt
mkdir -p "$MNT"
fail() { echo "not ok tsan stress: $*"; cat "$TMP"/tsan.* 2>/dev/null | head -60; }
cleanup() {
	mountpoint -q "$MNT" && { fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"; }
	rm -rf "$TMP"
}
trap cleanup EXIT

# Liveness bounds, scaled (tests/bats/helpers.bash).
SCALE=${CKPTFS_TIME_SCALE:-1}
case $SCALE in '' | *[!0-9]* | 0) SCALE=1 ;; esac
/usr/bin/python3 "$ROOT/scripts/gen_ckpt.py" "$TMP/ckpt" --seed 5 --keys 700 --files 500 --max-elems 4000
# start_daemon: the TSan daemon in the foreground, in the background.
start_daemon() {
	bash -c 'ulimit -n 64 && exec "$@"' _ env TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$TMP/tsan" \
		"$BIN" mount "$TMP/ckpt" "$MNT" --world 3 --rank 1 -f -o prefetch >>"$TMP/daemon.log" 2>&1 &
	pid=$!
	for _ in $(seq $((400 * SCALE))); do mountpoint -q "$MNT" && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
	if ! mountpoint -q "$MNT"; then fail "mount did not come up"; cat "$TMP/daemon.log"; exit 1; fi
}

start_daemon
out=$(/usr/bin/python3 "$ROOT/tests/stress.py" "$TMP/ckpt" "$MNT" --world 3 --rank 1 --procs 16 --seconds 5)
src=$?
fusermount3 -u "$MNT"
wait $pid
drc=$?
if [ $src -ne 0 ]; then fail "$out"; exit 1; fi
if [ $drc -ne 0 ] || ls "$TMP"/tsan.* >/dev/null 2>&1; then fail "daemon exited $drc with reports"; exit 1; fi

# Again, stopped by SIGTERM while 16 readers read (their reads then fail:
# only the daemon is judged): it must exit 0 within 10 s, race-free.
start_daemon
/usr/bin/python3 "$ROOT/tests/stress.py" "$TMP/ckpt" "$MNT" --world 3 --rank 1 --procs 16 --seconds 30 >/dev/null 2>&1 &
spid=$!
sleep 3
kill -TERM $pid
for _ in $(seq $((200 * SCALE))); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $pid 2>/dev/null; then
	fail "daemon still running $((10 * SCALE)) s after SIGTERM during reads"
	kill -9 $pid $spid
	exit 1
fi
wait $pid
drc=$?
kill $spid 2>/dev/null
wait $spid
if [ $drc -ne 0 ] || ls "$TMP"/tsan.* >/dev/null 2>&1; then fail "daemon stopped by SIGTERM during reads exited $drc with reports"; cat "$TMP/daemon.log"; exit 1; fi

# The S3 credential refresher (tests/unit/test_s3_creds.c: readers beside
# a refresh held in credential_process, a free while it is stuck), when
# built beside the daemon (make SAN=thread O=build-tsan
# build-tsan/tests/test_s3_creds).
creds=
T=$(dirname "$BIN")/tests/test_s3_creds
if [ -x "$T" ]; then
	TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$TMP/tsan" "$T" >"$TMP/creds.log" 2>&1
	crc=$?
	if [ $crc -ne 0 ] || ls "$TMP"/tsan.* >/dev/null 2>&1; then fail "test_s3_creds exited $crc"; cat "$TMP/creds.log"; exit 1; fi
	creds=", credential refresh race-free"
fi
echo "ok tsan stress: $out, no data races reported, SIGTERM during reads exits 0$creds"
