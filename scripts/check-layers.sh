#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make check-layers`: libckptfs's folders depend one way (by includes,
# and by the symbols each object uses, which also covers what ckptfs.h
# declares), no two modules of core/ include each other round a cycle,
# only io/ knows how a store is implemented, core/ never touches FUSE, and
# programs outside core/ (but tests/unit/) include only the public header.
# Usage: check-layers.sh [OBJECT...]   (core's objects, for the nm check)
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
bad() { echo "check-layers: $*"; fail=1; }

# What each folder may include, besides itself and the public header.
declare -A may=(
	[common]=""
	[model]="common"
	[plan]="common model"
	[io]="common model"
	[torch]="common model io safetensors"
	[safetensors]="common model io"
	[records]="common model io torch"
	[view]="common model plan io records"
	[open]="common model plan io torch safetensors records"
)

folder_of() {	# core/x/y.c -> x; core/open.c -> open
	local rel=${1#core/}
	case $rel in
	*/*) echo "${rel%%/*}" ;;
	*) basename "${rel%.*}" ;;
	esac
}

module_of() {	# core/x/y.c, core/x/y.h, core/x/y_impl.h -> x/y
	local rel=${1#core/}
	rel=${rel%.*}
	echo "${rel%_impl}"
}

edges=$(mktemp)
fedges=$(mktemp)
trap 'rm -f "$edges" "$fedges"' EXIT
for f in $(find core -name '*.[ch]' | sort); do
	from=$(folder_of "$f")
	[ "$f" = core/ckptfs.h ] && continue
	if [ -z "${may[$from]+x}" ]; then
		bad "$f: folder '$from' is not in the layer table"
		continue
	fi
	while IFS= read -r inc; do
		[ "$inc" = ckptfs.h ] && continue
		case $inc in
		*/*) to=${inc%%/*} ;;
		*) to=$(basename "${inc%.*}") ;;
		esac
		if [ ! -e "core/$inc" ]; then
			bad "$f: includes \"$inc\", which is not core/$inc"
			continue
		fi
		m1=$(module_of "$f")
		m2=$(module_of "core/$inc")
		[ "$m1" != "$m2" ] && echo "$m1 $m2" >> "$fedges"
		[ "$to" = "$from" ] && continue
		echo "$from $to" >> "$edges"
		case " ${may[$from]} " in
		*" $to "*) ;;
		*) bad "$f: $from/ may not include $inc ($from may use: ${may[$from]:-libc only})" ;;
		esac
	done < <(sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
	if [ "$from" != io ] && grep -Eq '^#[[:space:]]*include[[:space:]]*"io/store_impl\.h"' "$f"; then
		bad "$f: includes io/store_impl.h: only io/ sees how a store is implemented"
	fi
	if grep -Eq '^#[[:space:]]*include[[:space:]]*[<"][^>"]*fuse' "$f"; then
		bad "$f: core/ includes a FUSE header"
	fi
done

# Cycles, between folders and between modules (a .c and its .h are one).
if ! sort -u "$edges" | tsort >/dev/null 2>&1; then
	bad "the folders of core/ include each other in a cycle:"
	sort -u "$edges" | tsort 2>&1 >/dev/null | sed 's/^/    /'
fi
if ! sort -u "$fedges" | tsort >/dev/null 2>&1; then
	bad "modules of core/ include each other in a cycle:"
	sort -u "$fedges" | tsort 2>&1 >/dev/null | sed 's/^/    /'
fi

# Objects: no FUSE symbol reaches core/.
if [ $# -gt 0 ] && nm -u "$@" | grep -q 'fuse_'; then
	bad "core/ references FUSE symbols: $(nm -u "$@" | grep fuse_ | sort -u | tr '\n' ' ')"
fi

# Objects: the layer order as the linker sees it.  Every function or
# variable an object of core/ uses from another object of core/ must be
# defined in its own folder or in one it may use.  Includes can hide a
# dependency (ckptfs.h declares every public function, whichever layer
# defines it); symbols cannot.
if [ $# -gt 0 ]; then
	defs=$(mktemp)
	for o in "$@"; do
		f=$(folder_of "${o#*core/}")
		nm -g --defined-only "$o" | awk -v f="$f" '$2 ~ /^[TDBRVW]$/ { print $3, f }'
	done | sort -u > "$defs"
	for o in "$@"; do
		from=$(folder_of "${o#*core/}")
		while read -r sym to; do
			case $sym in
			ckpt_store_*_new) [ "$from" = io ] ||
				bad "${o#*core/}: uses $sym: above io/, nothing knows which store it uses (ckpt_store_new())" ;;
			esac
			[ "$to" = "$from" ] && continue
			case " ${may[$from]:-} " in
			*" $to "*) ;;
			*) bad "${o#*core/}: uses $sym, defined in $to/ ($from may use: ${may[$from]:-libc only})" ;;
			esac
		done < <(nm -u "$o" | awk '{ print $2 }' | sort -u | join - "$defs")
	done
	rm -f "$defs"
fi

# Programs use the public header alone.
for f in $(find fs mount tests/fuzz scripts/bench docs -name '*.[ch]' 2>/dev/null | sort); do
	while IFS= read -r inc; do
		case $inc in
		*core/*) [ "$(basename "$inc")" = ckptfs.h ] ||
			bad "$f: includes \"$inc\"; outside core/ and tests/unit/ only ckptfs.h may be used" ;;
		esac
		b=$(basename "$inc")
		if [ "$b" != ckptfs.h ] && [ -n "$(find core -name "$b" -not -path core/ckptfs.h)" ] &&
		   [ ! -e "$(dirname "$f")/$inc" ]; then
			bad "$f: includes core's internal header \"$inc\"; use ckptfs.h"
		fi
	done < <(sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done

# File names are unique across the tree (grep and stack traces stay plain).
dups=$(git ls-files '*.c' '*.h' 2>/dev/null | xargs -n1 basename | sort | uniq -d)
[ -n "$dups" ] && bad "file names used twice: $dups"

if [ $fail -eq 0 ]; then
	echo "check-layers: ok ($(sort -u "$edges" | wc -l) folder edges, $(sort -u "$fedges" | wc -l) module edges, no cycle)"
fi
exit $fail
