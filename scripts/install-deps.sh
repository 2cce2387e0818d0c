#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install the Debian packages ckptfs needs to build, test and demo, only
# those missing.  `install-deps.sh --demo` installs only the demo's.  Safe to run again; does nothing when all are there.
set -euo pipefail

# What `make demo` needs (build, mount, the numpy reference), and the
# rest that `make check` adds (test tools, Ceph for S3, torch, clang for
# fuzzing, debootstrap for the chroots, the Debian packaging tools).
DEMO=(build-essential pkg-config fuse3 libfuse3-dev libmsgpack-dev
      libxxhash-dev zlib1g-dev libzstd-dev libcurl4-openssl-dev
      python3-numpy python3-msgpack)
CHECK=(bats attr valgrind gdb clang libclang-rt-14-dev python3-torch
       python3-xxhash debootstrap python3-zstandard curl
       ceph-mon ceph-osd radosgw ceph-common python3-pytest python3-venv
       python3-setuptools python3-wheel python3-pip mypy
       debhelper devscripts lintian dh-python fakeroot)
# Node and npm (Debian's nodejs, npm) only when there is no npm yet: a
# Node from elsewhere brings its own, which Debian's conflicts with.
# Azurite (the Azure Storage emulator, for the Azure tests) is not in
# Debian: npm installs this version (it runs on bookworm's Node 18; 3.37
# wants Node 22) from npm's default registry into AZURITE_PREFIX.
AZURITE_VERSION=3.35.0
AZURITE_PREFIX=${CKPTFS_AZURITE_PREFIX:-/opt/ckptfs-azurite}

# No argument: everything (make check); --demo: the demo's set; else
# the packages named.  --list [--demo] prints the set, installs nothing.
case "${1:-}" in
--list)
	if [ "${2:-}" = --demo ]; then printf '%s\n' "${DEMO[@]}"
	else printf '%s\n' "${DEMO[@]}" "${CHECK[@]}"; fi
	exit 0 ;;
"") pkgs=("${DEMO[@]}" "${CHECK[@]}"); want_azurite=1 ;;
--demo) pkgs=("${DEMO[@]}") ;;
*) pkgs=("$@") ;;
esac

want_azurite=${want_azurite:-0}

# Azurite AZURITE_VERSION under AZURITE_PREFIX, unless it is there.
install_azurite() {
	local have
	have=$("$AZURITE_PREFIX/bin/azurite-blob" --version 2>/dev/null || true)
	[ "$have" = "$AZURITE_VERSION" ] && return 0
	echo "ckptfs: installing Azurite $AZURITE_VERSION into $AZURITE_PREFIX" >&2
	$sudo npm install -g --prefix "$AZURITE_PREFIX" --no-audit --no-fund \
		"azurite@$AZURITE_VERSION" >&2
}

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing+=("$p")
done
if [ "$want_azurite" = 1 ] && ! command -v npm >/dev/null; then
	missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
	[ "$want_azurite" = 1 ] && install_azurite
	exit 0
fi

echo "ckptfs: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || {
		echo "ckptfs: need root (or sudo) to install: ${missing[*]}" >&2
		exit 1
	}
	sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
[ "$want_azurite" = 1 ] && install_azurite
exit 0
