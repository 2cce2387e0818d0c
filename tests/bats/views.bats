#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Mounted views compared byte for byte (read, mmap, st_size) with the
# independent numpy reference, over many checkpoints, worlds and ranks.

load helpers

setup() { common_setup; }
teardown() { common_teardown; }

# W = 1, W larger than most dim 0s, R = W - 1, and some in between.
WR="1:0 2:0 2:1 3:1 4:3 8:5 8:7 64:0 64:63"

sweep() {
	local seed=$1 w r
	$GEN "$TMP/ckpt" --seed "$seed" --keys 40
	for wr in $WR; do
		w=${wr%%:*}
		r=${wr##*:}
		check_view "$TMP/ckpt" "$w" "$r"
	done
}

@test "views match the reference: seed 1" { sweep 1; }
@test "views match the reference: seed 2" { sweep 2; }
@test "views match the reference: seed 3" { sweep 3; }
@test "views match the reference: seed 4" { sweep 4; }
@test "views match the reference: seed 5" { sweep 5; }

@test "views match with many data files and larger tensors" {
	$GEN "$TMP/ckpt" --seed 99 --keys 30 --files 9 --max-elems 400000
	check_view "$TMP/ckpt" 3 2
	check_view "$TMP/ckpt" 7 0
}

@test "--prefix shows only keys under that first component" {
	$GEN "$TMP/ckpt" --seed 7 --keys 40
	check_view "$TMP/ckpt" 4 1 --prefix optim
	start_mount "$TMP/ckpt" "$MNT" --world 4 --rank 1 --prefix optim
	run ls "$MNT"
	stop_mount
	[ "$output" = "optim" ]
}

@test "-o prefix= is the same as --prefix" {
	$GEN "$TMP/ckpt" --seed 7 --keys 40
	start_mount "$TMP/ckpt" "$MNT" -o world=4,rank=1,prefix=model
	run $REF check "$TMP/ckpt" "$MNT" --world 4 --rank 1 --prefix model
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "attributes: modes, mtime of .metadata, sizes seen by stat, du and wc" {
	$PY "$ROOT/tests/make_bad_ckpt.py" ok "$TMP/ckpt"
	touch -d "2024-01-02 03:04:05" "$TMP/ckpt/.metadata"
	start_mount "$TMP/ckpt" "$MNT" --world 4 --rank 1
	f=$MNT/optim/state/w/exp_avg
	[ "$(stat -c %a "$f")" = 444 ]
	[ "$(stat -c %a "$MNT/optim/state")" = 555 ]
	[ "$(stat -c %Y "$f")" = "$(stat -c %Y "$TMP/ckpt/.metadata")" ]
	# [6,8] float32, W=4: cs=2, rank 1 has rows 2-3: 2*8*4 bytes.
	[ "$(stat -c %s "$f")" = 64 ]
	[ "$(wc -c < "$f")" = 64 ]
	[ "$(du -b "$f" | cut -f1)" = 64 ]
	# A 0-d tensor is whole on every rank; bytes entries pass through.
	[ "$(stat -c %s "$MNT/optim/state/w/step")" = 4 ]
	[ "$(cat "$MNT/optim/param_groups")" = "param-groups-pickle" ]
	run od -An -f -j 0 -N 8 "$f"
	[ "$(echo $output)" = "16 17" ]
	stop_mount
}

@test "numpy.memmap of a view file matches the reference" {
	$GEN "$TMP/ckpt" --seed 3 --keys 30
	start_mount "$TMP/ckpt" "$MNT" --world 3 --rank 2
	run $PY -c '
import os, sys, numpy as np
sys.path.insert(0, sys.argv[3])
import reference
exp = reference.expected(sys.argv[1], 3, 2)
n = 0
for rel, want in exp.items():
    if not want:
        continue
    a = np.memmap(os.path.join(sys.argv[2], rel), dtype="u1", mode="r")
    assert a.tobytes() == want, rel
    n += 1
print("memmapped", n)
' "$TMP/ckpt" "$MNT" "$ROOT/tests"
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}
