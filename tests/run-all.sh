#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test run behind `make check` and `make check-all`.
#     tests/run-all.sh [--all] BUILD...
# For each build directory given (plain first, then sanitized), the C unit
# tests and the end-to-end bats suites through real mounts; on the first
# build, the Python package's pytest suite, one job per test file.  --all
# adds valgrind on the first build's unit tests and the ThreadSanitizer
# jobs (build-tsan/).  Ends with one line "N passed, N failed, N skipped".
#
# What a job counts (docs/testing.md):
# - Its TAP lines ("ok", "not ok", "ok ... # skip"); a skip fails the run,
#   except a plain-only suite's in a later build's pass, which is reported
#   as skipped (the suite ran in the first pass).
# - It fails, with a line that says so, when its runner exits non-zero
#   without a failed test, when it printed no plan, or when its TAP lines
#   fall short of its plan (bats "1..N", pytest's "collected N items",
#   run-unit.sh's closing plan): a suite that dies halfway is a failure,
#   not a shorter pass.
# - Every job runs under a timeout: (120 s + 4 x its expected cost) x the
#   build's slowness (x2 sanitized), or CKPTFS_JOB_TIMEOUT seconds.  A job
#   past it is killed with what it started (daemons included, found by
#   the CKPTFS_JOB_MARK in their environment), its mounts are detached,
#   and it fails; the run goes on.
#
# The jobs run CKPTFS_TEST_JOBS at a time (default 2, 1 on a one-core
# machine), slowest first: most wait on servers, mounts and timeouts
# rather than the CPU.  Each job has its own TMPDIR, index cache and
# ports (test servers bind port 0 and report theirs).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ALL=
if [ "${1:-}" = --all ]; then
	ALL=1
	shift
fi
[ $# -ge 1 ] || { echo "usage: tests/run-all.sh [--all] BUILD..." >&2; exit 2; }
FIRST=$1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# libfuse's own leak at a session's end (tests/lsan.supp says which)
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/tests/lsan.supp:print_suppressions=0}
OUT=$(mktemp -d)
# Tests that run a child as nobody need a path it may walk.
chmod 755 "$OUT"
RUN_MARK=ckptfs-run-$$-$RANDOM

# The Python package's node-local index cache (default ~/.cache/ckptfs):
# the tests' own, one per job (removed at the end), not the user's.
own_cache=
if [ -z "${CKPTFS_INDEX_CACHE+set}" ]; then
	own_cache=$OUT/index-cache
fi

# Checkpoints that several suites (and both builds' passes) generate with
# the same seed are made once per run (gen_once in tests/bats/helpers.bash;
# under a lock, so two jobs wanting one wait for the first).
if [ -z "${CKPTFS_GEN_CACHE+set}" ]; then
	mkdir -p "$OUT/gen-cache"
	export CKPTFS_GEN_CACHE="$OUT/gen-cache"
fi

LANES=${CKPTFS_TEST_JOBS:-}
case $LANES in
'' | *[!0-9]* | 0) LANES=2; [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ] || LANES=1 ;;
esac

is_sanitized() {	# BUILD
	grep -q -a -m1 -e __asan_init -e __tsan_init "$1/ckptfs" 2>/dev/null
}

# Timed waits in the suites are liveness bounds scaled by
# CKPTFS_TIME_SCALE (tests/bats/helpers.bash): 1 for a plain build, 5 for
# a sanitized one (ASan/UBSan/TSan run the daemon 2-5x slower), each
# doubled when jobs run side by side, unless the caller sets it.
CKPTFS_TIME_SCALE_SET=${CKPTFS_TIME_SCALE:-}
scale_for() {	# BUILD
	local s=1
	if [ -n "$CKPTFS_TIME_SCALE_SET" ]; then
		echo "$CKPTFS_TIME_SCALE_SET"
		return
	fi
	is_sanitized "$1" && s=5
	[ "$LANES" -gt 1 ] && s=$((s * 2))
	echo $s
}

