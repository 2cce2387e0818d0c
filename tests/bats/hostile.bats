#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Hostile directories and arguments (issue 19): outputs are written only
# beneath their target and never through a symlink, indexes are checked
# against the files they describe, every output stays valid whatever the
# keys hold, and arguments are parsed strictly.

load helpers

setup_file() {
	export TORCH_CK="$BATS_FILE_TMPDIR/torch"
	torch_gen "$TORCH_CK" --world 2 --seed 19 >/dev/null
}

setup() {
	common_setup
	$GEN "$TMP/ckpt" --seed 19 --keys 12
}
teardown() { common_teardown; }

# Every file under DIR (but .ckptfs) equals the reference view (W, R) of
# CKPT; files missing are allowed, files extra or different are not.
only_whole_files() {	# CKPT DIR W R
	$PY -c '
import os, sys
sys.path.insert(0, sys.argv[3])
import reference
exp = reference.expected(sys.argv[1], int(sys.argv[4]), int(sys.argv[5]))
bad = []
for d, _, files in os.walk(sys.argv[2]):
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), sys.argv[2])
        if rel not in exp or open(os.path.join(d, f), "rb").read() != exp[rel]:
            bad.append(rel)
assert not bad, bad
print("whole files only")' "$1" "$2" "$ROOT/tests" "$3" "$4"
}

@test "extract: a symlink planted at a file's name is never written through" {
	echo victim > "$TMP/victim"
	# a link at every file of rank 0's view
	while IFS=$'\t' read -r path _; do
		mkdir -p "$TMP/out/$(dirname "$path")"
		ln -sf "$TMP/victim" "$TMP/out/$path"
	done < <($REF paths "$TMP/ckpt" --world 2 --rank 0)
	run "$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 2 --rank 0
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"exists; --force replaces it"* ]]
	[ "$(cat "$TMP/victim")" = victim ]
	# --force replaces the links themselves, not what they point at.
	"$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 2 --rank 0 --force
	[ "$(cat "$TMP/victim")" = victim ]
	[ -z "$(find "$TMP/out" -type l)" ]
	run $REF check "$TMP/ckpt" "$TMP/out" --world 2 --rank 0
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "extract: a directory symlink inside OUT is refused, even with --force" {
	mkdir -p "$TMP/out" "$TMP/elsewhere"
	ln -s "$TMP/elsewhere" "$TMP/out/optim"
	for force in "" --force; do
		run "$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 2 --rank 1 $force
		echo "$output"
		[ "$status" -eq 1 ]
		[[ "$output" == *"$TMP/out/optim: key 'optim."*"is a symlink; extract never writes through one"* ]]
		[ "${#lines[@]}" -eq 1 ]
		[ -z "$(ls -A "$TMP/elsewhere")" ]
	done
	# A link deeper down, and OUT itself given through a symlink (the
	# user's own path) is fine.
	rm "$TMP/out/optim"
	mkdir -p "$TMP/out/optim"
	ln -s "$TMP/elsewhere" "$TMP/out/optim/state"
	run "$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 2 --rank 1
	[ "$status" -eq 1 ]
	[[ "$output" == *"$TMP/out/optim/state: key"*"is a symlink"* ]]
	[ -z "$(ls -A "$TMP/elsewhere")" ]
	ln -s "$TMP/fresh" "$TMP/via-link"
	mkdir "$TMP/fresh"
	"$CKPTFS" extract "$TMP/ckpt" "$TMP/via-link" --world 2 --rank 1
	run $REF check "$TMP/ckpt" "$TMP/fresh" --world 2 --rank 1
	[ "$status" -eq 0 ]
}

@test "extract: an existing file (mode 0444 too) is kept unless --force" {
	"$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 3 --rank 0
	f=$(find "$TMP/out" -type f | head -1)
	echo precious > "$f"
	chmod 0444 "$f"
	run "$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 3 --rank 0
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"exists; --force replaces it"* ]]
	[ "$(cat "$f")" = precious ]
	"$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 3 --rank 0 --force
	run $REF check "$TMP/ckpt" "$TMP/out" --world 3 --rank 0
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$(find "$TMP/out" -name '.ckptfs-tmp-*')" ]
	# --force belongs to extract alone.
	run "$CKPTFS" ls "$TMP/ckpt" --force
	[ "$status" -eq 2 ]; [[ "$output" == *"unknown option '--force'"* ]]
}

