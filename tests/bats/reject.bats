#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Every validation rule has a failing case: the mount is refused before
# anything is mounted, with a non-zero exit and one line naming the file,
# the key and the problem.

load helpers

setup() { common_setup; }
teardown() { common_teardown; }

# refuse CASE EXPECTED-FRAGMENT [MOUNT ARGS...]
refuse() {
	local case=$1 want=$2
	shift 2
	$BAD "$case" "$TMP/ckpt"
	refuse_mount "$TMP/ckpt" "$want" --world 2 --rank 1 "$@"
}

@test "the valid base case mounts" {
	$BAD ok "$TMP/ckpt"
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 1
	stop_mount
}

@test "format name" { refuse bad_format "format is 'pytorch', not 'tensorplay-dcp'"; }
@test "version other than 1" { refuse bad_version "format version 2 is not supported"; }
@test "missing version" { refuse no_version "missing required field 'version'"; }
@test "size of the wrong type" { refuse size_not_array "key 'optim.state.w.exp_avg': field 'size': expected array of unsigned integers, got string"; }
@test "negative offset" { refuse offset_not_uint "storage_data[0]: field 'offset': expected unsigned integer, got negative integer"; }
@test "fqn of the wrong type" { refuse fqn_not_str "field 'fqn': expected string, got integer"; }
@test "chunks of the wrong type" { refuse chunks_not_array "field 'chunks': expected array, got map"; }
@test "unknown entry type" { refuse bad_type "unknown type 'tensorz'"; }
@test "unknown dtype" { refuse bad_dtype "key 'optim.state.w.exp_avg': unknown dtype 'float128'"; }
@test "chunk outside the shape" { refuse chunk_outside "chunk [3,0]+[4,8] lies outside the shape [6,8]"; }
@test "chunk with the wrong number of dims" { refuse chunk_dims_mismatch "'chunks[1].offsets' has 3 dims, the tensor has 2"; }
@test "overlapping chunks" { refuse overlap "key 'optim.state.w.exp_avg': chunk [3,0]+[3,8] overlaps chunk [0,0]+[4,8]"; }
@test "a gap in the tiling" { refuse gap "the tiling has a gap"; }
@test "chunk without a record" { refuse no_record "key 'optim.state.w.exp_avg': chunk at [3,0] size [3,8] has no storage record"; }
@test "bytes entry without a record" { refuse bytes_no_record "key 'optim.param_groups': bytes entry has no storage record"; }
@test "record without a chunk" { refuse record_no_chunk "record at offsets [4,0] matches no chunk"; }
@test "record for an unknown key" { refuse record_unknown_key "record for unknown key 'optim.state.nope'"; }
@test "two records for one chunk" { refuse duplicate_record "chunk at [0,0] has two storage records"; }
@test "two chunks at the same offsets" { refuse duplicate_chunk "two chunks at offsets [0,0]"; }
@test "record length differs from the chunk's bytes" { refuse length_mismatch "has length 95, the chunk needs 96 bytes"; }
@test "record offset + length overflows" { refuse offset_overflow "overflows"; }
@test "shape whose element count overflows" { refuse dims_overflow "element count overflows"; }
@test "relative_path with .." { refuse path_dotdot "relative_path '../__0_0.distcp' must be relative"; }
@test "absolute relative_path" { refuse path_absolute "relative_path '/etc/passwd' must be relative"; }
@test "relative_path with NUL" { refuse path_nul "must be relative, inside the checkpoint, without '..' or NUL"; }
@test "relative_path with NUL after the same path's record" { refuse path_nul_repeat "key 'optim.state.w.exp_avg': relative_path '__0_0.distcp' must be relative, inside the checkpoint, without '..' or NUL"; }
@test "missing data file" { refuse file_missing "__1_0.distcp: key 'optim.state.w.step': cannot open data file"; }
@test "data file too short" { refuse file_short "__0_0.distcp: key 'optim.param_groups': data file has 100 bytes, its record ends at 211"; }
@test "data file is a directory" { refuse file_is_dir "__1_0.distcp: key 'optim.state.w.step': data file is not a regular file"; }
@test "data file is a FIFO (no hang)" { refuse file_is_fifo "data file is not a regular file"; }
@test "symlink leading outside the checkpoint" { refuse symlink_outside "leads outside the checkpoint directory"; }
@test "two keys with the same path" { refuse same_path "keys 'optim.state.w.exp_avg' and 'optim.state.w.step' both need the file 'exp_avg'"; }
@test "a key's file is another key's directory" { refuse file_vs_dir "needs 'state' as a file, but key 'optim.state.w.exp_avg' needs it as a directory"; }
@test "a path component longer than 255 bytes" { refuse long_name "key 'optim.state.w.step': path component 'ssssssssssssssssssssssssssssssssssssssss...' is 300 bytes, longer than the 255 a file name may have"; }
@test "duplicate key" { refuse duplicate_key "key 'optim.state.w.exp_avg' appears twice"; }
@test "trailing data" { refuse trailing_junk "bytes of trailing data after the metadata map"; }
@test "a broken pickle (read as a PyTorch checkpoint)" { refuse not_msgpack ".metadata: pickle opcode FRAME (0x95) at byte 2: frame runs past the end"; }
@test "empty .metadata" { refuse empty_metadata "got an empty file"; }
@test "1 GiB .metadata is refused by the size cap" { refuse huge_metadata "more than the 536870912-byte metadata limit"; }
@test "a count of 2^32-1 entries" { refuse huge_count "state_dict_metadata: truncated or malformed msgpack"; }

@test "no .metadata at all" {
	mkdir -p "$TMP/ckpt"
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT"
	[ "$status" -ne 0 ]
	[ "$output" = "ckptfs: $TMP/ckpt: not a checkpoint: it holds none of .metadata (ckptfs, PyTorch DCP), __R.metadata (PyTorch rank-local), *.safetensors, model.safetensors.index.json" ]
}

@test "world 0, rank out of range, non-numbers, missing rank" {
	$BAD ok "$TMP/ckpt"
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 0 --rank 0
	[ "$status" -ne 0 ]; [[ "$output" == *"world must be at least 1"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 4 --rank 4
	[ "$status" -ne 0 ]; [[ "$output" == *"rank 4 is out of range"* ]]
	run "$CKPTFS" "$TMP/ckpt" "$MNT" -o world=4,rank=9
	[ "$status" -ne 0 ]; [[ "$output" == *"rank 9 is out of range"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world x --rank 0
	[ "$status" -ne 0 ]; [[ "$output" == *"world must be a whole number, got 'x'"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world -3 --rank 0
	[ "$status" -ne 0 ]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 4
	[ "$status" -ne 0 ]; [[ "$output" == *"rank is required with world"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --bogus
	[ "$status" -ne 0 ]; [[ "$output" == *"unknown option '--bogus'"* ]]
	not mountpoint -q "$MNT"
}

@test "wrong types for every field, each with its own message" {
	n=0
	while IFS=$'\t' read -r i want; do
		rm -rf "$TMP/ckpt"
		$BAD "wrong_type_$i" "$TMP/ckpt"
		run timeout "$(secs 20)" "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 2 --rank 1
		echo "case $i: status=$status output=$output"
		[ "$status" -ne 0 ]
		[ "$status" -ne 124 ]
		[[ "$output" == *"$want"* ]]
		[ "${#lines[@]}" -eq 1 ]
		not mountpoint -q "$MNT"
		n=$((n + 1))
	done < <($BAD --wrong-types)
	[ "$n" -ge 20 ]
}