# Each job: "COST KIND BUILD [SUITE]".  The cost is the job's seconds on a
# fresh 2-core machine with two lanes (make check's own "wall time per
# suite" table); it orders the jobs and sets their timeouts.
declare -A COST=([s3mount]=140 [s3]=210 [s3formats]=200 [bench_smoke]=260
	[torch2]=180 [direct]=90 [prefetch]=100 [torch]=120 [s3creds]=40
	[s3lazy]=300 [azure]=150 [azure_formats]=150 [azure_entra]=90 [shutdown]=45 [s3tls]=35 [hostile]=35 [loader]=35
	[memory]=30 [lifecycle]=30 [packages]=65
	[py:test_coop]=220 [py:test_resume]=55 [py:test_docs]=110
	[py:test_cancel]=40 [py:test_handle]=20 [py:test_errors]=25
	[py:test_package]=30 [py:test_index_cache]=70 [py:test_stale_index]=25
	[py:test_waits]=50 [py:test_fork]=45 [py:test_scale_open]=40
	[py:test_lazy_local]=120
	[unit]=70 [valgrind]=120 [tsan]=60 [tsan_s3]=150)
# bench_smoke, packages and runner test the plain build only (make bench's,
# the packages', the runner's own): in a later build's pass they are
# reported as skipped.
PLAIN_ONLY=" bench_smoke packages runner "
JOBLIST=()
label_of() {	# KIND BUILD [SUITE]
	case $1 in
	bats | plainonly) echo "$3.bats ($2)" ;;
	pytest) echo "pytest $3 ($2)" ;;
	tsan) echo "tsan $3" ;;
	*) echo "$1 ($2)" ;;
	esac
}

add_job() {	# COST KIND BUILD [SUITE]
	JOBLIST+=("$(printf '%06d' "$1") $2 $3 ${4:-}")
}
for b in "$@"; do
	slow=10
	is_sanitized "$b" && slow=20
	add_job $((COST[unit] * slow / 10)) unit "$b"
	for suite in tests/bats/*.bats; do
		[ -e "$suite" ] || continue
		s=$(basename "$suite" .bats)
		if [ "$b" != "$FIRST" ] && [[ $PLAIN_ONLY == *" $s "* ]]; then
			add_job 0 plainonly "$b" "$s"
			continue
		fi
		add_job $((${COST[$s]:-25} * slow / 10)) bats "$b" "$s"
	done
done
for t in tests/python/test_*.py; do
	[ -e "$t" ] || continue
	s=$(basename "$t" .py)
	add_job "${COST[py:$s]:-30}" pytest "$FIRST" "$s"
done
if [ -n "$ALL" ]; then
	add_job "${COST[valgrind]}" valgrind "$FIRST"
	add_job "${COST[tsan]}" tsan build-tsan stress
	[ -x tests/tsan-s3.sh ] && add_job "${COST[tsan_s3]}" tsan build-tsan s3
fi
mapfile -t JOBLIST < <(printf '%s\n' "${JOBLIST[@]}" | sort -r -k1,1)


# check_tap LOG TAP RC PLAN: the job's verdict lines, appended to TAP:
# a runner that failed without a failed test, a missing plan, or fewer
# results than planned.
check_tap() {
	local log=$1 tap=$2 rc=$3 plan=$4 n f
	n=$(grep -c -E '^(not )?ok ' "$tap")
	f=$(grep -c '^not ok ' "$tap")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "not ok runner exited $rc without a failed test" | tee -a "$log" >> "$tap"
	fi
	if [ -z "$plan" ]; then
		echo "not ok runner printed no plan (1..N): the suite did not run" | tee -a "$log" >> "$tap"
	elif [ "$n" -lt "$plan" ]; then
		echo "not ok printed $n results of the $plan planned: the suite stopped early" | tee -a "$log" >> "$tap"
	fi
}

# kill_job I: end what job I left running (processes carrying its mark,
# mounts under its TMPDIR).
kill_job() {
	local mark=$RUN_MARK-$1 m
	for _ in 1 2; do
		# the search runs without the mark, so it finds only the job's
		(unset CKPTFS_JOB_MARK
		 grep -l -a -F -x -z "CKPTFS_JOB_MARK=$mark" /proc/[0-9]*/environ 2>/dev/null |
			sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p' | xargs -r kill -KILL 2>/dev/null)
		sleep 0.2
	done
	for m in $(awk '{print $2}' /proc/mounts | grep -F "$OUT/tmp.$1/"); do
		fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
	done
}

