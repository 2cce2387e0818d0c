#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The subcommands that need no mount: info, ls, plan, cat, extract, checked
# against the reference and against the mounted files.

load helpers

setup() {
	common_setup
	$GEN "$TMP/ckpt" --seed 71 --keys 40
}
teardown() { common_teardown; }

@test "cat gives every key's view, identical to the mounted file and the reference" {
	start_mount "$TMP/ckpt" "$MNT" --world 3 --rank 1
	n=0
	while IFS=$'\t' read -r path size; do
		fqn=$(getfattr --only-values -n user.ckptfs.fqn "$MNT/$path")
		"$CKPTFS" cat "$TMP/ckpt" "$fqn" --world 3 --rank 1 > "$TMP/out"
		cmp "$TMP/out" "$MNT/$path"
		[ "$(stat -c %s "$TMP/out")" = "$size" ]
		"$CKPTFS" cat "$TMP/ckpt" "$path" --world 3 --rank 1 | cmp - "$MNT/$path"
		n=$((n + 1))
	done < <($REF paths "$TMP/ckpt" --world 3 --rank 1)
	stop_mount
	[ "$n" -ge 30 ]
}

@test "extract writes the same tree as the mount (raw), and loadable .npy files" {
	"$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 4 --rank 2
	run $REF check "$TMP/ckpt" "$TMP/out" --world 4 --rank 2
	echo "$output"
	[ "$status" -eq 0 ]
	start_mount "$TMP/ckpt" "$MNT" --world 4 --rank 2
	diff -r -x .ckptfs "$TMP/out" "$MNT"
	stop_mount
	"$CKPTFS" extract "$TMP/ckpt" "$TMP/npy" --world 4 --rank 2 --format npy
	run $PY -c '
import os, sys, numpy as np
sys.path.insert(0, sys.argv[3])
import reference
exp = reference.expected(sys.argv[1], 4, 2)
attrs = reference.expected_attrs(sys.argv[1], 4, 2)
n = 0
for rel, want in exp.items():
    a = attrs[rel]
    if a["user.ckptfs.kind"] == "bytes":
        assert open(os.path.join(sys.argv[2], rel), "rb").read() == want
        continue
    arr = np.load(os.path.join(sys.argv[2], rel + ".npy"), mmap_mode="r")
    shape = tuple(int(x) for x in a["user.ckptfs.shape"].split(",") if x)
    assert arr.shape == shape, (rel, arr.shape, shape)
    assert arr.tobytes() == want, rel
    if arr.nbytes:
        assert isinstance(arr, np.memmap) or arr.base is not None
    n += 1
print(n, "npy files ok")' "$TMP/ckpt" "$TMP/npy" "$ROOT/tests"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "ls: a header and one tab-separated line per key, matching the reference" {
	"$CKPTFS" ls "$TMP/ckpt" --world 3 --rank 2 > "$TMP/ls"
	head -1 "$TMP/ls" | grep -qx $'path\tdtype\tglobal_shape\tchunks\tlocal_shape\tlocal_offset\tbytes'
	run $PY -c '
import sys
sys.path.insert(0, sys.argv[2])
import reference
attrs = reference.expected_attrs(sys.argv[1], 3, 2)
exp = reference.expected(sys.argv[1], 3, 2)
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[3])][1:]
assert len(rows) == len(exp), (len(rows), len(exp))
for path, dtype, gshape, chunks, lshape, loff, size in rows:
    a = attrs[path]
    assert int(size) == len(exp[path]), path
    if a["user.ckptfs.kind"] == "bytes":
        assert dtype == "bytes"
        continue
    d = lambda s: s or "-"
    assert dtype == a["user.ckptfs.dtype"], path
    assert gshape == d(a["user.ckptfs.global_shape"]), path
    assert lshape == d(a["user.ckptfs.shape"]), path
    assert loff == d(a["user.ckptfs.offsets"]), path
print(len(rows), "rows ok")' "$TMP/ckpt" "$ROOT/tests" "$TMP/ls"
	echo "$output"
	[ "$status" -eq 0 ]
	# Easy for cut and awk.
	[ "$("$CKPTFS" ls "$TMP/ckpt" --prefix model | tail -n +2 | cut -f1 | cut -d/ -f1 | sort -u)" = model ]
	total=$(awk -F'\t' 'NR > 1 { s += $7 } END { print s }' "$TMP/ls")
	[ "$total" -eq "$($REF paths "$TMP/ckpt" --world 3 --rank 2 | awk -F'\t' '{ s += $2 } END { print s }')" ]
}

