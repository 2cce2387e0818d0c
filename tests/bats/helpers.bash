# SPDX-License-Identifier: MIT
# Shared helpers for the end-to-end suites (after libfuse's
# test/cases/lib/common.sh): start the daemon in the foreground in the
# background, wait for the mount with a deadline, and in teardown unmount,
# wait for the daemon and require that it exits 0.

ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
CKPTFS=${CKPTFS:-$ROOT/build/ckptfs}
PY=/usr/bin/python3
# The ckptfs Python package, imported from the work tree (scripts/ckptfs/),
# loads the plain build's library unless a suite points it elsewhere.
export CKPTFS_LIB=${CKPTFS_LIB:-$ROOT/build/libckptfs.so}
# The S3 credential chain ends at EC2 instance metadata on a link-local
# address: never from a test (the suites use loopback only).
export AWS_EC2_METADATA_DISABLED=true
GEN="$PY $ROOT/scripts/gen_ckpt.py"
REF="$PY $ROOT/tests/reference.py"
BAD="$PY $ROOT/tests/make_bad_ckpt.py"

# Every timed wait in the suites is a liveness bound, scaled by
# CKPTFS_TIME_SCALE (a whole number, default 1): tests/run-all.sh raises it
# for the sanitized builds, so that a slower build or machine makes a run
# slower instead of failing it, while a hang still fails.
TIME_SCALE=${CKPTFS_TIME_SCALE:-1}
case $TIME_SCALE in '' | *[!0-9]* | 0) TIME_SCALE=1 ;; esac
export CKPTFS_TIME_SCALE=$TIME_SCALE

# secs N: N seconds, scaled.
secs() {
	echo $(($1 * TIME_SCALE))
}

# polls N: the number of 50 ms polls in N seconds, scaled.
polls() {
	echo $(($1 * 20 * TIME_SCALE))
}

# gen_once DEST KEY CMD...: CMD writes checkpoints into the directory
# DEST.  In a run of tests/run-all.sh (CKPTFS_GEN_CACHE set), the first
# CMD of each KEY runs and its output is kept; later suites and the next
# build's pass get a copy (the generators are seeded: one KEY, the same
# files).  Without CKPTFS_GEN_CACHE, CMD runs every time.
gen_once() {
	local dest=$1 key=$2
	shift 2
	if [ -z "${CKPTFS_GEN_CACHE:-}" ]; then
		"$@"
		return
	fi
	local c="$CKPTFS_GEN_CACHE/$key"
	mkdir -p "$dest" || return 1
	(
		flock 9 || exit 1
		if [ -f "$c.done" ]; then
			cp -a "$c/." "$dest/"
		else
			rm -rf "$c"
			"$@" || exit 1
			mkdir -p "$c" && cp -a "$dest/." "$c/" && touch "$c.done"
		fi
	) 9>"$c.lock"
}

# torch_gen DEST ARGS...: scripts/gen_torch_ckpt.py DEST ARGS (torch 1.13
# on the host, gloo ranks), once per run (gen_once).
torch_gen() {
	local dest=$1
	shift
	gen_once "$dest" "torch1$(printf -- '_%s' "$@")" \
		$PY "$ROOT/scripts/gen_torch_ckpt.py" "$dest" "$@"
}

common_setup() {
	TMP=$(mktemp -d "${BATS_TMPDIR:-/tmp}/ckptfs-test.XXXXXX")
	MNT=$TMP/mnt
	mkdir -p "$MNT"
	DAEMON_PID=
	MOUNTED=
	MOUNT_CONN=
	MOUNT_CONN_INO=
}

common_teardown() {
	local rc=0 conns= c
	for c in $(conns_under "$TMP"); do
		conn_ino "$c"
		conns+=" $c:$CONN_INO"
	done
	stop_mount || rc=1
	# Any daemonized mount a test made under $TMP.
	for m in $(awk -v t="$TMP" 'index($2, t) == 1 { print $2 }' /proc/mounts); do
		fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" || true
		rc=1
	done
	wait_daemons_gone $conns || rc=1
	rm -rf "$TMP"
	return $rc
}

