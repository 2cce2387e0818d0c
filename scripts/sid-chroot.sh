#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The newest PyTorch for the tests: a Debian sid chroot with python3-torch,
# built once with debootstrap and cached (outside the work tree, so every
# clone and CI run on this machine reuses it).
#
#   scripts/sid-chroot.sh build      build it unless it is there (2-3 min)
#   scripts/sid-chroot.sh path       print its directory
#   scripts/sid-chroot.sh run CMD... run CMD inside, with /proc, /dev,
#                                    /dev/shm and /sys bound, the work tree
#                                    bound at /ckptfs.PID (each run its
#                                    own, so runs from several clones do
#                                    not mix; "@ROOT@" in CMD's arguments
#                                    becomes that path), USE_LIBUV=0
#                                    (gloo); the binds are undone when CMD
#                                    ends
#
# CKPTFS_SID overrides the directory (default /var/cache/ckptfs/sid).
# Inside, CKPTFS_LIB is the work tree's build/libckptfs.so (the host's
# CKPTFS_LIB names a path outside the chroot); CKPTFS_CHROOT_LIB, a path
# inside it, overrides that.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${CKPTFS_SID:-/var/cache/ckptfs/sid}
MIRROR=${CKPTFS_SID_MIRROR:-http://deb.debian.org/debian}
PKGS=python3-torch,python3-numpy,python3-safetensors,python3-zstandard,python3-msgpack,libxxhash0,zlib1g

build() {
	[ -f "$DIR/.ckptfs-ready" ] && return 0
	if ! command -v debootstrap >/dev/null; then
		"$ROOT/scripts/install-deps.sh" debootstrap >&2
	fi
	rm -rf "$DIR.tmp"
	mkdir -p "$(dirname "$DIR")"
	echo "sid-chroot: debootstrap sid into $DIR (2-3 minutes, once)" >&2
	debootstrap --variant=minbase --include="$PKGS" sid "$DIR.tmp" "$MIRROR" >&2
	chroot "$DIR.tmp" /usr/bin/python3 -c 'import torch, numpy; print("sid-chroot: torch", torch.__version__)' >&2
	touch "$DIR.tmp/.ckptfs-ready"
	rm -rf "$DIR"
	mv "$DIR.tmp" "$DIR"
}

# Bind what gloo and torch need, run, and undo the binds in any case.
BOUND=()
unbind() {
	local i
	for ((i = ${#BOUND[@]} - 1; i >= 0; i--)); do
		umount "${BOUND[$i]}" 2>/dev/null || umount -l "${BOUND[$i]}" || true
	done
	BOUND=()
}

RUN_IN="/ckptfs.$$"

run() {
	local m in=$RUN_IN args=() a
	build
	mkdir -p "$DIR$in"
	trap 'unbind; rmdir "$DIR$RUN_IN" 2>/dev/null || true' EXIT
	for m in proc dev dev/shm sys; do
		mkdir -p "$DIR/$m"
		mount --bind "/$m" "$DIR/$m"
		BOUND+=("$DIR/$m")
	done
	mount --bind "$ROOT" "$DIR$in"
	BOUND+=("$DIR$in")
	for a in "$@"; do
		args+=("${a//@ROOT@/$in}")
	done
	chroot "$DIR" /usr/bin/env USE_LIBUV=0 PYTHONDONTWRITEBYTECODE=1 \
		UCX_LOG_LEVEL=fatal \
		CKPTFS_LIB="${CKPTFS_CHROOT_LIB:-$in/build/libckptfs.so}" "${args[@]}"
}

case "${1:-}" in
build) build ;;
path) echo "$DIR" ;;
run) shift; run "$@" ;;
*) sed -n '3,18p' "$0"; exit 2 ;;
esac
