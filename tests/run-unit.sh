#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run the C unit-test binaries given as arguments; print each case, then a
# TAP plan ("1..N", at the end) and "N passed, N failed".  A binary counts
# as failed when it exits non-zero, or when its own closing line
# ("N passed, N failed", testhelp.h) is missing or disagrees with the
# cases it printed: one that dies halfway fails, named, instead of
# reporting only what it reached.  Exit non-zero on any failure.
set -u
passed=0
failed=0
for t in "$@"; do
	out=$("$t" 2>&1)
	rc=$?
	echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
	p=$(echo "$out" | grep -c '^ok ')
	f=$(echo "$out" | grep -c '^not ok ')
	summary=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "not ok $(basename "$t"): exited $rc without a failed case"
		f=$((f + 1))
	elif [ -z "$summary" ]; then
		echo "not ok $(basename "$t"): ended without its closing \"N passed, N failed\" line (exit $rc)"
		f=$((f + 1))
	elif [ "$summary" != "$p passed, $f failed" ]; then
		echo "not ok $(basename "$t"): says \"$summary\" but printed $p ok and $f not ok"
		f=$((f + 1))
	fi
	passed=$((passed + p))
	failed=$((failed + f))
done
echo "1..$((passed + failed))"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