# The fusectl numbers of the FUSE connections behind the mounts at or
# under DIR: the kernel's dev_t of each mount (major << 20 | minor), read
# from mountinfo, which costs the daemons no request.
conns_under() {	# DIR
	awk -v t="$1" 'index($5, t) == 1 && / - fuse/ {
		split($3, d, ":"); print d[1] * 1048576 + d[2] }' /proc/self/mountinfo
}

# Abort FUSE connections through fusectl (mounted first if nobody has).
# A daemon that can no longer answer leaves its readers in D state and
# `sync` blocked on the whole host until its connection is aborted;
# unmounting does not help.
abort_conns() {	# CONN...
	local c
	mountpoint -q /sys/fs/fuse/connections ||
		mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
	for c in "$@"; do
		echo 1 > "/sys/fs/fuse/connections/$c/abort" 2>/dev/null || true
	done
}

# CONN_INO := the inode of fusectl's directory for connection CONN, or
# empty.  A connection's number is its superblock's device number, which
# the next mount anywhere on the host may take once it is free (the other
# lane's jobs mount all the time); the directory's inode is new for each
# connection, so number and inode together name one.
conn_ino() {	# CONN
	CONN_INO=
	[ -n "$1" ] || return 0
	CONN_INO=$(stat -c %i "/sys/fs/fuse/connections/$1" 2>/dev/null) || CONN_INO=
}

# Abort connection CONN only if it is still the one whose fusectl
# directory had inode INO (conn_ino), never another mount's that took
# its number.
abort_conn_if_same() {	# CONN INO
	[ -n "$1" ] && [ -n "$2" ] || return 0
	conn_ino "$1"
	[ "$CONN_INO" = "$2" ] && abort_conns "$1"
	return 0
}

# start_mount CKPT MNT [ARGS...]: daemon in the foreground (-f), in the
# background; returns once MNT is a mount point, fails early if it died.
# With FD_LIMIT=N set, the daemon runs under `ulimit -n N`.
start_mount() {
	local ckpt=$1 mnt=$2 deadline
	shift 2
	if [ -n "${FD_LIMIT:-}" ]; then
		bash -c 'ulimit -n "$0" && exec "$@"' "$FD_LIMIT" \
			"$CKPTFS" mount "$ckpt" "$mnt" -f "$@" >>"$TMP/daemon.log" 2>&1 &
	else
		"$CKPTFS" mount "$ckpt" "$mnt" -f "$@" >>"$TMP/daemon.log" 2>&1 &
	fi
	DAEMON_PID=$!
	MOUNTED=$mnt
	MOUNT_CONN=
	deadline=$((SECONDS + $(secs 20)))
	until mountpoint -q "$mnt"; do
		if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
			wait "$DAEMON_PID" || true
			echo "daemon died before mounting:"
			cat "$TMP/daemon.log"
			DAEMON_PID=
			MOUNTED=
			return 1
		fi
		if [ $SECONDS -ge $deadline ]; then
			echo "mount did not appear within $(secs 20) s"
			return 1
		fi
		sleep 0.05
	done
	MOUNT_CONN=$(conns_under "$mnt" | tail -1)
	mountpoint -q /sys/fs/fuse/connections ||
		mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
	conn_ino "$MOUNT_CONN"
	MOUNT_CONN_INO=$CONN_INO
}

# Unmount what start_mount mounted; the daemon must exit 0.
stop_mount() {
	local rc=0 deadline status=0
	if [ -n "$MOUNTED" ] && mountpoint -q "$MOUNTED"; then
		if ! fusermount3 -u "$MOUNTED" 2>/dev/null; then
			sleep 0.5
			fusermount3 -u "$MOUNTED" 2>/dev/null ||
				{ echo "$MOUNTED busy at unmount (lazily detached):"; \
				  fuser -vm "$MOUNTED" 2>&1 | head -n 20; \
				  fusermount3 -uz "$MOUNTED"; rc=1; }
		fi
	fi
	if [ -n "$DAEMON_PID" ]; then
		deadline=$((SECONDS + $(secs 10)))
		while kill -0 "$DAEMON_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
			sleep 0.05
		done
		if kill -0 "$DAEMON_PID" 2>/dev/null; then
			echo "daemon still running $(secs 10) s after unmount"
			# where it is stuck, for the log (gdb comes with make deps)
			command -v gdb >/dev/null &&
				timeout 30 gdb -p "$DAEMON_PID" -batch -nx \
					-ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)' | head -n 200
			abort_conn_if_same "$MOUNT_CONN" "$MOUNT_CONN_INO"
			kill -9 "$DAEMON_PID"
			rc=1
		fi
		wait "$DAEMON_PID" || status=$?
		if [ "$status" -ne 0 ]; then
			echo "daemon exited with status $status"
			rc=1
		fi
	fi
	DAEMON_PID=
	MOUNTED=
	if [ $rc -ne 0 ]; then
		echo "daemon log:"
		cat "$TMP/daemon.log" 2>/dev/null
	fi
	return $rc
}

