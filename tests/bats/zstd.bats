#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Records stored with transforms (zstd, "stream.zstd/1"): native
# checkpoints written by tests/make_zstd.py with the zstandard package,
# every view against the values make_safetensors.py recomputes; the
# decoded-record cache (-o cache_mb); verify; and the hostile matrix:
# bombs, lying sizes, corrupt, truncated and trailing frames give EIO on
# that key only, with one log line naming file, offset and key; unknown
# or malformed descriptors refuse the mount naming them.

load helpers

Z="$PY $ROOT/tests/make_zstd.py"
ST="$PY $ROOT/tests/make_safetensors.py"

setup() { common_setup; }
teardown() { common_teardown; }

check_views() {	# CKPT W R [MOUNT OPTIONS...]: the keys and meta.blob
	{
		$ST expect "$1" "$2" "$3"
		printf 'meta/blob\t%s\n' "$($Z blob)"
	} > "$TMP/expect"
	check_expected_views "$@"
}

@test "zstd: records in chunks (dim 0, dim 1, grid, uneven; one through two zstd layers) match every view (W=1,3,5,8)" {
	$Z ok "$TMP/ckpt"
	run "$CKPTFS" info "$TMP/ckpt"
	echo "$output"
	[[ "$output" == *"format	tensorplay-dcp+zstd"* ]]
	for wr in "1 0" "3 1" "3 2" "5 4" "8 0" "8 7"; do
		check_views "$TMP/ckpt" $wr
	done
}

@test "zstd: views through a 1 MiB cache; ckptfs.load matches the mount" {
	$Z ok "$TMP/ckpt"
	check_views "$TMP/ckpt" 3 1 -o cache_mb=1
	start_mount "$TMP/ckpt" "$MNT" --world 4 --rank 1
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $PY "$ROOT/tests/direct_checks.py" same "$TMP/ckpt" "$MNT" 4 1
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "zstd: ckptfs verify decodes every record; plan shows decoded reads" {
	$Z ok "$TMP/ckpt"
	run "$CKPTFS" verify "$TMP/ckpt"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"0 mismatched, 0 unreadable"* ]]
	run "$CKPTFS" plan "$TMP/ckpt" --world 2 --rank 1
	echo "$output"
	[[ "$output" == *"decoded	__"*"(bytes of the stream.zstd/1 record at "* ]]
	$Z corrupt "$TMP/bad"
	run "$CKPTFS" verify "$TMP/bad"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"key 'x'"* ]]
}

@test "zstd: -o cache_mb must be a positive number of MiB" {
	$Z ok "$TMP/ckpt"
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" -o cache_mb=0 -f
	[ "$status" -ne 0 ]
	[[ "$output" == *"cache_mb must be between 1 and"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" -o cache_mb=lots -f
	[ "$status" -ne 0 ]
	[[ "$output" == *"cache_mb must be a whole number"* ]]
	not mountpoint -q "$MNT"
}

# A record that cannot be decoded: EIO for x, y still served, the daemon
# alive, and one log line naming the file, offset, key and reason.
eio() {	# CASE TEXT [MOUNT OPTIONS...]
	local c=$1 text=$2
	shift 2
	$Z "$c" "$TMP/$c"
	start_mount "$TMP/$c" "$MNT" "$@"
	run cat "$MNT/x"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	[ "$(od -An -f "$MNT/y" | tr -s ' ' | sed 's/^ //')" = "0 1 2" ]
	kill -0 "$DAEMON_PID"
	stop_mount
	cat "$TMP/daemon.log"
	grep -q "$TMP/$c/__0_0.distcp: offset 0: key 'x': record stored with stream.zstd/1: .*$text" "$TMP/daemon.log"
}

@test "zstd hostile: a bomb whose frame declares 64 MiB hits the cap" { eio bomb_declared "past the 8388608-byte cap" -o cache_mb=8; }
@test "zstd hostile: a bomb without a declared size hits the cap while decoding" { eio bomb_stream "decodes to more than the 8388608-byte cap" -o cache_mb=8; }
@test "zstd hostile: a frame that decodes to fewer bytes than the chunk" { eio short "decodes to 12 bytes, the metadata implies 16"; }
@test "zstd hostile: a frame that decodes to more bytes than the chunk" { eio long "decodes to 20 bytes, the metadata implies 16"; }
@test "zstd hostile: a corrupt frame (checksum)" { eio corrupt "doesn't match checksum"; }
@test "zstd hostile: a truncated frame" { eio truncated "truncated"; }
@test "zstd hostile: bytes after the last frame" { eio trailing "zstd: "; }
@test "zstd hostile: a record that is not a zstd frame" { eio not_zstd "zstd: "; }

refuse() {	# CASE TEXT
	$Z "$1" "$TMP/$1"
	refuse_mount "$TMP/$1" "$2"
}

@test "zstd hostile: an unknown transform is refused by name" { refuse unknown_transform "key 'x': transform 'stream.lz4/1' is not supported"; }
@test "zstd hostile: a transform with a domain is another extension" { refuse domain_transform "transform 'stream.zstd@example.com/1' is not supported"; }
@test "zstd hostile: stream.zstd version 2" { refuse version_transform "transform 'stream.zstd/2': version other than 1"; }
@test "zstd hostile: a descriptor outside name[@domain][/version]" { refuse malformed_transform "transform descriptor 'stream zstd/1' is not name[@domain][/version]"; }
@test "zstd hostile: more than 4 transforms" { refuse too_many_transforms "key 'x': 5 transforms (want 1 to 4)"; }
@test "zstd hostile: strides on a record with transforms" { refuse strides_and_transforms "a record with transforms has no strides"; }
@test "zstd hostile: a bytes record with transforms but no size" { refuse bytes_without_size "key 'b': a bytes record with transforms needs 'size'"; }

@test "zstd: ckptfs.load(cache_mb=) bounds decoding too; a bomb is an OSError naming the key, not memory" {
	$Z bomb_stream "$TMP/bomb"
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $PY -c '
import sys; sys.path.insert(0, sys.argv[2]); import ckptfs
try:
    ckptfs.load(sys.argv[1], backend="numpy", cache_mb=8)
except OSError as e:
    print("OSError", e)' "$TMP/bomb" "$ROOT/scripts"
	echo "$output"
	[[ "$output" == *"OSError"*"key 'x'"*"decodes to more than the 8388608-byte cap"* ]]
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $PY -c '
import sys; sys.path.insert(0, sys.argv[2]); import ckptfs
try:
    ckptfs.load(sys.argv[1], cache_mb=0)
except ValueError as e:
    print("ValueError", e)' "$TMP/bomb" "$ROOT/scripts"
	echo "$output"
	[[ "$output" == "ValueError cache_mb must be between 1 and "* ]]
}

@test "zstd: -o verify on a record whose frame is corrupt: EIO and one line saying the record is corrupt" {
	$Z corrupt "$TMP/bad"
	start_mount "$TMP/bad" "$MNT" -o verify
	run cat "$MNT/x"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	[ "$(od -An -f "$MNT/y" | tr -s ' ' | sed 's/^ //')" = "0 1 2" ]
	stop_mount
	cat "$TMP/daemon.log"
	grep -q "$TMP/bad/__0_0.distcp: offset 0: key 'x': record stored with transforms is corrupt" "$TMP/daemon.log"
}
