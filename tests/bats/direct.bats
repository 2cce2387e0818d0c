#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The direct paths, without FUSE: ckptfs.load (libckptfs through ctypes)
# equals load_view of a mount made with the same options, byte for byte;
# ckptfs.StorageReader gives torch's own tensors in multi-process gloo
# loads (Debian's torch 1.13); bad input gives one-line errors.

load helpers

DIRECT="$PY $ROOT/tests/direct_checks.py"
LAYOUT="$PY $ROOT/tests/gen_layout.py"

setup_file() {
	$PY -c 'import torch' 2>/dev/null || return 0
	export TORCH_CKPTS="$BATS_FILE_TMPDIR/torch"
	torch_gen "$TORCH_CKPTS/w4" --world 4 --seed 5
}

setup() {
	common_setup
	$PY -c 'import torch' 2>/dev/null || skip "python3-torch is not installed"
	export CKPTFS_LIB="$(dirname "$CKPTFS")/libckptfs.so"
	# The sanitized build's library needs its runtimes loaded first.
	if nm -D "$CKPTFS_LIB" | grep -q __asan_; then
		DIRECT="env LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0 $DIRECT"
	fi
}
teardown() { common_teardown; }

same() {	# same CKPT W R|LIST [mount and load options...]
	local ckpt=$1 w=$2 r=$3
	shift 3
	if [[ "$r" == *[,-]* ]]; then
		start_mount "$ckpt" "$MNT" --world "$w" --ranks "$r" "$@"
	else
		start_mount "$ckpt" "$MNT" --world "$w" --rank "$r" "$@"
	fi
	run $DIRECT same "$ckpt" "$MNT" "$w" "$r" "$@"
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "ckptfs.load equals load_view of the mount: native checkpoints, W and R swept" {
	$GEN "$TMP/ckpt" --seed 71 --keys 60
	for wr in "1 0" "3 1" "4 3" "8 5" "64 63"; do
		same "$TMP/ckpt" $wr
	done
}

@test "ckptfs.load equals load_view: --prefix, --dtype, --layout and --ranks" {
	$GEN "$TMP/ckpt" --seed 72 --keys 50
	same "$TMP/ckpt" 3 2 --prefix optim
	same "$TMP/ckpt" 5 1 --dtype bfloat16
	same "$TMP/ckpt" 2 0 --dtype float32
	$LAYOUT "$TMP/ckpt" "$TMP/layout" --split 1 --tp 2 --tp-rank 1
	same "$TMP/ckpt" 3 1 --layout "$TMP/layout"
	same "$TMP/ckpt" 8 0-7
	same "$TMP/ckpt" 7 0,2,4-6 --dtype bfloat16 --prefix optim
}

@test "ckptfs.load equals load_view on torch 1.13 checkpoints (both file layouts)" {
	same "$TORCH_CKPTS/w4/per_item" 8 3
	same "$TORCH_CKPTS/w4/per_rank" 3 0-2
	same "$TORCH_CKPTS/w4/per_item" 5 4 --dtype float32
}

@test "ckptfs.load matches the independent numpy reference" {
	$GEN "$TMP/ckpt" --seed 73 --keys 40
	run $DIRECT ref "$TMP/ckpt" 6 4
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "ckptfs.load leaves RLIMIT_NOFILE as it was (soft 64 < hard), 100 data files still read right" {
	$GEN "$TMP/ckpt" --seed 5 --keys 150 --files 100 --max-elems 2000
	run $DIRECT rlimit "$TMP/ckpt" 3 1
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "ckptfs.load: a missing path is FileNotFoundError, bad checkpoints and options are ValueErrors, a data file cut short is OSError(EIO) naming file and key" {
	run $DIRECT errors "$TMP"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "ckptfs.StorageReader: torch's load_state_dict from 4 gloo ranks' checkpoint into 8 and 3 ranks equals FileSystemReader" {
	run $DIRECT dcp-torch "$TORCH_CKPTS/w4/per_item" 5 4 8
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq 8 ]
	run $DIRECT dcp-torch "$TORCH_CKPTS/w4/per_rank" 5 4 3 1
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq 3 ]
}

@test "ckptfs.StorageReader on a native checkpoint: every rank's shards equal the numpy reference" {
	$GEN "$TMP/ckpt" --seed 74 --keys 40
	run $DIRECT dcp-native "$TMP/ckpt" 3
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq 3 ]
}