@test "info and plan describe the checkpoint and the reads" {
	run "$CKPTFS" info "$TMP/ckpt"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *$'format\ttensorplay-dcp'* ]]
	[[ "$output" == *$'version\t1'* ]]
	keys=$($PY -c 'import msgpack,sys; print(len(msgpack.unpackb(open(sys.argv[1]+"/.metadata","rb").read())["state_dict_metadata"]))' "$TMP/ckpt")
	[[ "$output" == *$'keys\t'"$keys "* ]]
	[[ "$output" == *"tiling"*"split along dim 0"* ]]
	# plan: the reads of each key add up to its view's size.
	"$CKPTFS" plan "$TMP/ckpt" --world 3 --rank 1 > "$TMP/plan"
	run $PY -c '
import sys
sys.path.insert(0, sys.argv[2])
import reference
exp = reference.expected(sys.argv[1], 3, 1)
exp_sizes = {k: len(v) for k, v in exp.items()}
fqns = {}
cur = None
for line in open(sys.argv[3]):
    f = line.rstrip("\n").split("\t")
    if f[0].startswith("view bytes: "):   # the last line: their sum
        assert int(f[0].split()[2]) == sum(exp_sizes.values()), f
        continue
    if f[0]:
        cur = f[0]; fqns[cur] = [int(f[1].split()[0]), 0]
    elif f[1] == "read":
        fqns[cur][1] += int(f[4])
bad = [k for k, (want, got) in fqns.items() if want != got]
assert len(fqns) == len(exp) and not bad, bad
print(len(fqns), "keys planned")' "$TMP/ckpt" "$ROOT/tests" "$TMP/plan"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "every subcommand has --help; bad arguments give a message" {
	for c in info ls plan cat extract; do
		run "$CKPTFS" "$c" --help
		[ "$status" -eq 0 ]
		[[ "$output" == "usage: ckptfs $c"* ]]
	done
	run "$CKPTFS" cat "$TMP/ckpt" optim.x
	[ "$status" -ne 0 ]; [[ "$output" == *"--world and --rank are required"* ]]
	run "$CKPTFS" cat "$TMP/ckpt" optim.nope --world 2 --rank 0
	[ "$status" -ne 0 ]; [[ "$output" == *"no key 'optim.nope'"* ]]
	run "$CKPTFS" ls "$TMP/ckpt" --world 2 --rank 2
	[ "$status" -ne 0 ]; [[ "$output" == *"rank 2 is out of range"* ]]
	run "$CKPTFS" extract "$TMP/ckpt" "$TMP/x" --world 2 --rank 0 --format csv
	[ "$status" -ne 0 ]; [[ "$output" == *"format must be raw or npy"* ]]
	run "$CKPTFS" info "$TMP/nope"
	[ "$status" -ne 0 ]; [ "$output" = "ckptfs: $TMP/nope: cannot open: No such file or directory" ]
}

@test "verify: a flipped byte is named (file, offset, key); -o verify gives EIO for that key only" {
	run "$CKPTFS" verify "$TMP/ckpt"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *" 0 without a checksum, 0 mismatched"* ]]
	# Flip one byte inside the record of one chunk.
	read -r file off len key < <($PY -c '
import msgpack, sys
m = msgpack.unpackb(open(sys.argv[1] + "/.metadata", "rb").read())
r = max((r for r in m["storage_data"] if r["length"] >= 8), key=lambda r: r["length"])
print(r["relative_path"], r["offset"], r["length"], r["fqn"])' "$TMP/ckpt")
	$PY -c '
import sys
p, at = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x40]))' "$TMP/ckpt/$file" $((off + len / 2))
	run "$CKPTFS" verify "$TMP/ckpt" --jobs 3
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$TMP/ckpt/$file: offset $off: key '$key'"*"xxh3 mismatch"* ]]
	[[ "$output" == *" 1 mismatched"* ]]
	start_mount "$TMP/ckpt" "$MNT" -o verify
	bad=0
	while IFS= read -r f; do
		if ! cat "$f" > /dev/null 2>&1; then
			[ "$(getfattr --only-values -n user.ckptfs.fqn "$f" 2>/dev/null)" = "$key" ]
			bad=$((bad + 1))
		fi
	done < <(find "$MNT" -path "$MNT/.ckptfs" -prune -o -type f -print)
	[ "$bad" -eq 1 ]
	# view.safetensors holds that tensor too.
	run cat "$MNT/.ckptfs/view.safetensors"
	[[ "$output" == *"Input/output error"* ]]
	# Again: still EIO, logged once.
	f=$(for x in $(find "$MNT" -path "$MNT/.ckptfs" -prune -o -type f -print); do
		if [ "$(getfattr --only-values -n user.ckptfs.fqn "$x" 2>/dev/null)" = "$key" ]; then echo "$x"; fi
	done)
	run cat "$f"
	[[ "$output" == *"Input/output error"* ]]
	stop_mount
	[ "$(grep -c "verify: .*key '$key': xxh3 mismatch" "$TMP/daemon.log")" -eq 1 ]
	# Without -o verify the mount serves the bytes as they are.
	start_mount "$TMP/ckpt" "$MNT"
	cat "$f" > /dev/null
	stop_mount
}