@test "extract: a read that fails leaves no half-written file under a final name" {
	$PY "$ROOT/tests/make_zstd.py" corrupt "$TMP/zc"	# x: a corrupt frame, y: fine
	run "$CKPTFS" extract "$TMP/zc" "$TMP/out" --world 1 --rank 0 --jobs 1
	echo "$output"
	[ "$status" -eq 1 ]
	[ ! -e "$TMP/out/x" ]
	[ -z "$(find "$TMP/out" -name '.ckptfs-tmp-*')" ]
	# A good checkpoint extracted in many small groups: all whole.
	"$CKPTFS" extract "$TMP/ckpt" "$TMP/out2" --world 2 --rank 1 --jobs 2
	only_whole_files "$TMP/ckpt" "$TMP/out2" 2 1
}

@test "index: a symlink planted at the temporary name or at .ckptfs-index is never written through" {
	cp -r "$TORCH_CK/per_rank" "$TMP/tc"
	echo victim > "$TMP/victim"
	# The old temporary name was PATH.tmp.PID: plant it for the PID that
	# exec keeps.
	bash -c 'ln -s "$1" "$2/.ckptfs-index.tmp.$$"; exec "$3" index "$2"' _ \
		"$TMP/victim" "$TMP/tc" "$CKPTFS"
	[ "$(cat "$TMP/victim")" = victim ]
	[ -f "$TMP/tc/.ckptfs-index" ]
	[ ! -L "$TMP/tc/.ckptfs-index" ]
	rm -f "$TMP/tc"/.ckptfs-index.tmp.*
	# .ckptfs-index itself a link: replaced, the victim untouched.
	ln -sf "$TMP/victim" "$TMP/tc/.ckptfs-index"
	"$CKPTFS" index "$TMP/tc"
	[ "$(cat "$TMP/victim")" = victim ]
	[ -f "$TMP/tc/.ckptfs-index" ]
	[ ! -L "$TMP/tc/.ckptfs-index" ]
	# -o FILE the same; nothing else is left in its directory.
	mkdir "$TMP/idx"
	ln -s "$TMP/victim" "$TMP/idx/index"
	"$CKPTFS" index "$TMP/tc" -o "$TMP/idx/index"
	[ "$(cat "$TMP/victim")" = victim ]
	[ ! -L "$TMP/idx/index" ]
	[ "$(ls -A "$TMP/idx")" = index ]
	cmp "$TMP/idx/index" "$TMP/tc/.ckptfs-index"
}

@test "arguments: --world and --rank only together, 32-bit limits named, the ranks cap named" {
	run "$CKPTFS" ls "$TMP/ckpt" --world 2
	[ "$status" -eq 2 ]; [[ "$output" == *"rank is required with world"* ]]
	run "$CKPTFS" stats "$TMP/ckpt" --world 2
	[ "$status" -eq 2 ]; [[ "$output" == *"rank is required with world"* ]]
	run "$CKPTFS" ls "$TMP/ckpt" --rank 1
	[ "$status" -eq 2 ]; [[ "$output" == *"world is required with rank"* ]]
	for c in ls mount; do
		run "$CKPTFS" $c "$TMP/ckpt" "$MNT" --world 4294967296 --rank 0
		[ "$status" -ne 0 ]; [[ "$output" == *"world must be at most 4294967295, got '4294967296'"* ]]
	done
	run "$CKPTFS" "$TMP/ckpt" "$MNT" -o world=2,rank=18446744073709551617
	[ "$status" -ne 0 ]; [[ "$output" == *"rank must be at most 4294967295"* ]]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --world 100000 --ranks 0-99999
	echo "$output"
	[ "$status" -ne 0 ]; [[ "$output" == *"ranks '0-99999': the range 0-99999 holds 100000 ranks; a range may hold at most 65536"* ]]
	run "$CKPTFS" ls "$TMP/ckpt" --world
	[ "$status" -eq 2 ]; [[ "$output" == *"--world needs a value"* ]]
	not mountpoint -q "$MNT"
}

@test "arguments: getopt_long parsing, '--' ends the options" {
	cd "$TMP"
	cp -r ckpt ./-ck
	run "$CKPTFS" info -- -ck
	echo "$output"
	[ "$status" -eq 0 ]; [[ "$output" == *$'checkpoint\t-ck'* ]]
	run "$CKPTFS" ls --world=2 --rank=1 -- -ck
	[ "$status" -eq 0 ]
	[ "$output" = "$("$CKPTFS" ls ckpt --world 2 --rank 1)" ]
	# -- in a mount: the checkpoint is -nope, not an option.
	run "$CKPTFS" mount --world 2 --rank 0 -- -nope "$MNT"
	echo "$output"
	[ "$status" -ne 0 ]; [[ "$output" == *"-nope"*"No such file or directory"* ]]
	# options after the operands, and -oLIST
	start_mount "$TMP/-ck" "$MNT" -oworld=2,rank=1
	run $REF check "$TMP/ckpt" "$MNT" --world 2 --rank 1
	stop_mount
	[ "$status" -eq 0 ]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" -x
	[ "$status" -ne 0 ]; [[ "$output" == *"unknown option '-x'"* ]]
}

