#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# s3:// through the mount and the CLI, against a radosgw this suite starts
# itself (tests/s3/suite.bash), with the fault proxy in front of it for
# the faults: the S3 settings as -o keys, long options and fstab lines;
# every subcommand on s3:// against the local copy; radosgw stopped in the
# middle of reads, objects replaced or deleted while mounted, short and
# cut bodies, 503s and resets under 16 readers, SIGTERM while reads wait
# on a silent server; and no credential anywhere the daemon or the CLI
# writes.

load helpers
load ../s3/suite

setup_file() { s3_setup_file; }
teardown_file() { s3_teardown_file; }

setup() {
	common_setup
	proxy config '{"mode":"none"}'
}

teardown() {
	proxy config '{"mode":"none"}' || true
	# A test that stopped radosgw and failed before starting it again.
	curl -s -o /dev/null --max-time 2 "$AWS_ENDPOINT_URL/" ||
		"$ROOT/tests/s3/rgw.sh" start-rgw "$S3TMP/rgw"
	common_teardown
}

# A checkpoint of 4 float32 parameters' Adam state (about 6 MB per key,
# dim-0 shards of 4 ranks), uploaded to s3://BUCKET/run.
big_ckpt() {	# BUCKET
	$PY "$ROOT/scripts/bench/gen_bench_ckpt.py" data "$TMP/big" --tiling dim0 \
		--gib 0.05 --params 4 >/dev/null
	upload "$TMP/big" "$1/run"
}

@test "s3 -o keys: ckptfs SRC MNT -o world=,rank=,s3_endpoint=,... (the fstab form), mount.fuse3, and a real fstab line through mount -T" {
	$GEN --seed 21 --keys 20 --files 3 "$TMP/ck" >/dev/null
	upload "$TMP/ck" ck-opts/run
	local ep=$AWS_ENDPOINT_URL
	unset AWS_ENDPOINT_URL
	run "$CKPTFS" "s3://ck-opts/run" "$MNT" -o rw,nodev,_netdev,world=8,rank=3,s3_endpoint=$ep,s3_region=us-east-1,s3_parallel=4,s3_part_size=1M,s3_merge_gap=64K,s3_retries=2,s3_timeout_ms=5000
	echo "$output"
	[ "$status" -eq 0 ]
	run $REF check "$TMP/ck" "$MNT" --world 8 --rank 3
	echo "$output"
	fusermount3 -u "$MNT"
	[ "$status" -eq 0 ]
	mkdir -p "$TMP/bin"
	ln -s "$CKPTFS" "$TMP/bin/ckptfs"
	run env PATH="$TMP/bin:$PATH" mount.fuse3 "s3://ck-opts/run" "$MNT" -t ckptfs -o ro,nosuid,noauto,_netdev,world=2,rank=1,s3_endpoint=$ep
	echo "$output"
	[ "$status" -eq 0 ]
	run $REF check "$TMP/ck" "$MNT" --world 2 --rank 1
	echo "$output"
	fusermount3 -u "$MNT"
	[ "$status" -eq 0 ]
	# mount(8) reads the line and runs mount.fuse3 with a PATH of its own,
	# so the program is named in the source field (PROGRAM#SOURCE).
	echo "$CKPTFS#s3://ck-opts/run $MNT fuse world=5,rank=4,s3_endpoint=$ep,s3_parallel=8,_netdev,noauto 0 0" >"$TMP/fstab"
	run mount -T "$TMP/fstab" "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	run $REF check "$TMP/ck" "$MNT" --world 5 --rank 4
	echo "$output"
	fusermount3 -u "$MNT"
	[ "$status" -eq 0 ]
	# The long options of `ckptfs mount`.
	start_mount s3://ck-opts/run "$MNT" --world 3 --rank 2 --s3-endpoint "$ep" --s3-retries 0 --s3-timeout-ms 4000
	run $REF check "$TMP/ck" "$MNT" --world 3 --rank 2
	echo "$output"
	[ "$status" -eq 0 ]
	stop_mount
}

