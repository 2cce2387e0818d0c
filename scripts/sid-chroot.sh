#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The newest PyTorch for the tests: a Debian sid chroot with python3-torch,
# built once with debootstrap and cached (outside the work tree, so every
# clone and CI run on this machine reuses it).
#
#   scripts/sid-chroot.sh build      build it unless it is there (2-3 min)
#   scripts/sid-chroot.sh path       print its directory
#   scripts/sid-chroot.sh mirror     print the Debian mirror debootstrap
#                                    uses: CKPTFS_SID_MIRROR, else the
#                                    machine's own apt sources, as apt
#                                    reads them (sources.list, then
#                                    sources.list.d/*.list and *.sources
#                                    in name order): the URI of the first
#                                    enabled "deb" entry for a Debian
#                                    release suite (bookworm, sid,
#                                    stable, ...; not -security or
#                                    -updates)
#   scripts/sid-chroot.sh run CMD... run CMD inside, with /proc, /dev,
#                                    /dev/shm and /sys bound, the work tree
#                                    bound at /ckptfs.PID (each run its
#                                    own, so runs from several clones do
#                                    not mix; "@ROOT@" in CMD's arguments
#                                    becomes that path), USE_LIBUV=0
#                                    (gloo); the binds are undone when CMD
#                                    ends
#
# CKPTFS_SID overrides the directory (default /var/cache/ckptfs/sid),
# CKPTFS_APT_ETC the apt configuration directory read (default /etc/apt).
# Inside, CKPTFS_LIB is the work tree's build/libckptfs.so (the host's
# CKPTFS_LIB names a path outside the chroot); CKPTFS_CHROOT_LIB, a path
# inside it, overrides that.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${CKPTFS_SID:-/var/cache/ckptfs/sid}
APT_ETC=${CKPTFS_APT_ETC:-/etc/apt}
PKGS=python3-torch,python3-numpy,python3-safetensors,python3-zstandard,python3-msgpack,libxxhash0,zlib1g
# Added since the first chroots were built (libckptfs links libcurl; the
# S3 benchmark's FsspecReader needs s3fs): installed into a cached chroot
# that lacks them.
EXTRA="libcurl4t64 python3-s3fs"

# Debian's release suites, by code name and by alias: an entry for one
# of them is the Debian archive itself (not a security, updates or
# third-party repository), which has sid too.
DEBIAN_SUITES=" sid unstable testing stable oldstable oldoldstable experimental
	hamm slink potato woody sarge etch lenny squeeze wheezy jessie stretch
	buster bullseye bookworm trixie forky duke "

# A deb entry's URI if it is the Debian archive: URI SUITE...
debian_uri() {
	local uri=$1 suite
	shift
	case $uri in
	http://* | https://* | ftp://* | file:/*) ;;
	*) return 1 ;;
	esac
	for suite in "$@"; do
		case $DEBIAN_SUITES in
		*[[:space:]]"$suite"[[:space:]]*) echo "${uri%/}"; return 0 ;;
		esac
	done
	return 1
}

