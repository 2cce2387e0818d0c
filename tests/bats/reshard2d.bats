#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Complete resharding: 2-D (TP x DP) layouts, several ranks in one mount,
# and dtype views, against the independent reference.

load helpers

setup() { common_setup; }
teardown() { common_teardown; }

LAYOUT="$PY $ROOT/tests/gen_layout.py"

layout_sweep() {
	local split=$1 seed=$2 w r tp
	$GEN "$TMP/ckpt" --seed "$seed" --keys 40
	for tp in 0 1 3; do
		[ "$split" = both ] || [ "$tp" -lt 2 ] || continue
		$LAYOUT "$TMP/ckpt" "$TMP/layout" --split "$split" --tp 2 --tp-rank "$tp"
		for wr in 1:0 2:1 3:2 8:5; do
			w=${wr%%:*}
			r=${wr##*:}
			start_mount "$TMP/ckpt" "$MNT" --world "$w" --rank "$r" --layout "$TMP/layout"
			run $REF check "$TMP/ckpt" "$MNT" --world "$w" --rank "$r" --layout "$TMP/layout"
			echo "split=$split tp=$tp W=$w R=$r: $output"
			stop_mount
			[ "$status" -eq 0 ]
		done
	done
}

@test "layouts: TP split along dim 0" { layout_sweep 0 41; }
@test "layouts: TP split along dim 1" { layout_sweep 1 42; }
@test "layouts: TP split along dims 0 and 1 (2x2 grid)" { layout_sweep both 43; }

@test "layouts: -o layout= form, and a parameter matching no key only warns" {
	$GEN "$TMP/ckpt" --seed 44 --keys 30
	$LAYOUT "$TMP/ckpt" "$TMP/layout" --split 1 --tp 2 --tp-rank 0
	start_mount "$TMP/ckpt" "$MNT" -o world=2,rank=1,layout="$TMP/layout"
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1 --layout "$TMP/layout"
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	grep -q "warning: .*layout:[0-9]*: parameter 'no.such.param' matches no key" "$TMP/daemon.log"
}

@test "layouts: -o layout= with a comma in the path (fuse_opt's \\, escape), and libfuse's thread options" {
	$GEN "$TMP/ckpt" --seed 45 --keys 30
	mkdir -p "$TMP/a,b"
	$LAYOUT "$TMP/ckpt" "$TMP/a,b/lay,out" --split 1 --tp 2 --tp-rank 1
	esc=$(printf '%s' "$TMP/a,b/lay,out" | sed 's/,/\\,/g')
	start_mount "$TMP/ckpt" "$MNT" -o "world=3,rank=2,layout=$esc,max_threads=2,max_idle_threads=1"
	run $REF check "$TMP/ckpt" "$MNT" --world 3 --rank 2 --layout "$TMP/a,b/lay,out"
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" -f -o world=1,rank=0,max_threads=0
	[ "$status" -ne 0 ]
	[[ "$output" == *"max_threads and max_idle_threads must be at least 1"* ]]
}

@test "layouts: boxes bound by exact key and by shell glob (Megatron-style keys), besides PARAM" {
	$PY - "$TMP/ckpt" <<'PY'
import os, sys, msgpack, numpy as np
out = sys.argv[1]; os.makedirs(out)
keys = {"optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight": (8, 6),
        "optimizer.state.exp_avg_sq.decoder.layers.mlp.linear_fc1.weight": (8, 6),
        "decoder.layers.mlp.linear_fc1.weight": (8, 6),
        "decoder.layers.mlp.linear_fc2.weight": (6, 8),
        "decoder.final_norm.weight": (6,)}
data, sdm, sd, off = b"", {}, [], 0
for i, (k, shape) in enumerate(keys.items()):
    a = (np.arange(np.prod(shape), dtype="<f4") + 100 * i).reshape(shape)
    sdm[k] = {"type": "tensor", "dtype": "float32", "size": list(shape),
              "chunks": [{"offsets": [0] * len(shape), "sizes": list(shape)}]}
    sd.append({"fqn": k, "offsets": [0] * len(shape), "relative_path": "d",
               "offset": off, "length": a.nbytes})
    data += a.tobytes(); off += a.nbytes
open(os.path.join(out, "d"), "wb").write(data)
msgpack.dump({"format": "tensorplay-dcp", "version": 1,
              "state_dict_metadata": sdm, "storage_data": sd},
             open(os.path.join(out, ".metadata"), "wb"))
PY
	printf '%s\n' '# exact key, a glob over the optimizer states, another exact key' \
		'decoder.layers.mlp.linear_fc2.weight 0,4 6,4' \
		'optimizer.state.*.decoder.layers.mlp.linear_fc1.weight 0,3 8,3' \
		'decoder.layers.mlp.linear_fc1.weight 4,0 4,6' \
		'decoder.*.nothing 0 1' > "$TMP/layout"
	for wr in "2 1" "3 0" "3 2"; do
		set -- $wr
		start_mount "$TMP/ckpt" "$MNT" --world $1 --rank $2 --layout "$TMP/layout"
		run $REF check "$TMP/ckpt" "$MNT" --world $1 --rank $2 --layout "$TMP/layout"
		echo "$output"
		stop_mount
		[ "$status" -eq 0 ]
	done
	# fc1's optimizer state: columns 3-5 of 8 rows; W=2 R=1 sees rows 4-7.
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 1 --layout "$TMP/layout"
	[ "$(getfattr --only-values -n user.ckptfs.offsets "$MNT/optimizer/state/exp_avg/decoder/layers/mlp/linear_fc1/weight")" = "4,3" ]
	[ "$(getfattr --only-values -n user.ckptfs.shape "$MNT/decoder/layers/mlp/linear_fc1/weight")" = "2,6" ]
	stop_mount
	grep -q "layout:5: parameter 'decoder.\*.nothing' matches no key" "$TMP/daemon.log"
}

@test "layouts: a dim-1 TP box reads only the bytes it needs" {
	# [8,6] saved whole; box = columns 3-5; W=2 rank 1 = rows 4-7.
	$PY - "$TMP/ckpt" <<'PY'
import os, sys, msgpack, numpy as np
out = sys.argv[1]; os.makedirs(out)
a = np.arange(48, dtype="<f4").reshape(8, 6)
open(os.path.join(out, "d"), "wb").write(a.tobytes())
msgpack.dump({"format": "tensorplay-dcp", "version": 1,
    "state_dict_metadata": {"optim.state.w.exp_avg": {"type": "tensor",
        "dtype": "float32", "size": [8, 6],
        "chunks": [{"offsets": [0, 0], "sizes": [8, 6]}]}},
    "storage_data": [{"fqn": "optim.state.w.exp_avg", "offsets": [0, 0],
        "relative_path": "d", "offset": 0, "length": 192}]},
    open(os.path.join(out, ".metadata"), "wb"))
PY
	echo "w 0,3 8,3" > "$TMP/layout"
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 1 --layout "$TMP/layout"
	run od -An -f "$MNT/optim/state/w/exp_avg"
	stop_mount
	[ "$(echo $output)" = "27 28 29 33 34 35 39 40 41 45 46 47" ]
}

@test "layouts: bad lines, boxes out of bounds and wrong dims are refused" {
	$BAD ok "$TMP/ckpt"
	refuse_layout() {
		printf '%s\n' "$1" > "$TMP/layout"
		run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 2 --rank 0 --layout "$TMP/layout"
		echo "$output"
		[ "$status" -ne 0 ]
		[[ "$output" == *"$2"* ]]
		[ "${#lines[@]}" -eq 1 ]
		not mountpoint -q "$MNT"
	}
	refuse_layout "w 0,0" "layout:1: expected 'PARAM OFFSETS SIZES'"
	refuse_layout "w 0,x 6,8" "layout:1: OFFSETS '0,x' is not a comma-separated list"
	refuse_layout "w 0,0 6" "layout:1: OFFSETS has 2 dims, SIZES has 1"
	refuse_layout $'# c\nw 0,0 6,8\nw 0,0 6,8' "layout:3: parameter 'w' is already given on line 2"
	refuse_layout "w 0,4 6,8" "layout:1: parameter 'w': box [0,4]+[6,8] lies outside key 'optim.state.w.exp_avg' of shape [6,8]"
	refuse_layout "w 0 6" "layout:1: parameter 'w': box has 1 dims, key 'optim.state.w.exp_avg' has 2"
	refuse_layout "w 18446744073709551615,0 2,8" "lies outside key"
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 2 --rank 0 --layout "$TMP/nope"
	[ "$status" -ne 0 ]
	[[ "$output" == *"nope: cannot open"* ]]
}

@test "--ranks 0-7: each rankN/ matches the reference and a single-rank mount" {
	$GEN "$TMP/ckpt" --seed 45 --keys 40
	start_mount "$TMP/ckpt" "$MNT" --world 8 --ranks 0-7
	[ "$(ls "$MNT" | tr '\n' ' ')" = "rank0 rank1 rank2 rank3 rank4 rank5 rank6 rank7 " ]
	for r in 0 3 7; do
		run $REF check "$TMP/ckpt" "$MNT/rank$r" --world 8 --rank "$r"
		echo "rank $r: $output"
		[ "$status" -eq 0 ]
	done
	# Reads from all 8 ranks at once agree with the reference.
	pids=()
	for r in 0 1 2 3 4 5 6 7; do
		$REF check "$TMP/ckpt" "$MNT/rank$r" --world 8 --rank "$r" > "$TMP/par$r" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done
	# One daemon, each data file opened once.
	n=$(ls -l /proc/$DAEMON_PID/fd | grep -c '\.distcp')
	[ "$n" -eq "$(ls "$TMP/ckpt" | grep -c distcp)" ]
	mkdir "$TMP/one"
	"$CKPTFS" mount "$TMP/ckpt" "$TMP/one" --world 8 --rank 5
	diff -r "$MNT/rank5" "$TMP/one"
	fusermount3 -u "$TMP/one"
	stop_mount
}

@test "--ranks with a list, -o ranks=, layouts and dtype together" {
	$GEN "$TMP/ckpt" --seed 46 --keys 30
	$LAYOUT "$TMP/ckpt" "$TMP/layout" --split 1 --tp 2 --tp-rank 1
	start_mount "$TMP/ckpt" "$MNT" -o world=7,ranks=0,2,4-6,layout="$TMP/layout",dtype=float32
	[ "$(ls "$MNT" | tr '\n' ' ')" = "rank0 rank2 rank4 rank5 rank6 " ]
	for r in 2 6; do
		run $REF check "$TMP/ckpt" "$MNT/rank$r" --world 7 --rank "$r" --layout "$TMP/layout" --dtype float32
		echo "rank $r: $output"
		[ "$status" -eq 0 ]
	done
	stop_mount
}

@test "--ranks: 16 ranges of 65536 ranks are checked at once (sorted, not rank by rank), duplicates still named, the per-range cap kept" {
	spec=$(for i in $(seq 0 15); do printf '%d-%d,' $((i * 65536)) $((i * 65536 + 65535)); done)
	spec=${spec%,}
	# The options are fine: what fails is the missing checkpoint, after
	# they were parsed.  (Compared pairwise, they took minutes.)
	run timeout "$(secs 60)" "$CKPTFS" mount "$TMP/none" "$MNT" --world 1048576 --ranks "$spec"
	echo "$output"
	[ "$status" -eq 1 ]; [[ "$output" == *"$TMP/none: No such file"* ]]
	run timeout "$(secs 60)" "$CKPTFS" mount "$TMP/none" "$MNT" --world 1048576 --ranks "$spec,1048575"
	[ "$status" -eq 2 ]; [[ "$output" == *"rank 1048575 is listed twice"* ]]
	run timeout "$(secs 60)" "$CKPTFS" mount "$TMP/none" "$MNT" --world 1048576 --ranks "70000,$spec"
	[ "$status" -eq 2 ]; [[ "$output" == *"rank 70000 is listed twice"* ]]
	run timeout "$(secs 60)" "$CKPTFS" mount "$TMP/none" "$MNT" --world 1048576 --ranks 5-9,0-4,9
	[ "$status" -eq 2 ]; [[ "$output" == *"rank 9 is listed twice"* ]]
	run "$CKPTFS" mount "$TMP/none" "$MNT" --world 1048576 --ranks 0-65536
	[ "$status" -ne 0 ]; [[ "$output" == *"the range 0-65536 holds 65537 ranks; a range may hold at most 65536"* ]]
}

@test "--ranks: duplicates, ranks >= world, bad syntax, with --rank" {
	$BAD ok "$TMP/ckpt"
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 8 --ranks 0,1,1
	[ "$status" -ne 0 ]; [[ "$output" == *"rank 1 is listed twice"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 4 --ranks 0-4
	[ "$status" -ne 0 ]; [[ "$output" == *"rank 4 is out of range"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 4 --ranks 3-1
	[ "$status" -ne 0 ]; [[ "$output" == *"ranks must be a list such as 0-7"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 4 --ranks 0,
	[ "$status" -ne 0 ]; [[ "$output" == *"ranks must be a list"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 4 --ranks 0-1 --rank 0
	[ "$status" -ne 0 ]; [[ "$output" == *"either rank or ranks"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --ranks 0-1
	[ "$status" -ne 0 ]; [[ "$output" == *"world is required with ranks"* ]]
	not mountpoint -q "$MNT"
}

@test "dtype views: every float8/float16/bfloat16 code and float32/float64 specials, to float32 and bfloat16" {
	$PY "$ROOT/tests/make_special_ckpt.py" "$TMP/ckpt"
	for dt in float32 bfloat16; do
		start_mount "$TMP/ckpt" "$MNT" --dtype "$dt"
		run $PY -W ignore $ROOT/tests/reference.py check "$TMP/ckpt" "$MNT" --dtype "$dt"
		echo "$dt: $output"
		stop_mount
		[ "$status" -eq 0 ]
	done
}

@test "dtype views of generated checkpoints, resharded, and unchanged integers" {
	$GEN "$TMP/ckpt" --seed 47 --keys 40
	for dt in float32 bfloat16; do
		for wr in 1:0 3:1; do
			start_mount "$TMP/ckpt" "$MNT" --world "${wr%%:*}" --rank "${wr##*:}" -o dtype=$dt
			run $PY -W ignore $ROOT/tests/reference.py check "$TMP/ckpt" "$MNT" --world "${wr%%:*}" --rank "${wr##*:}" --dtype "$dt"
			echo "$dt $wr: $output"
			stop_mount
			[ "$status" -eq 0 ]
		done
	done
}

@test "dtype views: a bfloat16 checkpoint read with od -f as float32" {
	$PY - "$TMP/ckpt" <<'PY'
import os, sys, msgpack, numpy as np
out = sys.argv[1]; os.makedirs(out)
a = (np.array([1.5, -2.25, 3.0, 1e30], dtype="<f4").view("<u4") >> 16).astype("<u2")
open(os.path.join(out, "d"), "wb").write(a.tobytes())
msgpack.dump({"format": "tensorplay-dcp", "version": 1,
    "state_dict_metadata": {"w": {"type": "tensor", "dtype": "bfloat16",
        "size": [4], "chunks": [{"offsets": [0], "sizes": [4]}]}},
    "storage_data": [{"fqn": "w", "offsets": [0], "relative_path": "d",
        "offset": 0, "length": 8}]}, open(os.path.join(out, ".metadata"), "wb"))
PY
	start_mount "$TMP/ckpt" "$MNT" --dtype float32
	[ "$(stat -c %s "$MNT/w")" = 16 ]
	run od -An -f "$MNT/w"
	stop_mount
	[ "$(echo $output)" = "1.5 -2.25 3 9.953038e+29" ]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --dtype float16
	[ "$status" -ne 0 ]; [[ "$output" == *"dtype must be float32 or bfloat16, got 'float16'"* ]]
}