@test "verify reports records without a checksum" {
	$BAD ok "$TMP/nock"
	run "$CKPTFS" verify "$TMP/nock"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"4 records"*"0 checked, 4 without a checksum"* ]]
}

@test "stats: min, max, mean, absmax, NaN/Inf/zero counts match numpy for every dtype" {
	$PY "$ROOT/tests/make_special_ckpt.py" "$TMP/special"
	for c in "$TMP/special:1:0" "$TMP/ckpt:3:1"; do
		IFS=: read -r ck w r <<< "$c"
		"$CKPTFS" stats "$ck" --world "$w" --rank "$r" > "$TMP/stats"
		run $PY -W ignore -c '
import sys, math, numpy as np
sys.path.insert(0, sys.argv[2])
import reference
ck, w, r = sys.argv[1], int(sys.argv[3]), int(sys.argv[4])
kinds = {}
exp = reference.expected(ck, w, r, kinds=kinds)
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[5])]
assert rows[0] == "path dtype shape min max mean absmax nan inf zeros".split()
seen = 0
for p, dt, shape, mn, mx, mean, amax, nan, inf, zeros in rows[1:]:
    raw = exp[p]
    if dt in reference.FLOATS:
        x = (np.frombuffer(raw, "<f8") if dt == "float64"
             else reference.to_f32(raw, dt).astype("<f8"))
    else:
        x = np.frombuffer(raw, reference.NP[dt]).astype("<f8")
    ok = ~np.isnan(x)
    assert int(nan) == int((~ok).sum()), (p, nan)
    assert int(inf) == int(np.isinf(x).sum()), p
    assert int(zeros) == int((x == 0).sum()), p
    if ok.any():
        y = x[ok]
        assert float(mn) == y.min() and float(mx) == y.max(), (p, mn, mx)
        assert float(amax) == np.abs(y).max(), p
        want = y.mean()
        got = float(mean)
        assert (math.isnan(got) and math.isnan(want)) or \
            math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-300), (p, got, want)
    else:
        assert mn == "-", p
    seen += 1
assert seen == sum(1 for k in kinds.values() if k != "bytes"), seen
print(seen, "tensors ok")' "$ck" "$ROOT/tests" "$w" "$r" "$TMP/stats"
		echo "$output"
		[ "$status" -eq 0 ]
	done
	"$CKPTFS" stats "$TMP/special" special.float16 | grep -q $'special/float16\tfloat16\t65536\t-inf\tinf\tnan\tinf\t2046\t2\t2'
}

# Issue 27 item 7: a CLI that helps.
@test "an unknown command suggests the closest one, in every place it can come" {
	run "$CKPTFS" moutn "$TMP/ckpt" "$MNT"
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs: unknown command 'moutn'; did you mean 'mount'?" ]
	run "$CKPTFS" --world 2 --rank 0 lss "$TMP/ckpt"
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs: unknown command 'lss'; did you mean 'ls'?" ]
	run "$CKPTFS" umonut "$MNT"
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs: unknown command 'umonut'; did you mean 'umount'?" ]
	run "$CKPTFS" help extarct
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs: unknown command 'extarct'; did you mean 'extract'?" ]
	run "$CKPTFS" frobnicate x
	[ "$status" -eq 2 ]
	[[ "$output" == "ckptfs: unknown command 'frobnicate' (commands: mount umount help info ls plan cat extract stats index verify; ckptfs --help)" ]]
	not mountpoint -q "$MNT"
	# the fstab form still takes a relative CKPT
	cd "$TMP"
	run "$CKPTFS" ckpt "$MNT" -o world=2,rank=1
	[ "$status" -eq 0 ]
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	echo "$output"; fusermount3 -u "$MNT"; [ "$status" -eq 0 ]
}