@test "s3 -o keys: a profile in a credentials file and an endpoint in a config file named by options; bad values and credentials as options are refused in one line" {
	$GEN --seed 22 --keys 10 --files 2 "$TMP/ck" >/dev/null
	upload "$TMP/ck" ck-prof/run
	printf '[ckpt]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
		"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$TMP/creds"
	printf '[profile ckpt]\nendpoint_url = %s\nregion = us-east-1\n' \
		"$AWS_ENDPOINT_URL" >"$TMP/config"
	local secret=$AWS_SECRET_ACCESS_KEY
	(
		unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL AWS_REGION
		HOME=$TMP/nohome
		run "$CKPTFS" "s3://ck-prof/run" "$MNT" -o world=2,rank=0,s3_profile=ckpt,s3_credentials_file=$TMP/creds,s3_config_file=$TMP/config
		echo "$output"
		[ "$status" -eq 0 ]
		run $REF check "$TMP/ck" "$MNT" --world 2 --rank 0
		echo "$output"
		fusermount3 -u "$MNT"
		[ "$status" -eq 0 ]
		run "$CKPTFS" ls s3://ck-prof/run --s3-profile ckpt --s3-credentials-file "$TMP/creds" --s3-config-file "$TMP/config"
		[ "$status" -eq 0 ]
		[ "${#lines[@]}" -eq 11 ]
	)
	refuse_mount s3://ck-prof/run "S3 credentials are never taken from options" -o "s3_secret_key=$secret"
	not grep -q "$secret" <<<"$output"
	refuse_mount s3://ck-prof/run "S3 credentials are never taken from options" --s3-secret-access-key "$secret"
	not grep -q "$secret" <<<"$output"
	run "$CKPTFS" info s3://ck-prof/run --aws-secret-access-key="$secret"
	[ "$status" -ne 0 ]
	[[ "$output" == *"never taken from options"* ]]
	not grep -q "$secret" <<<"$output"
	refuse_mount s3://ck-prof/run "s3_part_size must be a size" -o s3_part_size=lots
	refuse_mount s3://ck-prof/run "S3 parallel=1000: at most 256" -o s3_parallel=1000
	refuse_mount s3://ck-prof/run "nope (from the credentials_file option)" -o "s3_credentials_file=$TMP/nope"
	refuse_mount s3://ck-prof/run "unknown S3 option 's3_colour'" -o s3_colour=blue
}

@test "s3 subcommands: info, ls, plan, cat, extract, stats and verify of s3:// say what they say of the local copy" {
	$GEN --seed 23 --keys 25 --files 3 "$TMP/ck" >/dev/null
	upload "$TMP/ck" ck-cli/run
	local s3=s3://ck-cli/run key
	diff <("$CKPTFS" info "$TMP/ck" | sed 1d) <("$CKPTFS" info $s3 | sed '1,2d')
	[ "$("$CKPTFS" info $s3 | head -1)" = "checkpoint	$s3" ]
	[ "$("$CKPTFS" info $s3 | sed -n 2p)" = "credentials	the environment (AWS_ACCESS_KEY_ID)" ]
	diff <("$CKPTFS" ls "$TMP/ck" --world 3 --rank 2) <("$CKPTFS" ls $s3 --world 3 --rank 2)
	diff <("$CKPTFS" plan "$TMP/ck" --world 3 --rank 1) <("$CKPTFS" plan $s3 --world 3 --rank 1)
	diff <("$CKPTFS" stats "$TMP/ck" --world 4 --rank 3) <("$CKPTFS" stats $s3 --world 4 --rank 3)
	for key in $("$CKPTFS" ls "$TMP/ck" | sed 1d | cut -f1 | head -8); do
		cmp <("$CKPTFS" cat "$TMP/ck" "$key" --world 3 --rank 1) \
			<("$CKPTFS" cat $s3 "$key" --world 3 --rank 1)
	done
	"$CKPTFS" extract "$TMP/ck" "$TMP/x.local" --world 3 --rank 1 --format npy
	"$CKPTFS" extract $s3 "$TMP/x.s3" --world 3 --rank 1 --format npy
	diff -r "$TMP/x.local" "$TMP/x.s3"
	run "$CKPTFS" verify $s3
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *" 0 mismatched, 0 unreadable"* ]]
	# A record changed in the bucket: verify names it, exit 1.
	cp "$TMP/ck/__1_0.distcp" "$TMP/bad"
	printf 'XXXX' | dd of="$TMP/bad" bs=1 seek=10 conv=notrunc 2>/dev/null
	upload "$TMP/ck" ck-cli/bad
	"$ROOT/tests/s3/rgw.sh" put "$S3TMP/rgw" ck-cli/bad/__1_0.distcp "$TMP/bad"
	run "$CKPTFS" verify s3://ck-cli/bad
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"__1_0.distcp"* ]]
}

