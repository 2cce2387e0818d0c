/* SPDX-License-Identifier: MIT */
/* UTF-8 validation and escapes: see escape.h. */
#include "common/escape.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ckptfs.h"

/* The length of the valid UTF-8 sequence at s[0, left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
	size_t n, i;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF) {
		n = 2;
		cp = s[0] & 0x1F;
	} else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
		n = 3;
		cp = s[0] & 0x0F;
	} else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;	/* a continuation byte, C0, C1, F5..FF */
	}
	if (left < n)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
		return 0;	/* overlong, a surrogate, too large */
	return n;
}

size_t ckpt_utf8_valid_prefix(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t at = 0, n;

	while (at < len) {
		n = utf8_seq(u + at, len - at);
		if (!n)
			return at;
		at += n;
	}
	return len;
}

char *ckpt_escape_msg(const char *s, size_t len, char *out, size_t cap)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t at = 0, o = 0, n;
	char tmp[8];

	if (!cap)
		return out;
	while (at < len) {
		const char *put = tmp;
		size_t k;

		n = utf8_seq(u + at, len - at);
		if (n > 1) {
			put = s + at;
			k = n;
		} else if (n == 1 && u[at] == '\\') {
			put = "\\\\";
			k = 2;
		} else if (n == 1 && (u[at] == '\t' || u[at] == '\n' ||
				      u[at] == '\r')) {
			tmp[0] = '\\';
			tmp[1] = u[at] == '\t' ? 't' : u[at] == '\n' ? 'n' : 'r';
			k = 2;
		} else if (n == 1 && u[at] >= 0x20 && u[at] != 0x7F) {
			put = s + at;
			k = 1;
		} else {
			snprintf(tmp, sizeof(tmp), "\\x%02x", u[at]);
			k = 4;
			n = 1;
		}
		if (o + k + 4 > cap) {	/* keep room for "..." and the NUL */
			if (cap >= 4)
				memcpy(out + o, "...", 4);
			else
				out[0] = '\0';
			return out;
		}
		memcpy(out + o, put, k);
		o += k;
		at += n;
	}
	out[o] = '\0';
	return out;
}

size_t ckpt_tsv_escape(const char *s, char *out, size_t cap)
{
	size_t o = 0;

	for (; *s; s++) {
		char e = *s == '\t' ? 't' : *s == '\n' ? 'n' :
			 *s == '\r' ? 'r' : *s == '\\' ? '\\' : 0;

		if (e && o + 1 < cap) {
			out[o] = '\\';
			out[o + 1] = e;
		} else if (!e && o < cap) {
			out[o] = *s;
		}
		o += e ? 2 : 1;
	}
	if (cap)
		out[o < cap ? o : cap - 1] = '\0';
	return o;
}
