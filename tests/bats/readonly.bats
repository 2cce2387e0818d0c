#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The view is read-only: every mutating call fails with EROFS, and a
# missing name gives ENOENT.  The mount is "ro", so the kernel refuses
# them itself: the daemon has no handlers for them and never sees them
# (checked below in its -d request log).

load helpers

setup() {
	common_setup
	$BAD ok "$TMP/ckpt"
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	F=$MNT/optim/state/w/exp_avg
}
teardown() { common_teardown; }

erofs() {
	run "$@"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Read-only file system"* ]]
}

@test "writes give EROFS" {
	erofs sh -c "echo x > '$F'"
	erofs sh -c "echo x >> '$F'"
	erofs truncate -s 0 "$F"
	erofs $PY -c "import os,sys; os.open(sys.argv[1], os.O_RDWR)" "$F"
}

@test "mkdir, rm, rmdir, mv, ln, touch, chmod, setfattr give EROFS" {
	erofs mkdir "$MNT/newdir"
	erofs rm -f "$F"
	erofs rmdir "$MNT/optim/state/w"
	erofs mv "$F" "$MNT/optim/moved"
	erofs ln -s x "$MNT/link"
	erofs ln "$F" "$MNT/hard"
	erofs touch "$MNT/newfile"
	erofs chmod 600 "$F"
	erofs $PY -c "import os,sys; os.setxattr(sys.argv[1], 'user.x', b'1')" "$F"
}

@test "a missing name gives ENOENT" {
	run cat "$MNT/optim/nope"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No such file or directory"* ]]
	run stat "$MNT/nope/deeper"
	[[ "$output" == *"No such file or directory"* ]]
	run ls "$MNT/optim/param_groups/x"
	[ "$status" -ne 0 ]
}

@test "the file's contents are unchanged after the attempts" {
	before=$(md5sum < "$F")
	run sh -c "echo x > '$F'"
	[ "$(md5sum < "$F")" = "$before" ]
}

@test "the kernel refuses writes before they reach the daemon" {
	stop_mount
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0 -d
	erofs sh -c "echo x > '$F'"
	erofs mkdir "$MNT/newdir"
	erofs rm -f "$F"
	erofs mv "$F" "$MNT/optim/moved"
	erofs touch "$MNT/newfile"
	erofs chmod 600 "$F"
	erofs $PY -c "import os,sys; os.setxattr(sys.argv[1], 'user.x', b'1')" "$F"
	grep -q 'opcode: LOOKUP' "$TMP/daemon.log"
	not grep -E 'opcode: (WRITE|MKDIR|UNLINK|RENAME2?|CREATE|MKNOD|SETATTR|SETXATTR|SYMLINK|LINK|FALLOCATE)' "$TMP/daemon.log"
}
