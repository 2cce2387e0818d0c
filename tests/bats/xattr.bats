#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Extended attributes on view files (user.ckptfs.*), checked against the
# reference, and getxattr/listxattr semantics from their man pages.

load helpers

setup() { common_setup; }
teardown() { common_teardown; }

check_attrs() {
	run $PY -c '
import os, sys
sys.path.insert(0, sys.argv[1])
import reference
ckpt, mnt, w, r = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
layout = sys.argv[6] or None
dtype = sys.argv[7] or None
bad = 0
exp = reference.expected_attrs(ckpt, w, r, layout, dtype)
for rel, want in exp.items():
    p = os.path.join(mnt, rel)
    names = os.listxattr(p)
    if sorted(names) != sorted(want):
        print(rel, "names", names); bad += 1
    for k, v in want.items():
        got = os.getxattr(p, k).decode()
        if got != v:
            print(rel, k, repr(got), "want", repr(v)); bad += 1
print(len(exp), "files,", bad, "problems")
sys.exit(1 if bad else 0)' "$ROOT/tests" "$@"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "xattrs match the reference (plain, layout, dtype, --ranks)" {
	$GEN "$TMP/ckpt" --seed 51 --keys 40
	start_mount "$TMP/ckpt" "$MNT" --world 3 --rank 2
	check_attrs "$TMP/ckpt" "$MNT" 3 2 "" ""
	stop_mount
	$PY "$ROOT/tests/gen_layout.py" "$TMP/ckpt" "$TMP/layout" --split 1
	start_mount "$TMP/ckpt" "$MNT" --world 2 --ranks 0-1 --layout "$TMP/layout" --dtype bfloat16
	check_attrs "$TMP/ckpt" "$MNT/rank1" 2 1 "$TMP/layout" bfloat16
	check_attrs "$TMP/ckpt" "$MNT/rank0" 2 0 "$TMP/layout" bfloat16
	stop_mount
}

@test "getfattr shows them; size 0, short buffers and missing names behave as documented" {
	$BAD ok "$TMP/ckpt"
	start_mount "$TMP/ckpt" "$MNT" --world 4 --rank 1
	f=$MNT/optim/state/w/exp_avg
	[ "$(getfattr --only-values -n user.ckptfs.shape "$f")" = "2,8" ]
	[ "$(getfattr --only-values -n user.ckptfs.offsets "$f")" = "2,0" ]
	[ "$(getfattr --only-values -n user.ckptfs.kind "$MNT/optim/param_groups")" = bytes ]
	run $PY -c '
import ctypes, ctypes.util, errno, os, sys
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
p = sys.argv[1].encode()
n = libc.getxattr(p, b"user.ckptfs.fqn", None, 0)
assert n == len("optim.state.w.exp_avg"), n
buf = ctypes.create_string_buffer(4)
assert libc.getxattr(p, b"user.ckptfs.fqn", buf, 4) == -1
assert ctypes.get_errno() == errno.ERANGE
assert libc.getxattr(p, b"user.nope", buf, 4) == -1
assert ctypes.get_errno() == errno.ENODATA
n = libc.listxattr(p, None, 0)
assert n == sum(len(x) + 1 for x in os.listxattr(sys.argv[1])), n
assert libc.listxattr(p, buf, 4) == -1 and ctypes.get_errno() == errno.ERANGE
d = sys.argv[2].encode()
assert libc.getxattr(d, b"user.ckptfs.fqn", buf, 4) == -1
assert ctypes.get_errno() == errno.ENODATA
assert libc.listxattr(d, None, 0) == 0
print("ok")' "$f" "$MNT/optim"
	echo "$output"
	[ "$output" = ok ]
	stop_mount
}