@test "s3 index: ckptfs index s3://... --index FILE writes a local index, which a mount of s3:// takes with --index FILE; without FILE it is refused" {
	torch_gen "$TMP/t" --world 3 --seed 5 >"$TMP/gen.log" 2>&1 ||
		{ cat "$TMP/gen.log"; false; }
	upload "$TMP/t/per_rank" ck-index/run
	run "$CKPTFS" index s3://ck-index/run
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"give --index FILE"* ]]
	run "$CKPTFS" index s3://ck-index/run --index "$TMP/idx"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -s "$TMP/idx" ]
	start_mount "$TMP/t/per_rank" "$MNT" --world 4 --rank 3
	sums "$MNT" >"$TMP/local.sums"
	stop_mount
	start_mount s3://ck-index/run "$MNT" --world 4 --rank 3 --index "$TMP/idx"
	sums "$MNT" >"$TMP/s3.sums"
	stop_mount
	[ "$(wc -l <"$TMP/local.sums")" -gt 10 ]
	diff "$TMP/local.sums" "$TMP/s3.sums"
	# An index of the local copy names other versions of the data files
	# (mtimes, not ETags): refused for the bucket's copy.
	"$CKPTFS" index "$TMP/t/per_rank" -o "$TMP/idx.local"
	run "$CKPTFS" mount s3://ck-index/run "$MNT" --index "$TMP/idx.local" -f
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"idx.local"* ]]
	not mountpoint -q "$MNT"
}

@test "s3 faults: radosgw stopped in the middle of reads gives EIO after the retries, one line naming object and range; the daemon keeps serving and reads work once radosgw is back" {
	big_ckpt ck-restart
	start_mount "$TMP/big" "$MNT" --world 1 --rank 0
	sums "$MNT" >"$TMP/local.sums"
	stop_mount
	start_mount s3://ck-restart/run "$MNT" --world 1 --rank 0 -o s3_endpoint=$S3CHECK_PROXY,s3_retries=2,s3_timeout_ms=3000
	local f=optim/state/layers.0.weight/exp_avg
	# Slow reads, so that radosgw stops while some are in flight.
	proxy config '{"mode":"delay","delay_ms":300,"only":"get"}'
	(if cat "$MNT/$f" >"$TMP/out1" 2>"$TMP/err1"; then echo 0; else echo 1; fi >"$TMP/rc1") &
	local reader=$!
	sleep 0.5
	"$ROOT/tests/s3/rgw.sh" stop-rgw "$S3TMP/rgw"
	wait "$reader" || true
	echo "cat: rc $(cat "$TMP/rc1"): $(cat "$TMP/err1")"
	[ "$(cat "$TMP/rc1")" -ne 0 ]
	grep -q "Input/output error" "$TMP/err1"
	kill -0 "$DAEMON_PID"
	grep "s3://ck-restart/run/__0_0.distcp: bytes" "$TMP/daemon.log" | head -3
	grep -q "s3://ck-restart/run/__[0-3]_0.distcp: bytes [0-9]*-[0-9]*" "$TMP/daemon.log"
	proxy config '{"mode":"none"}'
	"$ROOT/tests/s3/rgw.sh" start-rgw "$S3TMP/rgw"
	# Every file, the one that failed included, now reads right.
	sums "$MNT" >"$TMP/s3.sums" || { tail -20 "$TMP/daemon.log"; false; }
	diff "$TMP/local.sums" "$TMP/s3.sums"
	stop_mount
}

