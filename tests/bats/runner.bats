#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# tests/run-all.sh counts what ran: a copy of it runs deliberately broken
# suites (cut after the plan, a failing exit, no plan, a hang with a
# daemon that left its process group, an unexpected skip, a unit binary
# that dies) and must fail each, naming why; a good suite and a plain-only
# one in a later pass must not fail the run; the closing recap shows a
# failed test's own lines.

setup() {
	T=$(mktemp -d "${BATS_TMPDIR:-/tmp}/ckptfs-runner.XXXXXX")
	ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	mkdir -p "$T/tests/bats" "$T/bin" "$T/build/tests" "$T/build2/tests"
	cp "$ROOT/tests/run-all.sh" "$ROOT/tests/run-unit.sh" "$T/tests/"
	# A stand-in for bats: each "suite" here is a script printing TAP.
	printf '#!/bin/bash\nexec bash "${@: -1}"\n' > "$T/bin/bats"
	chmod +x "$T/bin/bats"
	: > "$T/build/ckptfs"
	: > "$T/build2/ckptfs"
	unit ok_a ok_b
	suite good 'echo 1..2; echo ok 1 a; echo ok 2 b'
	suite packages 'echo 1..1; echo ok 1 a'
	suite cut 'echo 1..3; echo ok 1 a; exit 0'
	suite exit1 'echo 1..1; echo ok 1 a; exit 1'
	suite noplan 'echo ok 1 a'
	suite skip 'echo 1..1; echo "ok 1 a # skip for no reason"'
	suite hang 'echo 1..1; setsid sleep 4242 & sleep 4243'
}

teardown() {
	pkill -KILL -f 'sleep 424[23]' || true
	rm -rf "$T"
}

suite() {	# NAME BODY
	echo "$2" > "$T/tests/bats/$1.bats"
}

# unit CASE...: build/tests/test_unit printing those cases and its summary
unit() {
	{
		echo '#!/bin/bash'
		for c in "$@"; do echo "echo 'ok $c'"; done
		echo "echo '$# passed, 0 failed'"
	} > "$T/build/tests/test_unit"
	chmod +x "$T/build/tests/test_unit"
}

# runner ONLY [BUILD...]: the copied runner on the jobs matching ONLY
runner() {
	local only=$1
	shift
	PATH="$T/bin:$PATH" CKPTFS_TEST_ONLY="$only" CKPTFS_JOB_TIMEOUT=${TIMEOUT:-60} \
		run "$T/tests/run-all.sh" "${@:-build}"
	echo "$output"
}

@test "good suites pass; a plain-only suite in a later build's pass is skipped, not failed" {
	runner 'good|packages|unit' build build2
	[ "$status" -eq 0 ]
	[ "${lines[-1]}" = "7 passed, 0 failed, 1 skipped" ]
	echo "$output" | grep -q 'packages.bats (build2): 0 passed, 0 failed, 1 skipped'
}

@test "each broken suite fails the run, named" {
	runner '^cut'
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'not ok printed 1 results of the 3 planned'
	[ "${lines[-1]}" = "1 passed, 1 failed, 0 skipped" ]

	runner '^exit1'
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'not ok runner exited 1 without a failed test'

	runner '^noplan'
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'not ok runner printed no plan'

	runner '^skip'
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'not ok 1 tests skipped'
	[ "${lines[-1]}" = "0 passed, 1 failed, 1 skipped" ]
}

@test "a unit binary that dies before its summary fails, named" {
	printf '#!/bin/bash\necho "ok a"\nkill -SEGV $$\n' > "$T/build/tests/test_die"
	chmod +x "$T/build/tests/test_die"
	runner '^unit'
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'not ok test_die: exited 139 without a failed case'
	# and one whose summary disagrees with its cases
	printf '#!/bin/bash\necho "ok a"\necho "3 passed, 0 failed"\n' > "$T/build/tests/test_die"
	runner '^unit'
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'says "3 passed, 0 failed" but printed 1 ok'
}

@test "a hanging suite times out, fails, and what it started is killed" {
	TIMEOUT=2 runner '^hang'
	[ "$status" -ne 0 ]
	echo "$output" | grep -q 'not ok timed out after 2 s'
	! pgrep -f 'sleep 424[23]'
}

@test "the closing recap names each failed test with the first lines it printed" {
	suite fails 'echo 1..3; echo ok 1 a; echo "not ok 2 b"; echo "# round 7: still there"; echo "# the reason"; echo ok 3 c'
	runner '^fails|^good'
	[ "$status" -ne 0 ]
	[ "${lines[-1]}" = "4 passed, 1 failed, 0 skipped" ]
	# after the timings: the job, the test, its lines, and nothing of ok 3
	echo "$output" | sed -n '/^== failed in fails.bats (build):$/,$p' > "$T/recap"
	cat "$T/recap"
	grep -q '^   not ok 2 b$' "$T/recap"
	grep -q '^     # round 7: still there$' "$T/recap"
	grep -q '^     # the reason$' "$T/recap"
	! grep -q 'ok 3 c' "$T/recap" || false
	! grep -q 'good.bats' "$T/recap"
}
