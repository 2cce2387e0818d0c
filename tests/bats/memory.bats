#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The decoded-record cache bounds memory (issue 18): 16 concurrent readers
# of 16 zstd records of 48 MiB each with a 64 MiB cache.  The daemon's peak
# RSS (VmHWM) stays within the cap plus a fixed overhead of 32 MiB (serving
# threads' buffers, libfuse, the metadata: 14 MiB measured, 24 under
# ASan); ckptfs.load's within the tensors it returns, the cap and 8 MiB
# (its threads' scratch: measured 7).  Before the cache reserved what it
# decodes, the daemon peaked at about 700 MiB, ckptfs.load at 75 to 100
# MiB over.

load helpers

HT="$PY $ROOT/tests/hang_tools.py"
CACHE_MB=64
DAEMON_OVERHEAD_MB=32
LOAD_OVERHEAD_MB=8

setup() {
	common_setup
	$HT zstd "$TMP/ckpt" --keys 16 --mib 48
}
teardown() { common_teardown; }

@test "-o cache_mb=64, 16 readers of 48 MiB zstd records at once: the daemon's peak RSS is within 64 + 32 MiB" {
	# ASan's quarantine keeps freed memory: not what is measured here.
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
		start_mount "$TMP/ckpt" "$MNT" -o cache_mb=$CACHE_MB
	run $HT check "$MNT" --keys 16 --mib 48 --procs 16
	echo "$output"
	[ "$status" -eq 0 ]
	peak=$(awk '/^VmHWM:/ { print int($2 / 1024) }' "/proc/$DAEMON_PID/status")
	echo "daemon peak RSS: $peak MiB, bound $((CACHE_MB + DAEMON_OVERHEAD_MB)) MiB"
	stop_mount
	[ "$peak" -le $((CACHE_MB + DAEMON_OVERHEAD_MB)) ]
}

@test "ckptfs.load(cache_mb=64, threads=16) of 16 zstd records of 48 MiB: peak RSS within the tensors + 64 + 8 MiB" {
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $HT load "$TMP/ckpt" \
		"$ROOT/scripts" --keys 16 --mib 48 --threads 16 --cache-mb $CACHE_MB
	echo "$output"
	[ "$status" -eq 0 ]
	read -r _ base _ out _ peak <<< "${lines[0]}"
	echo "over the tensors: $((peak - base - out)) MiB, bound $((CACHE_MB + LOAD_OVERHEAD_MB)) MiB"
	[ "$((peak - base - out))" -le $((CACHE_MB + LOAD_OVERHEAD_MB)) ]
}