@test "s3 faults: an object overwritten or deleted while mounted gives EIO naming it; the other files still read" {
	big_ckpt ck-replace
	start_mount s3://ck-replace/run "$MNT" --world 1 --rank 0
	head -c "$(stat -c %s "$TMP/big/__1_0.distcp")" /dev/urandom >"$TMP/other"
	"$ROOT/tests/s3/rgw.sh" put "$S3TMP/rgw" ck-replace/run/__1_0.distcp "$TMP/other"
	"$ROOT/tests/s3/rgw.sh" rm "$S3TMP/rgw" ck-replace/run/__2_0.distcp
	local f=optim/state/layers.1.weight/exp_avg_sq size
	# Rows of saved rank 1 (in __1_0.distcp), then of rank 2.
	size=$(stat -c %s "$MNT/$f")
	for at in 35 60; do
		run dd if="$MNT/$f" of=/dev/null bs=4096 count=1 iflag=direct \
			skip=$((size * at / 100 / 4096))
		echo "$output"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Input/output error"* ]]
	done
	cat "$TMP/daemon.log"
	grep -q "s3://ck-replace/run/__1_0.distcp: bytes .*replaced since it was opened" "$TMP/daemon.log"
	grep -q "s3://ck-replace/run/__2_0.distcp: bytes .*\(deleted\|replaced\)" "$TMP/daemon.log"
	# The rows saved by ranks 0 and 3 (__0_0.distcp, __3_0.distcp) still
	# read, with the bytes of the local copy.
	"$CKPTFS" cat "$TMP/big" optim.state.layers.1.weight.exp_avg_sq --world 1 --rank 0 >"$TMP/want"
	for at in 10 90; do
		cmp <(dd if="$MNT/$f" bs=4096 count=2 iflag=direct status=none \
			skip=$((size * at / 100 / 4096))) \
		    <(dd if="$TMP/want" bs=4096 count=2 status=none \
			skip=$((size * at / 100 / 4096)))
	done
	kill -0 "$DAEMON_PID"
	stop_mount
}

@test "s3 faults: bodies shorter than their Content-Length, or cut, give EIO, never short data; the same reads are right once the server is" {
	big_ckpt ck-short
	start_mount "$TMP/big" "$MNT" --world 2 --rank 1
	sums "$MNT" >"$TMP/local.sums"
	stop_mount
	start_mount s3://ck-short/run "$MNT" --world 2 --rank 1 -o s3_endpoint=$S3CHECK_PROXY,s3_retries=1
	local f=optim/state/layers.2.weight/exp_avg mode
	for mode in short truncate; do
		proxy config "{\"mode\":\"$mode\",\"frac\":0.5,\"only\":\"get\"}"
		run dd if="$MNT/$f" of="$TMP/part" bs=1M count=1 iflag=direct
		echo "$mode: $output"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Input/output error"* ]]
		[ ! -s "$TMP/part" ]
	done
	grep -q "short\|ends\|cut\|Content-Length\|bytes" "$TMP/daemon.log"
	proxy config '{"mode":"none"}'
	sums "$MNT" >"$TMP/s3.sums"
	diff "$TMP/local.sums" "$TMP/s3.sums"
	stop_mount
}

@test "s3 faults: 503s, 500s and connection resets under 16 readers: every byte right" {
	big_ckpt ck-load16
	start_mount s3://ck-load16/run "$MNT" --world 3 --rank 1 -o s3_endpoint=$S3CHECK_PROXY,s3_retries=12
	local mode
	for mode in 503 reset 500; do
		proxy config "{\"mode\":\"$mode\",\"rate\":0.3,\"only\":\"get\",\"seed\":7}"
		proxy reset '{}'
		run $PY "$ROOT/tests/stress.py" "$TMP/big" "$MNT" --world 3 --rank 1 --procs 16 --seconds 3
		echo "$mode: $output; proxy faults $(proxy_stat faults)"
		[ "$status" -eq 0 ]
		[ "$(proxy_stat faults)" -gt 0 ]
	done
	stop_mount
}

