#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A fresh Debian 12 for testing the packages (tests/bats/packages.bats):
# a minimal bookworm chroot built once with debootstrap and cached, and
# each run on a pristine overlay of it, thrown away afterwards.
#
#   scripts/bookworm-chroot.sh build     build it unless it is there
#                                        (1-3 minutes, once)
#   scripts/bookworm-chroot.sh path      print its directory
#   scripts/bookworm-chroot.sh enter DIR mount a pristine copy at DIR
#                                        (an overlayfs over the cache;
#                                        its changes in DIR.upper) with
#                                        /proc, /sys, /dev/fuse, and
#                                        apt's download cache bound
#   scripts/bookworm-chroot.sh leave DIR undo enter and remove the copy
#
# The mirror is the one sid-chroot.sh reads from the machine's apt
# sources (scripts/sid-chroot.sh mirror; CKPTFS_SID_MIRROR overrides it).
# CKPTFS_BOOKWORM overrides the directory (default
# /var/cache/ckptfs/bookworm); downloaded packages are kept in
# DIR.debs, so a run fetches only what the last did not.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${CKPTFS_BOOKWORM:-/var/cache/ckptfs/bookworm}
APT_OPTS=(-o Acquire::Check-Valid-Until=false)

build() {
	local m
	[ -f "$DIR/.ckptfs-ready" ] && return 0
	(
		flock 9
		[ -f "$DIR/.ckptfs-ready" ] && exit 0
		m=$("$ROOT/scripts/sid-chroot.sh" mirror)
		command -v debootstrap >/dev/null ||
			"$ROOT/scripts/install-deps.sh" debootstrap >&2
		rm -rf "$DIR.tmp"
		echo "bookworm-chroot: debootstrap bookworm into $DIR (1-3 minutes, once)" >&2
		echo "bookworm-chroot: from $m" >&2
		debootstrap --variant=minbase bookworm "$DIR.tmp" "$m" >&2
		# apt's lists, so that apt install resolves dependencies.
		cp /etc/resolv.conf "$DIR.tmp/etc/resolv.conf" 2>/dev/null || true
		chroot "$DIR.tmp" apt-get -q "${APT_OPTS[@]}" update >&2
		chroot "$DIR.tmp" apt-get -q clean
		touch "$DIR.tmp/.ckptfs-ready"
		rm -rf "$DIR"
		mv "$DIR.tmp" "$DIR"
	) 9>"$DIR.lock"
}

enter() {	# MERGED
	local m=$1
	build
	mkdir -p "$m" "$m.upper" "$m.work" "$DIR.debs/partial"
	mount -t overlay overlay \
		-o "lowerdir=$DIR,upperdir=$m.upper,workdir=$m.work" "$m"
	mount --bind /proc "$m/proc"
	mount --bind /sys "$m/sys"
	touch "$m/dev/fuse"
	mount --bind /dev/fuse "$m/dev/fuse"
	mount --bind "$DIR.debs" "$m/var/cache/apt/archives"
	cp /etc/resolv.conf "$m/etc/resolv.conf" 2>/dev/null || true
}

leave() {	# MERGED
	local m=$1 t
	# Anything mounted inside (a test's FUSE mount included), deepest
	# first.
	for t in $(awk -v m="$m" '$2 == m || index($2, m "/") == 1 { print $2 }' \
			/proc/mounts | sort -r); do
		umount "$t" 2>/dev/null || umount -l "$t"
	done
	rm -rf "$m" "$m.upper" "$m.work"
}

case "${1:-}" in
build) build ;;
path) echo "$DIR" ;;
enter) enter "${2:?enter DIR}" ;;
leave) leave "${2:?leave DIR}" ;;
*) sed -n '3,22p' "$0"; exit 2 ;;
esac
