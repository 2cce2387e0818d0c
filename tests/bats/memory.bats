#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The decoded-record cache bounds memory (issue 18): 16 concurrent readers
# of 16 zstd records of 48 MiB each with a 64 MiB cache.  The daemon's peak
# RSS (VmHWM) stays within the cap plus a fixed overhead of 32 MiB (serving
# threads' buffers, libfuse, the metadata: 5 to 20 MiB measured), 48 MiB
# for the ASan daemon (its runtime's own memory: 24 to 37 measured); ckptfs.load's within the tensors it returns, the cap and 8 MiB
# (its threads' scratch: measured 1 to 5).  Before the cache reserved what
# it decodes, the daemon peaked at about 700 MiB, ckptfs.load at 75 to 100
# MiB over.

load helpers

HT="$PY $ROOT/tests/hang_tools.py"
CACHE_MB=64
DAEMON_OVERHEAD_MB=32
ASAN_OVERHEAD_MB=16	# more, for the ASan daemon's runtime
LOAD_OVERHEAD_MB=8

setup() { common_setup; }
teardown() { common_teardown; }

# 16 readers of 16 zstd records of MIB MiB each at once through a mount
# with -o cache_mb=CACHE: the daemon's peak RSS is within CACHE + 32 MiB
# (+ 16 for the ASan daemon).
daemon_peak_within() {	# MIB CACHE
	local mib=$1 cache=$2 peak bound=$((${2} + DAEMON_OVERHEAD_MB))
	if nm -D "$CKPTFS" 2>/dev/null | grep -q __asan_init; then
		bound=$((bound + ASAN_OVERHEAD_MB))
	fi
	$HT zstd "$TMP/ckpt" --keys 16 --mib "$mib"
	# ASan's quarantine keeps freed memory: not what is measured here.
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
		start_mount "$TMP/ckpt" "$MNT" -o cache_mb="$cache"
	run $HT check "$MNT" --keys 16 --mib "$mib" --procs 16
	echo "$output"
	[ "$status" -eq 0 ]
	peak=$(awk '/^VmHWM:/ { print int($2 / 1024) }' "/proc/$DAEMON_PID/status")
	echo "daemon peak RSS: $peak MiB, bound $bound MiB"
	stop_mount
	[ "$peak" -le "$bound" ]
}

@test "-o cache_mb=64, 16 readers of 48 MiB zstd records at once: the daemon's peak RSS is within 64 + 32 MiB" {
	daemon_peak_within 48 $CACHE_MB
}

@test "-o cache_mb=16, 16 readers of 12 MiB zstd records at once (buffers malloc would keep in its arenas): within 16 + 32 MiB" {
	daemon_peak_within 12 16
}

@test "ckptfs.load(cache_mb=64, threads=16) of 16 zstd records of 48 MiB: peak RSS within the tensors + 64 + 8 MiB" {
	$HT zstd "$TMP/ckpt" --keys 16 --mib 48
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $HT load "$TMP/ckpt" \
		"$ROOT/scripts" --keys 16 --mib 48 --threads 16 --cache-mb $CACHE_MB
	echo "$output"
	[ "$status" -eq 0 ]
	read -r _ base _ out _ peak <<< "${lines[0]}"
	echo "over the tensors: $((peak - base - out)) MiB, bound $((CACHE_MB + LOAD_OVERHEAD_MB)) MiB"
	[ "$((peak - base - out))" -le $((CACHE_MB + LOAD_OVERHEAD_MB)) ]
}
