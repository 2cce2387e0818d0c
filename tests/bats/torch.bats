#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Real PyTorch distributed checkpoints, written by torch's own
# save_state_dict + FileSystemWriter from 4 and 3 gloo processes
# (scripts/gen_torch_ckpt.py), mounted with no Python involved; expected
# views come from torch's own loader (tests/torch_check.py).

load helpers

TCHECK="$PY $ROOT/tests/torch_check.py"

setup_file() {
	$PY -c 'import torch' 2>/dev/null || return 0
	export TORCH_CKPTS="$BATS_FILE_TMPDIR/torch"
	torch_gen "$TORCH_CKPTS/w4" --world 4 --seed 5
	torch_gen "$TORCH_CKPTS/w3" --world 3 --seed 6
	torch_gen "$TORCH_CKPTS/w2" --world 2 --seed 7
}

setup() {
	common_setup
	$PY -c 'import torch' 2>/dev/null || skip "python3-torch is not installed"
	W4=$TORCH_CKPTS/w4
	W3=$TORCH_CKPTS/w3
	W2=$TORCH_CKPTS/w2
}
teardown() { common_teardown; }

@test "torch: 4-rank checkpoint, one file per item: every view file is torch.chunk of torch's own load (W=1..8,16)" {
	run $TCHECK "$CKPTFS" "$W4/per_item" "$MNT" 1 2 3 4 5 6 7 8 16
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 bad"* ]]
}

@test "torch: 4-rank checkpoint, single_file_per_rank: every view file matches torch (W=1..8,13)" {
	run $TCHECK "$CKPTFS" "$W4/per_rank" "$MNT" 1 2 3 4 5 6 7 8 13
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 bad"* ]]
}

@test "torch: 3-rank and 2-rank checkpoints (both file layouts) match torch (W=1..5,9)" {
	for d in "$W3/per_item" "$W3/per_rank" "$W2/per_item" "$W2/per_rank"; do
		run $TCHECK "$CKPTFS" "$d" "$MNT" 1 2 3 4 5 9
		echo "$output"
		[ "$status" -eq 0 ]
		[[ "$output" == *", 0 bad"* ]]
	done
}

@test "torch: a torch 2.x-style .metadata (torch.distributed.checkpoint classes, protocol 5, storage_meta, version, planner_data) is read by class name" {
	$PY "$ROOT/tests/make_torch2_metadata.py" "$W4/per_item" "$TMP/t2"
	head -c 2 "$TMP/t2/.metadata" | od -An -tx1 | grep -q "80 05"
	grep -q "torch.distributed.checkpoint.metadata" "$TMP/t2/.metadata"
	not grep -q "_shard" "$TMP/t2/.metadata"
	run $TCHECK "$CKPTFS" "$TMP/t2" "$MNT" 1 3 8 --ref "$W4/per_item"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 bad"* ]]
}

@test "torch: the checkpoint is what the tests claim: dim-0 and dim-1 shards, fewer chunks than ranks, strides, 0-d, empty, bytes" {
	run "$CKPTFS" ls "$W4/per_rank"
	echo "$output"
	[ "$status" -eq 0 ]
	# dim-1 shards of [6,12] over 4 ranks; [5] over 4 gives 3 chunks
	[[ "$output" == *$'model/layer2/weight\tfloat16\t6,12\t4'* ]]
	[[ "$output" == *$'model/bias\tfloat32\t5\t3'* ]]
	[[ "$output" == *$'optim/state/layer1/weight/step\tfloat32\t-\t1'* ]]
	[[ "$output" == *$'model/empty\tfloat32\t0,4\t1'* ]]
	[[ "$output" == *$'optim/param_groups\tbytes'* ]]
	run "$CKPTFS" info "$W4/per_rank"
	[[ "$output" == *"torch-dcp"* ]]
	[[ "$output" == *"bfloat16"* && "$output" == *"float64"* && "$output" == *"int64"* ]]
	[[ "$output" == *"split along dim 1"* ]]
	# the transposed replicated tensor is indexed with its strides
	"$CKPTFS" index "$W4/per_rank" -o "$TMP/idx"
	$PY -c 'import msgpack,sys; m=msgpack.unpackb(open(sys.argv[1],"rb").read()); r=[x for x in m["storage_data"] if x["fqn"]=="model.transposed"][0]; assert r["strides"]==[1,9], r' "$TMP/idx"
}

@test "torch: --format npy and a 2-D layout on a torch checkpoint match torch" {
	run $TCHECK "$CKPTFS" "$W4/per_item" "$MNT" 2 3 --npy
	echo "$output"
	[ "$status" -eq 0 ]
	printf '# TP boxes\nlayer1.weight 0,3 10,3\nlayer2.weight 2,0 4,12\n' >"$TMP/layout"
	run $TCHECK "$CKPTFS" "$W4/per_rank" "$MNT" 1 3 4 --layout "$TMP/layout"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"(layout), 0 bad"* ]]
}