# python3 with ckptfs.py and this build's libckptfs (the sanitized one
# needs its runtimes loaded first).
pyload() {
	local pre=
	export CKPTFS_LIB="$(dirname "$CKPTFS")/libckptfs.so"
	if nm -D "$CKPTFS_LIB" | grep -q __asan_; then
		pre="LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0"
	fi
	env $pre PYTHONPATH="$ROOT/scripts" $PY "$@"
}

@test "--prefix that matches no key is an error listing the prefixes (CLI, mount, library, ckptfs.load)" {
	for p in nope; do
		run "$CKPTFS" ls "$TMP/ckpt" --prefix "$p"
		echo "$output"
		[ "$status" -eq 1 ]
		[[ "$output" == *"prefix '$p' matches no key; the prefixes (first path components) are: 'model', 'optim'"* ]]
		run "$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 2 --rank 0 --prefix "$p"
		[ "$status" -eq 1 ]; [[ "$output" == *"matches no key"* ]]
		run pyload -c '
import ckptfs, sys
try:
    ckptfs.load(sys.argv[1], 2, 1, prefix=sys.argv[2], backend="numpy")
except ValueError as e:
    print(type(e).__name__, "is a ValueError:", e)
    sys.exit(3)' "$TMP/ckpt" "$p"
		echo "$output"
		[ "$status" -eq 3 ]
		[[ "$output" == *"CheckpointError is a ValueError: "*"prefix '$p' matches no key"*"'model', 'optim'"* ]]
	done
	refuse_mount "$TMP/ckpt" "prefix 'nope' matches no key; the prefixes (first path components) are: 'model', 'optim'" --world 2 --rank 0 --prefix nope
	refuse_mount "$TMP/ckpt" "prefix must not be empty" -o world=2,rank=0,prefix=
	# An empty prefix: refused as the mount refuses it, by every form
	# (issue 27 item 5; was a view of nothing listing the prefixes).
	run "$CKPTFS" ls "$TMP/ckpt" --prefix ''
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs ls: prefix must not be empty" ]
	run "$CKPTFS" extract "$TMP/ckpt" "$TMP/out" --world 2 --rank 0 --prefix ''
	[ "$status" -eq 2 ]; [ "$output" = "ckptfs extract: prefix must not be empty" ]
	run pyload -c '
import ckptfs, sys
try:
    ckptfs.load(sys.argv[1], 2, 1, prefix="", backend="numpy")
except ValueError as e:
    print(type(e).__name__, "is a ValueError:", e)' "$TMP/ckpt"
	[ "$output" = "CheckpointError is a ValueError: prefix must not be empty" ]
	# A prefix that exists still works.
	[ "$("$CKPTFS" ls "$TMP/ckpt" --prefix optim | tail -n +2 | cut -f1 | cut -d/ -f1 | sort -u)" = optim ]
}

