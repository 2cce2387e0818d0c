#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# A PyTorch checkpoint from s3:// with no index and no cached index opens
# in proportion to a rank's share (issue 29 item 2): the open GETs
# .metadata alone, and each record a read needs is located then, in one
# parallel batch (its zip tail and head), against a radosgw of the suite's
# own; requests counted by the fault proxy in front of it.  Bytes are
# compared with torch's FileSystemReader on the local copy (torch_check.py)
# and with ckptfs.load of the local copy.

load helpers
load ../s3/suite

LAZY="$PY $ROOT/tests/lazy_check.py"

setup_file() {
	s3_setup_file || return 1
	LZ=$(mktemp -d "${BATS_TMPDIR:-/tmp}/ckptfs-lazy.XXXXXX")
	export LZ
	# 4 ranks x 100 parameters x 2 states: about 800 records, 5 MB.
	torch_gen "$LZ/t" --large 0.005 --world 4 \
		>"$LZ/gen.log" 2>&1 || { tail -30 "$LZ/gen.log"; return 1; }
	upload "$LZ/t/large" ck-lazy/big
}

teardown_file() {
	[ -n "${LZ:-}" ] && rm -rf "$LZ"
	s3_teardown_file
}

setup() { common_setup; }
teardown() { common_teardown; }