@test "torch: xattrs, .ckptfs/ manifest and safetensors view on a torch checkpoint" {
	start_mount "$W4/per_rank" "$MNT" --world 3 --rank 1
	v=$(getfattr --only-values -n user.ckptfs.global_shape "$MNT/model/layer2/weight" 2>/dev/null)
	[ "$v" = "6,12" ]
	v=$(getfattr --only-values -n user.ckptfs.dtype "$MNT/optim/state/layer2/weight/exp_avg" 2>/dev/null)
	[ "$v" = "bfloat16" ]
	v=$(getfattr --only-values -n user.ckptfs.offsets "$MNT/model/transposed" 2>/dev/null)
	[ "$v" = "3,0" ]
	grep -q "model.transposed" "$MNT/.ckptfs/manifest.tsv"
	$PY - "$MNT" <<-'EOF'
	import json, os, struct, sys
	mnt = sys.argv[1]
	with open(os.path.join(mnt, ".ckptfs/view.safetensors"), "rb") as f:
	    n = struct.unpack("<Q", f.read(8))[0]
	    hdr = json.loads(f.read(n))
	    base = 8 + n
	    t = hdr["model.transposed"]
	    f.seek(base + t["data_offsets"][0])
	    raw = f.read(t["data_offsets"][1] - t["data_offsets"][0])
	assert raw == open(os.path.join(mnt, "model/transposed"), "rb").read()
	assert t["shape"] == [3, 7], t
	EOF
}

@test "torch: ckptfs index writes records that point at the raw tensor bytes; mounts use a current index and refuse a stale one" {
	cp -r "$W4/per_item" "$TMP/ck"
	run "$CKPTFS" index "$TMP/ck"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -f "$TMP/ck/.ckptfs-index" ]
	run $TCHECK index "$TMP/ck/.ckptfs-index" "$TMP/ck"
	echo "$output"
	[ "$status" -eq 0 ]
	run "$CKPTFS" info "$TMP/ck"
	[[ "$output" == *"via its .ckptfs-index"* ]]
	run $TCHECK "$CKPTFS" "$TMP/ck" "$MNT" 3
	echo "$output"
	[ "$status" -eq 0 ]
	# an index of another checkpoint: an error naming the mismatch, by
	# default as when given explicitly (issue 19); without one, the
	# checkpoint is indexed at mount
	"$CKPTFS" index "$W4/per_rank" -o "$TMP/other-index"
	cp "$TMP/other-index" "$TMP/ck/.ckptfs-index"
	run "$CKPTFS" info "$TMP/ck"
	[ "$status" -ne 0 ]
	[[ "$output" == *".ckptfs-index: index was not built from"*"run 'ckptfs index $TMP/ck' again"* ]]
	rm "$TMP/ck/.ckptfs-index"
	run "$CKPTFS" info "$TMP/ck"
	[[ "$output" == *"records located as read"* ]]
	run env CKPTFS_EAGER_INDEX=1 "$CKPTFS" info "$TMP/ck"
	[[ "$output" == *"indexed now"* ]]
	run $TCHECK "$CKPTFS" "$TMP/ck" "$MNT" 3
	[ "$status" -eq 0 ]
	run "$CKPTFS" mount "$TMP/ck" "$MNT" --world 2 --rank 0 -o index="$TMP/other-index"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"other-index: index was not built from"* ]]
	not mountpoint -q "$MNT"
	# the index is msgpack in the native format, and stdout works too
	"$CKPTFS" index "$TMP/ck" -o - >"$TMP/stdout-index" 2>/dev/null
	not cmp -s "$TMP/stdout-index" "$TMP/other-index"
	$PY -c 'import msgpack,sys; m=msgpack.unpackb(open(sys.argv[1],"rb").read()); assert m["format"]=="tensorplay-dcp" and m["version"]==1' "$TMP/stdout-index"
	# a native checkpoint has nothing to index
	$GEN "$TMP/native" --seed 3 --keys 4
	run "$CKPTFS" index "$TMP/native"
	[ "$status" -ne 0 ]
	[[ "$output" == *"nothing to index"* ]]
}

