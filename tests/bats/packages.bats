#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The Debian packages of `make deb` on a fresh Debian 12: a pristine
# overlay of the cached bookworm chroot (scripts/bookworm-chroot.sh), in
# which apt installs build/deb/*.deb; then, from /, ckptfs --version, a
# mount of the demo checkpoint (by the command and by an fstab line of
# type fuse.ckptfs with mount -a) and ckptfs.load, each compared with
# tests/reference.py; and apt remove --purge leaving none of their files.
# The packages hold the plain build: the sanitized pass of run-all.sh
# reports each test as passing with a note, not running it again.

load helpers

VERSION=$(sed -n 's/^VERSION *:*= *//p' "$ROOT/Makefile")
DEBS=$ROOT/build/deb
# What a runtime install must not bring: compilers and toolchains, Ceph,
# the test tools.
NOT_RUNTIME='^(gcc|gcc-[0-9]+|cpp|cpp-[0-9]+|g\+\+.*|clang.*|llvm.*|binutils.*|make|build-essential|libc6-dev|ceph.*|radosgw|librados.*|bats|valgrind|python3-pytest|mypy|debootstrap|python3-torch|lintian|debhelper)$'

plain_only() {
	[ "$CKPTFS" = "$ROOT/build/ckptfs" ] && return 0
	echo "# the packages hold the plain build: tested in its pass ($ROOT/build/ckptfs), not again for $CKPTFS" >&3
	return 1
}

# Run in the chroot from /, with the environment a new login has.
inside() {
	chroot "$CH" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		DEBIAN_FRONTEND=noninteractive sh -c 'cd / && "$@"' sh "$@"
}

# The chroot's paths of the named packages' .deb files.
debs() {
	local p f
	for p in "$@"; do
		for f in "$DEBS/${p}"_*.deb; do echo "/pkg/${f##*/}"; done
	done
}

installed() {
	inside dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' |
		awk '$1 == "ii" { print $2 }' | sort
}

setup_file() {
	[ "$CKPTFS" = "$ROOT/build/ckptfs" ] || return 0
	local n
	n=$(ls "$DEBS"/*.deb 2>/dev/null | wc -l)
	if [ "$n" -ne 4 ]; then
		make -C "$ROOT" --no-print-directory deb >"$BATS_FILE_TMPDIR/deb.log" 2>&1 ||
			{ tail -40 "$BATS_FILE_TMPDIR/deb.log"; return 1; }
	fi
	"$ROOT/scripts/bookworm-chroot.sh" build
	RUN=$(mktemp -d /tmp/ckptfs-packages.XXXXXX)
	CH=$RUN/root
	export RUN CH
	"$ROOT/scripts/bookworm-chroot.sh" enter "$CH"
	mkdir -p "$CH/pkg" "$CH/mnt" "$CH/mnt2"
	cp "$DEBS"/*.deb "$CH/pkg/"
	cp -a "$ROOT/demo/ckpt" "$CH/pkg/ckpt"
	installed > "$RUN/pristine"
	# apt's download cache is shared by the runs of every clone: one at
	# a time.
	exec {lock}>"$("$ROOT/scripts/bookworm-chroot.sh" path).debs.lock"
	flock "$lock"
	# All four, as a user installs them: apt's defaults, Recommends
	# included.
	inside apt-get -q -y -o Acquire::Check-Valid-Until=false install \
		$(debs ckptfs libckptfs0 libckptfs-dev python3-ckptfs) \
		>"$RUN/apt-all.log" 2>&1 ||
		{ tail -40 "$RUN/apt-all.log"; return 1; }
	installed > "$RUN/all"
	exec {lock}>&-
	for p in ckptfs libckptfs0 libckptfs-dev python3-ckptfs; do
		inside dpkg -L "$p"
	done | sort -u > "$RUN/files"
}

teardown_file() {
	[ -n "${CH:-}" ] || return 0
	"$ROOT/scripts/bookworm-chroot.sh" leave "$CH"
	rm -rf "$RUN"
}

# A mount made inside the chroot is undone here, and its daemon waited
# for, whatever the test did.
teardown() {
	local m i
	[ -n "${CH:-}" ] || return 0
	for m in "$CH/mnt" "$CH/mnt2"; do
		if mountpoint -q "$m"; then
			fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m"
		fi
	done
	for i in $(seq "$(polls 5)"); do
		pgrep -f "ckptfs.* /pkg/ckpt /mnt" >/dev/null || return 0
		sleep 0.05
	done
	echo "a ckptfs daemon of the chroot is still running" >&2
	return 1
}

@test "apt install ./build/deb/*.deb (all four) on Debian 12 pulls runtime dependencies only: no compiler, no other -dev package" {
	plain_only || return 0
	new=$(comm -13 "$RUN/pristine" "$RUN/all")
	echo "installed: $new"
	for p in ckptfs libckptfs0 libckptfs-dev python3-ckptfs fuse3 libfuse3-3 python3 python3-numpy; do
		grep -qx "$p" <<<"$new" || { echo "missing: $p"; return 1; }
	done
	bad=$(grep -E "$NOT_RUNTIME" <<<"$new" | grep -v '^$' || true)
	dev=$(grep -E -- '-dev$' <<<"$new" | grep -vx libckptfs-dev || true)
	[ -z "$bad$dev" ] || { echo "not runtime: $bad $dev"; return 1; }
	# The man page, the command where mount.fuse3 looks for it.
	[ -f "$CH/usr/share/man/man1/ckptfs.1.gz" ]
	[ -x "$CH/usr/bin/ckptfs" ]
	soname=$(objdump -p "$CH"/usr/lib/*/libckptfs.so.0 | awk '$1 == "SONAME" { print $2 }')
	[ "$soname" = libckptfs.so.0 ]
}