@test "s3 lazy: an open GETs .metadata alone; ckptfs.load of one rank's share GETs at most 2 per record it reads plus its data, and equals the local load" {
	local nrec out og lg nreads
	nrec=$($LAZY records "$LZ/t/large" 8 3)
	echo "records rank 3 of 8 reads: $nrec of about 800"
	[ "$nrec" -gt 10 ]
	run $(direct_env) $LAZY counts s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" 8 3
	echo "$output"
	[ "$status" -eq 0 ]
	out=${output##*open_gets }
	og=${out%% *}
	out=${output##*load_gets }
	lg=${out%% *}
	# .metadata, and the .ckptfs-index looked for (404)
	[ "$og" -le 2 ]
	# the open's, then <= 2 per record to locate it and 1 for its data
	[ "$lg" -le $((2 + 3 * nrec)) ]
	# The eager pass (the behaviour before) GETs every record's windows.
	run env CKPTFS_EAGER_INDEX=1 $(direct_env) $LAZY counts s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" 8 3
	echo "eager: $output"
	[ "$status" -eq 0 ]
	out=${output##*open_gets }
	og=${out%% *}
	[ "$og" -gt 100 ]
	# Its load checks each record's zip local header (the guard) in the
	# same GET as the record's bytes after it (a W=8 rank's bytes start
	# a few KiB in: too far for the store's merging of its own), so it
	# GETs the open's and the plan's reads, not a GET more per record.
	out=${output##*load_gets }
	lg=${out%% *}
	nreads=$(CKPTFS_EAGER_INDEX=1 "$CKPTFS" plan "$LZ/t/large" --world 8 --rank 3 | grep -c $'^\tread\t')
	echo "eager load: $lg GETs, $og of them its open's; $nreads planned reads"
	[ "$lg" -le $((og + nreads + 2)) ]
}

@test "s3 lazy: a mount of the checkpoint from s3:// equals torch's FileSystemReader on the local copy (W=1, 3)" {
	export CKPTFS
	run $PY "$ROOT/tests/torch_check.py" "$CKPTFS" s3://ck-lazy/big "$MNT" 1 3 --ref "$LZ/t/large"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "s3 lazy: a record whose zip is broken is EIO naming its file and key; every other record still reads" {
	local key path good
	cp -r "$LZ/t/large" "$TMP/bad"
	key=$($LAZY corrupt "$TMP/bad")
	echo "broken: $key"
	[ -n "$key" ]
	upload "$TMP/bad" ck-lazy/bad
	start_mount s3://ck-lazy/bad "$MNT" --world 1 --rank 0
	path="$MNT/${key//.//}"
	[ -f "$path" ]
	run cat "$path"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	grep -F "$key" "$TMP/daemon.log" | grep -q "distcp"
	# Everything else reads, and equals the local copy's bytes.
	stop_mount
	start_mount "$LZ/t/large" "$MNT" --world 1 --rank 0
	sums "$MNT" | grep -v " ./${key//.//}\$" >"$TMP/local.sums"
	stop_mount
	start_mount s3://ck-lazy/bad "$MNT" --world 1 --rank 0
	sums "$MNT" 2>/dev/null >"$TMP/s3.sums" || true
	stop_mount
	echo "$(wc -l <"$TMP/s3.sums") other files"
	[ "$(wc -l <"$TMP/s3.sums")" -gt 100 ]
	diff "$TMP/local.sums" "$TMP/s3.sums"
}

@test "s3 lazy: cat of every file of a mount locates the records of the next files with each file's (tails and heads in one GET): GETs at most the plan's reads plus one per record; bytes equal the local mount's" {
	local nrec nreads g
	nrec=$($LAZY records "$LZ/t/large" 8 3)
	nreads=$(CKPTFS_EAGER_INDEX=1 "$CKPTFS" plan "$LZ/t/large" --world 8 --rank 3 | grep -c $'^\tread\t')
	start_mount "$LZ/t/large" "$MNT" --world 8 --rank 3
	sums "$MNT" >"$TMP/local.sums"
	stop_mount
	# ahead_kb=0: no file fetched ahead of the reader (whose order,
	# sorted paths, is not quite the view's), so each range is one GET.
	start_mount s3://ck-lazy/big "$MNT" --world 8 --rank 3 -o s3_endpoint=$S3CHECK_PROXY,ahead_kb=0
	proxy reset '{}'
	sums "$MNT" >"$TMP/s3.sums"
	g=$(gets 0)
	stop_mount
	echo "records read: $nrec; plan's reads: $nreads; GETs: ${g#* }; files: $(wc -l <"$TMP/local.sums")"
	[ "$nrec" -gt 10 ]
	[ "$(wc -l <"$TMP/local.sums")" -gt 10 ]
	diff "$TMP/local.sums" "$TMP/s3.sums"
	# Each file locating its own records: a GET for each record's head
	# and one for its tail, then its data (2 * nrec + nreads).
	[ "${g#* }" -le $((nreads + nrec + 8)) ]
}

# read_files LIST: read each file of the mount named in LIST, in order,
# whole, O_DIRECT (the daemon serves each read), and compare it with the
# local mount's copy in $TMP/want.
read_files() {
	local f
	while read -r f; do
		dd if="$MNT/$f" of="$TMP/got" bs=1M iflag=direct status=none
		cmp "$TMP/got" "$TMP/want/$f"
	done <"$1"
}

@test "s3 read-ahead across files: a reader that reads a mount's small files one after another gets the next files fetched with each, several GETs at once, bytes equal the local mount's; -o ahead_kb=0 turns it off" {
	local f g ga
	start_mount "$LZ/t/large" "$MNT" --world 8 --rank 3
	(cd "$MNT" && find . -path ./.ckptfs -prune -o -type f -print | sort) >"$TMP/files"
	while read -r f; do
		mkdir -p "$TMP/want/$(dirname "$f")"
		cat "$MNT/$f" >"$TMP/want/$f"
	done <"$TMP/files"
	stop_mount
	echo "$(wc -l <"$TMP/files") files"
	[ "$(wc -l <"$TMP/files")" -gt 50 ]
	start_mount s3://ck-lazy/big "$MNT" --world 8 --rank 3 -o s3_endpoint=$S3CHECK_PROXY
	sums "$MNT" >/dev/null	# every record located
	# Each GET waits 30 ms at the proxy, so that GETs in flight at once show.
	proxy config '{"mode":"delay","delay_ms":30,"only":"get"}'
	proxy reset '{}'
	read_files "$TMP/files"
	ga=$(gets 0)
	echo "read-ahead: $(proxy_stat inflight_max) GETs at once, GETs: ${ga#* }"
	[ "$(proxy_stat inflight_max)" -ge 3 ]
	stop_mount
	start_mount s3://ck-lazy/big "$MNT" --world 8 --rank 3 -o s3_endpoint=$S3CHECK_PROXY,ahead_kb=0
	proxy config '{"mode":"none"}'
	sums "$MNT" >/dev/null
	proxy config '{"mode":"delay","delay_ms":30,"only":"get"}'
	proxy reset '{}'
	read_files "$TMP/files"
	g=$(gets 0)
	echo "without: $(proxy_stat inflight_max) GETs at once, GETs: ${g#* }"
	[ "$(proxy_stat inflight_max)" -le 2 ]
	# Files fetched ahead in the view's order, read in another: some
	# twice, not many.
	[ "${ga#* }" -le $((${g#* } + ${g#* } / 4)) ]
	proxy config '{"mode":"none"}'
	stop_mount
}
