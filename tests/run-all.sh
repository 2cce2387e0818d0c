#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test run behind `make check`: for each build directory given
# (plain, then sanitized), the C unit tests and the end-to-end bats suites
# through real mounts; then the Python package's pytest suite on the first
# (tests/python/: mypy --strict, a venv install, every runnable block of
# README.md and docs/*.md: test_docs.py).  Ends with one line "N passed, N failed, N skipped".
# A skipped test (TAP "ok N ... # skip") is counted as skipped, not passed,
# and any skip fails the run: every suite (torch and loader included)
# must run in `make check`.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
total_p=0
total_f=0
total_s=0
log=$(mktemp)
# The Python package's node-local index cache (default ~/.cache/ckptfs):
# the tests' own, removed at the end, not the user's.
own_cache=
if [ -z "${CKPTFS_INDEX_CACHE+set}" ]; then
	own_cache=$(mktemp -d)
	export CKPTFS_INDEX_CACHE="$own_cache/index-cache"
fi

count() {	# count TAP lines of $log into the totals
	local p f s
	s=$(grep -E -c '^ok .*# (skip|SKIP)' "$log")
	p=$(($(grep -c '^ok ' "$log") - s))
	f=$(grep -c '^not ok ' "$log")
	total_p=$((total_p + p))
	total_f=$((total_f + f))
	total_s=$((total_s + s))
	echo "== $1: $p passed, $f failed, $s skipped"
}

# Checkpoints that several suites (and both builds' passes) generate with
# the same seed are made once per run (gen_once in tests/bats/helpers.bash).
own_gen=
if [ -z "${CKPTFS_GEN_CACHE+set}" ]; then
	own_gen=$(mktemp -d)
	export CKPTFS_GEN_CACHE="$own_gen"
fi

# Each suite's wall time, per build, so the slowest show in every log.
times=$(mktemp)
timed() {	# LABEL START
	local t=$((SECONDS - $2))
	printf '%5d s  %s\n' "$t" "$1" >> "$times"
	echo "== time: $1: $t s"
}

# Timed waits in the suites are liveness bounds scaled by
# CKPTFS_TIME_SCALE (tests/bats/helpers.bash): 1 for a plain build, more
# for a sanitized one (ASan/UBSan run the daemon 2-5x slower), unless the
# caller sets it.
scale_for() {	# BUILD
	if [ -n "${CKPTFS_TIME_SCALE_SET:-}" ]; then
		echo "$CKPTFS_TIME_SCALE_SET"
	elif grep -q -a -m1 -e __asan_init -e __tsan_init "$1/ckptfs" 2>/dev/null; then
		echo 5
	else
		echo 1
	fi
}
CKPTFS_TIME_SCALE_SET=${CKPTFS_TIME_SCALE:-}

for b in "$@"; do
	export CKPTFS_TIME_SCALE
	CKPTFS_TIME_SCALE=$(scale_for "$b")
	echo "== unit tests ($b)"
	t0=$SECONDS
	tests/run-unit.sh $(find "$b/tests" -name "test_*" -type f ! -name "*.d" | sort) | tee "$log"
	count "unit ($b)"
	timed "unit ($b)" $t0
	echo "== end-to-end tests ($b, liveness bounds x$CKPTFS_TIME_SCALE)"
	: > "$log.all"
	for suite in tests/bats/*.bats; do
		t0=$SECONDS
		CKPTFS="$ROOT/$b/ckptfs" bats --tap "$suite" 2>&1 | tee "$log"
		if ! grep -q '^1\.\.' "$log"; then
			echo "not ok bats did not run: $suite ($b)" | tee -a "$log"
		fi
		cat "$log" >> "$log.all"
		timed "$(basename "$suite") ($b)" $t0
	done
	mv "$log.all" "$log"
	count "bats ($b)"
done
CKPTFS_TIME_SCALE=$(scale_for "$1")

# The Python package (scripts/ckptfs/) with pytest (tests/python/), on the
# first build's library: its results become TAP lines for the count.
echo "== python package: pytest tests/python ($1)"
t0=$SECONDS
CKPTFS_BUILD="$ROOT/$1" CKPTFS_LIB="$ROOT/$1/libckptfs.so" \
	/usr/bin/python3 -m pytest -p no:cacheprovider -rA tests/python > "$log.py" 2>&1
rc=$?
cat "$log.py"
sed -n -E 's/^PASSED (.*)$/ok \1/p; s/^(FAILED|ERROR) (.*)$/not ok \2/p; s/^SKIPPED (.*)$/ok # skip \1/p' "$log.py" > "$log"
if [ "$rc" -ne 0 ] && ! grep -q '^not ok ' "$log"; then
	echo "not ok pytest exited $rc without a failed test" | tee -a "$log"
fi
rm -f "$log.py"
count "pytest ($1)"
timed "pytest ($1)" $t0

# Memory errors the sanitizers cannot see in the plain build: valgrind runs
# the unit tests of the first build given.  Without valgrind, or without the
# ThreadSanitizer daemon, those runs count as skipped (which fails the run),
# never as silently passed.
if ! command -v valgrind >/dev/null; then
	echo "ok valgrind # skip valgrind is not installed (make deps)" | tee "$log"
	count "valgrind ($1)"
else
	echo "== valgrind ($1)"
	t0=$SECONDS
	: > "$log"
	for t in $(find "$1/tests" -name "test_*" -type f ! -name "*.d" | sort); do
		if valgrind -q --error-exitcode=99 --leak-check=full "$t" >/dev/null 2>"$log.vg"; then
			echo "ok valgrind $(basename "$t")" | tee -a "$log"
		else
			echo "not ok valgrind $(basename "$t")" | tee -a "$log"
			cat "$log.vg"
		fi
	done
	rm -f "$log.vg"
	count "valgrind ($1)"
	timed "valgrind ($1)" $t0
fi

# The stress test once more, against a ThreadSanitizer build of the daemon.
if [ ! -x build-tsan/ckptfs ]; then
	echo "ok tsan stress # skip build-tsan/ckptfs is not built (make SAN=thread O=build-tsan build-tsan/ckptfs)" | tee "$log"
	count "tsan"
else
	echo "== ThreadSanitizer stress"
	t0=$SECONDS
	CKPTFS_TIME_SCALE=$(scale_for build-tsan) tests/tsan-stress.sh build-tsan/ckptfs | tee "$log"
	count "tsan"
	timed "tsan stress" $t0
fi
rm -f "$log"
echo "== wall time per suite, slowest first (whole run: $SECONDS s)"
sort -rn "$times"
rm -f "$times"
[ -n "$own_cache" ] && rm -rf "$own_cache"
[ -n "$own_gen" ] && rm -rf "$own_gen"
left=$(grep -E ' fuse(\.[A-Za-z0-9_-]+)? ' /proc/mounts | awk '$2 ~ /ckptfs-test/ {print $2}')
if [ -n "$left" ]; then
	echo "not ok mounts left behind: $left"
	total_f=$((total_f + 1))
fi
if [ "$total_s" -gt 0 ]; then
	echo "not ok $total_s tests skipped: make check runs every suite (make deps installs python3-torch and valgrind; make check builds the TSan daemon)"
	total_f=$((total_f + 1))
fi
echo "$total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ]