@test "s3 faults: SIGTERM while reads wait on a server that does not answer unmounts within seconds; the daemon exits 0" {
	blocked_readers ck-term
	kill -TERM "$DAEMON_PID"
	# A liveness bound, not a speed figure: without the cancel the
	# daemon waits for the server's 30 s timeouts and the retries.
	for _ in $(seq "$(polls 10)"); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
	not kill -0 "$DAEMON_PID" 2>/dev/null
	wait "$DAEMON_PID"
	DAEMON_PID=
	not mountpoint -q "$MNT"
	wait "${READERS[@]}" || true
	grep -q "cancelled" "$TMP/daemon.log"
}

# Readers of 4 files of a mount of s3://BUCKET/run whose GETs the proxy
# holds for 120 s: READERS (pids), once 2 GETs wait.
blocked_readers() {	# BUCKET
	big_ckpt "$1"
	start_mount "s3://$1/run" "$MNT" --world 1 --rank 0 -o s3_endpoint=$S3CHECK_PROXY
	proxy config '{"mode":"delay","delay_ms":120000,"only":"get"}'
	proxy reset '{}'
	local i
	READERS=()
	for i in 0 1 2 3; do
		cat "$MNT/optim/state/layers.$i.weight/exp_avg" >/dev/null 2>&1 &
		READERS+=($!)
	done
	for _ in $(seq "$(polls 5)"); do
		[ "$(proxy_stat requests)" -ge 2 ] && break
		sleep 0.05
	done
	[ "$(proxy_stat requests)" -ge 2 ]
}

# The daemon ends by itself within 5 s (a liveness bound: without the
# cancel it waits for the server's 30 s timeouts and the retries), its
# store's reads cancelled, with status 0.
daemon_ends_within_5s() {
	local status=0 late=
	for _ in $(seq "$(polls 5)"); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
	if kill -0 "$DAEMON_PID" 2>/dev/null; then
		echo "the daemon is still there 5 s after its connection ended"
		late=1
		kill -TERM "$DAEMON_PID"
	fi
	wait "$DAEMON_PID" || status=$?
	DAEMON_PID=
	cat "$TMP/daemon.log"
	[ -z "$late" ]
	[ "$status" -eq 0 ]
	grep -q "cancelled" "$TMP/daemon.log"
}

@test "s3 faults: a lazy unmount while reads wait on a server that does not answer: once the readers are gone, the daemon cancels its store and exits 0 within seconds" {
	blocked_readers ck-lazy
	fusermount3 -uz "$MNT"
	MOUNTED=
	# The mount lives on while its files are open: the readers give up
	# (SIGTERM: background jobs of a script ignore SIGINT), and the
	# connection then ends.
	kill -TERM "${READERS[@]}"
	wait "${READERS[@]}" || true
	daemon_ends_within_5s
	not mountpoint -q "$MNT"
}

@test "s3 faults: the connection aborted through fusectl while reads wait on a server that does not answer: the daemon cancels its store and exits 0 within seconds" {
	blocked_readers ck-abort
	abort_conns "$MOUNT_CONN"
	wait "${READERS[@]}" || true
	daemon_ends_within_5s
	fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" 2>/dev/null || true
	MOUNTED=
}

# any CMD...: run CMD, its output and errors to stdout, whatever its status.
any() {
	"$@" 2>&1 || true
}

