#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# A smoke run of the benchmark script (tiny checkpoint, one repetition), to
# keep `make bench` working.  No timing is checked: the timeout only
# catches a hang (the run takes 2-5 minutes, longer on a loaded machine).

load helpers

setup() { common_setup; }
teardown() { common_teardown; }

@test "make bench's script runs end to end (--quick)" {
	# make bench runs the plain build: smoke-tested in its pass only
	if [ "$CKPTFS" != "$ROOT/build/ckptfs" ]; then
		echo "# make bench uses $ROOT/build/ckptfs: run in that pass, not again for $CKPTFS" >&3
		return 0
	fi
	run timeout 1200 $PY "$ROOT/scripts/bench/bench.py" --quick \
		--ckptfs "$CKPTFS" --ceilfs "$(dirname "$CKPTFS")/ceilfs" --work "$TMP/bench"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"FUSE ceiling first read"* ]]
	[[ "$output" == *"view first read, tiling dim1, W=8 R=3"* ]]
	[[ "$output" == *"daemon RSS growth"* ]]
	[[ "$output" == *"zstd records through the mount, first read"* ]]
	[[ "$output" == *"S3: ckptfs.load of rank 3 of 8"* ]]
	[[ "$output" == *"S3: cat of every file of an s3:// mount"* ]]
	# the Azure rows (issue 39): left out of --quick, saying so
	[[ "$output" == *"Azure: not measured in --quick"* ]]
	# the throttled device, where this machine can build one
	if [[ "$output" != *"throttled device:"*"not measured"* ]]; then
		[[ "$output" == *"ckptfs.load(direct_io=True), rank 3 of 8"*"x fio"* ]]
	fi
	# issue 22's two ratios
	[[ "$output" == *"(first-load baseline)"* ]]
	[[ "$output" == *"ckptfs.load first call in a fresh process"*"x baseline"* ]]
	if [[ "$output" != *"no sid chroot"* ]]; then
		[[ "$output" == *"reader that reads nothing"* ]]
		[[ "$output" == *"data floor: 8 processes"* ]]
		[[ "$output" == *"ckptfs.StorageReader"*"x the limit (null "* ]]
	fi
}
