#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Mount lifecycle: daemonizing only once usable, the fstab and mount.fuse3
# forms, signals, umount, and failed starts leaving nothing behind.

load helpers

setup() {
	common_setup
	$BAD ok "$TMP/ckpt"
}
teardown() { common_teardown; }

daemon_pid() {
	pgrep -f "ckptfs.* $MNT" | head -1
}

@test "ckptfs mount daemonizes only once the mount is usable; ckptfs umount ends it" {
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	[ "$status" -eq 0 ]
	# Usable at once, with no waiting.
	[ "$(stat -c %s "$MNT/optim/state/w/exp_avg")" = 96 ]
	pid=$(daemon_pid)
	[ -n "$pid" ]
	run "$CKPTFS" umount "$MNT"
	[ "$status" -eq 0 ]
	not mountpoint -q "$MNT"
	for i in $(seq "$(polls 5)"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	not kill -0 "$pid" 2>/dev/null
}

@test "the fstab form: ckptfs SRC MNT -o world=,rank= with generic options ignored" {
	run "$CKPTFS" "$TMP/ckpt" "$MNT" -o rw,nodev,nosuid,noauto,user,_netdev,x-systemd.automount,world=2,rank=1
	echo "$output"
	[ "$status" -eq 0 ]
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	echo "$output"
	fusermount3 -u "$MNT"
	[ "$status" -eq 0 ]
}

@test "mount.fuse3 (what mount -t fuse.ckptfs runs) with options from fstab" {
	mkdir -p "$TMP/bin"
	ln -s "$CKPTFS" "$TMP/bin/ckptfs"
	# mount(8) resets PATH, so call its helper directly with ours.
	run env PATH="$TMP/bin:$PATH" mount.fuse3 "$TMP/ckpt" "$MNT" -t ckptfs -o ro,nodev,nosuid,noauto,_netdev,world=2,rank=1
	echo "$output"
	[ "$status" -eq 0 ]
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	echo "$output"
	fusermount3 -u "$MNT"
	[ "$status" -eq 0 ]
}

@test "SIGTERM unmounts cleanly and the daemon exits 0" {
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	stop_by_signal TERM
}

@test "SIGINT unmounts cleanly and the daemon exits 0" {
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	stop_by_signal INT
}

@test "a missing mount point fails with a message and leaves nothing" {
	run "$CKPTFS" mount "$TMP/ckpt" "$TMP/nope" --world 2 --rank 0
	[ "$status" -ne 0 ]
	[[ "$output" == *"cannot mount on"* ]]
	not grep -q " $TMP" /proc/mounts
	[ -z "$(daemon_pid)" ]
}

@test "-s (single-threaded) and -d (debug, foreground) serve the same bytes" {
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 1 -s
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	stop_mount
	[ "$status" -eq 0 ]
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 1 -d
	cat "$MNT/optim/state/w/exp_avg" >/dev/null
	stop_mount
	grep -q "opcode" "$TMP/daemon.log" || grep -q "unique" "$TMP/daemon.log"
}

@test "--help and --version" {
	run "$CKPTFS" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"--world"* ]]
	run "$CKPTFS" mount --help
	[ "$status" -eq 0 ]
	run "$CKPTFS" --version
	[ "$status" -eq 0 ]
	[[ "$output" == "ckptfs "* ]]
}

@test "a daemon killed with SIGKILL: fusermount3 -u clears it and a new mount works" {
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	kill -KILL "$DAEMON_PID"
	wait "$DAEMON_PID" || true
	DAEMON_PID=
	fusermount3 -u "$MNT"
	not mountpoint -q "$MNT"
	MOUNTED=
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 1
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	stop_mount
	[ "$status" -eq 0 ]
}

@test "credential-like -o names are refused by ckptfs in one line that never shows the value, before libfuse sees them" {
	local v name out
	for name in secret_key aws_secret_access_key AWS_SECRET_ACCESS_KEY \
		access_key session_token password Password my_secret api_token \
		db_credential aws_access_key_id AWS_SESSION_KEY s3_secret_key; do
		v="V4lue-$RANDOM-$name-zQ"
		for form in mount fstab; do
			if [ "$form" = mount ]; then
				run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 2 --rank 0 -o "ro,$name=$v,allow_other"
			else
				run "$CKPTFS" "$TMP/ckpt" "$MNT" -o "rw,noauto,world=2,rank=0,$name=$v"
			fi
			echo "$name ($form): status $status: $output"
			[ "$status" -ne 0 ]
			[ "${#lines[@]}" -eq 1 ]
			[[ "$output" == "ckptfs: -o $name: looks like a credential: "* ]]
			[[ "$output" != *"$v"* ]]
			[[ "$output" != *"fuse:"* ]]
			not mountpoint -q "$MNT"
		done
	done
	# Without a value the name itself may be the secret: not shown either.
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 2 --rank 0 -o "Tok3nAKIAsecretXYZ"
	echo "$output"
	[ "$status" -ne 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" != *"Tok3nAKIAsecretXYZ"* ]]
	# Stdout and stderr apart: the value is in neither.
	out=$("$CKPTFS" mount "$TMP/ckpt" "$MNT" -o AWS_SECRET_ACCESS_KEY=Zq9-s3cr3t 2>"$TMP/err") || true
	[ -z "$out" ]
	not grep -q Zq9-s3cr3t "$TMP/err"
	grep -q "looks like a credential" "$TMP/err"
	# Ordinary options still mount.
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0 -o ro,prefetch
	stop_mount
}