@test "manifest.tsv and ls escape tab, newline, CR and backslash: a key a<TAB>b.c<LF>d round-trips" {
	$PY - "$TMP/odd" "$ROOT/scripts" <<'PYEOF'
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
from native_writer import write_checkpoint
keys = ["a\tb.c\nd", "back\\slash.x\ry", "plain.w"]
data, sdm, st = b"", {}, []
for i, k in enumerate(keys):
    raw = np.arange(4 + i, dtype="<f4").tobytes()
    sdm[k] = {"type": "tensor", "dtype": "float32", "size": [4 + i],
              "chunks": [{"offsets": [0], "sizes": [4 + i]}]}
    st.append({"fqn": k, "offsets": [0], "relative_path": "d",
               "offset": len(data), "length": len(raw)})
    data += raw
write_checkpoint(sys.argv[1], {"d": data}, sdm, st)
PYEOF
	"$CKPTFS" ls "$TMP/odd" --world 1 --rank 0 > "$TMP/ls"
	start_mount "$TMP/odd" "$MNT"
	cp "$MNT/.ckptfs/manifest.tsv" "$TMP/manifest"
	run $PY - "$TMP/ls" "$TMP/manifest" "$MNT" <<'PYEOF'
import json, os, sys
def unescape(f):
    out, i = "", 0
    while i < len(f):
        if f[i] == "\\":
            out += {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[f[i + 1]]
            i += 2
        else:
            out += f[i]
            i += 1
    return out
want = {"a\tb/c\nd": 4, "back\\slash/x\ry": 5, "plain/w": 6}
for t in sys.argv[1:3]:
    lines = open(t, newline="").read().split("\n")
    assert lines[-1] == "" and len(lines) == 2 + len(want), lines
    rows = [l.split("\t") for l in lines[1:-1]]
    assert all(len(r) == 7 for r in rows), rows
    got = {unescape(r[0]): int(r[2]) for r in rows}
    assert got == want, got
    for p, n in want.items():
        assert os.path.getsize(os.path.join(sys.argv[3], p)) == 4 * n, p
json.load(open(os.path.join(sys.argv[3], ".ckptfs/view.json")))
print("round-trip ok")
PYEOF
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	cmp "$TMP/ls" "$TMP/manifest"
	"$CKPTFS" cat "$TMP/odd" $'a\tb.c\nd' --world 1 --rank 0 | cmp - <($PY -c 'import numpy as np, sys; sys.stdout.buffer.write(np.arange(4, dtype="<f4").tobytes())')
}

ST="$PY $ROOT/tests/make_safetensors.py"

@test "safetensors headers: a repeated field, a repeated or malformed __metadata__ are refused naming file and key" {
	while IFS='|' read -r case want; do
		$ST "$case" "$TMP/$case"
		refuse_mount "$TMP/$case" "$TMP/$case/model.safetensors: $want" --world 2 --rank 0
	done <<'EOF2'
field_twice|key 'x': byte 62: field 'shape' appears twice
metadata_twice|byte 91: key '__metadata__' appears twice
metadata_not_strings|key '__metadata__': byte 40: 'n' is a number; __metadata__ must be an object of strings
metadata_not_object|key '__metadata__': must be an object of strings, not an array
metadata_key_twice|key '__metadata__': byte 34: field 'format' appears twice
EOF2
}

@test "UTF-8: keys that are not UTF-8 are refused at open with the key escaped (native, torch, safetensors)" {
	# native: a key with the bytes ff fe
	$PY - "$TMP/nat" <<'PYEOF'
import msgpack, os, sys
os.makedirs(sys.argv[1])
open(sys.argv[1] + "/d", "wb").write(bytes(16))
k = b"a\xff\xfe.w"
open(sys.argv[1] + "/.metadata", "wb").write(msgpack.packb({
    "format": "tensorplay-dcp", "version": 1,
    "state_dict_metadata": {k: {"type": "tensor", "dtype": "float32", "size": [4],
                                "chunks": [{"offsets": [0], "sizes": [4]}]}},
    "storage_data": [{"fqn": k, "offsets": [0], "relative_path": "d",
                      "offset": 0, "length": 16}]}, use_bin_type=False))
PYEOF
	refuse_mount "$TMP/nat" "$TMP/nat/.metadata: state_dict_metadata: key 'a\\xff\\xfe.w' is not valid UTF-8 (byte 1)"
	run "$CKPTFS" ls "$TMP/nat"
	[ "$status" -eq 1 ]; [[ "$output" == *"key 'a\\xff\\xfe.w' is not valid UTF-8"* ]]
	# torch: a key ending in a lone surrogate (pickled as ed b3 bf)
	cp -r "$TORCH_CK/per_rank" "$TMP/tc"
	$PY - "$TMP/tc" "$ROOT/scripts" <<'PYEOF'
import dataclasses, pickle, sys
sys.path.insert(0, sys.argv[2])
import torch_dcp_compat
torch_dcp_compat.install()
p = sys.argv[1] + "/.metadata"
md = pickle.load(open(p, "rb"))
old = "model.bias"
md.state_dict_metadata[old + "\udcff"] = md.state_dict_metadata.pop(old)
md.storage_data = {(dataclasses.replace(mi, fqn=old + "\udcff") if mi.fqn == old else mi): si
                   for mi, si in md.storage_data.items()}
pickle.dump(md, open(p, "wb"))
PYEOF
	refuse_mount "$TMP/tc" "$TMP/tc/.metadata: state_dict_metadata: key 'model.bias\\xed\\xb3\\xbf' is not valid UTF-8 (byte 10)"
	run "$CKPTFS" index "$TMP/tc"
	[ "$status" -ne 0 ]; [[ "$output" == *"not valid UTF-8"* ]]
	# safetensors: lone surrogates, bytes that are not UTF-8, CESU-8
	while IFS='|' read -r case want; do
		$ST "$case" "$TMP/$case"
		refuse_mount "$TMP/$case" "$TMP/$case/model.safetensors: byte 3: string $want" --world 2 --rank 0
	done <<'EOF2'
key_lone_surrogate|"x\ud800" holds a lone surrogate
key_low_surrogate|"x\udc00\ud800" holds a lone surrogate
key_not_utf8|"x\xff\xfe" is not valid UTF-8
key_cesu8|"x\xed\xa0\x80" is not valid UTF-8
EOF2
}

@test "UTF-8: a surrogate pair is one 4-byte character; view.json and view.safetensors stay valid for any source path" {
	$ST key_pair "$TMP/pair"
	mkdir "$TMP/bad"$'\xff'
	$ST key_pair "$TMP/bad"$'\xff'/ck
	for ck in "$TMP/pair" "$TMP/bad"$'\xff'/ck; do
		start_mount "$ck" "$MNT"
		run $PY - "$MNT" "$ck" <<'PYEOF'
import json, os, struct, sys
mnt, ck = sys.argv[1], os.fsencode(sys.argv[2])
assert os.listdir(mnt.encode()) == [b".ckptfs", "x\U0001F600".encode()], os.listdir(mnt.encode())
v = json.loads(open(mnt + "/.ckptfs/view.json", "rb").read().decode("utf-8"))
if ck.decode("utf-8", "replace") != ck.decode("utf-8", "surrogateescape"):
    assert bytes.fromhex(v["source_bytes"]) == ck, v
    assert v["source"] == ck.decode("utf-8", "replace"), v
else:
    assert "source_bytes" not in v and v["source"] == ck.decode(), v
raw = open(mnt + "/.ckptfs/view.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n].decode("utf-8"))
assert list(h) == ["__metadata__", "x\U0001F600"], h
print("valid")
PYEOF
		echo "$output"
		stop_mount
		[ "$status" -eq 0 ]
	done
}

@test "model.safetensors.index.json governs: files it does not list are ignored with one warning line" {
	$ST stale_shards "$TMP/st"
	run "$CKPTFS" ls "$TMP/st"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'warning' <<< "$output")" -eq 1 ]
	[[ "${lines[0]}" == "ckptfs: warning: $TMP/st/model.safetensors.index.json does not list these files, so they are ignored: model-old.safetensors, z-extra.safetensors" ]]
	[[ "$output" != *stale* ]]
	$ST expect "$TMP/st" 3 1 > "$TMP/expect"
	check_expected_views "$TMP/st" 3 1
	[ "$(grep -c 'ckptfs: warning: .*does not list these files' "$TMP/daemon.log")" -eq 1 ]
}

@test "sid-chroot.sh mirror: the machine's apt sources (one-line and deb822), CKPTFS_SID_MIRROR overrides; no mirror host in the repository" {
	local sid="$ROOT/scripts/sid-chroot.sh" etc="$TMP/apt" own
	# this machine's own sources give one; the entries below are made
	# from it (its host and path, numbered), so that no mirror's address
	# is written here
	run "$sid" mirror
	echo "$output"
	[ "$status" -eq 0 ]; [[ "$output" == http* ]]
	own=${output#*://}
	# at SCHEME N: entry N's URI
	at() { echo "$1://$own/$2"; }
	mkdir -p "$etc/sources.list.d"
	cat > "$etc/sources.list" <<EOF2
# deb $(at http 3) bookworm main
deb-src $(at http 12) bookworm main
deb [signed-by=/usr/share/keyrings/x.gpg arch=amd64] $(at https 2) nodistro main
deb $(at http 10)-security bookworm-security main
deb [ arch=amd64 ] $(at http 6)/ bookworm main contrib
deb $(at http 5) bookworm main
EOF2
	run env CKPTFS_APT_ETC="$etc" "$sid" mirror
	echo "$output"
	[ "$status" -eq 0 ]; [ "$output" = "$(at http 6)" ]
	# deb822 only, after .list files without a Debian archive
	rm "$etc/sources.list"
	printf 'deb %s stable-updates main\n' "$(at https 9)" > "$etc/sources.list.d/a.list"
	cat > "$etc/sources.list.d/b.sources" <<EOF2
Types: deb
URIs: $(at http 4)
Suites: bookworm
Enabled: no

Types: deb-src
URIs: $(at http 12)
Suites: sid

# $(at http 11)/20250520T000000Z
Types: deb
URIs: $(at https 7) $(at https 13)
Suites: trixie trixie-updates
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----
EOF2
	printf 'Types: deb\nURIs: %s\nSuites: sid\n' "$(at http 14)" > "$etc/sources.list.d/z.sources"
	run env CKPTFS_APT_ETC="$etc" "$sid" mirror
	echo "$output"
	[ "$status" -eq 0 ]; [ "$output" = "$(at https 7)" ]
	run env CKPTFS_APT_ETC="$etc" CKPTFS_SID_MIRROR="$(at http 8)" "$sid" mirror
	[ "$status" -eq 0 ]; [ "$output" = "$(at http 8)" ]
	# nothing usable: an error naming the override
	rm "$etc/sources.list.d/b.sources" "$etc/sources.list.d/z.sources"
	run env CKPTFS_APT_ETC="$etc" "$sid" mirror
	echo "$output"
	[ "$status" -eq 1 ]; [[ "$output" == *"set CKPTFS_SID_MIRROR"* ]]
	# no Debian host name anywhere in the repository
	run grep -rIEn --exclude-dir=.git --exclude-dir='build*' '[a-z0-9-]+\.debian\.org' "$ROOT"
	echo "$output"
	[ "$status" -eq 1 ]
}

# The index of CKPT with two equal-length records' relative_path, offset
# and crc32 swapped, as KIND: "edited" keeps the stamp's image hash,
# "forged" recomputes it.  Prints the two keys.
swap_records() {	# CKPT KIND
	$PY - "$1/.ckptfs-index" "$2" <<'PYEOF'
import msgpack, sys, xxhash
path, kind = sys.argv[1], sys.argv[2]
img = msgpack.unpackb(open(path, "rb").read(), raw=False)
recs = img["storage_data"]
pair = None
for i, a in enumerate(recs):
    for b in recs[i + 1:]:
        if (a["length"] == b["length"] and a["length"] > 8 and a.get("crc32")
                and b.get("crc32") and a["fqn"] != b["fqn"]):
            pair = (a, b)
            break
    if pair:
        break
a, b = pair
for f in ("relative_path", "offset", "crc32", "zip_header"):  # a forger moves all
    a[f], b[f] = b[f], a[f]
body = b"".join(msgpack.packb(k) + msgpack.packb(v)
                for k, v in img.items() if k not in ("format", "version", "source"))
if kind == "forged":
    img["source"]["image_xxh3"] = xxhash.xxh3_64_intdigest(body)
out = bytes([0x80 | len(img)])                      # a fixmap
for k in ("format", "version", "source"):
    out += msgpack.packb(k) + msgpack.packb(img[k])
open(path, "wb").write(out + body)
print(a["fqn"], b["fqn"])
PYEOF
}

@test "index trust: an edited, forged or stale .ckptfs-index is refused at mount or caught by verify, naming the mismatch" {
	cp -a "$TORCH_CK/per_rank" "$TMP/tc"
	"$CKPTFS" index "$TMP/tc"
	cp "$TMP/tc/.ckptfs-index" "$TMP/good-index"
	# edited: the records no longer hash to the stamp
	read -r k1 k2 < <(swap_records "$TMP/tc" edited)
	echo "swapped $k1 $k2"
	refuse_mount "$TMP/tc" "$TMP/tc/.ckptfs-index: edited: its records hash to" --world 1 --rank 0
	run "$CKPTFS" cat "$TMP/tc" "$k1" --world 1 --rank 0
	[ "$status" -ne 0 ]; [[ "$output" == *"edited"*"run 'ckptfs index $TMP/tc' again"* ]]
	# forged (hash recomputed): verify finds both records in the archives
	cp "$TMP/good-index" "$TMP/tc/.ckptfs-index"
	swap_records "$TMP/tc" forged
	run "$CKPTFS" verify "$TMP/tc"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$TMP/tc/.ckptfs-index: key '$k1'"*"the index says"*"the checkpoint's own archives say"* ]]
	[[ "$output" == *"key '$k2'"* ]]
	[[ "$output" == *"; 2 index records differ from the checkpoint's archives"* ]]
	# a good index verifies clean
	cp "$TMP/good-index" "$TMP/tc/.ckptfs-index"
	run "$CKPTFS" verify "$TMP/tc"
	echo "$output"
	[ "$status" -eq 0 ]; [[ "$output" == *"; 0 index records differ"* ]]
	# stale: a data file rewritten since (its mtime), the index refused
	# by default and when given
	touch "$TMP/tc/__1_0.distcp"
	refuse_mount "$TMP/tc" "$TMP/tc/.ckptfs-index: stale: $TMP/tc/__1_0.distcp is " --world 1 --rank 0
	refuse_mount "$TMP/tc" "run 'ckptfs index $TMP/tc' again" --world 1 --rank 0 -o index="$TMP/good-index"
	"$CKPTFS" index "$TMP/tc"
	start_mount "$TMP/tc" "$MNT" --world 2 --rank 1
	stop_mount
	# a copy that keeps modification times keeps its index valid
	cp -a "$TMP/tc" "$TMP/tc-copy"
	run "$CKPTFS" info "$TMP/tc-copy"
	[ "$status" -eq 0 ]; [[ "$output" == *"via its .ckptfs-index"* ]]
	# an index of another .metadata
	cp -a "$TORCH_CK/per_item" "$TMP/ti"
	cp "$TMP/tc/.ckptfs-index" "$TMP/ti/.ckptfs-index"
	refuse_mount "$TMP/ti" "$TMP/ti/.ckptfs-index: index was not built from $TMP/ti/.metadata as it is now" --world 1 --rank 0
	# an index without the data files' stamp (an older ckptfs)
	$PY -c '
import msgpack, sys
p = sys.argv[1]
img = msgpack.unpackb(open(p, "rb").read(), raw=False)
del img["source"]["files"], img["source"]["image_xxh3"]
open(p, "wb").write(msgpack.packb(img))' "$TMP/tc/.ckptfs-index"
	refuse_mount "$TMP/tc" "written by an older ckptfs, without the stamp of its data files; run 'ckptfs index $TMP/tc' again" --world 1 --rank 0
}

# FILE holds no control byte but newlines and the tabs of a table.
no_raw_controls() {	# FILE
	$PY - "$1" <<'PYEOF'
import sys
data = open(sys.argv[1], "rb").read()
bad = [hex(b) for b in data if (b < 0x20 and b not in (9, 10)) or b == 0x7f]
assert not bad, (bad[:10], data[:400])
PYEOF
}

@test "names in messages: ESC [ 31m, CR, LF and a 2,000-character key or path are escaped in ckptfs info, a mount's log and CheckpointError, and the reason shows (issue 26 item 11)" {
	NASTY="$PY $ROOT/tests/make_nasty_names.py"
	$NASTY "$TMP/esc" short-esc
	$NASTY "$TMP/long" short-long
	$NASTY "$TMP/ok"
	# ckptfs info: refused at open, one line naming the file and the key
	run "$CKPTFS" info "$TMP/esc"
	[ "$status" -eq 1 ]
	printf '%s' "$output" > "$TMP/out"
	no_raw_controls "$TMP/out"
	[[ "$output" == *"/d\\x1b[31m\\r\\nz.distcp: key 'w\\x1b[31mred\\r\\nx.weight': data file has 127 bytes, its record ends at 128" ]]
	run "$CKPTFS" info "$TMP/long"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"kkkk.w': data file has 127 bytes, its record ends at 128" ]]
	# a checkpoint that opens: info's data files are escaped
	"$CKPTFS" info "$TMP/ok" > "$TMP/out"
	no_raw_controls "$TMP/out"
	grep -qF $'\td\\x1b[31m\\r\\nz.distcp\t128 bytes' "$TMP/out"
	# a mount's log: both files cut short under the mount, each read fails
	start_mount "$TMP/ok" "$MNT"
	truncate -s 100 "$TMP/ok/d"$'\e[31m\r\n'"z.distcp"
	find "$TMP/ok" -name 'f*.distcp' -exec truncate -s 100 {} +
	local f n=0
	while IFS= read -r -d '' f; do
		n=$((n + 1))
		not cat "$f" > /dev/null
	done < <(find "$MNT" -type f -not -path '*/.ckptfs/*' -print0)
	[ "$n" -eq 2 ]
	stop_mount
	cat "$TMP/daemon.log"
	no_raw_controls "$TMP/daemon.log"
	grep -qF "key 'w\\x1b[31mred\\r\\nx.weight': $TMP/ok/d\\x1b[31m\\r\\nz.distcp: offset 0: file ends 100 bytes into a 128-byte read" "$TMP/daemon.log"
	grep -q "ffff.distcp: offset 0: file ends 100 bytes into a 128-byte read (truncated?)$" "$TMP/daemon.log"
	# Python: CheckpointError's text
	pyload - "$TMP/esc" "$TMP/long" <<'PYEOF'
import sys
import ckptfs
for d in sys.argv[1:]:
    try:
        ckptfs.open(d)
    except ckptfs.CheckpointError as e:
        s = str(e)
        assert not [c for c in s if ord(c) < 0x20 or ord(c) == 0x7f], repr(s[:300])
        assert s.endswith("data file has 127 bytes, its record ends at 128"), s[-200:]
    else:
        raise AssertionError(d + " opened")
PYEOF
}

