/* SPDX-License-Identifier: MIT */
/* UTF-8 validation and escapes: see escape.h. */
#include "common/escape.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"

size_t ckpt_utf8_seq(const char *str, size_t left)
{
	const unsigned char *s = (const unsigned char *)str;
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
	size_t at = 0, n;

	while (at < len) {
		n = ckpt_utf8_seq(s + at, len - at);
		if (!n)
			return at;
		at += n;
	}
	return len;
}

/* ckpt_escape_mid(), or with keep_bs ckpt_escape_line(). */
static char *escape_mid(const char *s, size_t len, bool keep_bs, char *out,
			size_t cap)
{
	static const char ell[] = "\xe2\x80\xa6";	/* U+2026 */
	size_t elen, head, tail, a, b;
	char *e;
	bool *starts;

	if (!cap)
		return out;
	if (len > (SIZE_MAX - 1) / 4)
		return ckpt_escape_msg(s, len, keep_bs, out, cap);
	e = malloc(4 * len + 1);
	starts = calloc(4 * len + 2, sizeof(*starts));
	if (!e || !starts) {
		free(e);
		free(starts);
		return ckpt_escape_msg(s, len, keep_bs, out, cap);
	}
	/* Each piece alone, so that both cuts fall between pieces. */
	elen = 0;
	for (a = 0; a < len; a += b) {
		char one[8];

		b = ckpt_utf8_seq(s + a, len - a);
		if (b < 2)
			b = 1;
		ckpt_escape_msg(s + a, b, keep_bs, one, sizeof(one));
		starts[elen] = true;
		memcpy(e + elen, one, strlen(one));
		elen += strlen(one);
	}
	starts[elen] = true;
	if (elen + 1 <= cap || cap < sizeof(ell) + 2) {
		free(e);
		free(starts);
		return ckpt_escape_msg(s, len, keep_bs, out, cap);
	}
	head = (cap - sizeof(ell)) / 2;
	tail = cap - sizeof(ell) - head;
	while (head > 0 && !starts[head])
		head--;
	a = elen - tail;
	while (a < elen && !starts[a])
		a++;
	memcpy(out, e, head);
	memcpy(out + head, ell, sizeof(ell) - 1);
	memcpy(out + head + sizeof(ell) - 1, e + a, elen - a);
	out[head + sizeof(ell) - 1 + elen - a] = '\0';
	free(e);
	free(starts);
	return out;
}

char *ckpt_escape_mid(const char *s, size_t len, char *out, size_t cap)
{
	return escape_mid(s, len, false, out, cap);
}

/* True when s[0, len) has nothing ckpt_escape_line() would change. */
static bool is_clean_line(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t at;

	for (at = 0; at < len; at++)
		if (u[at] < 0x20 || u[at] >= 0x7F)
			break;
	if (at == len)
		return true;
	while (at < len) {
		size_t n = ckpt_utf8_seq(s + at, len - at);

		if (!n || (n == 1 && (u[at] < 0x20 || u[at] == 0x7F)))
			return false;
		at += n;
	}
	return true;
}

char *ckpt_escape_line(const char *s, size_t len, char *out, size_t cap)
{
	if (!cap)
		return out;
	if (len < cap && is_clean_line(s, len)) {
		memmove(out, s, len);
		out[len] = '\0';
		return out;
	}
	return escape_mid(s, len, true, out, cap);
}

char *ckpt_name_for_msg(const char *s, char *out, size_t cap)
{
	return escape_mid(s ? s : "", s ? strlen(s) : 0, false, out, cap);
}

char *ckpt_line_for_msg(const char *s, char *out, size_t cap)
{
	return ckpt_escape_line(s ? s : "", s ? strlen(s) : 0, out, cap);
}

char *ckpt_escape_msg(const char *s, size_t len, bool json, char *out,
		      size_t cap)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t at = 0, o = 0, cut = 0, n;
	char tmp[8];

	if (!cap)
		return out;
	while (at < len) {
		const char *put = tmp;
		size_t k;

		n = ckpt_utf8_seq(s + at, len - at);
		if (n > 1 || (n == 1 && u[at] >= 0x20 && u[at] != 0x7F &&
			      (u[at] != '\\' || json))) {
			put = s + at;
			k = n;
		} else if (n == 1 && (u[at] == '\\' || u[at] == '\t' ||
				      u[at] == '\n' || u[at] == '\r')) {
			tmp[0] = '\\';
			tmp[1] = u[at] == '\t' ? 't' : u[at] == '\n' ? 'n' :
				 u[at] == '\r' ? 'r' : '\\';
			k = 2;
		} else {
			snprintf(tmp, sizeof(tmp), "\\x%02x", u[at]);
			k = 4;
			n = 1;
		}
		if (o + k + 1 > cap) {
			/* Cut where "..." still fits, after a whole piece. */
			if (cap >= 4)
				memcpy(out + cut, "...", 4);
			else
				out[0] = '\0';
			return out;
		}
		memcpy(out + o, put, k);
		o += k;
		at += n;
		if (o + 4 <= cap)
			cut = o;
	}
	out[o] = '\0';
	return out;
}

size_t ckpt_tsv_escape(const char *s, char *out, size_t cap)
{
	size_t o = 0, w = 0;	/* needed, written */
	bool full = false;

	for (; *s; s++) {
		char e = *s == '\t' ? 't' : *s == '\n' ? 'n' :
			 *s == '\r' ? 'r' : *s == '\\' ? '\\' : 0;
		size_t k = e ? 2 : 1;

		if (!full && w + k < cap) {
			out[w] = e ? '\\' : *s;
			if (e)
				out[w + 1] = e;
			w += k;
		} else {
			full = true;	/* never half an escape */
		}
		o += k;
	}
	if (cap)
		out[w] = '\0';
	return o;
}
