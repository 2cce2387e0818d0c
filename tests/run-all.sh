#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test run behind `make check`: for each build directory given
# (plain, then sanitized), the C unit tests and the end-to-end bats suites
# through real mounts; then the Python package's pytest suite on the first
# (tests/python/: mypy --strict, a venv install, every runnable block of
# README.md and docs/*.md: test_docs.py), valgrind on the first build's
# unit tests and the ThreadSanitizer stress.  Ends with one line
# "N passed, N failed, N skipped".
# A skipped test (TAP "ok N ... # skip") is counted as skipped, not passed,
# and any skip fails the run: every suite (torch and loader included)
# must run in `make check`.
#
# The jobs (one per suite and build) run CKPTFS_TEST_JOBS at a time
# (default 2, 1 on a one-core machine), slowest first: most suites wait on
# servers, mounts and timeouts rather than the CPU, so two lanes share a
# 2-core machine well.  Every job has its own temporary directories, ports
# (tests/s3/rgw.sh picks free ones) and index cache; each job's output is
# printed whole when it ends, with its counts and wall time.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ $# -ge 1 ] || { echo "usage: tests/run-all.sh BUILD..." >&2; exit 2; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
OUT=$(mktemp -d)

# The Python package's node-local index cache (default ~/.cache/ckptfs):
# the tests' own, one per job (removed at the end), not the user's.
own_cache=
if [ -z "${CKPTFS_INDEX_CACHE+set}" ]; then
	own_cache=$OUT/index-cache
fi

# Checkpoints that several suites (and both builds' passes) generate with
# the same seed are made once per run (gen_once in tests/bats/helpers.bash;
# under a lock, so two jobs wanting one wait for the first).
own_gen=
if [ -z "${CKPTFS_GEN_CACHE+set}" ]; then
	own_gen=$OUT/gen-cache
	mkdir -p "$own_gen"
	export CKPTFS_GEN_CACHE="$own_gen"
fi

LANES=${CKPTFS_TEST_JOBS:-}
case $LANES in
'' | *[!0-9]* | 0) LANES=2; [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ] || LANES=1 ;;
esac

# Timed waits in the suites are liveness bounds scaled by
# CKPTFS_TIME_SCALE (tests/bats/helpers.bash): 1 for a plain build, 5 for
# a sanitized one (ASan/UBSan/TSan run the daemon 2-5x slower), each
# doubled when jobs run side by side, unless the caller sets it.
scale_for() {	# BUILD
	local s
	if [ -n "${CKPTFS_TIME_SCALE_SET:-}" ]; then
		echo "$CKPTFS_TIME_SCALE_SET"
		return
	fi
	if grep -q -a -m1 -e __asan_init -e __tsan_init "$1/ckptfs" 2>/dev/null; then
		s=5
	else
		s=1
	fi
	[ "$LANES" -gt 1 ] && s=$((s * 2))
	echo $s
}
CKPTFS_TIME_SCALE_SET=${CKPTFS_TIME_SCALE:-}

# Each job: "KIND BUILD [SUITE]", with its expected cost in seconds (from
# past runs on a 2-core machine; the order is all it decides).
declare -A COST=([s3mount]=160 [s3]=180 [s3formats]=125 [bench_smoke]=126
	[torch2]=90 [direct]=65 [prefetch]=60 [torch]=56 [s3creds]=38
	[s3lazy]=27 [shutdown]=27 [s3tls]=21)
