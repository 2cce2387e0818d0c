#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# -o prefetch cannot wedge the host whatever kills the daemon (issue 26
# item 7): SIGKILL at a random moment while it prefetches beside a reader
# that evicts what it reads, under CPU load, and a memory cgroup's OOM
# killer.  After each kill, every process of the test ends by itself, none
# is left in D state, `sync` returns, and the kernel ends the connection
# by itself: nothing here writes to fusectl's abort before the checks.

load helpers

HT="$PY $ROOT/tests/hang_tools.py"

setup() {
	common_setup
	LOAD_PIDS=()
	CG=
	# fusectl, to tell a connection that ended from one still there
	# (start_mount mounts it too; the OOM case mounts by itself)
	mountpoint -q /sys/fs/fuse/connections ||
		mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
}
teardown() {
	local p
	for p in "${LOAD_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${LOAD_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -z "$CG" ] || rmdir "$CG" 2>/dev/null || true
	common_teardown
}

# A busy loop per core, until teardown.
cpu_load() {
	local i
	for i in $(seq "$(nproc)"); do
		(while :; do :; done) &
		LOAD_PIDS+=($!)
	done
}

# STATE := the state letter of process PID (R, S, D, Z...), from
# /proc/PID/stat; empty when it no longer exists.  No subshell: the checks
# below run under CPU load.
proc_state() {	# PID
	local line=
	STATE=
	read -r line 2>/dev/null <"/proc/$1/stat" || return 0
	line=${line##*) }
	STATE=${line%% *}
}

# Processes in D state whose command line names this test's directory,
# one line each: pid, wchan, command.
d_state() {
	local f pid args
	for f in /proc/[0-9]*/stat; do
		pid=${f#/proc/}
		pid=${pid%/stat}
		proc_state "$pid"
		[ "$STATE" = D ] || continue
		mapfile -d '' args 2>/dev/null <"/proc/$pid/cmdline" || continue
		[[ "${args[*]}" == *"$TMP"* ]] || continue
		echo "$pid $(cat "/proc/$pid/wchan" 2>/dev/null) ${args[*]}"
	done
}

# True once none of PIDS exists (or is more than a zombie), within 5 s.
all_gone_within_5s() {	# PID...
	local i p left
	for i in $(seq "$(polls 5)"); do
		left=
		for p in "$@"; do
			proc_state "$p"
			case $STATE in '' | Z) ;; *) left=1 ;; esac
		done
		[ -z "$left" ] && return 0
		sleep 0.05
	done
	return 1
}

# After the daemon DAEMON_PID (connection CONN, whose fusectl directory
# had inode INO) was killed while the prefetch helpers HELPERS and the
# reader RPID ran: everything ends by itself, nothing is in D state, sync
# returns, and once the stale mount is detached the kernel has let the
# connection go.  Only after a failed check does it abort the connection
# (if it is still the same one), to leave the host clean.
check_after_kill() {	# WHAT CONN INO RPID [HELPER...]
	local what=$1 conn=$2 ino=$3 rpid=$4 spid i p bad= gone=
	shift 4
	if ! all_gone_within_5s "$DAEMON_PID" "$rpid" "$@"; then
		echo "$what: still there 5 s after the kill:"
		for p in "$DAEMON_PID" "$rpid" "$@"; do
			proc_state "$p"
			echo "  $p $STATE $(cat "/proc/$p/wchan" 2>/dev/null)"
		done
		bad=1
	fi
	if [ -z "$bad" ] && [ -n "$(d_state)" ]; then
		echo "$what: processes in D state:"
		d_state
		bad=1
	fi
	if [ -z "$bad" ]; then
		sync &
		spid=$!
		all_gone_within_5s "$spid" || all_gone_within_5s "$spid" ||
			all_gone_within_5s "$spid" || all_gone_within_5s "$spid" || {
			echo "$what: sync still blocked after 20 s"
			bad=1
		}
	fi
	fusermount3 -uz "$MNT" 2>/dev/null || true
	MOUNTED=
	if [ -z "$bad" ] && [ -n "$ino" ]; then
		for i in $(seq "$(polls 5)"); do
			conn_ino "$conn"
			[ "$CONN_INO" = "$ino" ] || { gone=1; break; }
			sleep 0.05
		done
		if [ -z "$gone" ]; then
			echo "$what: connection $conn still there 5 s after the lazy unmount"
			bad=1
		fi
	fi
	if [ -n "$bad" ]; then
		abort_conn_if_same "$conn" "$ino"
		kill -9 "$DAEMON_PID" "$rpid" "$@" 2>/dev/null || true
		[ -z "$spid" ] || wait "$spid" 2>/dev/null || true
	fi
	wait "$rpid" 2>/dev/null || true
	DAEMON_PID=
	[ -z "$bad" ]
}