# run_job I KIND BUILD [SUITE]: the job's TAP lines into $OUT/I.tap, all
# its output into $OUT/I.log.
run_job() {
	local i=$1 kind=$2 b=$3 suite=${4:-} tap=$OUT/$1.tap log=$OUT/$1.log
	local rc plan limit to
	export CKPTFS_TIME_SCALE CKPTFS_JOB_MARK=$RUN_MARK-$i TMPDIR=$OUT/tmp.$i
	mkdir -p "$TMPDIR"
	chmod 755 "$TMPDIR"
	CKPTFS_TIME_SCALE=$(scale_for "$b")
	[ -n "$own_cache" ] && export CKPTFS_INDEX_CACHE="$own_cache/$i"
	set -- ${JOBLIST[$i]}
	limit=$((120 + 4 * 10#$1))
	is_sanitized "$b" && limit=$((limit * 2))
	[ -n "${CKPTFS_JOB_TIMEOUT:-}" ] && limit=$CKPTFS_JOB_TIMEOUT
	to=(timeout -k 20 "$limit")
	case $kind in
	plainonly)
		echo "1..1" > "$log"
		echo "ok 1 $suite.bats # skip plain-only: tests the plain build (make bench's, the packages', the runner's), run in its pass" >> "$log"
		cp "$log" "$tap"
		return
		;;
	unit)
		"${to[@]}" tests/run-unit.sh $(find "$b/tests" -name "test_*" -type f ! -name "*.d" | sort) > "$log" 2>&1
		rc=$?
		grep -E '^(not )?ok ' "$log" > "$tap"
		plan=$(sed -n -E 's/^1\.\.([0-9]+)$/\1/p' "$log" | tail -n 1)
		;;
	bats)
		CKPTFS="$ROOT/$b/ckptfs" "${to[@]}" bats --tap "tests/bats/$suite.bats" > "$log" 2>&1
		rc=$?
		grep -E '^(not )?ok ' "$log" > "$tap"
		plan=$(sed -n -E 's/^1\.\.([0-9]+)$/\1/p' "$log" | head -n 1)
		;;
	pytest)
		# The Python package (scripts/ckptfs/) on this build's library;
		# its summary lines (-rA) become TAP lines for the count.
		CKPTFS_BUILD="$ROOT/$b" CKPTFS_LIB="$ROOT/$b/libckptfs.so" "${to[@]}" \
			/usr/bin/python3 -m pytest -p no:cacheprovider -rA "tests/python/$suite.py" > "$log" 2>&1
		rc=$?
		# rc 5: no tests collected (a file of helpers): nothing planned
		[ "$rc" -eq 5 ] && ! grep -q 'collected [1-9]' "$log" && rc=0
		sed -n -E 's/^PASSED (.*)$/ok \1/p; s/^(FAILED|ERROR) (.*)$/not ok \2/p; s/^XFAIL (.*)$/ok \1/p; s/^XPASS (.*)$/not ok XPASS \1/p' "$log" > "$tap"
		# one SKIPPED line may stand for [N] skips
		sed -n -E 's/^SKIPPED \[([0-9]+)\] (.*)$/\1 \2/p' "$log" | while read -r k why; do
			for ((j = 0; j < k; j++)); do echo "ok # skip $why"; done
		done >> "$tap"
		plan=$(sed -n -E 's/^collected ([0-9]+) items?.*/\1/p' "$log" | tail -n 1)
		[ -z "$plan" ] && grep -q '^collected 0 items' "$log" && plan=0
		;;
	valgrind)
		# Memory errors the sanitizers cannot see in the plain build.
		rc=0
		: > "$log"
		tests=$(find "$b/tests" -name "test_*" -type f ! -name "*.d" | sort)
		plan=$(echo "$tests" | grep -c .)
		echo "1..$plan" >> "$log"
		for t in $tests; do
			if "${to[@]}" valgrind -q --error-exitcode=99 --leak-check=full "$t" >/dev/null 2>"$OUT/$i.vg"; then
				echo "ok valgrind $(basename "$t")" >> "$log"
			else
				echo "not ok valgrind $(basename "$t")" >> "$log"
				cat "$OUT/$i.vg" >> "$log"
			fi
		done
		grep -E '^(not )?ok ' "$log" > "$tap"
		;;
	tsan)
		# The local stress test, and the S3 paths through the fault
		# proxy, against ThreadSanitizer builds.
		# (the stress test takes the daemon, the S3 one the folder)
		local arg=$b
		[ "$suite" = stress ] && arg=$b/ckptfs
		"${to[@]}" "tests/tsan-$suite.sh" "$arg" > "$log" 2>&1
		rc=$?
		grep -E '^(not )?ok ' "$log" > "$tap"
		plan=$(sed -n -E 's/^1\.\.([0-9]+)$/\1/p' "$log" | head -n 1)
		;;
	esac
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "not ok timed out after $limit s (CKPTFS_JOB_TIMEOUT to change): killed with what it started" | tee -a "$log" >> "$tap"
	fi
	kill_job "$i"
	check_tap "$log" "$tap" "$rc" "$plan"
}