JOBLIST=()
add_job() {	# COST KIND BUILD [SUITE]
	JOBLIST+=("$(printf '%06d' "$1") $2 $3 ${4:-}")
}
# bench_smoke and packages test the plain build only (make bench's and the
# packages'): in another build's pass they note it and end at once.
PLAIN_ONLY=" bench_smoke packages "
for b in "$@"; do
	san=10
	grep -q -a -m1 __asan_init "$b/ckptfs" 2>/dev/null && san=14
	add_job $((20 * san / 10)) unit "$b"
	for suite in tests/bats/*.bats; do
		s=$(basename "$suite" .bats)
		c=$((${COST[$s]:-15} * san / 10))
		[ "$b" != build ] && [[ $PLAIN_ONLY == *" $s "* ]] && c=1
		add_job $c bats "$b" "$s"
	done
done
add_job 240 pytest "$1"
add_job 86 valgrind "$1"
add_job 10 tsan build-tsan
mapfile -t JOBLIST < <(printf '%s\n' "${JOBLIST[@]}" | sort -r -k1,1)

# run_job I KIND BUILD [SUITE]: the job's TAP lines into $OUT/I.tap, all
# its output into $OUT/I.log.
run_job() {
	local i=$1 kind=$2 b=$3 suite=${4:-} tap=$OUT/$1.tap log=$OUT/$1.log rc
	export CKPTFS_TIME_SCALE
	CKPTFS_TIME_SCALE=$(scale_for "$b")
	[ -n "$own_cache" ] && export CKPTFS_INDEX_CACHE="$own_cache/$i"
	case $kind in
	unit)
		tests/run-unit.sh $(find "$b/tests" -name "test_*" -type f ! -name "*.d" | sort) > "$log" 2>&1
		cp "$log" "$tap"
		;;
	bats)
		CKPTFS="$ROOT/$b/ckptfs" bats --tap "tests/bats/$suite.bats" > "$log" 2>&1
		cp "$log" "$tap"
		grep -q '^1\.\.' "$log" ||
			echo "not ok bats did not run: $suite ($b)" | tee -a "$log" >> "$tap"
		;;
	pytest)
		# The Python package (scripts/ckptfs/) on this build's library:
		# its results become TAP lines for the count.
		CKPTFS_BUILD="$ROOT/$b" CKPTFS_LIB="$ROOT/$b/libckptfs.so" \
			/usr/bin/python3 -m pytest -p no:cacheprovider -rA tests/python > "$log" 2>&1
		rc=$?
		sed -n -E 's/^PASSED (.*)$/ok \1/p; s/^(FAILED|ERROR) (.*)$/not ok \2/p; s/^SKIPPED (.*)$/ok # skip \1/p' "$log" > "$tap"
		if [ "$rc" -ne 0 ] && ! grep -q '^not ok ' "$tap"; then
			echo "not ok pytest exited $rc without a failed test" | tee -a "$log" >> "$tap"
		fi
		;;
	valgrind)
		# Memory errors the sanitizers cannot see in the plain build.
		# Without valgrind the run counts as skipped (which fails the
		# run), never as silently passed.
		: > "$tap"
		if ! command -v valgrind >/dev/null; then
			echo "ok valgrind # skip valgrind is not installed (make deps)" >> "$tap"
		else
			for t in $(find "$b/tests" -name "test_*" -type f ! -name "*.d" | sort); do
				if valgrind -q --error-exitcode=99 --leak-check=full "$t" >/dev/null 2>"$OUT/$i.vg"; then
					echo "ok valgrind $(basename "$t")" >> "$tap"
				else
					echo "not ok valgrind $(basename "$t")" >> "$tap"
					cat "$OUT/$i.vg" >> "$tap"
				fi
			done
		fi
		cp "$tap" "$log"
		;;
	tsan)
		# The stress test once more, against a ThreadSanitizer daemon.
		if [ ! -x "$b/ckptfs" ]; then
			echo "ok tsan stress # skip $b/ckptfs is not built (make SAN=thread O=build-tsan build-tsan/ckptfs)" > "$log"
		else
			tests/tsan-stress.sh "$b/ckptfs" > "$log" 2>&1
		fi
		cp "$log" "$tap"
		;;
	esac
}

label_of() {	# KIND BUILD [SUITE]
	case $1 in
	bats) echo "$3.bats ($2)" ;;
	tsan) echo "tsan stress" ;;
	*) echo "$1 ($2)" ;;
	esac
}

# CKPTFS_TEST_ONLY=REGEX (for development, not make check): only the jobs
# whose label ("s3.bats (build-san)", "pytest (build)", "unit (build)",
# "tsan stress", ...) matches the extended regular expression.
if [ -n "${CKPTFS_TEST_ONLY:-}" ]; then
	kept=()
	for j in "${JOBLIST[@]}"; do
		set -- $j
		label_of "${@:2}" | grep -q -E -- "$CKPTFS_TEST_ONLY" && kept+=("$j")
	done
	JOBLIST=("${kept[@]}")
fi

# A lane takes the next job (under a lock) until none is left; a finished
# job's output, counts and time are printed whole, under another lock.
lane() {
	local i t0 p f s label
	while :; do
		i=$({
			flock 8
			n=$(cat "$OUT/next")
			echo $((n + 1)) > "$OUT/next"
			echo "$n"
		} 8>"$OUT/next.lock")
		[ "$i" -lt "${#JOBLIST[@]}" ] || return 0
		set -- ${JOBLIST[$i]}
		shift
		label=$(label_of "$@")
		echo "== start: $label (liveness bounds x$(scale_for "$2"))"
		t0=$SECONDS
		run_job "$i" "$@"
		t=$((SECONDS - t0))
		s=$(grep -E -c '^ok .*# (skip|SKIP)' "$OUT/$i.tap")
		p=$(($(grep -c '^ok ' "$OUT/$i.tap") - s))
		f=$(grep -c '^not ok ' "$OUT/$i.tap")
		echo "$p $f $s" > "$OUT/$i.count"
		printf '%5d s  %s\n' "$t" "$label" >> "$OUT/times"
		(
			flock 9
			echo "== $label"
			cat "$OUT/$i.log"
			echo "== $label: $p passed, $f failed, $s skipped"
			echo "== time: $label: $t s"
		) 9>"$OUT/print.lock"
	done
}

echo "== ${#JOBLIST[@]} jobs, $LANES at a time, slowest first"
echo 0 > "$OUT/next"
: > "$OUT/times"
pids=()
for ((l = 0; l < LANES; l++)); do
	lane &
	pids+=($!)
done
for pid in "${pids[@]}"; do
	wait "$pid"
done

total_p=0
total_f=0
total_s=0
for ((i = 0; i < ${#JOBLIST[@]}; i++)); do
	if [ ! -f "$OUT/$i.count" ]; then
		set -- ${JOBLIST[$i]}
		echo "not ok job did not finish: $(label_of "${@:2}")"
		total_f=$((total_f + 1))
		continue
	fi
	read -r p f s < "$OUT/$i.count"
	total_p=$((total_p + p))
	total_f=$((total_f + f))
	total_s=$((total_s + s))
done
echo "== wall time per suite, slowest first (whole run: $SECONDS s)"
sort -rn "$OUT/times"
rm -rf "$OUT"
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
