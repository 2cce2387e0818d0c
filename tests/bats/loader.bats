#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The ckptfs package (scripts/ckptfs/): load_view with both backends
# against the reference, memory-mapped (not copied), an Adam round trip
# through two ranks with Debian's torch, and its ValueErrors.

load helpers

setup() {
	common_setup
	$PY -c 'import torch' 2>/dev/null || skip "python3-torch is not installed"
}
teardown() { common_teardown; }

CHECKS="$PY $ROOT/tests/loader_checks.py"

@test "load_view: every tensor (dtype, shape, values) matches the reference, numpy and torch" {
	for seed in 61 62; do
		$GEN "$TMP/ckpt$seed" --seed $seed --keys 40
		start_mount "$TMP/ckpt$seed" "$MNT" --world 3 --rank 1
		run $CHECKS compare "$TMP/ckpt$seed" "$MNT" 3 1
		echo "$output"
		stop_mount
		[ "$status" -eq 0 ]
	done
	start_mount "$TMP/ckpt62" "$MNT" --world 3 --rank 1 --format npy
	run $CHECKS compare "$TMP/ckpt62" "$MNT" 3 1
	echo "npy mount: $output"
	stop_mount
	[ "$status" -eq 0 ]
	start_mount "$TMP/ckpt61" "$MNT" --world 8 --ranks 0-7
	run $CHECKS compare "$TMP/ckpt61" "$MNT/rank7" 8 7
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "load_view maps a 1 GiB view without copying it (RSS stays flat)" {
	$PY "$ROOT/scripts/bench/gen_bench_ckpt.py" data "$TMP/big" --gib 1.05 --params 20
	start_mount "$TMP/big" "$MNT" --world 1 --rank 0
	run $CHECKS rss "$MNT"
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "Adam state saved by 2 ranks, viewed as W=2 R=0 and R=1, concatenates back exactly and steps" {
	mkdir -p "$TMP/adam" "$TMP/m1"
	$CHECKS adam-save "$TMP/adam/ckpt"
	start_mount "$TMP/adam/ckpt" "$MNT" --world 2 --rank 0
	"$CKPTFS" mount "$TMP/adam/ckpt" "$TMP/m1" --world 2 --rank 1
	run $CHECKS adam-check "$TMP/adam/ckpt" "$MNT" "$TMP/m1"
	echo "$output"
	fusermount3 -u "$TMP/m1"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "load_view raises ValueError naming the path" {
	$BAD ok "$TMP/ckpt"
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	run $CHECKS errors "$TMP" "$MNT"
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "import ckptfs pulls in neither torch nor numpy" {
	run $PY -c '
import sys; sys.path.insert(0, sys.argv[1])
import ckptfs
assert "torch" not in sys.modules and "numpy" not in sys.modules
print("ok")' "$ROOT/scripts"
	[ "$output" = ok ]
}

@test "make install puts ckptfs and the ckptfs package where the shell and /usr/bin/python3 find them" {
	run make -C "$ROOT" --no-print-directory install DESTDIR="$TMP/inst" O="$(dirname "$CKPTFS" | sed "s|^$ROOT/||")"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -x "$TMP/inst/usr/local/bin/ckptfs" ]
	[ -f "$TMP/inst/usr/local/share/man/man1/ckptfs.1" ]
	grep -q '^\.TH CKPTFS 1' "$TMP/inst/usr/local/share/man/man1/ckptfs.1"
	site=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	[ -f "$TMP/inst$site/ckptfs/__init__.py" ]
	[ -f "$TMP/inst$site/ckptfs/py.typed" ]
	# The installed package finds the installed library: a link beside it
	# (no sed of the sources).
	[ "$(readlink "$TMP/inst$site/ckptfs/libckptfs.so.0")" = /usr/local/lib/libckptfs.so.0 ]
	local pre=
	# The sanitized build's library needs its runtimes loaded first.
	if nm -D "$TMP/inst/usr/local/lib/libckptfs.so.0" | grep -q __asan_; then
		pre="LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0"
	fi
	run env $pre PYTHONPATH="$TMP/inst$site" CKPTFS_LIB="$TMP/inst/usr/local/lib/libckptfs.so.0" $PY -c 'import ckptfs; print(ckptfs.load_view.__name__, ckptfs.__version__)'
	echo "$output"
	[ "$output" = "load_view $("$TMP/inst/usr/local/bin/ckptfs" --version | cut -d" " -f2)" ]
	[ ! -e "$TMP/inst$site/ckptfs.py" ]
}