@test "torch: cat, plan, stats, extract and verify work on a torch checkpoint" {
	start_mount "$W4/per_rank" "$MNT" --world 3 --rank 2
	"$CKPTFS" cat "$W4/per_rank" model.cube_tp --world 3 --rank 2 >"$TMP/cat"
	cmp "$TMP/cat" "$MNT/model/cube_tp"
	"$CKPTFS" cat "$W4/per_rank" optim.param_groups --world 3 --rank 2 >"$TMP/pg"
	$PY -c 'import sys,torch; g=torch.load(sys.argv[1]); assert g[0]["lr"]==0.001, g' "$TMP/pg"
	run "$CKPTFS" plan "$W4/per_rank" --world 3 --rank 2 model.layer2.weight
	echo "$output"
	[[ "$output" == *"__"*".distcp"* ]]
	run "$CKPTFS" stats "$W4/per_rank" --world 3 --rank 2 model.counts
	[ "$status" -eq 0 ]
	[[ "$output" == *int64* ]]
	"$CKPTFS" extract "$W4/per_rank" "$TMP/out" --world 3 --rank 2
	diff -r --exclude=.ckptfs "$TMP/out" "$MNT"
	run "$CKPTFS" verify "$W4/per_rank"
	echo "$output"
	[ "$status" -eq 0 ]
	# torch's zip CRC-32 of every non-empty tensor record is checked
	[[ "$output" == *"48 records"*"45 checked, 3 without a checksum, 0 mismatched"* ]]
}