# The index at PATH as an older ckptfs wrote it, before zip_header: no
# "guards" in its stamp, no zip_header in its records, the image hash
# recomputed (so only the missing guards tell).
old_index() {	# PATH
	$PY - "$1" <<'PYEOF'
import msgpack, sys, xxhash
path = sys.argv[1]
img = msgpack.unpackb(open(path, "rb").read(), raw=False)
assert img["source"].pop("guards") == 1
n = 0
for r in img["storage_data"]:
    n += r.pop("zip_header", None) is not None
assert n > 0
body = b"".join(msgpack.packb(k) + msgpack.packb(v)
                for k, v in img.items() if k not in ("format", "version", "source"))
img["source"]["image_xxh3"] = xxhash.xxh3_64_intdigest(body)
out = bytes([0x80 | len(img)])
for k in ("format", "version", "source"):
    out += msgpack.packb(k) + msgpack.packb(img[k])
open(path, "wb").write(out + body)
PYEOF
}

@test "index trust: an index written before zip_header (.ckptfs-index, --index FILE, a cache file) is never used unchecked: refused with 'rebuild it with ckptfs index', a cache entry indexed again (issue 26 item 1)" {
	cp -a "$TORCH_CK/per_rank" "$TMP/tc"
	"$CKPTFS" index "$TMP/tc"
	cp "$TMP/tc/.ckptfs-index" "$TMP/idx"
	old_index "$TMP/tc/.ckptfs-index"
	old_index "$TMP/idx"
	refuse_mount "$TMP/tc" "$TMP/tc/.ckptfs-index: written by an older ckptfs, before records carried their zip_header" --world 1 --rank 0
	run "$CKPTFS" info "$TMP/tc"
	echo "$output"
	[ "$status" -ne 0 ]; [[ "$output" == *"rebuild it with 'ckptfs index $TMP/tc'"* ]]
	rm "$TMP/tc/.ckptfs-index"
	refuse_mount "$TMP/tc" "$TMP/idx: written by an older ckptfs, before records carried their zip_header" --world 1 --rank 0 -o index="$TMP/idx"
	# the node-local cache: an old entry is indexed again and replaced
	# (eager opens: a lazy one stores records not located yet, which
	# carry no zip_header to take away)
	CKPTFS_EAGER_INDEX=1 "$CKPTFS" info "$TMP/tc" --index-cache "$TMP/cache" >/dev/null
	local f
	f=$(ls "$TMP/cache"/*.ckptfs-index)
	old_index "$f"
	CKPTFS_EAGER_INDEX=1 run "$CKPTFS" info "$TMP/tc" --index-cache "$TMP/cache"
	echo "$output"
	[ "$status" -eq 0 ]
	$PY -c '
import msgpack, sys
img = msgpack.unpackb(open(sys.argv[1], "rb").read(), raw=False)
assert img["source"]["guards"] == 1
assert all("zip_header" in r for r in img["storage_data"] if r["offsets"]), "no guards"' "$f"
	# rebuilt, it is taken again
	"$CKPTFS" index "$TMP/tc"
	start_mount "$TMP/tc" "$MNT" --world 1 --rank 0
	stop_mount
}

@test "guards: two keys viewing one record (native, zip_header each): a read of the longer one past the shorter's end still checks its guard, so a changed header is EIO, never other bytes" {
	mkdir "$TMP/ov"
	$PY - "$TMP/ov" <<'PYEOF'
import msgpack, os, sys, xxhash
import numpy as np
out = sys.argv[1]
hdr = bytes(range(64))
a = np.arange(16384, dtype="<f4")
open(os.path.join(out, "d.distcp"), "wb").write(hdr + a.tobytes())
def ent(n):
    return {"type": "tensor", "dtype": "float32", "size": [n],
            "chunks": [{"offsets": [0], "sizes": [n]}]}
def rec(k, n, g):
    return {"fqn": k, "offsets": [0], "relative_path": "d.distcp",
            "offset": 64, "length": 4 * n,
            "zip_header": [g, 32, xxhash.xxh3_64_intdigest(hdr[g:g + 32])]}
# "b" views the first 4 KiB of "a"'s record; each has its own header
open(os.path.join(out, ".metadata"), "wb").write(msgpack.packb({
    "format": "tensorplay-dcp", "version": 1,
    "state_dict_metadata": {"a": ent(16384), "b": ent(1024)},
    "storage_data": [rec("a", 16384, 0), rec("b", 1024, 32)]}))
PYEOF
	start_mount "$TMP/ov" "$MNT"
	# the header of "a" changes (the record moved), the file keeps its size
	printf 'XXXXXXXX' | dd of="$TMP/ov/d.distcp" bs=1 seek=0 conv=notrunc 2>/dev/null
	run dd if="$MNT/a" of=/dev/null bs=4096 skip=8 count=1
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	run dd if="$MNT/a" of=/dev/null bs=4096 count=1
	[ "$status" -ne 0 ]
	stop_mount
	cat "$TMP/daemon.log"
	grep -q "key 'a'" "$TMP/daemon.log"
}
