#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# A shutdown that cannot wedge the host (issue 18): a signal while the
# prefetch thread stores pages and a reader evicts and rereads them must
# end the daemon within 5 s, every time, and leave no process in D state;
# a shutdown that is stuck anyway aborts the connection and says so.

load helpers

HT="$PY $ROOT/tests/hang_tools.py"

setup() { common_setup; }
teardown() { common_teardown; }

# Processes of this test in D state (uninterruptible), one per line.
d_state() {
	ps -eo pid=,stat=,wchan:32=,args= | awk -v t="$TMP" '$2 ~ /^D/ && index($0, t)'
}

# One round: mount with -o prefetch, start a reader that evicts what it
# reads, send SIG after MS milliseconds.  Fails naming what went wrong;
# a daemon still there after 5 s has its connection aborted and is killed.
one_round() {	# ROUND SIG MS
	local round=$1 sig=$2 ms=$3 rpid status=0 i
	start_mount "$TMP/ckpt" "$MNT" -o prefetch
	$HT reader "$MNT" &
	rpid=$!
	sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
	kill -"$sig" "$DAEMON_PID"
	for i in $(seq 100); do
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$DAEMON_PID" 2>/dev/null; then
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
	for i in $(seq 100); do
		kill -0 "$rpid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$rpid" 2>/dev/null; then
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
