#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Safetensors checkpoints (Hugging Face's layout: *.safetensors, with or
# without model.safetensors.index.json), written by tests/make_safetensors.py
# from the format's spec: every view against values the writer recomputes,
# ckptfs.load, and the hostile matrix (each a one-line refusal).

load helpers

ST="$PY $ROOT/tests/make_safetensors.py"

setup() { common_setup; }
teardown() { common_teardown; }

check_views() {	# CKPT W R
	$ST expect "$1" "$2" "$3" > "$TMP/expect"
	check_expected_views "$1" "$2" "$3"
}

@test "safetensors: a directory of shards with model.safetensors.index.json mounts; every view matches (W=1,3,5,8)" {
	$ST ok "$TMP/ckpt" --shards 3 --index
	run "$CKPTFS" info "$TMP/ckpt"
	[[ "$output" == *"format	safetensors"* ]]
	for wr in "1 0" "3 1" "5 4" "8 2" "8 7"; do
		check_views "$TMP/ckpt" $wr
	done
}

@test "safetensors: one file without an index; ckptfs.load equals load_view" {
	$ST ok "$TMP/ckpt" --shards 1
	check_views "$TMP/ckpt" 4 3
	start_mount "$TMP/ckpt" "$MNT" --world 4 --rank 1
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $PY "$ROOT/tests/direct_checks.py" same "$TMP/ckpt" "$MNT" 4 1
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

refuse() {	# CASE TEXT
	$ST "$1" "$TMP/$1"
	refuse_mount "$TMP/$1" "$2" --world 2 --rank 0
}

@test "safetensors hostile: truncated header" { refuse truncated_header "header length"; }
@test "safetensors hostile: header length 2^64-1" { refuse header_len_huge "runs past the end (88 bytes)"; }
@test "safetensors hostile: a file shorter than 8 bytes" { refuse tiny_file "shorter than a safetensors header"; }
@test "safetensors hostile: data_offsets past the file" { refuse offsets_past_file "key 'x': data_offsets must be [begin, end]"; }
@test "safetensors hostile: overlapping data_offsets" { refuse offsets_overlap "keys 'x' and 'y': their data_offsets overlap"; }
@test "safetensors hostile: data_offsets that disagree with dtype x shape" { refuse size_mismatch "key 'x': data_offsets span 16 bytes"; }
@test "safetensors hostile: an offset of 2^64" { refuse offset_2_64 "integer does not fit 64 bits"; }
@test "safetensors hostile: a shape whose size overflows" { refuse shape_overflow "key 'x': shape is not a list of sizes that fit 64 bits"; }
@test "safetensors hostile: JSON nested 100000 deep" { refuse deep_json "nested too deep"; }
@test "safetensors hostile: not JSON (a trailing comma)" { refuse not_json "expected a string key"; }
@test "safetensors hostile: a float offset" { refuse float_offset "only integers are accepted here"; }
@test "safetensors hostile: an unknown dtype" { refuse bad_dtype "dtype 'C64' is not supported"; }
@test "safetensors hostile: one key in two files" { refuse duplicate_key "key 'x' is in both a.safetensors and b.safetensors"; }
@test "safetensors hostile: the index names another file" { refuse index_mismatch "key 'model.embed.weight' is in model-00001-of-00002.safetensors, but the index says model-00002-of-00002.safetensors"; }
@test "safetensors hostile: the index names a key no file has" { refuse index_missing_key "key 'model.ghost' is in no safetensors file"; }

@test "safetensors, DCP sharded: DCP_SHARDING_INFO chunks (dim 0, dim 1, a grid, uneven) over 4 shard files match every view (W=1,3,5,8)" {
	$ST sharded "$TMP/ckpt"
	run "$CKPTFS" info "$TMP/ckpt"
	echo "$output"
	[[ "$output" == *"format	safetensors-dcp-sharded"* ]]
	[[ "$output" == *"split along dim 0+1"* ]]
	for wr in "1 0" "3 1" "5 4" "8 2" "8 7"; do
		check_views "$TMP/ckpt" $wr
	done
	start_mount "$TMP/ckpt" "$MNT" --world 3 --rank 2
	run env CKPTFS_LIB="$ROOT/build/libckptfs.so" $PY "$ROOT/tests/direct_checks.py" same "$TMP/ckpt" "$MNT" 3 2
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "safetensors hostile, sharded: a chunk missing (a gap in the tiling)" { refuse sharded_gap "key 'model.embed.weight': chunks cover 45 of the 60 elements"; }
@test "safetensors hostile, sharded: overlapping saved_offsets" { refuse sharded_overlap "key 'model.embed.weight': chunk [4,0]+[5,3] overlaps"; }
@test "safetensors hostile, sharded: DCP_SHARDING_INFO that is not JSON" { refuse sharded_not_json "__metadata__.DCP_SHARDING_INFO: byte 1: expected a string key"; }
@test "safetensors hostile, sharded: DCP_SHARDING_INFO that is not a string" { refuse sharded_not_string "__metadata__.DCP_SHARDING_INFO is not a string"; }
@test "safetensors hostile, sharded: a tensor without saved_offsets" { refuse sharded_missing_key "has no saved_offsets for key 'model.embed.weight'"; }
@test "safetensors hostile, sharded: saved_offsets for a key the file lacks" { refuse sharded_unknown_key "key 'model.ghost' is not a tensor of the file"; }
@test "safetensors hostile, sharded: saved_offsets near 2^64" { refuse sharded_offset_2_64 "saved_offsets[0] is not an offset whose end fits 64 bits"; }
@test "safetensors hostile, sharded: one shard without DCP_SHARDING_INFO" { refuse sharded_mixed "key 'model.embed.weight': no DCP_SHARDING_INFO saved_offsets, but other files have them"; }
@test "safetensors hostile, sharded: one key saved with two dtypes" { refuse sharded_dtype_clash "key 'model.embed.weight': shard-00001-model-00001-of-00001.safetensors has float32 x 2 dims"; }
