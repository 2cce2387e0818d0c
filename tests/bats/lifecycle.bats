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

# Issue 27 item 6: a mount point that cannot be used is refused in one line
# with a nonzero exit before anything is opened or daemonized, in every
# form (ckptfs mount, the fstab form, mount.fuse3).
@test "mount point: a regular file is refused (it used to mount and give EIO)" {
	: > "$TMP/file"
	for form in mount fstab fuse3; do
		case $form in
		mount) run timeout "$(secs 20)" "$CKPTFS" mount "$TMP/ckpt" "$TMP/file" --world 2 --rank 0 ;;
		fstab) run timeout "$(secs 20)" "$CKPTFS" "$TMP/ckpt" "$TMP/file" -o ro,world=2,rank=0 ;;
		fuse3) mkdir -p "$TMP/bin"; ln -sf "$CKPTFS" "$TMP/bin/ckptfs"
		       run env PATH="$TMP/bin:$PATH" timeout "$(secs 20)" mount.fuse3 "$TMP/ckpt" "$TMP/file" -t ckptfs -o ro,world=2,rank=0 ;;
		esac
		echo "$form: status=$status output=$output"
		[ "$status" -ne 0 ]; [ "$status" -ne 124 ]
		[ "${#lines[@]}" -eq 1 ]
		[ "${lines[0]}" = "ckptfs: cannot mount on $TMP/file: not a directory (a mount point is an existing directory)" ]
		not mountpoint -q "$TMP/file"
	done
	[ ! -s "$TMP/file" ]
}

@test "mount point: one that holds a ckptfs mount is refused, naming what is mounted there" {
	start_mount "$TMP/ckpt" "$MNT" --world 4 --rank 2
	want="ckptfs: cannot mount on $MNT: it already holds a ckptfs mount of $TMP/ckpt, world 4, rank 2 (ckptfs umount $MNT first)"
	run timeout "$(secs 20)" "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 4 --rank 3
	echo "status=$status output=$output"
	[ "$status" -ne 0 ]; [ "$status" -ne 124 ]
	[ "$output" = "$want" ]
	run timeout "$(secs 20)" "$CKPTFS" "$TMP/ckpt" "$MNT" -o world=4,rank=3,nonempty
	echo "status=$status output=$output"
	[ "$status" -ne 0 ]; [ "$output" = "$want" ]
	# still rank 2's view, one mount, not stacked
	[ "$(findmnt -n -o TARGET "$MNT" | wc -l)" -eq 1 ]
	run $REF check "$TMP/ckpt" "$MNT" --world 4 --rank 2
	echo "$output"; [ "$status" -eq 0 ]
	stop_mount
}

@test "mount point: a directory with files is refused unless -o nonempty" {
	echo hi > "$MNT/keep"
	for form in mount fstab; do
		if [ $form = mount ]; then
			run timeout "$(secs 20)" "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 2 --rank 1
		else
			run timeout "$(secs 20)" "$CKPTFS" "$TMP/ckpt" "$MNT" -o world=2,rank=1
		fi
		echo "status=$status output=$output"
		[ "$status" -ne 0 ]; [ "$status" -ne 124 ]
		[ "$output" = "ckptfs: cannot mount on $MNT: not empty (it holds 'keep'; -o nonempty mounts over it)" ]
		not mountpoint -q "$MNT"
	done
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 1 -o nonempty
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	echo "$output"; [ "$status" -eq 0 ]
	stop_mount
	[ "$(cat "$MNT/keep")" = hi ]
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