@test "options before the command work (or are refused for what they are)" {
	"$CKPTFS" ls "$TMP/ckpt" --world 3 --rank 2 > "$TMP/after"
	"$CKPTFS" --world 3 --rank 2 ls "$TMP/ckpt" > "$TMP/before"
	cmp "$TMP/before" "$TMP/after"
	"$CKPTFS" --world=3 --prefix model --rank 2 ls "$TMP/ckpt" > "$TMP/before"
	"$CKPTFS" ls "$TMP/ckpt" --world 3 --rank 2 --prefix model | cmp - "$TMP/before"
	run "$CKPTFS" -f info "$TMP/ckpt"
	[ "$status" -eq 2 ]; [ "${lines[0]}" = "ckptfs info: unknown option '-f'" ]
	run "$CKPTFS" --world 2 info "$TMP/ckpt"
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs info: rank is required with world" ]
	run "$CKPTFS" --world 2 --rank 1 mount "$TMP/ckpt" "$MNT"
	[ "$status" -eq 0 ]
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	echo "$output"; fusermount3 -u "$MNT"; [ "$status" -eq 0 ]
}

@test "a directory that is no checkpoint says so and what was looked for" {
	mkdir "$TMP/empty"; echo x > "$TMP/empty/notes.txt"
	want="$TMP/empty: not a checkpoint: it holds none of .metadata (ckptfs, PyTorch DCP), __R.metadata (PyTorch rank-local), *.safetensors, model.safetensors.index.json"
	for c in info ls verify; do
		run "$CKPTFS" $c "$TMP/empty"
		[ "$status" -eq 1 ]; [ "$output" = "ckptfs: $want" ]
	done
	# the library under Python says the same (the build's own library;
	# a sanitized one needs its runtime preloaded)
	lib="$(dirname "$CKPTFS")/libckptfs.so" pre=
	if nm -D "$lib" | grep -q __asan_; then
		pre="LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0"
	fi
	run env $pre CKPTFS_LIB="$lib" PYTHONPATH="$ROOT/scripts" $PY -c '
import sys, ckptfs
try:
    ckptfs.open(sys.argv[1])
except ckptfs.CheckpointError as e:
    print(e)' "$TMP/empty"
	echo "$output"
	[ "$output" = "$want" ]
}

@test "umount of a directory that is not mounted says so" {
	run "$CKPTFS" umount "$MNT"
	[ "$status" -eq 1 ]; [ "$output" = "ckptfs: umount: $MNT is not mounted" ]
	run "$CKPTFS" umount "$TMP/nope"
	[ "$status" -eq 1 ]; [ "$output" = "ckptfs: umount: $TMP/nope: No such file or directory" ]
	start_mount "$TMP/ckpt" "$MNT" --world 2 --rank 0
	run "$CKPTFS" umount "$MNT"
	[ "$status" -eq 0 ]
	wait "$DAEMON_PID"	# exits 0 once unmounted
	DAEMON_PID= MOUNTED=
	not mountpoint -q "$MNT"
}

