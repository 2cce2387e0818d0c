#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# `make demo`: scripts/demo.sh runs to the end and prints the next three
# commands with the binary's path, and those commands work as printed (the
# mount point moved into the test's directory); make demo installs the
# demo's packages only.

load helpers

setup() { common_setup; }
teardown() { common_teardown; }

@test "demo.sh ends with the next three commands, which work as printed" {
	run "$ROOT/scripts/demo.sh" "$CKPTFS"
	echo "$output"
	[ "$status" -eq 0 ]
	bin=${CKPTFS#"$ROOT"/}
	next=$(echo "$output" | tail -3)
	[ "$(echo "$next" | sed -n 1p)" = "  $bin info demo/ckpt" ]
	[ "$(echo "$next" | sed -n 2p)" = "  mkdir -p /tmp/view && $bin mount demo/ckpt /tmp/view --world 8 --rank 3" ]
	[ "$(echo "$next" | sed -n 3p)" = "  $bin umount /tmp/view" ]
	cd "$ROOT"
	run eval "$(echo "$next" | sed -n 1p)"
	[ "$status" -eq 0 ]
	[[ "$output" == *"keys	13"* ]]
	run eval "$(echo "$next" | sed -n 2p | sed "s|/tmp/view|$MNT|g")"
	[ "$status" -eq 0 ]
	MOUNTED=$MNT
	pid=$(pgrep -f "ckptfs mount demo/ckpt $MNT" | head -1)
	[ -n "$pid" ]
	run $REF check "$ROOT/demo/ckpt" "$MNT" --world 8 --rank 3
	echo "$output"
	[ "$status" -eq 0 ]
	run eval "$(echo "$next" | sed -n 3p | sed "s|/tmp/view|$MNT|g")"
	[ "$status" -eq 0 ]
	not mountpoint -q "$MNT"
	for i in $(seq "$(polls 5)"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	not kill -0 "$pid" 2>/dev/null
}

@test "make demo installs the demo's packages only, make check the rest" {
	grep -q '^demo: deps-demo$' "$ROOT/Makefile"
	grep -q '^check-build: deps$' "$ROOT/Makefile"
	grep -q '^check: check-build$' "$ROOT/Makefile"
	demo=$("$ROOT/scripts/install-deps.sh" --list --demo)
	all=$("$ROOT/scripts/install-deps.sh" --list)
	for p in libfuse3-dev fuse3 python3-numpy python3-msgpack build-essential; do
		grep -qx "$p" <<<"$demo"
	done
	for p in ceph-mon radosgw valgrind clang debootstrap bats python3-torch python3-pytest lintian; do
		not grep -qx "$p" <<<"$demo"
		grep -qx "$p" <<<"$all"
	done
}
