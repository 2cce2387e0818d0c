#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run the C unit-test binaries given as arguments; print each case and a
# closing "N passed, N failed".  Exit non-zero on any failure.
set -u
passed=0
failed=0
for t in "$@"; do
	out=$("$t" 2>&1)
	rc=$?
	echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
	p=$(echo "$out" | grep -c '^ok ')
	f=$(echo "$out" | grep -c '^not ok ')
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "not ok $(basename "$t"): exited $rc"
		f=1
	fi
	passed=$((passed + p))
	failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