@test "s3 credentials: the secret is in no output, log, view.json, xattr, .ckptfs/ file, command line or error message" {
	$GEN --seed 24 --keys 12 --files 2 "$TMP/ck" >/dev/null
	upload "$TMP/ck" ck-secret/run
	local s=$AWS_SECRET_ACCESS_KEY k=$AWS_ACCESS_KEY_ID all="$TMP/all"
	start_mount s3://ck-secret/run "$MNT" --world 2 --rank 1 -o s3_endpoint=$S3CHECK_PROXY
	{
		cat "$MNT"/.ckptfs/*
		getfattr -R -d -m - "$MNT" 2>&1
		tr '\0' ' ' <"/proc/$DAEMON_PID/cmdline"
		tr '\0' '\n' <"/proc/$DAEMON_PID/environ" | grep -v '^AWS_'
		ps -eo args
		sums "$MNT"
		# a failing read's log line
		proxy config '{"mode":"503","only":"get"}'
		any cat "$MNT/$(cd "$MNT" && find . -type f -size +0 ! -path './.ckptfs/*' | head -1)"
		proxy config '{"mode":"none"}'
	} >"$all" 2>&1
	stop_mount
	{
		cat "$TMP/daemon.log"
		any "$CKPTFS" info s3://ck-secret/run 2>&1
		any "$CKPTFS" ls s3://ck-secret/run --world 2 --rank 1 2>&1
		any "$CKPTFS" plan s3://ck-secret/run --world 2 --rank 1 2>&1
		any "$CKPTFS" stats s3://ck-secret/run 2>&1
		any "$CKPTFS" verify s3://ck-secret/run 2>&1
		any "$CKPTFS" info s3://ck-secret/nothing-here 2>&1
		any "$CKPTFS" info s3://ck-secret-none/x 2>&1
		any env AWS_SECRET_ACCESS_KEY=${s}X "$CKPTFS" info s3://ck-secret/run 2>&1
		any env AWS_ACCESS_KEY_ID=${k}X "$CKPTFS" info s3://ck-secret/run 2>&1
		any env AWS_SECRET_ACCESS_KEY=${s}X "$CKPTFS" mount s3://ck-secret/run "$MNT" 2>&1
		any "$CKPTFS" info s3://ck-secret/run --s3-endpoint http://127.0.0.1:1 --s3-retries 0 2>&1
		any $(direct_env) $PY -c 'import sys, ckptfs
try:
    ckptfs.load(sys.argv[1], 2, 1, backend="numpy", s3_endpoint=sys.argv[2])
    ckptfs.load(sys.argv[1] + "x", 2, 1, backend="numpy")
except Exception as e:
    print(repr(e))' s3://ck-secret/run "$S3CHECK_PROXY"
	} >>"$all" 2>&1
	grep -c . "$all"
	grep -q "s3://ck-secret/run" "$all"
	grep -q "refused the secret key" "$all"
	grep -q "cannot reach" "$all"
	[ "$(grep -c "user.ckptfs.fqn" "$all")" -ge 5 ]
	not grep -q "$s" "$all"
	not grep -rq "$s" "$TMP" --exclude=all --exclude=creds
}

@test "s3 read-ahead: an in-order reader gets windows ahead of it, fetched as 1 MiB GETs, several at once, within 2x the bytes it is served; -o ahead_kb=0 turns it off" {
	big_ckpt ck-ahead
	local f=optim/state/layers.0.weight/exp_avg n=$((5 << 20)) g
	"$CKPTFS" cat "$TMP/big" optim.state.layers.0.weight.exp_avg --world 1 --rank 0 >"$TMP/want"
	# Each GET waits 30 ms at the proxy, so that GETs in flight at once
	# show; the reader's O_DIRECT reads are of 128 KiB.
	proxy config '{"mode":"delay","delay_ms":30,"only":"get"}'
	start_mount s3://ck-ahead/run "$MNT" --world 1 --rank 0 -o s3_endpoint=$S3CHECK_PROXY
	proxy reset '{}'
	dd if="$MNT/$f" of="$TMP/got" bs=128k count=40 iflag=direct status=none
	cmp "$TMP/got" <(head -c $n "$TMP/want")
	g=$(gets $((1 << 20)))
	echo "read-ahead: $(proxy_stat inflight_max) GETs at once, $(proxy_stat bytes) bytes for $n; 1 MiB GETs, all GETs: $g"
	[ "$(proxy_stat inflight_max)" -ge 3 ]
	[ "$(proxy_stat bytes)" -gt $((n + (1 << 20))) ]
	[ "$(proxy_stat bytes)" -le $((2 * n + (8 << 20))) ]
	[ "${g% *}" -ge 4 ]
	# The whole file, as cat reads it.
	cmp "$MNT/$f" "$TMP/want"
	stop_mount
	start_mount s3://ck-ahead/run "$MNT" --world 1 --rank 0 -o s3_endpoint=$S3CHECK_PROXY,ahead_kb=0
	proxy reset '{}'
	dd if="$MNT/$f" of="$TMP/got" bs=128k count=40 iflag=direct status=none
	cmp "$TMP/got" <(head -c $n "$TMP/want")
	g=$(gets $(((128 << 10) + 1)))
	echo "without: $(proxy_stat bytes) bytes; GETs over 128 KiB, all GETs: $g"
	[ "$(proxy_stat bytes)" -eq $n ]
	[ "${g% *}" -eq 0 ]
	cmp "$MNT/$f" "$TMP/want"
	stop_mount
}

@test "s3 -o prefetch: the view is fetched into the page cache after mounting, and reads then fetch nothing more" {
	big_ckpt ck-prefetch
	start_mount "$TMP/big" "$MNT" --world 3 --rank 1
	sums "$MNT" >"$TMP/local.sums"
	local total
	total=$(du -sb --apparent-size "$MNT" --exclude=.ckptfs | cut -f1)
	stop_mount
	proxy reset '{}'
	start_mount s3://ck-prefetch/run "$MNT" --world 3 --rank 1 -o s3_endpoint=$S3CHECK_PROXY,prefetch
	for _ in $(seq "$(polls 20)"); do
		[ "$(proxy_stat bytes)" -ge "$total" ] && break
		sleep 0.05
	done
	sleep 0.5
	local before=$(proxy_stat bytes)
	echo "prefetched $before bytes for a view of $total"
	[ "$before" -ge "$total" ]
	sums "$MNT" >"$TMP/s3.sums"
	diff "$TMP/local.sums" "$TMP/s3.sums"
	echo "after reading: $(proxy_stat bytes)"
	# Served from the page cache: at most a few stray pages more.
	[ "$(proxy_stat bytes)" -le $((before + total / 10)) ]
	stop_mount
}

@test "s3 read deadline through a mount: one read() of a stalled server (never answers; drips 1 byte/s) fails within about 1x s3_read_deadline_ms, not 2x (the kernel's retry after a failed read-ahead fails at once)" {
	big_ckpt ck-rd1x
	start_mount s3://ck-rd1x/run "$MNT" --world 1 --rank 0 -o s3_endpoint=$S3CHECK_PROXY,s3_read_deadline_ms=3000
	local mode i=0 t0 t1 ms
	for mode in '{"mode":"delay","delay_ms":60000,"only":"get"}' \
		    '{"mode":"drip","bps":1,"only":"get"}'; do
		proxy config "$mode"
		t0=$(date +%s%N)
		run dd if="$MNT/optim/state/layers.$i.weight/exp_avg" of=/dev/null bs=4096 count=1
		t1=$(date +%s%N)
		ms=$(((t1 - t0) / 1000000))
		echo "$mode: read() failed after $ms ms: $output"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Input/output error"* ]]
		# a liveness bound: under 1.5x the 3 s read deadline
		[ "$ms" -lt $((4500 * TIME_SCALE)) ]
		i=$((i + 1))
	done
	proxy config '{"mode":"none"}'
	cat "$TMP/daemon.log"
	grep -q "no complete answer within the deadline of 3000 ms" "$TMP/daemon.log"
	grep -q "failed at once: a read of bytes" "$TMP/daemon.log"
	# After the hold, the same bytes are read again, and arrive.
	sleep 1
	[ "$(dd if="$MNT/optim/state/layers.0.weight/exp_avg" bs=4096 count=1 2>/dev/null | wc -c)" -eq 4096 ]
}