@test "torch: through the node-local index cache (the image staged and mapped by the first open, the pickle given back for the parsed form by the next, read again when form and image are damaged) every view equals the one without a cache" {
	"$CKPTFS" extract "$W4/per_rank" "$TMP/plain" --world 3 --rank 2
	for step in first form damaged again; do
		if [ $step = damaged ]; then
			for f in "$TMP"/ic/*.ckptfs-parsed "$TMP"/ic/*.ckptfs-index; do
				$PY -c 'import sys,os; f=open(sys.argv[1],"r+b"); n=os.fstat(f.fileno()).st_size; f.seek(n-40); b=f.read(1); f.seek(n-40); f.write(bytes([b[0]^0x55]))' "$f"
			done
		fi
		run "$CKPTFS" info "$W4/per_rank" --index-cache "$TMP/ic"
		echo "$step: $output"
		[ "$status" -eq 0 ]
		case $step in
		first|damaged) [[ "$output" == *"records located as read"* ]] ;;
		*) [[ "$output" == *"via this node's index cache"* ]] ;;
		esac
		[ $step = damaged ] || not grep -q "parsed again" <<<"$output"
		[ $step != damaged ] || [[ "$output" == *".ckptfs-parsed: parsed form is corrupt"*"parsed again"* ]]
		"$CKPTFS" extract "$W4/per_rank" "$TMP/$step" --world 3 --rank 2 --index-cache "$TMP/ic"
		diff -r "$TMP/plain" "$TMP/$step"
		ls "$TMP"/ic/*.ckptfs-parsed
	done
}

@test "torch: plan of a lazily opened checkpoint locates the rank's records and lists the eager open's reads; a record it cannot locate fails plan, naming it" {
	local w r
	for w in 1 3 8; do
		r=$((w - 1))
		"$CKPTFS" plan "$W4/per_rank" --world "$w" --rank "$r" >"$TMP/lazy"
		CKPTFS_EAGER_INDEX=1 "$CKPTFS" plan "$W4/per_rank" --world "$w" --rank "$r" >"$TMP/eager"
		cmp "$TMP/lazy" "$TMP/eager"
		grep -q $'^\tread\t__' "$TMP/lazy"
	done
	# the zip end record of the first record of __1_0.distcp, broken
	cp -r "$W4/per_rank" "$TMP/ck"
	$PY -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[b.index(b"PK\x05\x06")]=0; open(p,"wb").write(b)' "$TMP/ck/__1_0.distcp"
	run "$CKPTFS" plan "$TMP/ck" --world 1 --rank 0
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"ckptfs: cannot plan: $TMP/ck/__1_0.distcp: offset "*": key '"*"' chunk "*": no zip end record"* ]]
	# the keys of the other files are still planned
	[[ "$output" == *$'\tread\t__0_0.distcp\t'* ]]
}

@test "torch: a flipped byte in a tensor record is found by its zip CRC-32 (ckptfs verify, -o verify)" {
	cp -r "$W4/per_rank" "$TMP/ck"
	"$CKPTFS" index "$TMP/ck" -o "$TMP/idx"
	read -r path off < <($PY -c 'import msgpack,sys; m=msgpack.unpackb(open(sys.argv[1],"rb").read()); r=[x for x in m["storage_data"] if x["fqn"]=="model.counts"][0]; print(r["relative_path"], r["offset"] + 5)' "$TMP/idx")
	$PY -c 'import sys; f=open(sys.argv[1],"r+b"); o=int(sys.argv[2]); f.seek(o); b=f.read(1); f.seek(o); f.write(bytes([b[0]^1]))' "$TMP/ck/$path" "$off"
	run "$CKPTFS" verify "$TMP/ck"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"key 'model.counts': chunk at [0,0]: crc32 mismatch"* ]]
	start_mount "$TMP/ck" "$MNT" --world 2 --rank 0 -o verify
	run cat "$MNT/model/counts"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	grep -q "key 'model.counts': crc32 mismatch, reads of it fail with EIO" "$TMP/daemon.log"
	cmp "$MNT/model/cube" <("$CKPTFS" cat "$W4/per_rank" model.cube --world 2 --rank 0)
}

@test "torch: hostile and broken checkpoints are refused with one line naming the file (and key); nothing runs, nothing mounts" {
	$PY "$ROOT/tests/make_hostile_torch.py" cases "$W4/per_rank" "$TMP/hostile"
	rm -f /tmp/ckptfs-pwned
	n=0
	# The eager pass (CKPTFS_EAGER_INDEX=1) checks every record at mount;
	# a lazy open (the default) checks each as a read locates it.
	while IFS=$'\t' read -r name want; do
		run env CKPTFS_EAGER_INDEX=1 "$CKPTFS" mount "$TMP/hostile/$name" "$MNT" --world 2 --rank 0
		echo "$name: status $status: $output"
		[ "$status" -eq 1 ]
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == *"$want"* ]]
		[[ "$output" == *"$TMP/hostile/$name"* ]]
		not mountpoint -q "$MNT"
		n=$((n + 1))
	done <"$TMP/hostile/expect.tsv"
	[ "$n" -ge 18 ]
	[ ! -e /tmp/ckptfs-pwned ]
	# keys are named where a record is at fault
	run env CKPTFS_EAGER_INDEX=1 "$CKPTFS" info "$TMP/hostile/zip_lying_sizes"
	[[ "$output" == *"key 'model.layer1.weight'"* ]]
	# an unsafe relative_path fails the lazy open too, also right after
	# a record of the file it names with a NUL and more
	for name in path_escape path_nul_repeat; do
		run "$CKPTFS" info "$TMP/hostile/$name"
		echo "$name (lazy): status $status: $output"
		[ "$status" -eq 1 ]
		[[ "$output" == *"/.metadata: key '"*"': relative_path must be relative"* ]]
	done
	# lazily, by the read that locates it
	run "$CKPTFS" cat "$TMP/hostile/zip_lying_sizes" model.layer1.weight --world 2 --rank 0
	[ "$status" -ne 0 ]
	[[ "$output" == *"key 'model.layer1.weight'"*"runs past the data area"* ]]
}

@test "torch: a .distcp truncated after mounting gives EIO for its keys; the rest keeps serving" {
	cp -r "$W4/per_rank" "$TMP/ck"
	start_mount "$TMP/ck" "$MNT" --world 2 --rank 0
	cat "$MNT/model/layer1/weight" >/dev/null
	truncate -s 100 "$TMP/ck/__3_0.distcp"
	echo 3 >/proc/sys/vm/drop_caches
	run cat "$MNT/model/layer2/weight"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	cat "$MNT/optim/param_groups" >/dev/null
	cat "$MNT/model/scale" >/dev/null
}

@test "torch: a record larger than 4 GiB (zip64) is located and served" {
	$PY "$ROOT/tests/make_zip64_ckpt.py" "$TMP/z64"
	start_mount "$TMP/z64" "$MNT" --world 2 --rank 1
	[ "$(stat -c %s "$MNT/big/bytes")" -eq 2147484148 ]
	$PY - "$TMP/z64/ends.bin" "$MNT/big/bytes" <<-'EOF'
	import sys
	ends = open(sys.argv[1], "rb").read()
	with open(sys.argv[2], "rb") as f:
	    f.seek(-65536, 2)
	    assert f.read() == ends[65536:], "tail"
	    f.seek(1 << 30)
	    assert f.read(4096) == bytes(4096), "hole"
	EOF
	stop_mount
	start_mount "$TMP/z64" "$MNT" --world 2 --rank 0
	head -c 65536 "$MNT/big/bytes" | cmp - <(head -c 65536 "$TMP/z64/ends.bin")
}

@test "torch: a rank-local checkpoint of 512 parts x 64 keys (32768 chunks: rows of 32 keys to sort, 512 copies of 32 replicated ones to drop) mounts and matches" {
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rl" --parts 512 --keys 32
	start_mount "$TMP/rl" "$MNT"
	run $PY "$ROOT/tests/make_ranklocal.py" check "$MNT" --parts 512 --keys 32
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	run "$CKPTFS" info "$TMP/rl"
	[[ "$output" == *"chunks	16416"* ]]
}
