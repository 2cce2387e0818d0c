#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Every checkpoint kind from az://, against an Azurite this suite starts
# itself (tests/azure/azurite.sh: 127.0.0.1, a port the kernel picks,
# data in memory), as tests/bats/s3formats.bats does from s3://: the
# checkpoints of the existing generators (the newest torch in the sid
# chroot: rank-local, Megatron-Core, SAFETENSORS .distcp,
# HuggingFaceStorageWriter's sharded safetensors; an HF safetensors
# directory; coop_check.py's state saved by 4 ranks as DDP does) are
# uploaded by tests/azure/azblob.py, and every view of an az:// mount,
# ckptfs.load, and an 8-rank dcp.load with ckptfs.StorageReader("az://...")
# in the chroot (which reaches Azurite on the host's loopback) must equal
# the local copy's (a mount of it, torch's FileSystemReader on it).
# teardown_file stops Azurite.

load helpers
load ../s3/suite	# sums, same_views, direct_env
load ../azure/suite	# az_setup_file, az_teardown_file, azput, $AZ
DIRECT="$PY $ROOT/tests/direct_checks.py"
T2DIRS="mesh1d zstd st ranklocal megatron hf/sharded"

setup_file() {
	az_setup_file || return 1
	"$ROOT/scripts/sid-chroot.sh" build
	SID=$("$ROOT/scripts/sid-chroot.sh" path)
	T2=$(mktemp -d "$SID/tmp/ckptfs-azt2.XXXXXX")
	export SID T2 T2IN=${T2#$SID}
	unset CKPTFS_LIB	# the plain build's library inside the chroot
	gen_once "$T2" torch2 "$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/torch2_check.py gen "$T2IN" >"$T2/gen.log" 2>&1 ||
		{ tail -30 "$T2/gen.log"; return 1; }
	"$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 @ROOT@/tests/coop_check.py gen "$T2IN/coop" 4 >"$T2/coop.log" 2>&1 ||
		{ tail -30 "$T2/coop.log"; return 1; }
	local d
	for d in $T2DIRS coop; do
		azput "ckpt/t2/$d" "$T2/$d" || return 1
	done
}

teardown_file() {
	[ -n "${T2:-}" ] && rm -rf "$T2"
	az_teardown_file
}

setup() { common_setup; }
teardown() { common_teardown; }

# chroot_run ARGS...: scripts/sid-chroot.sh run /usr/bin/python3 ARGS.
chroot_run() {
	"$ROOT/scripts/sid-chroot.sh" run /usr/bin/python3 "$@"
}

@test "azure formats: zstd-compressed DCP, rank-local, Megatron-Core, SAFETENSORS .distcp and HuggingFaceStorageWriter's sharded safetensors: every view of an az:// mount equals the local mount (W=1,3,8)" {
	local d
	for d in zstd st ranklocal megatron hf/sharded; do
		echo "== $d"
		same_views "$T2/$d" "az://$AZ/ckpt/t2/$d" "1 0" "3 1" "8 6"
	done
	run "$CKPTFS" info "az://$AZ/ckpt/t2/zstd"
	[[ "$output" == *"format	torch-dcp+zstd"* ]]
	run "$CKPTFS" info "az://$AZ/ckpt/t2/ranklocal"
	[[ "$output" == *"torch-dcp-rank-local"* ]]
	run "$CKPTFS" info "az://$AZ/ckpt/t2/hf/sharded"
	[[ "$output" == *"safetensors-dcp-sharded"* ]]
	CKPTFS_EAGER_INDEX=1 run "$CKPTFS" info "az://$AZ/ckpt/t2/st"
	[[ "$output" == *"format	torch-dcp+safetensors"* ]]
}

@test "azure formats: an HF safetensors directory: views of an az:// mount and ckptfs cat equal the local mount's bytes; its files carry the blobs' Last-Modified" {
	local f n=0 t0 t1 mt
	$PY "$ROOT/tests/make_safetensors.py" ok "$TMP/st" --shards 3 --index
	t0=$(date +%s)
	azput ckpt/hfdir "$TMP/st"
	mkdir "$TMP/noidx"
	cp "$TMP"/st/*.safetensors "$TMP/noidx/"
	azput ckpt/hfnoidx "$TMP/noidx"
	t1=$(date +%s)
	# Opened from the listing alone (no index to HEAD): each file's time
	# is its blob's <Last-Modified>, as a local mount's is its mtime.
	start_mount "az://$AZ/ckpt/hfnoidx" "$MNT" --world 2 --rank 1
	mt=$(stat -c %Y "$MNT"/*/ | sort -n | tail -1)
	stop_mount
	echo "mtime $mt, uploaded in [$t0, $t1]"
	[ "$mt" -ge $((t0 - 1)) ]
	[ "$mt" -le $((t1 + 1)) ]
	same_views "$TMP/st" "az://$AZ/ckpt/hfdir" "1 0" "2 1" "5 3"
	start_mount "$TMP/st" "$MNT" --world 5 --rank 3
	while read -r f; do
		"$CKPTFS" cat "az://$AZ/ckpt/hfdir" --world 5 --rank 3 "$f" >"$TMP/cat.bin"
		cmp "$TMP/cat.bin" "$MNT/$f"
		n=$((n + 1))
	done < <(cd "$MNT" && find . -path ./.ckptfs -prune -o -type f -print | sed 's|^\./||')
	stop_mount
	echo "$n files"
	[ "$n" -gt 0 ]
}

