#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make demo`: mount the built-in demo checkpoint (demo/ckpt, 4 saving
# ranks) as rank 3 of a new world of 8, show the view from the shell and
# from numpy, check it against the independent reference, and unmount;
# then print the next three commands a newcomer types.
set -euo pipefail
CKPTFS=${1:-build/ckptfs}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CKPT=$ROOT/demo/ckpt
MNT=$(mktemp -d /tmp/ckptfs-demo.XXXXXX)

cleanup() {
	if mountpoint -q "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
	fi
	for _ in $(seq 100); do pgrep -f "ckptfs mount $CKPT $MNT" >/dev/null || break; sleep 0.05; done
	rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say "ckptfs mount demo/ckpt $MNT --world 8 --rank 3"
"$CKPTFS" mount "$CKPT" "$MNT" --world 8 --rank 3

say "ls -lR $MNT"
ls -lR "$MNT"

say "od -f $MNT/optim/state/layer1.weight/exp_avg   # [10,4], cs=ceil(10/8)=2: rank 3 has rows 6-7"
od -A d -f "$MNT/optim/state/layer1.weight/exp_avg"

say "od -f $MNT/optim/state/layer2.weight/exp_avg   # saved in dim-1 shards, gathered on read: row 3"
od -A d -f "$MNT/optim/state/layer2.weight/exp_avg"

say "cat $MNT/optim/param_groups                    # bytes entries pass through"
cat "$MNT/optim/param_groups"; echo

say "python3 -c 'numpy.memmap(...)'"
/usr/bin/python3 - "$MNT" <<'PY'
import sys, numpy as np
mnt = sys.argv[1]
a = np.memmap(f"{mnt}/optim/state/layer1.weight/exp_avg", dtype="<f4", mode="r")
print("layer1.weight exp_avg, rank 3 of 8:", a.reshape(-1, 4))
s = np.fromfile(f"{mnt}/optim/state/layer1.weight/step", dtype="<f4")
print("step (0-d, whole on every rank):", s)
e = np.fromfile(f"{mnt}/optim/state/layer3.weight/exp_avg", dtype="<f4")
print("layer3.weight exp_avg ([3,6], cs=ceil(3/8)=1): rank 3 gets", e.size, "elements")
PY

say "tests/reference.py check   # every file against the independent numpy reference"
/usr/bin/python3 "$ROOT/tests/reference.py" check "$CKPT" "$MNT" --world 8 --rank 3

say "ckptfs umount $MNT"
"$CKPTFS" umount "$MNT"

say "python3 -c 'ckptfs.load(...)'   # the same view without a mount: libckptfs reads the data files directly"
lib="$(dirname "$CKPTFS")/libckptfs.so"
pre=()
# A sanitized build's library (SAN=...) needs its runtimes loaded first.
if nm -D "$lib" 2>/dev/null | grep __asan_ >/dev/null; then
	pre=(LD_PRELOAD="$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so)" ASAN_OPTIONS=detect_leaks=0)
fi
env "${pre[@]}" CKPTFS_LIB="$lib" /usr/bin/python3 - "$ROOT" "$CKPT" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/scripts")
import ckptfs
sd = ckptfs.load(sys.argv[2], world=8, rank=3, backend="numpy")
print("layer1.weight exp_avg, rank 3 of 8:", sd["optim"]["state"]["layer1.weight"]["exp_avg"])
PY

# What a newcomer types next, with the binary where `make` left it (the
# packages, the wheel or `make install` put ckptfs on PATH instead:
# docs/install.md).
bin=$CKPTFS
case $bin in "$ROOT"/*) bin=${bin#"$ROOT"/} ;; esac
cat <<NEXT

Next, from $ROOT (ckptfs is $bin until you install it: docs/install.md):
  $bin info demo/ckpt
  mkdir -p /tmp/view && $bin mount demo/ckpt /tmp/view --world 8 --rank 3
  $bin umount /tmp/view
NEXT
