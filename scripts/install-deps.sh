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

# No argument: everything (make check); --demo: the demo's set; else
# the packages named.  --list [--demo] prints the set, installs nothing.
case "${1:-}" in
--list)
	if [ "${2:-}" = --demo ]; then printf '%s\n' "${DEMO[@]}"
	else printf '%s\n' "${DEMO[@]}" "${CHECK[@]}"; fi
	exit 0 ;;
"") pkgs=("${DEMO[@]}" "${CHECK[@]}") ;;
--demo) pkgs=("${DEMO[@]}") ;;
*) pkgs=("$@") ;;
esac

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "ckptfs: installing ${missing[*]}" >&2
sudo=""
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
