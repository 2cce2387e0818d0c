# SPDX-License-Identifier: MIT
# Shared by the S3 suites (tests/bats/s3*.bats): a radosgw of the suite's
# own (tests/s3/rgw.sh: monitor, memstore OSD and radosgw on 127.0.0.1,
# state in a temporary directory) and the fault proxy
# (tests/s3/faultproxy.py) in front of it, both started by setup_file and
# stopped by teardown_file (proxy, then radosgw, OSD and monitor).  The
# AWS_* variables of the cluster's S3 user are exported; the proxy's URL
# is $S3CHECK_PROXY (give it as -o s3_endpoint= to go through it).

s3_setup_file() {
	S3TMP=$(mktemp -d "${BATS_TMPDIR:-/tmp}/ckptfs-s3.XXXXXX")
	export S3TMP
	"$ROOT/tests/s3/rgw.sh" start "$S3TMP/rgw" || return 1
	# shellcheck disable=SC1091
	. "$S3TMP/rgw/env"
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL AWS_REGION
	export S3CHECK_RGW="$ROOT/tests/s3/rgw.sh" S3CHECK_DIR="$S3TMP/rgw"
	setsid $PY "$ROOT/tests/s3/faultproxy.py" --upstream "$AWS_ENDPOINT_URL" \
		--port-file "$S3TMP/proxy.port" --max-seconds 3600 \
		</dev/null >"$S3TMP/proxy.log" 2>&1 &
	echo $! >"$S3TMP/proxy.pid"
	local deadline=$((SECONDS + 10 * ${CKPTFS_TIME_SCALE:-1}))
	until [ -s "$S3TMP/proxy.port" ]; do
		[ $SECONDS -lt $deadline ] || { cat "$S3TMP/proxy.log"; return 1; }
		sleep 0.05
	done
	export S3CHECK_PROXY="http://127.0.0.1:$(cat "$S3TMP/proxy.port")"
}

s3_teardown_file() {
	if [ -s "$S3TMP/proxy.pid" ]; then
		kill "$(cat "$S3TMP/proxy.pid")" 2>/dev/null || true
	fi
	"$ROOT/tests/s3/rgw.sh" stop "$S3TMP/rgw"
	rm -rf "$S3TMP"
}

# upload DIR BUCKET/PREFIX: every file of DIR (dot files too, not
# subdirectories) as objects.
upload() {
	local f
	"$ROOT/tests/s3/rgw.sh" mkbucket "$S3TMP/rgw" "${2%%/*}" 2>/dev/null || true
	for f in "$1"/* "$1"/.[!.]*; do
		[ -f "$f" ] || continue
		"$ROOT/tests/s3/rgw.sh" put "$S3TMP/rgw" "$2/$(basename "$f")" "$f"
	done
}

# sums MNT: "sha256  path" of every view file (not .ckptfs/, which names
# the source).
sums() {
	(cd "$1" && find . -path ./.ckptfs -prune -o -type f -print | sort |
		xargs -r sha256sum)
}

# same_views LOCAL S3ROOT "W R"... [-- MOUNT OPTIONS]: for each (W, R),
# every view file of a mount of S3ROOT has the bytes of a mount of LOCAL.
same_views() {
	local local_ckpt=$1 s3root=$2 wr opts=() pairs=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do pairs+=("$1"); shift; done
	[ $# -gt 0 ] && { shift; opts=("$@"); }
	for wr in "${pairs[@]}"; do
		set -- $wr
		start_mount "$local_ckpt" "$MNT" --world "$1" --rank "$2" "${opts[@]}"
		sums "$MNT" >"$TMP/local.sums"
		stop_mount
		start_mount "$s3root" "$MNT" --world "$1" --rank "$2" "${opts[@]}"
		sums "$MNT" >"$TMP/s3.sums"
		stop_mount
		echo "W=$1 R=$2: $(wc -l <"$TMP/local.sums") files"
		[ "$(wc -l <"$TMP/local.sums")" -gt 0 ]
		diff "$TMP/local.sums" "$TMP/s3.sums"
	done
}

# proxy KEY=JSON...: POST to the fault proxy's control endpoint.
proxy() {
	curl -sf -X POST -d "$2" "$S3CHECK_PROXY/__faultproxy/$1" >/dev/null
}

# proxy_stat FIELD: a number from the proxy's statistics.
proxy_stat() {
	curl -sf "$S3CHECK_PROXY/__faultproxy/stats" |
		$PY -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# gets BYTES: "N M" for the ranged GETs the proxy logged, N of them of
# at least BYTES, M in all.
gets() {
	curl -sf "$S3CHECK_PROXY/__faultproxy/stats" | $PY -c '
import json, sys
log = [e for e in json.load(sys.stdin)["log"] if e[0] == "GET" and e[2]]
big = sum(1 for e in log if e[4] >= int(sys.argv[1]))
print(big, len(log))' "$1"
}

# The sanitized build's library needs its runtimes loaded first.
direct_env() {
	local lib
	lib="$(dirname "$CKPTFS")/libckptfs.so"
	if nm -D "$lib" | grep -q __asan_; then
		echo "env CKPTFS_LIB=$lib LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0"
	else
		echo "env CKPTFS_LIB=$lib"
	fi
}
