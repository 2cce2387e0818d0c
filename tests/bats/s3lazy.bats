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
	# One data file per item: dozens of .distcp files.
	torch_gen "$LZ/m" --world 4 --seed 5 \
		>"$LZ/genm.log" 2>&1 || { tail -30 "$LZ/genm.log"; return 1; }
	upload "$LZ/m/per_item" ck-lazy/many
	# Thousands of items: 2,000 tensors x 4 ranks, 8,000 records.
	torch_gen "$LZ/k" --large 0.001 --world 4 --params 1000 \
		>"$LZ/genk.log" 2>&1 || { tail -30 "$LZ/genk.log"; return 1; }
	upload "$LZ/k/large" ck-lazy/k
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
	# .metadata, and the .ckptfs-index looked for (404); one listing
	# (not a GET of an object) instead of a HEAD per data file
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

@test "s3 lazy joined: a rank whose ranges touch its records' ends GETs one per range (the locate comes in the data's GET), W=8 R=3, W=3 R=1, W=2 R=0; and so does one whose ranges lie near an end (W=6 R=3: 24 pieces in the middle of their records, each a few rows off the start); bytes equal the local load" {
	local w r out og lg nrec nreads
	for wr in "8 3" "3 1" "2 0" "6 3"; do
		set -- $wr
		w=$1 r=$2
		nrec=$($LAZY records "$LZ/t/large" "$w" "$r")
		nreads=$(CKPTFS_EAGER_INDEX=1 "$CKPTFS" plan "$LZ/t/large" --world "$w" --rank "$r" | grep -c $'^\tread\t')
		run $(direct_env) $LAZY counts s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" "$w" "$r"
		echo "W=$w R=$r: $output"
		[ "$status" -eq 0 ]
		out=${output##*open_gets }
		og=${out%% *}
		out=${output##*load_gets }
		lg=${out%% *}
		echo "W=$w R=$r: $nrec records, $nreads planned reads, load $lg GETs ($og of them the open's)"
		[ "$nrec" -gt 10 ]
		# Without joining: a locate GET per record besides its read.
		[ "$lg" -le $((og + nreads + 2)) ]
	done
}

# side_gen KEY LARGE [DIM]: a 2-rank checkpoint (torch_gen --large LARGE,
# sharded along DIM, default 0) in $TMP/b/large, uploaded to ck-lazy/KEY.
side_gen() {
	rm -rf "$TMP/b"
	torch_gen "$TMP/b" --large "$2" --world 2 --dim "${3:-0}" >"$TMP/gen.log" 2>&1 ||
		{ tail -30 "$TMP/gen.log"; return 1; }
	upload "$TMP/b/large" "ck-lazy/$1"
}

# side_run KEY W R [CACHE_MB]: lazy_check.py side of ck-lazy/KEY against
# $TMP/b/large (bytes equal, or it fails); SIDE: the handle's
# side_bytes_peak, DATA: the bytes loaded.
side_run() {
	local out
	run $(direct_env) $LAZY side "s3://ck-lazy/$1" "$TMP/b/large" "$S3CHECK_PROXY" "${@:2}"
	echo "W=$2 R=$3${4:+ cache_mb=$4}: $output"
	[ "$status" -eq 0 ] || return 1
	out=${output##*side }
	SIDE=${out%% *}
	DATA=${output##*data }
}

@test "s3 lazy joined: a record read whole or from one end of its data is fetched into its destination: a load's side buffers hold the zip structures beside it, under a quarter of the loaded bytes (W=2 R=1, W=4 R=1 and R=2); bytes equal the local load" {
	# 2 ranks x 100 parameters x 2 states: 400 records of about 50 KiB.
	side_gen side 0.02
	for wr in "2 1" "4 1" "4 2"; do
		side_run side $wr
		# (before: every joined byte went through a side buffer, s > d)
		[ "$DATA" -gt 1000000 ]
		[ "$SIDE" -gt 0 ]
		[ $((4 * SIDE)) -lt "$DATA" ]
	done
}

@test "s3 lazy joined: a rank whose rows span two saved chunks (a split along dim 0 of a dim-0 checkpoint) gets each chunk's rows fetched into their run of its tensor: side buffers under an eighth of the loaded bytes (W=4 R=1, W=5 R=2, W=8 R=3, W=3 R=1); bytes equal the local load" {
	# records of about 150 KiB, most read in part
	side_gen sidecap 0.06
	for wr in "4 1" "5 2" "8 3" "3 1"; do
		side_run sidecap $wr
		[ "$DATA" -gt 4000000 ]
		# (before: 26% at W=4 R=1, 105% at W=5 R=2: the rows of a
		# tensor that two chunks fill went through side buffers)
		[ $((8 * SIDE)) -lt "$DATA" ]
	done
}

@test "s3 lazy joined: side buffers count against the handle's cache_mb: at cache_mb=1 the most all batches hold at once is 1 MiB (the rest located first, then read), and the load equals the local one (a dim-1 checkpoint: W=2 R=1, W=3 R=2, W=4 R=3)" {
	# chunks of columns, read in rows from their ends: their bytes are
	# no run of the rank's tensor, and go through side buffers (MBs)
	side_gen sidecap1 0.06 1
	for wr in "2 1" "3 2" "4 3"; do
		side_run sidecap1 $wr
		[ "$SIDE" -gt $((1 << 20)) ]	# the cap below does bind
		side_run sidecap1 $wr 1
		[ "$SIDE" -gt 0 ]
		[ "$SIDE" -le $((1 << 20)) ]
	done
}

@test "s3 lazy joined: records of odd layouts (transposed, int64, bf16, 0-d, bytes; one data file per item) read from s3:// equal the local load for several world sizes and ranks" {
	local wr
	for wr in "1 0" "2 1" "3 2" "8 5"; do
		run $(direct_env) $LAZY counts s3://ck-lazy/many "$LZ/m/per_item" "$S3CHECK_PROXY" $wr
		echo "W R = $wr: $output"
		[ "$status" -eq 0 ]
	done
}

@test "s3 lazy joined: a record whose zip end record is broken, read whole and from either end of its data (W=1; W=8 R=0 and R=1), fails naming its key: never other bytes" {
	local key wr
	cp -r "$LZ/t/large" "$TMP/bad"
	key=$($LAZY corrupt "$TMP/bad")
	echo "broken: $key"
	[ -n "$key" ]
	upload "$TMP/bad" ck-lazy/badj
	for wr in "1 0" "8 0" "8 1"; do
		run $(direct_env) $LAZY broken s3://ck-lazy/badj "$S3CHECK_PROXY" $wr "$key"
		echo "W R = $wr: $output"
		[ "$status" -eq 0 ]
	done
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

@test "s3 lazy: a checkpoint of thousands of items (8,000 records) opened lazily and eagerly (CKPTFS_EAGER_INDEX=1) gives the same views byte for byte, from s3:// and locally (W,R = 1,0 3,1 8,5)" {
	run $(direct_env) $LAZY lazyeager s3://ck-lazy/k "$S3CHECK_PROXY" 1 0 3 1 8 5
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'files equal' <<<"$output")" -eq 3 ]
	run $(direct_env) $LAZY lazyeager "$LZ/k/large" - 1 0 3 1 8 5
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'files equal' <<<"$output")" -eq 3 ]
}

@test "s3 lazy: opening a checkpoint of many data files makes as many requests as one of a few: one listing, no HEAD per data file" {
	local nf out g h l
	nf=$(ls "$LZ/m/per_item" | grep -c '\.distcp$')
	echo "data files: $nf"
	[ "$nf" -ge 10 ]
	run $(direct_env) $LAZY opencounts s3://ck-lazy/many "$S3CHECK_PROXY"
	echo "$output"
	[ "$status" -eq 0 ]
	set -- $output
	g=$2 h=$4 l=$6
	# .metadata; the store's probe (a listing of one key) and one
	# listing, which fixes each data file's size and ETag; HEADs of the
	# side files looked for (.ckptfs-index and the like).  Before: a HEAD
	# per data file besides.
	[ "$g" -le 2 ]
	[ "$l" -le 2 ]
	[ "$h" -le 4 ]
	[ $((g + h + l)) -le 8 ]
	# The bytes are the local copy's.
	run $(direct_env) $LAZY counts s3://ck-lazy/many "$LZ/m/per_item" "$S3CHECK_PROXY" 3 1
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "s3 lazy: a data file missing or shorter than its records is still refused in one line naming the file and a key, from s3:// as from the local copy" {
	local f key
	cp -r "$LZ/m/per_item" "$TMP/short"
	f=$(ls "$TMP/short" | grep '\.distcp$' | sort | sed -n 3p)
	truncate -s -1 "$TMP/short/$f"
	upload "$TMP/short" ck-lazy/short
	run "$CKPTFS" info s3://ck-lazy/short
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"s3://ck-lazy/short/$f: key '"*"': data file has "*" bytes, its record ends at "* ]]
	[ "$(grep -c . <<<"$output")" -eq 1 ]
	cp -r "$LZ/m/per_item" "$TMP/gone"
	rm "$TMP/gone/$f"
	upload "$TMP/gone" ck-lazy/gone
	run "$CKPTFS" info s3://ck-lazy/gone
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"s3://ck-lazy/gone/$f: key '"*"': cannot open data file: No such file or directory" ]]
	[ "$(grep -c . <<<"$output")" -eq 1 ]
	# a mount is refused with the same line
	run "$CKPTFS" s3://ck-lazy/short "$MNT" --world 1 --rank 0
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"$f: key '"*"': data file has "* ]]
}

