#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The .ckptfs/ directory (view.json, manifest.tsv, view.safetensors) and
# --format npy views, checked with readers written here, not by the C code.

load helpers

setup() {
	common_setup
	$GEN "$TMP/ckpt" --seed 81 --keys 40
}
teardown() { common_teardown; }

# A safetensors reader written from the format's spec.
ST_CHECK='
import json, os, struct, sys
sys.path.insert(0, sys.argv[1])
import reference
ck, path, w, r, dtype = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] or None
kinds = {}
exp = reference.expected(ck, w, r, dtype=dtype, kinds=kinds)
meta = reference.load(ck)
by_fqn = {"/".join(reference.view_path(f, meta)): f for f in meta["state_dict_metadata"]}
attrs = reference.expected_attrs(ck, w, r, dtype=dtype)
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
assert (8 + n) % 8 == 0, "data not 8-byte aligned"
head = json.loads(data[8:8 + n])
body = data[8 + n:]
md = head.pop("__metadata__")
assert md == {"world": str(w), "rank": str(r), "source": os.path.realpath(ck)}, md
names = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
         "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int64": "I64",
         "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}
ends = sorted((v["data_offsets"][0], v["data_offsets"][1]) for v in head.values())
pos = 0
for b, e in ends:
    assert b == pos, "hole or overlap in the data"
    pos = e
assert pos == len(body), "data not fully indexed"
n_t = 0
for rel, want in exp.items():
    if kinds[rel] == "bytes":
        continue
    fqn = by_fqn[rel]
    t = head[fqn]
    assert t["dtype"] == names[kinds[rel]], (fqn, t["dtype"])
    shape = [int(x) for x in attrs[rel]["user.ckptfs.shape"].split(",") if x]
    assert t["shape"] == shape, (fqn, t["shape"], shape)
    got = body[t["data_offsets"][0]:t["data_offsets"][1]]
    assert got == want or (dtype and reference.same_floats(got, want, kinds[rel])), fqn
    n_t += 1
assert n_t == len(head), (n_t, len(head))
print(n_t, "tensors in view.safetensors ok")
'

@test ".ckptfs/view.json and manifest.tsv describe the view" {
	start_mount "$TMP/ckpt" "$MNT" --world 3 --rank 2 --prefix optim
	ls -a "$MNT" | grep -qx .ckptfs
	run $PY -c '
import json, sys
j = json.load(open(sys.argv[1] + "/.ckptfs/view.json"))
assert j["world"] == 3 and j["rank"] == 2 and j["prefix"] == "optim", j
assert j["format_version"] == 1 and j["format"] == "raw", j
print(j["files"], j["total_bytes"])' "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	want=$($REF paths "$TMP/ckpt" --world 3 --rank 2 --prefix optim | awk -F'\t' '{ n++; s += $2 } END { print n, s }')
	[ "$output" = "$want" ]
	"$CKPTFS" ls "$TMP/ckpt" --world 3 --rank 2 --prefix optim | diff - "$MNT/.ckptfs/manifest.tsv"
	[ -z "$(getfattr -d -m - "$MNT/.ckptfs/view.json" 2>/dev/null)" ]
	stop_mount
}

@test ".ckptfs/view.safetensors: a standard reader sees every tensor of the view" {
	for wr in 1:0 4:3; do
		start_mount "$TMP/ckpt" "$MNT" --world "${wr%%:*}" --rank "${wr##*:}"
		run $PY -c "$ST_CHECK" "$ROOT/tests" "$TMP/ckpt" "$MNT/.ckptfs/view.safetensors" "${wr%%:*}" "${wr##*:}" ""
		echo "$output"
		[ "$status" -eq 0 ]
		# mmap-able, and reads at odd offsets agree with a whole read.
		$PY -c '
import mmap, sys
p = sys.argv[1]
whole = open(p, "rb").read()
with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
    assert m[:] == whole
    for off in range(0, len(whole), 977):
        f.seek(off); assert f.read(1500) == whole[off:off + 1500]' "$MNT/.ckptfs/view.safetensors"
		stop_mount
	done
	start_mount "$TMP/ckpt" "$MNT" --world 2 --ranks 0-1 --dtype bfloat16
	run $PY -W ignore -c "$ST_CHECK" "$ROOT/tests" "$TMP/ckpt" "$MNT/rank1/.ckptfs/view.safetensors" 2 1 bfloat16
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
}

@test "--format npy: NAME.npy files load with numpy.load(mmap_mode='r') and match" {
	start_mount "$TMP/ckpt" "$MNT" --world 3 --rank 1 --format npy
	run $PY -W ignore -c '
import os, sys, numpy as np
sys.path.insert(0, sys.argv[1])
import reference
kinds = {}
exp = reference.expected(sys.argv[2], 3, 1, kinds=kinds)
attrs = reference.expected_attrs(sys.argv[2], 3, 1)
n = 0
for rel, want in exp.items():
    p = os.path.join(sys.argv[3], rel)
    if kinds[rel] == "bytes":
        assert open(p, "rb").read() == want
        continue
    a = np.load(p + ".npy", mmap_mode="r")
    shape = tuple(int(x) for x in attrs[rel]["user.ckptfs.shape"].split(",") if x)
    assert a.shape == shape and a.tobytes() == want, rel
    assert os.getxattr(p + ".npy", "user.ckptfs.dtype").decode() == kinds[rel]
    assert os.path.getsize(p + ".npy") % 64 == len(want) % 64
    n += 1
print(n, "npy files ok")' "$ROOT/tests" "$TMP/ckpt" "$MNT"
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	start_mount "$TMP/ckpt" "$MNT" -o world=2,rank=0,format=npy,dtype=float32
	run $PY -c '
import glob, numpy as np, sys
fs = glob.glob(sys.argv[1] + "/**/*.npy", recursive=True)
assert fs and all(np.load(f, mmap_mode="r").dtype.kind in "fiub" for f in fs)
print(len(fs))' "$MNT"
	stop_mount
	[ "$status" -eq 0 ]
	run "$CKPTFS" mount "$TMP/ckpt" "$MNT" --format csv
	[ "$status" -ne 0 ]; [[ "$output" == *"format must be raw or npy"* ]]
}

@test "a key named .ckptfs is refused: the name is reserved" {
	$PY - "$TMP/bad" <<'PY'
import os, sys, msgpack
out = sys.argv[1]; os.makedirs(out)
open(os.path.join(out, "d"), "wb").write(b"\0" * 4)
msgpack.dump({"format": "tensorplay-dcp", "version": 1,
    "state_dict_metadata": {".ckptfs.x": {"type": "bytes"}},
    "planner_data": {".ckptfs.x": [".ckptfs", "x"]},
    "storage_data": [{"fqn": ".ckptfs.x", "offsets": None, "relative_path": "d",
        "offset": 0, "length": 4}]}, open(os.path.join(out, ".metadata"), "wb"))
PY
	run "$CKPTFS" mount "$TMP/bad" "$MNT"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"key '.ckptfs.x' needs '.ckptfs', which is reserved"* ]]
}