# CKPTFS_TEST_ONLY=REGEX (for development, not make check): only the jobs
# whose label ("s3.bats (build-san)", "pytest test_coop (build)",
# "unit (build)", "tsan s3", ...) matches the extended regular expression.
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
	local i t0 t p f s sp label
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
		(run_job "$i" "$@")
		t=$((SECONDS - t0))
		if [ ! -s "$OUT/$i.log" ] || [ ! -f "$OUT/$i.tap" ]; then
			echo "not ok the runner itself failed on this job" | tee -a "$OUT/$i.log" >> "$OUT/$i.tap"
		fi
		s=$(grep -E -c '^ok .*# (skip|SKIP)' "$OUT/$i.tap")
		p=$(($(grep -c '^ok ' "$OUT/$i.tap") - s))
		f=$(grep -c '^not ok ' "$OUT/$i.tap")
		sp=0
		[ "$1" = plainonly ] && sp=$s
		echo "$p $f $s $sp" > "$OUT/$i.count"
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
total_sp=0
for ((i = 0; i < ${#JOBLIST[@]}; i++)); do
	if [ ! -f "$OUT/$i.count" ]; then
		set -- ${JOBLIST[$i]}
		echo "not ok job did not finish: $(label_of "${@:2}")"
		total_f=$((total_f + 1))
		continue
	fi
	read -r p f s sp < "$OUT/$i.count"
	total_p=$((total_p + p))
	total_f=$((total_f + f))
	total_s=$((total_s + s))
	total_sp=$((total_sp + sp))
done
echo "== wall time per job, slowest first (whole run: $SECONDS s)"
sort -rn "$OUT/times"
# what failed, again at the end: a long log's tail is what a CI page shows
for ((i = 0; i < ${#JOBLIST[@]}; i++)); do
	[ -f "$OUT/$i.count" ] || continue
	read -r p f s sp < "$OUT/$i.count"
	[ "$f" -gt 0 ] || continue
	set -- ${JOBLIST[$i]}
	echo "== failed in $(label_of "${@:2}"):"
	# each failed test, with the first lines of what it printed where
	# its log has them as "# " lines after its "not ok" (TAP runners);
	# pytest's short summary line carries its reason
	if grep -q '^not ok ' "$OUT/$i.log"; then
		awk '/^not ok / { n = 0; on = 1; print "   " $0; next }
		     /^(ok|not ok) / { on = 0 }
		     on && /^#/ && n < 24 { n++; print "     " $0 }' "$OUT/$i.log"
	else
		grep '^not ok ' "$OUT/$i.tap" | sed 's/^/   /'
	fi
done
# (this run's: its jobs' TMPDIRs; another run's are its own business)
left=$(grep -E ' fuse(\.[A-Za-z0-9_-]+)? ' /proc/mounts | awk -v o="$OUT/" 'index($2, o) == 1 {print $2}')
if [ -n "$left" ]; then
	echo "not ok mounts left behind: $left"
	total_f=$((total_f + 1))
fi
rm -rf --one-file-system "$OUT"
if [ "$total_s" -gt "$total_sp" ]; then
	echo "not ok $((total_s - total_sp)) tests skipped: make check runs every suite (make deps installs what they need)"
	total_f=$((total_f + 1))
fi
echo "$total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ]