# gets_of OUTPUT: the "gets G1 G2 ..." line's numbers.
gets_of() { grep '^gets ' <<<"$1" | cut -d' ' -f2-; }
# bytes_of OUTPUT: the "bytes B1 B2 ..." line's numbers.
bytes_of() { grep '^bytes ' <<<"$1" | cut -d' ' -f2-; }

@test "s3 lazy: what a lazy load locates lands in the node-local index cache: a second load of the same rank locates nothing (as few GETs as with an eagerly indexed cache), and equals the local load" {
	local nrec g1 g2 ge b1 b2 be
	nrec=$($LAZY records "$LZ/t/large" 8 3)
	run $(direct_env) $LAZY cached s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" 8 3 "$TMP/ic" 2
	echo "$output"
	[ "$status" -eq 0 ]
	set -- $(gets_of "$output")
	g1=$1 g2=$2
	set -- $(bytes_of "$output")
	b1=$1 b2=$2
	[ "$(ls "$TMP/ic" | grep -c '\.ckptfs-index$')" -eq 1 ]
	# The reference: a cache filled by the eager pass (every record
	# located), then the same load from it.
	CKPTFS_EAGER_INDEX=1 $(direct_env) $LAZY cached s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" 8 3 "$TMP/eager" 1 >/dev/null
	run $(direct_env) $LAZY cached s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" 8 3 "$TMP/eager" 1
	echo "$output"
	[ "$status" -eq 0 ]
	ge=$(gets_of "$output")
	be=$(bytes_of "$output")
	echo "records read $nrec; GETs: lazy $g1 ($b1 bytes), then from its cache $g2 ($b2 bytes); from an eager cache $ge ($be bytes)"
	# The first locates (its records' zip windows, which come in the
	# GETs of its data: other ranges, not more GETs); the second does
	# not: it reads as a load from the eager cache does (the plan's
	# ranges, each with its guard), no more.
	[ "$b1" -ne "$b2" ]
	[ "$g2" -le "$ge" ]
	[ "$b2" -le "$be" ]
	# Another rank merges its records into the same entry; the first
	# rank's are still there.
	run $(direct_env) $LAZY cached s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" 8 5 "$TMP/ic" 2
	echo "$output"
	[ "$status" -eq 0 ]
	set -- $(bytes_of "$output")
	[ "$1" -ne "$2" ]
	run $(direct_env) $LAZY cached s3://ck-lazy/big "$LZ/t/large" "$S3CHECK_PROXY" 8 3 "$TMP/ic" 1
	echo "$output"
	[ "$(gets_of "$output")" -le "$ge" ]
	[ "$(ls "$TMP/ic" | grep -c '\.ckptfs-index$')" -eq 1 ]
}

