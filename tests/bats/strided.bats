#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Strided records (tensors saved from non-contiguous views: transposed,
# permuted, padded, broadcast; tests/make_strided.py), which are gathered
# in blocks: every view equals the independent numpy reference through
# the mount (read, mmap, reads at random offsets and lengths, in-order
# reads through read-ahead windows), through ckptfs.load and through
# ckptfs.StorageReader, for many worlds and ranks.

load helpers

DIRECT="$PY $ROOT/tests/direct_checks.py"

setup_file() {
	export STRIDED="$BATS_FILE_TMPDIR/strided"
	$PY "$ROOT/tests/make_strided.py" "$STRIDED" --seed 7 --big
}

setup() {
	common_setup
	export CKPTFS_LIB="$(dirname "$CKPTFS")/libckptfs.so"
	if nm -D "$CKPTFS_LIB" | grep -q __asan_; then
		DIRECT="env LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0 $DIRECT"
	fi
}
teardown() { common_teardown; }

# Random preads of every view file against the reference's bytes.
random_reads() {	# CKPT W R
	$PY - "$1" "$MNT" "$2" "$3" <<'PYEOF'
import os, random, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests"))
import reference
ckpt, mnt, w, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
exp = reference.expected(ckpt, w, r)
rnd = random.Random(w * 100 + r)
bad = n = 0
for path, want in sorted(exp.items()):
    fd = os.open(os.path.join(mnt, path), os.O_RDONLY)
    for _ in range(12):
        off = rnd.randrange(len(want) + 1)
        ln = rnd.choice([1, 3, 7, 64, 1000, 4096, 131072, len(want)])
        got = os.pread(fd, ln, off)
        n += 1
        if got != want[off:off + ln]:
            print(f"{path}: {ln} bytes at {off} differ")
            bad += 1
    os.close(fd)
print(f"{n} reads of {len(exp)} files, {bad} differ")
sys.exit(1 if bad else 0)
PYEOF
}

@test "strided records: views equal the reference through the mount (read and mmap), W and R swept" {
	for wr in "1 0" "2 1" "3 0" "3 2" "4 3" "5 1" "8 7" "13 4"; do
		check_view "$STRIDED" $wr
	done
}

@test "strided records: reads at random offsets and lengths equal the reference" {
	export ROOT
	for wr in "1 0" "3 1" "7 6"; do
		start_mount "$STRIDED" "$MNT" --world ${wr% *} --rank ${wr#* }
		run random_reads "$STRIDED" $wr
		echo "W=${wr% *} R=${wr#* }: $output"
		stop_mount
		[ "$status" -eq 0 ]
	done
}

@test "strided records: ckptfs.load equals the reference, W and R swept" {
	$PY -c 'import torch' 2>/dev/null || skip "python3-torch is not installed"
	for wr in "1 0" "2 0" "3 2" "4 1" "8 7" "13 12"; do
		run $DIRECT ref "$STRIDED" $wr
		echo "W=${wr% *} R=${wr#* }: $output"
		[ "$status" -eq 0 ]
	done
}

@test "strided records: ckptfs cat equals the mount" {
	start_mount "$STRIDED" "$MNT" --world 3 --rank 1
	for key in t2.float32 t3.p3 big.t2 tiled.grid bcast stride2; do
		path=${key//./\/}
		"$CKPTFS" cat "$STRIDED" "$key" --world 3 --rank 1 > "$TMP/out"
		cmp "$TMP/out" "$MNT/$path"
	done
}

rchar() { awk '/^rchar:/ { print $2 }' "/proc/$DAEMON_PID/io"; }

@test "strided records: in-order reads use read-ahead windows (-o ahead_kb), read at most 2x, right bytes" {
	for opts in "" "-o ahead_kb=0" "-o ahead_kb=64"; do
		start_mount "$STRIDED" "$MNT" --world 2 --rank 1 $opts
		"$CKPTFS" cat "$STRIDED" big.t2 --world 2 --rank 1 > "$TMP/want"
		size=$(stat -c %s "$TMP/want")
		before=$(rchar)
		dd if="$MNT/big/t2" of="$TMP/got" bs=128k status=none
		read=$(( $(rchar) - before ))
		stop_mount
		echo "opts '$opts': $size bytes served, daemon read $read"
		cmp "$TMP/want" "$TMP/got"
		[ "$read" -le $((2 * size)) ]
	done
}

@test "strided records: ckptfs.StorageReader loads them into ShardedTensors (3 gloo ranks) equal to the reference" {
	$PY -c 'import torch' 2>/dev/null || skip "python3-torch is not installed"
	run timeout 600 $DIRECT dcp-native "$STRIDED" 3
	echo "$output"
	[ "$status" -eq 0 ]
}
