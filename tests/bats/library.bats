#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# libckptfs as a library: `make install` puts libckptfs.a/.so, ckptfs.h
# and ckptfs.pc in place; the example in docs/ builds against them with
# pkg-config alone and reads the same bytes as the mount.

load helpers

setup() { common_setup; }
teardown() { common_teardown; }

@test "make install: pkg-config --cflags --libs ckptfs builds docs/example.c, which reads what the mount shows" {
	O=$(dirname "$CKPTFS" | sed "s|^$ROOT/||")
	run make -C "$ROOT" --no-print-directory install DESTDIR="$TMP/inst" PREFIX=/usr O="$O"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -f "$TMP/inst/usr/include/ckptfs.h" ]
	[ -f "$TMP/inst/usr/lib/libckptfs.a" ]
	[ -f "$TMP/inst/usr/lib/libckptfs.so.0" ]
	export PKG_CONFIG_PATH="$TMP/inst/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$TMP/inst"
	run pkg-config --modversion ckptfs
	[ "$status" -eq 0 ]
	# Static and shared, with nothing but the public header (and the
	# sanitizer runtime when this is the sanitized build's library).
	san=
	nm "$TMP/inst/usr/lib/libckptfs.a" 2>/dev/null | grep -q __asan_ && san=-fsanitize=address,undefined
	cc -std=c11 -Wall -Werror $san -o "$TMP/ex-static" "$ROOT/docs/example.c" \
		$(pkg-config --cflags ckptfs) $(pkg-config --libs --static ckptfs | sed 's/-lckptfs/-l:libckptfs.a/')
	cc -std=c11 -Wall -Werror $san -o "$TMP/ex-shared" "$ROOT/docs/example.c" \
		$(pkg-config --cflags --libs ckptfs)
	$GEN "$TMP/ckpt" --seed 61 --keys 40
	"$TMP/ex-static" "$TMP/ckpt" 3 1 > "$TMP/static.out"
	LD_LIBRARY_PATH="$TMP/inst/usr/lib" "$TMP/ex-shared" "$TMP/ckpt" 3 1 > "$TMP/shared.out"
	cmp "$TMP/static.out" "$TMP/shared.out"
	# Against the mount: same files, sizes, and FNV-1a hashes of the bytes.
	start_mount "$TMP/ckpt" "$MNT" --world 3 --rank 1
	tail -n +2 "$TMP/static.out" | $PY -c '
import sys, os
mnt = sys.argv[1]
n = 0
for line in sys.stdin:
    path, dtype, shape, offsets, size, h = line.rstrip("\n").split("\t")
    data = open(os.path.join(mnt, path), "rb").read()
    assert len(data) == int(size), (path, len(data), size)
    x = 1469598103934665603
    for b in data:
        x = ((x ^ b) * 1099511628211) & (2**64 - 1)
    assert "%016x" % x == h, path
    assert os.getxattr(os.path.join(mnt, path), "user.ckptfs.kind").decode() == ("bytes" if dtype == "bytes" else "tensor")
    n += 1
assert n == sum(len(f) for d, _, f in os.walk(mnt) if "/.ckptfs" not in d), n
print(n, "files match")' "$MNT"
	stop_mount
}

@test "the shared library exports the public header's functions and nothing else" {
	SO=$(dirname "$CKPTFS")/libckptfs.so
	[ -f "$SO" ]
	nm -D --defined-only "$SO" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort > "$TMP/exported"
	sed -n 's/^[a-z].*[ *]\(ckpt_[a-z0-9_]*\)(.*/\1/p' "$ROOT/core/ckptfs.h" | sort -u > "$TMP/public"
	diff "$TMP/public" "$TMP/exported"
}