@test "s3 lazy: a data file replaced after its records were cached (another ETag) is never read through the stale entry: the next load locates again and equals the new local copy" {
	local f g1 g2 g3 b1 b2
	cp -r "$LZ/m/per_item" "$TMP/st"
	upload "$TMP/st" ck-lazy/st
	run $(direct_env) $LAZY cached s3://ck-lazy/st "$TMP/st" "$S3CHECK_PROXY" 1 0 "$TMP/ic" 2
	echo "$output"
	[ "$status" -eq 0 ]
	set -- $(gets_of "$output")
	g1=$1 g2=$2
	set -- $(bytes_of "$output")
	b1=$1 b2=$2
	# the first locates (zip windows with its data: more bytes), the
	# second reads through the cache
	[ "$g1" -ge "$g2" ]
	[ "$b1" -gt "$b2" ]
	# The same data file from a checkpoint of the same shapes saved with
	# other values: same size, other bytes, another ETag.
	torch_gen "$TMP/o" --world 4 --seed 6 >"$TMP/geno.log" 2>&1 ||
		{ tail -30 "$TMP/geno.log"; false; }
	for f in $(cd "$TMP/st" && ls | grep '\.distcp$' | sort); do
		[ "$(stat -c %s "$TMP/st/$f")" = "$(stat -c %s "$TMP/o/per_item/$f")" ] &&
			! cmp -s "$TMP/st/$f" "$TMP/o/per_item/$f" && break
	done
	echo "replaced: $f"
	cp "$TMP/o/per_item/$f" "$TMP/st/$f"
	"$ROOT/tests/s3/rgw.sh" put "$S3TMP/rgw" "ck-lazy/st/$f" "$TMP/st/$f"
	run $(direct_env) $LAZY cached s3://ck-lazy/st "$TMP/st" "$S3CHECK_PROXY" 1 0 "$TMP/ic" 2
	echo "$output"
	[ "$status" -eq 0 ]
	set -- $(gets_of "$output")
	g3=$1
	[ "$2" -le "$g2" ]
	set -- $(bytes_of "$output")
	# the stale entry is refused, said so, and everything located again
	# (its zip windows fetched: as many bytes as the first load); then
	# the entry written anew serves the next load
	[[ "$output" == *"stale"*"$f"* ]]
	[ "$g3" -ge "$g1" ]
	[ "$1" -gt "$2" ]
	[ "$1" -ge "$b1" ]
}