# One-line format: "deb [options] URI SUITE COMPONENT...", # comments.
from_list() {	# FILE
	local line opts
	local -a w
	while IFS= read -r line || [ -n "$line" ]; do
		line=${line%%#*}
		read -r -a w <<< "$line"
		[ "${w[0]:-}" = deb ] || continue
		w=("${w[@]:1}")
		if [[ "${w[0]:-}" == \[* ]]; then	# [arch=... signed-by=...]
			opts=0
			while [ ${#w[@]} -gt 0 ]; do
				[[ "${w[0]}" == *\] ]] && opts=1
				w=("${w[@]:1}")
				[ $opts = 1 ] && break
			done
		fi
		[ ${#w[@]} -ge 2 ] || continue
		debian_uri "${w[0]}" "${w[1]}" && return 0
	done < "$1"
	return 1
}

# deb822 format: stanzas of "Field: value" lines, split by blank lines.
from_sources() {	# FILE
	local line types= uris= suites= enabled=yes key val u last=
	while [ -z "$last" ]; do
		IFS= read -r line || { line=; last=1; }
		case $line in
		'#'*) continue ;;		# a comment line
		[[:space:]]*[![:space:]]*) continue ;;	# a continuation line
		esac
		if [ -z "${line//[[:space:]]/}" ]; then	# a stanza ends
			if [ "$enabled" != no ] && [[ " $types " == *" deb "* ]]; then
				for u in $uris; do
					debian_uri "$u" $suites && return 0
				done
			fi
			types= uris= suites= enabled=yes
			continue
		fi
		key=${line%%:*}
		val=${line#*:}
		case ${key,,} in
		types) types=$val ;;
		uris) uris=$val ;;
		suites) suites=$val ;;
		enabled) enabled=${val//[[:space:]]/} ;;
		esac
	done < "$1"
	return 1
}

# The mirror debootstrap uses (see the header).
mirror() {
	local f
	if [ -n "${CKPTFS_SID_MIRROR:-}" ]; then
		echo "$CKPTFS_SID_MIRROR"
		return 0
	fi
	if [ -f "$APT_ETC/sources.list" ] && from_list "$APT_ETC/sources.list"; then
		return 0
	fi
	for f in "$APT_ETC"/sources.list.d/*; do
		case $f in
		*.list) [ -f "$f" ] && from_list "$f" && return 0 ;;
		*.sources) [ -f "$f" ] && from_sources "$f" && return 0 ;;
		esac
	done
	echo "sid-chroot: no Debian archive among the deb entries of $APT_ETC/sources.list and $APT_ETC/sources.list.d/; set CKPTFS_SID_MIRROR to a Debian mirror's URL" >&2
	return 1
}

# Install the EXTRA packages a cached chroot lacks, with its own apt (a
# mirror's snapshot may carry an expired Release date: not checked).
# Under a lock, as two runs may start at once.
ensure() {
	local p missing=()
	for p in $EXTRA; do
		chroot "$DIR" dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q "ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	(
		flock 9
		echo "sid-chroot: installing ${missing[*]} into $DIR" >&2
		mount --bind /proc "$DIR/proc"
		trap 'umount "$DIR/proc" 2>/dev/null || umount -l "$DIR/proc"' EXIT
		chroot "$DIR" apt-get -q -o Acquire::Check-Valid-Until=false \
			update >&2
		chroot "$DIR" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
			apt-get -q -y -o Acquire::Check-Valid-Until=false \
			install --no-install-recommends "${missing[@]}" >&2
	) 9>"$DIR.lock"
}

build() {
	local m
	if [ -f "$DIR/.ckptfs-ready" ]; then
		ensure
		return 0
	fi
	m=$(mirror)
	if ! command -v debootstrap >/dev/null; then
		"$ROOT/scripts/install-deps.sh" debootstrap >&2
	fi
	rm -rf "$DIR.tmp"
	mkdir -p "$(dirname "$DIR")"
	echo "sid-chroot: debootstrap sid into $DIR (2-3 minutes, once)" >&2
	echo "sid-chroot: from $m" >&2
	debootstrap --variant=minbase --include="$PKGS,${EXTRA// /,}" sid \
		"$DIR.tmp" "$m" >&2
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
	# Each run binds /dev, /dev/shm, ... in a mount namespace of its own:
	# runs side by side would otherwise stack their binds on the same
	# paths, and the first to end would unmount the other's /dev/shm
	# under its processes (their semaphores gone).  Host mounts still
	# reach the run (slave propagation); its binds reach nobody.
	if [ -z "${CKPTFS_SID_OWN_NS:-}" ]; then
		exec unshare --mount --propagation slave \
			env CKPTFS_SID_OWN_NS=1 "$0" run "$@"
	fi
	# The namespace began with a copy of every mount, FUSE mounts of
	# other jobs included.  / is private on some machines (no
	# propagation at all): a copy left here would keep that mount's
	# connection alive after its owner unmounts it, and its daemon
	# would serve on, unmounted, until this run ends.  Drop them.
	local fuse_types
	fuse_types=$(awk '$3 ~ /^fuse(blk|\.[^ ]*)?$/ {print $3}' /proc/self/mounts | sort -u | paste -sd, -)
	[ -z "$fuse_types" ] || umount -a -l -t "$fuse_types" 2>/dev/null || true
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
mirror) mirror ;;
run) shift; run "$@" ;;
*) sed -n '3,30p' "$0"; exit 2 ;;
esac
