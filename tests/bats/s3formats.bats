#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Every checkpoint kind from s3://, against a radosgw this suite starts
# itself (tests/s3/suite.bash): checkpoints written by the existing
# generators (native, torch 1.13 on the host, the newest torch in the sid
# chroot: the default writer, zstd, SAFETENSORS .distcp, rank-local,
# Megatron-Core, HuggingFaceStorageWriter; and an HF safetensors
# directory) are uploaded, and every view of an s3:// mount, ckptfs.load
# and dcp.load with ckptfs.StorageReader("s3://...") must equal the local
# copy's (a mount of it, torch's FileSystemReader on it).

load helpers
load ../s3/suite

T2DIRS="mesh1d mesh2d zstd st ranklocal megatron hf hf/sharded"

setup_file() {
	s3_setup_file || return 1
	"$ROOT/scripts/sid-chroot.sh" build
	SID=$("$ROOT/scripts/sid-chroot.sh" path)
	T2=$(mktemp -d "$SID/tmp/ckptfs-s3t2.XXXXXX")
	export SID T2 T2IN=${T2#$SID}
	unset CKPTFS_LIB	# the plain build's library inside the chroot
	gen_once "$T2" torch2 "$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py gen "$T2IN" >"$T2/gen.log" 2>&1 ||
		{ tail -30 "$T2/gen.log"; return 1; }
	local d
	for d in $T2DIRS; do
		upload "$T2/$d" "ck-t2/$d" || return 1
	done
}

teardown_file() {
	[ -n "${T2:-}" ] && rm -rf "$T2"
	s3_teardown_file
}

setup() { common_setup; }
teardown() { common_teardown; }

DIRECT="$PY $ROOT/tests/direct_checks.py"

@test "s3 formats: native checkpoints: every view of an s3:// mount and ckptfs.load equal the local mount (W=1,3,8)" {
	$GEN --seed 31 --keys 30 --files 4 "$TMP/ck" >/dev/null
	upload "$TMP/ck" ck-native/run
	same_views "$TMP/ck" s3://ck-native/run "1 0" "3 2" "8 5"
	same_views "$TMP/ck" s3://ck-native/run "4 1" -- --format npy --dtype float32
	start_mount "$TMP/ck" "$MNT" --world 3 --rank 2
	run $(direct_env) $DIRECT same s3://ck-native/run "$MNT" 3 2
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 problems"* ]]
}

@test "s3 formats: torch 2.x writers (DTensor 1-D and 2x2 meshes, zstd, SAFETENSORS .distcp, rank-local, Megatron-Core): every view of an s3:// mount equals the local mount (W=1,3,8)" {
	local d
	for d in mesh1d mesh2d zstd st ranklocal megatron; do
		echo "== $d"
		same_views "$T2/$d" "s3://ck-t2/$d" "1 0" "3 1" "8 6"
	done
	run "$CKPTFS" info s3://ck-t2/zstd
	[[ "$output" == *"format	torch-dcp+zstd"* ]]
	# A lazy open (docs/s3.md) has read no .distcp file: the payload
	# variant shows after an eager index.
	run "$CKPTFS" info s3://ck-t2/st
	[[ "$output" == *"format	torch-dcp"* ]]
	CKPTFS_EAGER_INDEX=1 run "$CKPTFS" info s3://ck-t2/st
	[[ "$output" == *"format	torch-dcp+safetensors"* ]]
	run "$CKPTFS" info s3://ck-t2/ranklocal
	[[ "$output" == *"torch-dcp-rank-local"* ]]
	run "$CKPTFS" verify s3://ck-t2/zstd
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "s3 formats: HuggingFaceStorageWriter's consolidated and sharded safetensors, and an HF safetensors directory, from s3:// equal the local mount" {
	$PY "$ROOT/tests/make_safetensors.py" ok "$TMP/st" --shards 3 --index
	upload "$TMP/st" ck-st/model
	same_views "$TMP/st" s3://ck-st/model "1 0" "2 1" "5 3"
	same_views "$T2/hf" s3://ck-t2/hf "1 0" "3 2"
	same_views "$T2/hf/sharded" s3://ck-t2/hf/sharded "1 0" "3 2" "8 7"
	run "$CKPTFS" info s3://ck-t2/hf/sharded
	[[ "$output" == *"safetensors-dcp-sharded"* ]]
}

@test "s3 formats: ckptfs.load of s3:// equals load_view of the local mount, every kind" {
	local d
	$PY "$ROOT/tests/make_safetensors.py" ok "$TMP/st" --shards 2
	upload "$TMP/st" ck-stload/model
	start_mount "$TMP/st" "$MNT" --world 2 --rank 1
	run $(direct_env) $DIRECT same s3://ck-stload/model "$MNT" 2 1
	echo "safetensors: $output"
	stop_mount
	[[ "$output" == *", 0 problems"* ]]
	for d in mesh2d zstd st ranklocal megatron hf/sharded; do
		start_mount "$T2/$d" "$MNT" --world 3 --rank 1
		run $(direct_env) $DIRECT same "s3://ck-t2/$d" "$MNT" 3 1
		echo "$d: $output"
		stop_mount
		[ "$status" -eq 0 ]
		[[ "$output" == *", 0 problems"* ]]
	done
}

@test "s3 formats: torch 2.x dcp.load with ckptfs.StorageReader(\"s3://...\") equals FileSystemReader on the local copy (gloo; to 3 ranks, to a 2x4 mesh; zstd, rank-local and SAFETENSORS against the saved tensors)" {
	local job
	for job in "mesh2d 3 3" "mesh1d 8 2x4" "zstd 3 3" "megatron 3 3" "ranklocal 3 3" "st 3 3 ref"; do
		set -- $job
		run "$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py load "$T2IN/$1" "$2" "$3" ${4:-} --from "s3://ck-t2/$1"
		grep '^rank\|Error' <<<"$output" | head -10
		[ "$status" -eq 0 ]
		[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq "$2" ]
	done
}

@test "s3 formats: torch 1.13 (host): views, ckptfs.load and load_state_dict with ckptfs.StorageReader(\"s3://...\") equal the local copy's, FileSystemReader's" {
	torch_gen "$TMP/t" --world 4 --seed 6 >"$TMP/gen.log" 2>&1 ||
		{ cat "$TMP/gen.log"; false; }
	upload "$TMP/t/per_rank" ck-t1/per_rank
	upload "$TMP/t/per_item" ck-t1/per_item
	same_views "$TMP/t/per_item" s3://ck-t1/per_item "1 0" "3 2" "8 1"
	start_mount "$TMP/t/per_rank" "$MNT" --world 5 --rank 4
	run $(direct_env) $DIRECT same s3://ck-t1/per_rank "$MNT" 5 4
	echo "$output"
	stop_mount
	[[ "$output" == *", 0 problems"* ]]
	local d
	for d in per_rank per_item; do
		run $(direct_env) $DIRECT dcp-torch "$TMP/t/$d" 6 4 3 --from "s3://ck-t1/$d"
		echo "$d: $output"
		[ "$status" -eq 0 ]
		[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq 3 ]
	done
}