@test "s3 lazy: a rank-local checkpoint (__R.metadata per rank) opens lazily too: the open GETs the ranks' metadata, no record's zip windows; a mount of it has the written values" {
	local g
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rl" --parts 8 --keys 16
	upload "$TMP/rl" ck-lazy/rl
	run $(direct_env) $LAZY opencounts s3://ck-lazy/rl "$S3CHECK_PROXY"
	echo "$output"
	[ "$status" -eq 0 ]
	set -- $output
	g=$2
	# 8 __R.metadata and .metadata looked for; eagerly, the 8 x 32
	# records' zip windows besides (tiny records: merged, a GET a file)
	[ "$g" -le 9 ]
	run env CKPTFS_EAGER_INDEX=1 $(direct_env) $LAZY opencounts s3://ck-lazy/rl "$S3CHECK_PROXY"
	echo "eager: $output"
	set -- $output
	[ "$2" -gt "$g" ]
	start_mount s3://ck-lazy/rl "$MNT"
	run $PY "$ROOT/tests/make_ranklocal.py" check "$MNT" --parts 8 --keys 16
	echo "$output"
	[ "$status" -eq 0 ]
	stop_mount
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

# obj_gets: the GETs of objects the proxy logged since its reset (a
# listing's GET is not one).
obj_gets() {
	curl -sf "$S3CHECK_PROXY/__faultproxy/stats" | $PY -c '
import json, sys
print(sum(1 for e in json.load(sys.stdin)["log"]
          if e[0] == "GET" and "list-type=" not in e[1]))'
}

# obj_bytes: the bytes of those GETs.
obj_bytes() {
	curl -sf "$S3CHECK_PROXY/__faultproxy/stats" | $PY -c '
import json, sys
print(sum(e[4] for e in json.load(sys.stdin)["log"]
          if e[0] == "GET" and "list-type=" not in e[1]))'
}

# rl_reads URL [MOUNT OPTION]: mount URL through the proxy (its log
# started anew), then, counted from there (the open's own requests are
# not), read every file and check it against the written values
# (make_ranklocal.py check, 8 parts, 16 keys, base $RL_BASE); unmount
# (a lazy mount stores what it located then).  RL_GETS, RL_BYTES: the
# reads' object GETs and their bytes.
rl_reads() {
	local url=$1 opts=s3_endpoint=$S3CHECK_PROXY
	[ $# -gt 1 ] && opts=$opts,$2
	: >"$TMP/daemon.log"
	start_mount "$url" "$MNT" -o "$opts"
	proxy reset '{}'
	$PY "$ROOT/tests/make_ranklocal.py" check "$MNT" --parts 8 --keys 16 \
		--base "${RL_BASE:-0}"
	RL_GETS=$(obj_gets)
	RL_BYTES=$(obj_bytes)
	stop_mount
}

@test "s3 lazy: a rank-local checkpoint's records, located by a lazy mount, land in the node-local index cache: the next mount's reads make no locate GET (as many GETs as a mount that indexed at open); values as written" {
	local ge g1 g2 be b1 b2
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rl" --parts 8 --keys 16
	upload "$TMP/rl" ck-lazy/rlc
	# The reference: indexed whole at open, the reads fetch data alone.
	CKPTFS_EAGER_INDEX=1 rl_reads s3://ck-lazy/rlc
	ge=$RL_GETS be=$RL_BYTES
	rl_reads s3://ck-lazy/rlc "index_cache=$TMP/ic"
	g1=$RL_GETS b1=$RL_BYTES
	[ "$(ls "$TMP/ic" | grep -c '\.ckptfs-index$')" -eq 1 ]
	rl_reads s3://ck-lazy/rlc "index_cache=$TMP/ic"
	g2=$RL_GETS b2=$RL_BYTES
	echo "reads' GETs (bytes): eager $ge ($be); lazy $g1 ($b1), then from its cache $g2 ($b2)"
	# Located when read: the records' zip windows, which come in the
	# GETs of their data (joined reads: other ranges, not more GETs);
	# then nothing located again: read as the eager open's reads are.
	[ "$b1" -gt "$be" ]
	[ "$g2" -le "$ge" ]
	[ "$b2" -le "$be" ]
	[ "$(ls "$TMP/ic" | grep -c '\.ckptfs-index$')" -eq 1 ]
}

@test "s3 lazy: a rank-local checkpoint's cached index is never used stale: data files replaced (same __R.metadata, other ETags) are refused and located again; __R.metadata replaced (other offsets) is another entry; values as written each time" {
	local g1 g2 g3 b1 b2 b3
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rl" --parts 8 --keys 16
	upload "$TMP/rl" ck-lazy/rls
	rl_reads s3://ck-lazy/rls "index_cache=$TMP/ic"
	g1=$RL_GETS b1=$RL_BYTES
	rl_reads s3://ck-lazy/rls "index_cache=$TMP/ic"
	g2=$RL_GETS b2=$RL_BYTES
	echo "lazy $g1 GETs ($b1 bytes), then cached $g2 ($b2)"
	# the first locates (zip windows with its data: more bytes)
	[ "$g1" -ge "$g2" ]
	[ "$b1" -gt "$b2" ]
	# Other values, same layout: each __R.metadata byte for byte the
	# same, each data file another ETag.
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rlb" --parts 8 --keys 16 --base 7
	for f in "$TMP"/rlb/__*.metadata; do cmp "$f" "$TMP/rl/${f##*/}"; done
	upload "$TMP/rlb" ck-lazy/rls
	RL_BASE=7 rl_reads s3://ck-lazy/rls "index_cache=$TMP/ic"
	g3=$RL_GETS b3=$RL_BYTES
	grep "stale" "$TMP/daemon.log" | grep -q "__[0-9]_0.distcp"
	echo "data files replaced: $g3 GETs ($b3 bytes)"
	[ "$g3" -ge "$g1" ]	# located again
	[ "$b3" -ge "$b1" ]
	RL_BASE=7 rl_reads s3://ck-lazy/rls "index_cache=$TMP/ic"
	[ "$RL_GETS" -le "$g2" ]
	[ "$RL_BYTES" -le "$b2" ]
	# Other offsets: every __R.metadata and data file replaced.
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rlr" --parts 8 --keys 16 --reverse
	! cmp -s "$TMP/rlr/__3.metadata" "$TMP/rl/__3.metadata" || false
	upload "$TMP/rlr" ck-lazy/rls
	rl_reads s3://ck-lazy/rls "index_cache=$TMP/ic"
	g3=$RL_GETS b3=$RL_BYTES
	not grep -q "stale" "$TMP/daemon.log"	# not even looked at
	[ "$g3" -ge "$g1" ]
	[ "$b3" -ge "$b1" ]
	[ "$(ls "$TMP/ic" | grep -c '\.ckptfs-index$')" -eq 2 ]
}

@test "s3 lazy: ckptfs index of a rank-local checkpoint writes an index that a mount takes from the bucket's .ckptfs-index: its reads make no locate GET; once a data file is replaced it is refused, naming the file" {
	local ge gi
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rl" --parts 8 --keys 16
	upload "$TMP/rl" ck-lazy/rli
	run "$CKPTFS" index s3://ck-lazy/rli --index "$TMP/idx"
	echo "$output"
	[ "$status" -eq 0 ]
	CKPTFS_EAGER_INDEX=1 rl_reads s3://ck-lazy/rli
	ge=$RL_GETS
	"$ROOT/tests/s3/rgw.sh" put "$S3TMP/rgw" ck-lazy/rli/.ckptfs-index "$TMP/idx"
	rl_reads s3://ck-lazy/rli
	gi=$RL_GETS
	echo "reads' GETs: eager $ge; from .ckptfs-index $gi"
	[ "$gi" -le "$ge" ]
	# A data file replaced: the index is stale, and refused.
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rlb" --parts 8 --keys 16 --base 7
	"$ROOT/tests/s3/rgw.sh" put "$S3TMP/rgw" ck-lazy/rli/__5_0.distcp "$TMP/rlb/__5_0.distcp"
	run "$CKPTFS" mount s3://ck-lazy/rli "$MNT" -f
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *".ckptfs-index: stale: "*"__5_0.distcp"* ]]
	not mountpoint -q "$MNT"
}

