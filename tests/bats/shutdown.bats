#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# A shutdown that cannot wedge the host (issue 18): a signal while the
# prefetch thread stores pages and a reader evicts and rereads them must
# end the daemon within 5 s, every time, and leave no process in D state;
# a shutdown that is stuck anyway aborts the connection and says so.

load helpers

HT="$PY $ROOT/tests/hang_tools.py"

setup() {
	common_setup
	INNER_PID=
}
teardown() {
	# A daemon stopped by a test must run again before anything looks at
	# its mount.
	[ -z "$INNER_PID" ] || kill -CONT "$INNER_PID" 2>/dev/null || true
	common_teardown
}

# Processes of this test in D state (uninterruptible), one per line.
d_state() {
	ps -eo pid=,stat=,wchan:32=,args= | awk -v t="$TMP" '$2 ~ /^D/ && index($0, t)'
}

# Wait up to 5 s for process PID to end; fails if it has not.
gone_within_5s() {	# PID
	local i
	for i in $(seq "$(polls 5)"); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.05
	done
	not kill -0 "$1" 2>/dev/null
}

# One round: mount with -o prefetch, start a reader that evicts what it
# reads, send SIG after MS milliseconds.  Fails naming what went wrong;
# a daemon still there after 5 s has its connection aborted and is killed.
one_round() {	# ROUND SIG MS
	local round=$1 sig=$2 ms=$3 rpid status=0
	start_mount "$TMP/ckpt" "$MNT" -o prefetch
	$HT reader "$MNT" &
	rpid=$!
	sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
	kill -"$sig" "$DAEMON_PID"
	if ! gone_within_5s "$DAEMON_PID" >/dev/null; then
		echo "round $round: SIG$sig after $ms ms: the daemon is still there after 5 s"
		ps -o pid=,stat=,wchan:32=,args= -p "$DAEMON_PID,$rpid"
		d_state
		abort_conns $MOUNT_CONN
		kill -9 "$DAEMON_PID" "$rpid" 2>/dev/null
		wait "$DAEMON_PID" "$rpid"
		DAEMON_PID=
		fusermount3 -uz "$MNT" 2>/dev/null
		return 1
	fi
	wait "$DAEMON_PID" || status=$?
	DAEMON_PID=
	# The reader's next read fails; then it exits by itself.
	if ! gone_within_5s "$rpid" >/dev/null; then
		echo "round $round: SIG$sig after $ms ms: the reader is still there 5 s after the daemon exited"
		ps -o pid=,stat=,wchan:32=,args= -p "$rpid"
		kill -9 "$rpid"
		wait "$rpid"
		return 1
	fi
	wait "$rpid"
	if [ "$status" -ne 0 ]; then
		echo "round $round: SIG$sig after $ms ms: the daemon exited $status"
		cat "$TMP/daemon.log"
		return 1
	fi
	if mountpoint -q "$MNT"; then
		echo "round $round: SIG$sig after $ms ms: still mounted"
		return 1
	fi
	if [ -n "$(d_state)" ]; then
		echo "round $round: processes in D state:"
		d_state
		return 1
	fi
}

@test "-o prefetch, a reader evicting what it reads, SIGTERM/SIGINT/SIGHUP at 0-500 ms: 50 of 50 rounds end within 5 s" {
	$HT big "$TMP/ckpt" --keys 3 --mib 128
	local sigs=(TERM INT HUP) round bad=0
	for round in $(seq 50); do
		one_round "$round" "${sigs[RANDOM % 3]}" $((RANDOM % 501)) ||
			bad=$((bad + 1))
		: > "$TMP/daemon.log"
	done
	echo "$bad of 50 rounds failed"
	[ "$bad" -eq 0 ]
}

@test "a shutdown stuck on a read that never returns: after 3 s one line says so, the connection is aborted, the daemon exits 1" {
	# The data file lies on another ckptfs mount, whose daemon is then
	# stopped: a read of it waits forever.
	$HT big "$TMP/inner-ckpt" --keys 2 --mib 4
	mkdir -p "$TMP/inner"
	"$CKPTFS" mount "$TMP/inner-ckpt" "$TMP/inner" -f >>"$TMP/inner.log" 2>&1 &
	INNER_PID=$!
	for _ in $(seq "$(polls 10)"); do mountpoint -q "$TMP/inner" && break; sleep 0.05; done
	mountpoint -q "$TMP/inner"
	$HT over "$TMP/ckpt" "$TMP/inner/k0" --mib 4
	start_mount "$TMP/ckpt" "$MNT" -o follow_symlinks
	# A first close on the inner mount: the kernel learns that it needs no
	# FLUSH, so the daemon's exit does not wait on the stopped one.
	head -c 1 "$TMP/inner/k1" >/dev/null
	kill -STOP "$INNER_PID"
	cat "$MNT/x" >/dev/null 2>&1 &
	rpid=$!
	sleep 1
	kill -TERM "$DAEMON_PID"
	for _ in $(seq "$(polls 10)"); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
	not kill -0 "$DAEMON_PID"
	status=0
	wait "$DAEMON_PID" || status=$?
	DAEMON_PID=
	cat "$TMP/daemon.log"
	[ "$status" -eq 1 ]
	# one read or more: the kernel may add a read-ahead to the reader's
	grep -q "shutdown stuck for 3 s waiting for the serving threads to finish their requests ([1-9][0-9]* reads in progress); aborted the FUSE connection (/sys/fs/fuse/connections/[0-9]*/abort)" "$TMP/daemon.log"
	[ "$(grep -c . "$TMP/daemon.log")" -eq 1 ]
	# The reader was answered (with an error), and the mount is gone.
	gone_within_5s "$rpid"
	not mountpoint -q "$MNT"
	kill -CONT "$INNER_PID"
	fusermount3 -u "$TMP/inner"
	wait "$INNER_PID"
	INNER_PID=
}

@test "a torch 2.x run (sid chroot) started while a mount exists does not keep it alive: unmounted, its daemon exits at once" {
	# The chroot's run has a mount namespace of its own, which began
	# with a copy of this mount; on a machine whose / propagates nothing
	# that copy kept the connection open and the daemon served on.
	local nap="$(secs 30).$$$RANDOM" chroot_pid i rc=0
	$GEN "$TMP/ckpt" --seed 5 --keys 4
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	"$ROOT/scripts/sid-chroot.sh" run sleep "$nap" &
	chroot_pid=$!
	# the run's namespace exists once its sleep does
	for i in $(seq "$(polls 30)"); do
		pgrep -f "^sleep $nap\$" >/dev/null && break
		sleep 0.05
	done
	pgrep -f "^sleep $nap\$" >/dev/null
	fusermount3 -u "$MNT"
	gone_within_5s "$DAEMON_PID" || rc=1
	pkill -f "^sleep $nap\$" || true
	wait "$chroot_pid" 2>/dev/null || true
	[ "$rc" -eq 0 ] || { echo "daemon still serving 5 s after its unmount"; false; }
	wait "$DAEMON_PID"
	DAEMON_PID=
	MOUNTED=
}
