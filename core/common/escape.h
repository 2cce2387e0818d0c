/* SPDX-License-Identifier: MIT */
/*
 * Text that keys may hold, made safe for where it goes: UTF-8 validation
 * (keys, JSON strings), one-line escapes for messages, and the TSV escape
 * of manifest.tsv and `ckptfs ls` (ckpt_tsv_escape(), in ckptfs.h).
 */
#ifndef CKPT_ESCAPE_H
#define CKPT_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>

/* The length (1 to 4) of the valid UTF-8 sequence starting s[0, left),
 * left > 0, or 0 when none starts there. */
size_t ckpt_utf8_seq(const char *s, size_t left);

/*
 * The length of the longest valid UTF-8 prefix of s[0, len) (RFC 3629:
 * shortest forms only, no surrogates, nothing above U+10FFFF): len when
 * all of it is valid, else the offset of the first bad byte.
 */
size_t ckpt_utf8_valid_prefix(const char *s, size_t len);

static inline bool ckpt_utf8_is_valid(const char *s, size_t len)
{
	return ckpt_utf8_valid_prefix(s, len) == len;
}

/*
 * s[0, len) for a one-line message, NUL-terminated in out[0, cap):
 * valid UTF-8 is kept, '\\' becomes "\\\\" (unless s is JSON text, whose
 * backslashes already start escapes: json set), \t \n \r "\\t" "\\n"
 * "\\r", other control bytes, DEL and bytes that are not valid UTF-8
 * "\\xNN".  Cut with "..." when it does not fit.  Returns out.
 */
char *ckpt_escape_msg(const char *s, size_t len, bool json, char *out,
		      size_t cap);

/*
 * The same escapes, but a name too long for out is shortened in the
 * middle ("abc\u2026xyz", after and before whole pieces), so that its
 * end, and what a message says after it, still shows.  Returns out.
 */
char *ckpt_escape_mid(const char *s, size_t len, char *out, size_t cap);

/* Bytes of a name in a message, escaped and shortened in the middle,
 * where a caller escapes it itself (ckpt_name_for_msg()). */
#define CKPT_NAME_SHOWN 512

/*
 * A whole message line (whose names may already be escaped) made safe for
 * a terminal or a log: control bytes, DEL and bytes that are not valid
 * UTF-8 escaped as ckpt_escape_msg() does, backslashes kept as they are,
 * and a line too long for out shortened in the middle like
 * ckpt_escape_mid(), so its reason at the end still shows.  s and out may
 * be the same buffer only when nothing needs escaping and it fits; pass
 * distinct buffers.  Returns out.
 */
char *ckpt_escape_line(const char *s, size_t len, char *out, size_t cap);

#endif