@test "libckptfs-dev adds the header, the .so link and ckptfs.pc for shared linking" {
	plain_only || return 0
	cmp "$ROOT/core/ckptfs.h" "$CH/usr/include/ckptfs.h"
	[ "$(readlink "$CH"/usr/lib/*/libckptfs.so)" = libckptfs.so.0 ]
	pc=$(echo "$CH"/usr/lib/*/pkgconfig/ckptfs.pc)
	grep -qx "Version: $VERSION" "$pc"
	grep -qx "libdir=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" "$pc"
	grep -qx "includedir=/usr/include" "$pc"
	not grep -q "^Requires" "$pc"
	[ ! -e "$CH/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/libckptfs.a" ]
}

@test "ckptfs --version from / in the chroot" {
	plain_only || return 0
	run inside ckptfs --version
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | head -1)" = "ckptfs $VERSION" ]
}

@test "ckptfs mount of the demo checkpoint in the chroot equals the reference; ckptfs umount" {
	plain_only || return 0
	run inside ckptfs mount /pkg/ckpt /mnt --world 8 --rank 3
	echo "$output"
	[ "$status" -eq 0 ]
	run $REF check "$ROOT/demo/ckpt" "$CH/mnt" --world 8 --rank 3
	echo "$output"
	[ "$status" -eq 0 ]
	run inside ckptfs umount /mnt
	[ "$status" -eq 0 ]
	not mountpoint -q "$CH/mnt"
}

@test "an fstab line of type fuse.ckptfs mounts with mount -a in the chroot" {
	plain_only || return 0
	echo "/pkg/ckpt /mnt2 fuse.ckptfs ro,nodev,nosuid,world=8,rank=3 0 0" >> "$CH/etc/fstab"
	run inside mount -a
	echo "$output"
	[ "$status" -eq 0 ]
	mountpoint -q "$CH/mnt2"
	run $REF check "$ROOT/demo/ckpt" "$CH/mnt2" --world 8 --rank 3
	echo "$output"
	[ "$status" -eq 0 ]
	run inside umount /mnt2
	[ "$status" -eq 0 ]
	not mountpoint -q "$CH/mnt2"
}

@test "import ckptfs and ckptfs.load with /usr/bin/python3 from / equal the numpy reference" {
	plain_only || return 0
	cp "$ROOT/tests/packages_check.py" "$CH/pkg/"
	run inside /usr/bin/python3 /pkg/packages_check.py dump /pkg/ckpt 8 3 /pkg/load.pickle
	echo "$output"
	[ "$status" -eq 0 ]
	run $PY "$ROOT/tests/packages_check.py" compare "$ROOT/demo/ckpt" 8 3 "$CH/pkg/load.pickle"
	echo "$output"
	[ "$status" -eq 0 ]
	# The packaged module, with libckptfs0's library.
	[[ "$output" == *"module /usr/lib/python3/dist-packages/ckptfs/__init__.py library libckptfs.so.0"* ]]
	# ckptfs.load refuses what the library refuses, in the package too.
	run inside /usr/bin/python3 -c 'import ckptfs; ckptfs.load("/pkg", backend="numpy")'
	[ "$status" -ne 0 ]
}

@test "apt remove --purge of the four packages leaves none of their files behind" {
	plain_only || return 0
	run inside apt-get -q -y remove --purge ckptfs libckptfs0 libckptfs-dev python3-ckptfs
	echo "$output"
	[ "$status" -eq 0 ]
	left=$(comm -12 <(installed) <(printf '%s\n' ckptfs libckptfs0 libckptfs-dev python3-ckptfs | sort))
	[ -z "$left" ]
	# Every path the packages listed that the pristine chroot lacks is
	# gone, but for directories another package owns (dist-packages,
	# which python3 brought).
	n=0
	lower=$("$ROOT/scripts/bookworm-chroot.sh" path)
	while IFS= read -r f; do
		[ -e "$lower$f" ] && continue
		[ -e "$CH$f" ] || [ -L "$CH$f" ] || continue
		if [ -d "$CH$f" ] && [ ! -L "$CH$f" ] && inside dpkg-query -S "$f" >/dev/null 2>&1; then
			continue
		fi
		echo "left behind: $f"
		n=$((n + 1))
	done < "$RUN/files"
	[ "$n" -eq 0 ]
	[ "$(wc -l < "$RUN/files")" -gt 10 ]
	[ ! -e "$CH/usr/lib/python3/dist-packages/ckptfs" ]
}