@test "-o prefetch, a reader evicting what it reads, CPU load, SIGKILL at 0-500 ms: 60 of 60 rounds leave nothing hung" {
	# 768 MiB: the helper reads it in about 0.5 s on a quiet machine,
	# 2.5 s under load (192 MiB ended before most kills could land)
	$HT big "$TMP/ckpt" --keys 6 --mib 128
	cpu_load
	local round ms rpid helpers conn ino bad=0 during=0 from i
	for round in $(seq 60); do
		ms=$((RANDOM % 501))
		start_mount "$TMP/ckpt" "$MNT" -o prefetch
		conn=$MOUNT_CONN
		ino=$MOUNT_CONN_INO
		$HT reader "$MNT" --shuffle --start "$round" &
		rpid=$!
		# Odd rounds count 0-500 ms from the mount.  Even ones count
		# 0-100 ms from when the helper is seen (looked for without a
		# pause, a few seconds at most), so that kills find it running
		# on a loaded machine too.
		from=mount
		if [ $((round % 2)) -eq 0 ]; then
			from=helper
			ms=$((RANDOM % 101))
			for i in $(seq "$(polls 2)"); do
				pgrep -P "$DAEMON_PID" >/dev/null && break
			done
		fi
		sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
		helpers=$(pgrep -P "$DAEMON_PID" | tr '\n' ' ')
		kill -KILL "$DAEMON_PID"
		[ -z "$helpers" ] || during=$((during + 1))
		# shellcheck disable=SC2086
		check_after_kill "round $round (SIGKILL $ms ms after the $from started)" \
			"$conn" "$ino" "$rpid" $helpers || bad=$((bad + 1))
		: >"$TMP/daemon.log"
	done
	echo "$bad of 60 rounds failed; the prefetch helper was running at $during kills"
	[ "$bad" -eq 0 ]
	[ "$during" -gt 0 ]
}

# This process's memory cgroup directory (v1 memory controller, or v2 with
# memory enabled), or nothing.
own_memory_cgroup() {
	local v1 v2
	v1=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
	if [ -n "$v1" ] && [ -d "/sys/fs/cgroup/memory$v1" ]; then
		echo "/sys/fs/cgroup/memory${v1%/}"
		return
	fi
	v2=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
	if [ -f /sys/fs/cgroup/cgroup.controllers ] &&
	   grep -qw memory "/sys/fs/cgroup${v2%/}/cgroup.subtree_control" 2>/dev/null; then
		echo "/sys/fs/cgroup${v2%/}"
	fi
}

# The OOM kills counted in cgroup DIR.
oom_kills() {	# DIR
	if [ -f "$1/memory.oom_control" ]; then
		awk '$1 == "oom_kill" { print $2 }' "$1/memory.oom_control"
	else
		awk '$1 == "oom_kill" { print $2 }' "$1/memory.events"
	fi
}

@test "-o prefetch, a reader evicting what it reads: the daemon killed by a memory cgroup's OOM killer leaves nothing hung" {
	local parent rpid helpers conn ino i status=0
	parent=$(own_memory_cgroup)
	[ -n "$parent" ] || skip "no memory cgroup to nest one in"
	CG=$parent/ckptfs-test-oom.$$
	mkdir "$CG" || skip "cannot create a memory cgroup under $parent"
	# zstd records of 48 MiB each: serving one decodes it whole, more
	# than the limit leaves.
	$HT zstd "$TMP/ckpt" --keys 4 --mib 48
	if [ -f "$CG/memory.limit_in_bytes" ]; then
		echo $((64 << 20)) >"$CG/memory.limit_in_bytes"
	else
		echo $((64 << 20)) >"$CG/memory.max"
		echo 0 >"$CG/memory.swap.max" 2>/dev/null || true
	fi
	cpu_load
	bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" \
		"$CKPTFS" mount "$TMP/ckpt" "$MNT" -f -o prefetch >>"$TMP/daemon.log" 2>&1 &
	DAEMON_PID=$!
	MOUNTED=$MNT
	# The mount, from mountinfo: the daemon may be killed before a stat()
	# of the mount point could see it served.
	for i in $(seq "$(polls 20)"); do
		conn=$(conns_under "$MNT" | tail -1)
		[ -n "$conn" ] && break
		sleep 0.05
	done
	[ -n "$conn" ]
	conn_ino "$conn"
	ino=$CONN_INO
	$HT reader "$MNT" --shuffle &
	rpid=$!
	helpers=$(pgrep -P "$DAEMON_PID" | tr '\n' ' ')
	for i in $(seq "$(polls 30)"); do
		proc_state "$DAEMON_PID"
		case $STATE in '' | Z) break ;; esac
		sleep 0.05
	done
	proc_state "$DAEMON_PID"
	if [ -n "$STATE" ] && [ "$STATE" != Z ]; then
		echo "the daemon was not killed within 30 s"
		cat "$TMP/daemon.log"
		kill "$rpid" 2>/dev/null || true
		return 1	# teardown unmounts and waits for the daemon
	fi
	wait "$DAEMON_PID" || status=$?
	echo "daemon exit status $status, OOM kills in the cgroup: $(oom_kills "$CG"), helpers: $helpers"
	# shellcheck disable=SC2086
	check_after_kill "OOM kill" "$conn" "$ino" "$rpid" $helpers
	[ "$status" -eq 137 ]
	[ "$(oom_kills "$CG")" -ge 1 ]
}