@test "help: bare ckptfs is short (exit 2); every --help exits 0, short, S3 only in 'ckptfs help s3'" {
	run "$CKPTFS"
	[ "$status" -eq 2 ]
	[ "${#lines[@]}" -le 6 ]; [[ "${lines[0]}" == "usage: ckptfs mount CKPT MNT"* ]]
	for c in info ls plan cat extract stats verify index umount; do
		for form in "$c --help" "$c -h" "help $c"; do
			run "$CKPTFS" $form
			echo "$form: $status"
			[ "$status" -eq 0 ]
			[[ "$output" == "usage: ckptfs $c"* ]]
			[ "${#lines[@]}" -le 14 ]
			[[ "$output" != *"--s3-endpoint"* ]]
		done
	done
	for form in "--help" "help" "mount --help" "help mount"; do
		run "$CKPTFS" $form
		[ "$status" -eq 0 ]
		[ "${#lines[@]}" -le 16 ]
		[[ "$output" != *"--s3-endpoint"* ]]
		[[ "$output" == *"'ckptfs help s3'"* ]]
		[[ "$output" == *"'ckptfs help options'"* ]]
	done
	# every mount option, in one place
	run "$CKPTFS" help options
	[ "$status" -eq 0 ]
	for k in "--ranks LIST" "--layout FILE" "--index-cache DIR" "--dtype T" \
		"--format npy" "-o prefetch" "-o cache_mb=N" "-o verify" \
		"-o follow_symlinks" "-o nonempty" "-o readahead_kb=N" "-o ahead_kb=N"; do
		[[ "$output" == *"$k"* ]] || { echo "missing: $k"; false; }
	done
	run "$CKPTFS" help s3
	[ "$status" -eq 0 ]
	for k in endpoint region profile credentials-file config-file parallel part-size merge-gap retries timeout-ms; do
		[[ "$output" == *"--s3-$k "* ]]
	done
	grep -q 's3\\-endpoint' "$ROOT/docs/ckptfs.1"
	grep -q '^.B ckptfs help s3' "$ROOT/docs/ckptfs.1"
}

@test "plan's 'view bytes' is the mounted view's size without .ckptfs/ (what du -sb was meant to say)" {
	for opts in "--world 4 --rank 3" "--world 3 --rank 0 --prefix model" "--world 2 --rank 1 --format npy"; do
		start_mount "$TMP/ckpt" "$MNT" $opts
		real=$(find "$MNT" -path "$MNT/.ckptfs" -prune -o -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
		whole=$(du -sb "$MNT" | cut -f1)
		stop_mount
		[ "$whole" -gt "$real" ]	# du counts .ckptfs/
		got=$("$CKPTFS" plan "$TMP/ckpt" $opts | sed -n 's/^view bytes: //p')
		echo "$opts: plan $got, files $real, du $whole"
		[ "$got" = "$real" ]
		# independent of the engine: the reference's sizes
		if [ "$opts" = "--world 4 --rank 3" ]; then
			[ "$got" = "$($REF paths "$TMP/ckpt" --world 4 --rank 3 | awk -F'\t' '{ s += $2 } END { print s }')" ]
		fi
	done
}

@test "--world 1 alone is rank 0 (the only rank), for the mount and the tools, as ckptfs.load(world=1) is; --world 2 alone is refused" {
	run "$CKPTFS" ls "$TMP/ckpt" --world 1
	[ "$status" -eq 0 ]
	"$CKPTFS" ls "$TMP/ckpt" --world 1 --rank 0 | cmp - <(printf '%s\n' "$output")
	run "$CKPTFS" ls "$TMP/ckpt" --world 2
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs ls: rank is required with world" ]
	start_mount "$TMP/ckpt" "$MNT" --world 1
	run $REF check "$TMP/ckpt" "$MNT" --world 1 --rank 0
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "every S3 setting, the time bounds and no_sign_request included, is refused by name for a checkpoint that is not s3://" {
	for o in "--s3-read-deadline-ms 5000" "--s3-connect-timeout-ms 500" \
		"--s3-list-max-keys 10" "--s3-low-speed-time 3" "--s3-no-sign-request" \
		"--s3-ca-bundle /ca.pem" "--s3-addressing-style virtual"; do
		name=$(echo "$o" | sed 's/^--//; s/^-o //; s/=.*//; s/ .*//; s/-/_/g')
		run "$CKPTFS" ls "$TMP/ckpt" $o
		echo "$o: $status $output"
		[ "$status" -eq 2 ]
		[ "$output" = "ckptfs ls: $name is only for s3:// checkpoints, not '$TMP/ckpt'" ]
	done
	for o in s3_open_deadline_ms=100 s3_low_speed_limit=9 s3_no_sign_request s3_ca_bundle=/ca.pem; do
		run "$CKPTFS" mount "$TMP/ckpt" "$MNT" -o "$o"
		echo "$o: $status $output"
		[ "$status" -ne 0 ]
		[ "$output" = "ckptfs: ${o%%=*} is only for s3:// checkpoints, not '$TMP/ckpt'" ]
		not mountpoint -q "$MNT"
	done
}
