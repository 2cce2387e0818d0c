#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The newest PyTorch (Debian sid's python3-torch, 2.x, in a cached chroot
# built by scripts/sid-chroot.sh): DTensor checkpoints written by dcp.save
# from 4 gloo ranks on 1-D and 2-D meshes, in float32, bfloat16 and
# float64, mounted and compared with torch's own tensors for many (W, R);
# ckptfs.load on them; and ckptfs.StorageReader in dcp.load against
# torch's FileSystemReader, resharding to 3 ranks and to a 2x4 mesh.

load helpers

setup_file() {
	"$ROOT/scripts/sid-chroot.sh" build
	SID=$("$ROOT/scripts/sid-chroot.sh" path)
	T2=$(mktemp -d "$SID/tmp/ckptfs-torch2.XXXXXX")
	export SID T2 T2IN=${T2#$SID}
	# The plain build's library inside the chroot (the sanitized one would
	# need the host's sanitizer runtimes there): the default.
	unset CKPTFS_LIB
	"$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py gen "$T2IN" >"$T2/gen.log" 2>&1 ||
		{ tail -30 "$T2/gen.log"; return 1; }
}

teardown_file() {
	[ -n "${T2:-}" ] && rm -rf "$T2"
}

setup() { common_setup; }
teardown() { common_teardown; }

VIEWS="$PY $ROOT/tests/torch2_views.py"

@test "torch 2.x: dcp.save of DTensors on a 1-D mesh mounts and every view equals torch's tensors (W=1,3,5,8)" {
	for wr in "1 0" "3 0" "3 2" "5 1" "5 4" "8 3" "8 7"; do
		set -- $wr
		start_mount "$T2/mesh1d" "$MNT" --world $1 --rank $2
		run $VIEWS mount "$T2/mesh1d" "$T2/ref" "$MNT" $1 $2
		echo "$output"
		stop_mount
		[ "$status" -eq 0 ]
	done
}

@test "torch 2.x: a 2x2 mesh (Shard(0), Shard(1)) checkpoint, bf16 included, mounts and matches (W=1,3,5,8)" {
	for wr in "1 0" "3 1" "5 2" "8 0" "8 5"; do
		set -- $wr
		start_mount "$T2/mesh2d" "$MNT" --world $1 --rank $2
		run $VIEWS mount "$T2/mesh2d" "$T2/ref" "$MNT" $1 $2
		echo "$output"
		stop_mount
		[ "$status" -eq 0 ]
	done
	run "$CKPTFS" info "$T2/mesh2d"
	[[ "$output" == *"split along dim 0+1"* ]]
}

@test "torch 2.x: ckptfs.load of those checkpoints equals torch's tensors" {
	run $VIEWS load "$T2/mesh2d" "$T2/ref" 8 0 3 7
	echo "$output"
	[ "$status" -eq 0 ]
	run $VIEWS load "$T2/mesh1d" "$T2/ref" 3 0 1 2
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "torch 2.x: dcp.load with ckptfs.StorageReader equals FileSystemReader, 4 ranks to 3 and to a 2x4 mesh" {
	for job in "mesh2d 3 3" "mesh2d 8 2x4" "mesh1d 8 8"; do
		set -- $job
		run "$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py load "$T2IN/$1" $2 $3
		grep '^rank\|Error' <<<"$output" | head -20
		[ "$status" -eq 0 ]
		[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq $2 ]
	done
}

@test "torch 2.x: Megatron-Core's Metadata with all_local_plans (SavePlan, WriteItem) and mcore_data mounts; the plans stay inert" {
	start_mount "$T2/megatron" "$MNT" --world 3 --rank 1
	run $VIEWS mount "$T2/megatron" "$T2/ref" "$MNT" 3 1
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "torch 2.x: dcp.save(use_collectives=False): the ranks' __R.metadata files are merged; views, ckptfs.load and StorageReader match" {
	run "$CKPTFS" info "$T2/ranklocal"
	echo "$output"
	[[ "$output" == *"torch-dcp-rank-local"* ]]
	for wr in "1 0" "3 1" "5 4" "8 2"; do
		set -- $wr
		start_mount "$T2/ranklocal" "$MNT" --world $1 --rank $2
		run $VIEWS mount "$T2/ranklocal" "$T2/ref" "$MNT" $1 $2
		echo "$output"
		stop_mount
		[ "$status" -eq 0 ]
	done
	run $VIEWS load "$T2/ranklocal" "$T2/ref" 3 0 2
	echo "$output"
	[ "$status" -eq 0 ]
	run "$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py load "$T2IN/ranklocal" 3 3
	grep '^rank\|Error' <<<"$output" | head
	[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq 3 ]
}

@test "torch 2.x: rank-local parts that leave a gap or overlap are refused, naming the key" {
	cp -a "$T2/ranklocal" "$TMP/gap"
	rm "$TMP/gap/__3.metadata"
	run "$CKPTFS" mount "$TMP/gap" "$MNT" --world 2 --rank 0 -f
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"__*.metadata: key 'model.w1'"* ]]
	rm -rf "$T2/overlap"
	"$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py overlap "$T2IN/ranklocal" "$T2IN/overlap"
	run "$CKPTFS" mount "$T2/overlap" "$MNT" --world 2 --rank 0 -f
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"key 'model.w1'"*"overlaps"* ]]
	! mountpoint -q "$MNT"
}

@test "torch 2.x: HuggingFaceStorageWriter's consolidated safetensors mount; zstd transforms and SAFETENSORS serialization (not served yet) are refused with one line naming file and key" {
	run "$CKPTFS" info "$T2/hf"
	echo "$output"
	[[ "$output" == *"format	safetensors"* ]]
	# w = arange(12).reshape(3, 4): rank 1 of 2 has row 2.
	[ "$("$CKPTFS" cat "$T2/hf" w --world 2 --rank 1 | od -An -f | tr -s ' ' | sed 's/^ //')" = "8 9 10 11" ]
	run "$CKPTFS" info "$T2/zstd"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"zstd/.metadata: key 'w': record is stored with transforms"* ]]
	run "$CKPTFS" info "$T2/st"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"st/__0_0.distcp: offset 0: key 'w' chunk [0,0]: record is not a torch.save zip archive"* ]]
}
