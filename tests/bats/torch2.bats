#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The newest PyTorch (Debian sid's python3-torch, 2.x, in a cached chroot
# built by scripts/sid-chroot.sh): DTensor checkpoints written by dcp.save
# from 4 gloo ranks on 1-D and 2-D meshes, in float32, bfloat16 and
# float64, mounted and compared with torch's own tensors for many (W, R);
# ckptfs.load on them; and ckptfs.StorageReader in dcp.load against
# torch's FileSystemReader, resharding to 3 ranks and to a 2x4 mesh.
# Every writer option of issue 14: rank-local metadata, Megatron-Core's
# Metadata and files, zstd transforms, SAFETENSORS serialization and
# HuggingFaceStorageWriter's consolidated and sharded output.

load helpers

setup_file() {
	"$ROOT/scripts/sid-chroot.sh" build
	SID=$("$ROOT/scripts/sid-chroot.sh" path)
	T2=$(mktemp -d "$SID/tmp/ckptfs-torch2.XXXXXX")
	export SID T2 T2IN=${T2#$SID}
	# Inside the chroot, scripts/sid-chroot.sh points CKPTFS_LIB at the
	# plain build's library (the sanitized one would need the host's
	# sanitizer runtimes there).
	gen_once "$T2" torch2 "$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py gen "$T2IN" >"$T2/gen.log" 2>&1 ||
		{ tail -30 "$T2/gen.log"; return 1; }
}

teardown_file() {
	[ -n "${T2:-}" ] && rm -rf "$T2"
}

setup() { common_setup; }
teardown() { common_teardown; }

VIEWS="$PY $ROOT/tests/torch2_views.py"

# NEW_W gloo ranks dcp.load DIR (under $T2) onto MESH inside the chroot,
# with ckptfs.StorageReader against FileSystemReader (with ref: against
# the tensors saved); every rank must report 0 differences.
reader_matches() {	# DIR NEW_W MESH [ref]
	run "$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py load "$T2IN/$1" "$2" "$3" ${4:-}
	grep '^rank\|Error' <<<"$output" | head -20
	[ "$status" -eq 0 ]
	[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq "$2" ]
}

# Mount DIR (under $T2) as each "W R" and compare every view file of the
# keys starting PREFIX with torch's tensors.
views_match() {	# DIR PREFIX "W R"...
	local dir=$1 prefix=$2 wr
	shift 2
	for wr in "$@"; do
		set -- $wr
		start_mount "$T2/$dir" "$MNT" --world $1 --rank $2
		run $VIEWS mount "$T2/$dir" "$T2/ref" "$MNT" $1 $2 $prefix
		echo "$dir: $output"
		stop_mount
		[ "$status" -eq 0 ]
	done
}

@test "torch 2.x: dcp.save of DTensors on a 1-D mesh mounts and every view equals torch's tensors (W=1,3,5,8)" {
	views_match mesh1d "" "1 0" "3 0" "3 2" "5 1" "5 4" "8 3" "8 7"
}

@test "torch 2.x: a 2x2 mesh (Shard(0), Shard(1)) checkpoint, bf16 included, mounts and matches (W=1,3,5,8)" {
	views_match mesh2d "" "1 0" "3 1" "5 2" "8 0" "8 5"
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
		reader_matches $job
	done
}

@test "torch 2.x: Megatron-Core's Metadata with all_local_plans (SavePlan, WriteItem) and mcore_data mounts; the plans stay inert (W=1,3,5,8)" {
	views_match megatron "" "1 0" "3 1" "5 3" "8 6"
}

@test "torch 2.x: dcp.save(use_collectives=False): the ranks' __R.metadata files are merged; views, ckptfs.load and StorageReader match" {
	run "$CKPTFS" info "$T2/ranklocal"
	echo "$output"
	[[ "$output" == *"torch-dcp-rank-local"* ]]
	views_match ranklocal "" "1 0" "3 1" "5 4" "8 2"
	run $VIEWS load "$T2/ranklocal" "$T2/ref" 3 0 2
	echo "$output"
	[ "$status" -eq 0 ]
	reader_matches ranklocal 3 3
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
	not mountpoint -q "$MNT"
}

@test "torch 2.x: FileSystemWriter(_extensions=[ZStandard()], thread_count=2): every view, ckptfs.load and StorageReader match (W=1,3,5,8)" {
	run "$CKPTFS" info "$T2/zstd"
	echo "$output"
	[[ "$output" == *"format	torch-dcp+zstd"* ]]
	for wr in "1 0" "3 1" "5 4" "8 2" "8 7"; do
		set -- $wr
		start_mount "$T2/zstd" "$MNT" --world $1 --rank $2
		run $VIEWS mount "$T2/zstd" "$T2/ref" "$MNT" $1 $2
		echo "$output"
		# The bytes entries decode to torch's pickles.
		[ "$($PY -c 'import sys, torch; print(torch.load(sys.argv[1]))' "$MNT/optim.param_groups/0/lr")" = 0.01 ]
		stop_mount
		[ "$status" -eq 0 ]
	done
	run "$CKPTFS" verify "$T2/zstd"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"0 mismatched, 0 unreadable"* ]]
	run $VIEWS load "$T2/zstd" "$T2/ref" 3 0 1 2
	echo "$output"
	[ "$status" -eq 0 ]
	reader_matches zstd 3 3
}

