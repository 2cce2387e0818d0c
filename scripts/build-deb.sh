#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make deb`: stage the work tree with the packaging of scripts/debian/
# into build/deb/src/ckptfs-VERSION/, build the Debian packages there with
# dpkg-buildpackage, check them with lintian and leave them in build/deb/.
#
#   scripts/build-deb.sh VERSION
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${1:?usage: build-deb.sh VERSION}
OUT=$ROOT/build/deb
SRC=$OUT/src/ckptfs-$VERSION

rm -rf "$OUT"
mkdir -p "$SRC"
# The sources as they are in the tree (tracked and new files, not the
# ignored build outputs); a tree that is not a git checkout, all of it
# but build directories.
cd "$ROOT"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - -cf - | tar -xf - -C "$SRC"
else
	tar --exclude='./build*' --exclude=.git -cf - . | tar -xf - -C "$SRC"
fi
rm -rf "$SRC/debian"
cp -a scripts/debian "$SRC/debian"

# The changelog carries the Makefile's VERSION; its date is the last
# commit's (the same tree builds the same packages).
when=$(git log -1 --format=%cD 2>/dev/null || date -R)
cat > "$SRC/debian/changelog" <<CL
ckptfs ($VERSION) unstable; urgency=medium

  * Release $VERSION, built from the project tree by make deb.

 -- ckptfs maintainers <maintainers@users.noreply.a-seed-c31c56d5.example>  $when
CL

cd "$SRC"
dpkg-buildpackage -us -uc -b -j"$(nproc)"
cd "$OUT/src"
mv ./*.deb ./*.changes ./*.buildinfo "$OUT/"
cd "$OUT"
changes=$(echo ckptfs_"$VERSION"_*.changes)
echo "deb: lintian $changes" >&2
lintian --fail-on error,warning --info --display-info "$changes"
# The debug symbols apart, so that build/deb/*.deb is the four packages.
mkdir -p dbgsym
mv ./*-dbgsym_*.deb dbgsym/
ls -l "$OUT"/*.deb