@test "azure formats: ckptfs.load of az:// equals load_view of the local mount (safetensors, zstd DCP, SAFETENSORS .distcp, rank-local, Megatron-Core, HF sharded)" {
	local d
	$PY "$ROOT/tests/make_safetensors.py" ok "$TMP/st" --shards 2
	azput ckpt/stload "$TMP/st"
	start_mount "$TMP/st" "$MNT" --world 2 --rank 1
	run $(direct_env) $DIRECT same "az://$AZ/ckpt/stload" "$MNT" 2 1
	echo "safetensors: $output"
	stop_mount
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 problems"* ]]
	for d in zstd st ranklocal megatron hf/sharded; do
		start_mount "$T2/$d" "$MNT" --world 3 --rank 1
		run $(direct_env) $DIRECT same "az://$AZ/ckpt/t2/$d" "$MNT" 3 1
		echo "$d: $output"
		stop_mount
		[ "$status" -eq 0 ]
		[[ "$output" == *", 0 problems"* ]]
	done
}

@test "azure formats: torch 2.x: an 8-rank dcp.load resume of a 4-rank save with ckptfs.StorageReader(\"az://...\") equals FileSystemReader on the local copy (onto a 2x4 mesh; rank-local; zstd)" {
	local job
	for job in "mesh1d 8 2x4" "ranklocal 8 8" "zstd 3 3"; do
		set -- $job
		run chroot_run @ROOT@/tests/torch2_check.py load "$T2IN/$1" "$2" "$3" ${4:-} --from "az://$AZ/ckpt/t2/$1"
		grep '^rank\|Error' <<<"$output" | head -10
		[ "$status" -eq 0 ]
		[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq "$2" ]
	done
}

@test "azure formats: torch 2.x DDP: 8 ranks dcp.load a 4-rank save from az:// cooperatively (the default), every tensor equal to FileSystemReader's, bytes fetched <= 1.05x the unique bytes" {
	run chroot_run @ROOT@/tests/coop_check.py load "$T2IN/coop" 8 ddp on --s3 "az://$AZ/ckpt/t2/coop"
	echo "$output" | tail -15
	[ "$status" -eq 0 ]
	[[ "$output" == *"W=8 ddp cooperative=on: "*"; 0 ranks differ"* ]]
}