@test "torch 2.x: a zstd record whose stored bytes are damaged gives EIO naming file and key; the other keys still read" {
	cp -a "$T2/zstd" "$TMP/zbad"
	rm -f "$TMP/zbad/.ckptfs-index"
	# model.w1's chunk [0,0] (rank 0's): flip bytes in the middle of its frame.
	read -r file off len < <("$CKPTFS" plan "$TMP/zbad" --world 1 --rank 0 | awk '/^model.w1\t/{k=1} k && $1=="chunk" && $2=="[0,0]+[3,6]" {print $3, $4, $5; exit}')
	echo "$file $off $len"
	[ -n "$file" ]
	$PY -c 'import sys; f=open(sys.argv[1],"r+b"); o=int(sys.argv[2])+int(sys.argv[3])//2; f.seek(o); b=f.read(8); f.seek(o); f.write(bytes(x^0xff for x in b))' "$TMP/zbad/$file" "$off" "$len"
	start_mount "$TMP/zbad" "$MNT" --world 1 --rank 0
	run cat "$MNT/model.w1"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	cat "$MNT/model.w2" > /dev/null
	stop_mount
	grep "key 'model.w1'" "$TMP/daemon.log" | grep -q "record stored with stream.zstd/1"
	run "$CKPTFS" verify "$TMP/zbad"
	echo "$output"
	[ "$status" -ne 0 ]
}

@test "torch 2.x: FileSystemWriter(serialization_format=SAFETENSORS): records found through the blob's header; views, ckptfs.load and StorageReader match" {
	# (the payload variant is found by the eager pass: a lazy open, the
	# default, has read no data file and says torch-dcp)
	run env CKPTFS_EAGER_INDEX=1 "$CKPTFS" info "$T2/st"
	echo "$output"
	[[ "$output" == *"format	torch-dcp+safetensors"* ]]
	views_match st "" "1 0" "3 1" "5 4" "8 2"
	run $VIEWS load "$T2/st" "$T2/ref" 5 0 4
	echo "$output"
	[ "$status" -eq 0 ]
	# torch's own FileSystemReader cannot read these back (it torch.loads
	# every record): StorageReader's tensors against the saved ones.
	reader_matches st 3 3 ref
}

@test "torch 2.x: HuggingFaceStorageWriter(save_distributed=True, enable_consolidation=True): the consolidated files and sharded/ (DCP_SHARDING_INFO) both mount and match (W=1,3,5,8)" {
	run "$CKPTFS" info "$T2/hf"
	echo "$output"
	[[ "$output" == *"format	safetensors (a directory"* ]]
	run "$CKPTFS" info "$T2/hf/sharded"
	echo "$output"
	[[ "$output" == *"format	safetensors-dcp-sharded"* ]]
	for d in hf hf/sharded; do
		views_match $d model. "1 0" "3 1" "5 4" "8 2"
	done
	start_mount "$T2/hf/sharded" "$MNT" --world 3 --rank 1
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $PY "$ROOT/tests/direct_checks.py" same "$T2/hf/sharded" "$MNT" 3 1
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "torch 2.x: Megatron-Core's common.pt and metadata.json are in the view's root as they are" {
	start_mount "$T2/megatron" "$MNT" --world 3 --rank 2
	cmp "$MNT/common.pt" "$T2/megatron/common.pt"
	cmp "$MNT/metadata.json" "$T2/megatron/metadata.json"
	[ "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["sharded_backend"])' "$MNT/metadata.json")" = torch_dist ]
	[ "$($PY -c 'import sys, torch; print(torch.load(sys.argv[1])["iteration"])' "$MNT/common.pt")" = 7 ]
	stop_mount
}