# Wait (with a deadline) until no ckptfs daemon serves anything under
# $TMP.  A daemon still there fails the test, named; the connections
# given (those of the test's mounts, as CONN:INO, see conn_ino) that are
# still those and the ones still mounted under $TMP are aborted and it is
# killed, so that nothing is left wedged.
wait_daemons_gone() {	# [CONN:INO...]
	local deadline=$((SECONDS + $(secs 10))) left c
	while pgrep -f "ckptfs.* $TMP" >/dev/null && [ $SECONDS -lt $deadline ]; do
		sleep 0.05
	done
	left=$(pgrep -af "ckptfs.* $TMP") || return 0
	echo "daemon(s) still running $(secs 10) s after the test ended:"
	echo "$left"
	for c in "$@"; do
		abort_conn_if_same "${c%%:*}" "${c#*:}"
	done
	abort_conns $(conns_under "$TMP")
	pkill -9 -f "ckptfs.* $TMP" 2>/dev/null || true
	return 1
}

# mount, compare with the numpy reference, unmount.
check_view() {
	local ckpt=$1 w=$2 r=$3
	shift 3
	start_mount "$ckpt" "$MNT" --world "$w" --rank "$r" "$@"
	run $REF check "$ckpt" "$MNT" --world "$w" --rank "$r" "$@"
	echo "W=$w R=$r: $output"
	stop_mount
	[ "$status" -eq 0 ]
}

# Mount CKPT as (W, R) with MOUNT OPTIONS and compare each view file with
# the "path<TAB>hex" lines of $TMP/expect; name every file that differs.
check_expected_views() {	# CKPT W R [MOUNT OPTIONS...]
	local ckpt=$1 w=$2 r=$3 bad=0 path hex got
	shift 3
	start_mount "$ckpt" "$MNT" --world "$w" --rank "$r" "$@"
	while IFS=$'\t' read -r path hex; do
		got=$(od -An -v -tx1 "$MNT/$path" | tr -d ' \n')
		[ "$got" = "$hex" ] || { echo "$path differs"; bad=$((bad + 1)); }
	done < "$TMP/expect"
	stop_mount
	echo "W=$w R=$r: $(wc -l < "$TMP/expect") files, $bad differ"
	[ "$bad" -eq 0 ]
}

# A checkpoint the mount must refuse: within 20 s, with one line starting
# "ckptfs:" that contains WANT, and no mount left.
refuse_mount() {	# CKPT WANT [MOUNT OPTIONS...]
	local ckpt=$1 want=$2
	shift 2
	run timeout "$(secs 20)" "$CKPTFS" mount "$ckpt" "$MNT" "$@"
	echo "status=$status output=$output"
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]			# did not hang
	[[ "$output" == *"$want"* ]]
	[ "${#lines[@]}" -eq 1 ]		# one line
	[[ "$output" == ckptfs:* ]]
	not mountpoint -q "$MNT"
}

# stop_by_signal SIG: send SIG to the daemon start_mount started; it must
# exit 0 within 5 s and leave no mount.
stop_by_signal() {
	kill -"$1" "$DAEMON_PID"
	for _ in $(seq "$(polls 5)"); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
	not kill -0 "$DAEMON_PID" 2>/dev/null
	wait "$DAEMON_PID"
	DAEMON_PID=
	not mountpoint -q "$MNT"
}

# `not CMD`: succeeds only when CMD fails.  (A bare `! CMD` does not stop
# a bats test, since set -e ignores negated commands.)
not() {
	if "$@"; then
		echo "expected to fail: $*"
		return 1
	fi
	return 0
}