@test "s3 lazy: the ranks of a node add up to one rank-local cache entry: rank 5's load keeps what rank 3's located, and rank 3 locates nothing after it; each load equals the local copy's" {
	local g1 g2 b2
	$PY "$ROOT/tests/make_ranklocal.py" write "$TMP/rl" --parts 8 --keys 16
	upload "$TMP/rl" ck-lazy/rlm
	run $(direct_env) $LAZY cached s3://ck-lazy/rlm "$TMP/rl" "$S3CHECK_PROXY" 8 3 "$TMP/ic" 2
	echo "$output"
	[ "$status" -eq 0 ]
	# the first load locates (zip windows with its data: more bytes),
	# the second reads through the cache
	set -- $(gets_of "$output")
	g1=$1 g2=$2
	set -- $(bytes_of "$output")
	b2=$2
	[ "$1" -gt "$2" ]
	run $(direct_env) $LAZY cached s3://ck-lazy/rlm "$TMP/rl" "$S3CHECK_PROXY" 8 5 "$TMP/ic" 2
	echo "$output"
	[ "$status" -eq 0 ]
	set -- $(bytes_of "$output")
	[ "$1" -gt "$2" ]
	run $(direct_env) $LAZY cached s3://ck-lazy/rlm "$TMP/rl" "$S3CHECK_PROXY" 8 3 "$TMP/ic" 1
	echo "$output"
	[ "$status" -eq 0 ]
	echo "rank 3: $g1, then $g2 GETs ($b2 bytes); after rank 5: $(gets_of "$output") ($(bytes_of "$output"))"
	[ "$(gets_of "$output")" -le "$g2" ]
	[ "$(bytes_of "$output")" -le "$b2" ]
	[ "$(ls "$TMP/ic" | grep -c '\.ckptfs-index$')" -eq 1 ]
}
