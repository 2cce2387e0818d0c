/* SPDX-License-Identifier: MIT */
/* The XML of S3 answers: see s3_xml.h. */
#include "io/s3_xml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errbuf.h"

#define KEY_MAX 4096		/* S3 keys are at most 1024 bytes */
#define TOKEN_MAX 8192

/* Find "<tag>TEXT</tag>" in [p, end): *text, *len; returns the byte
 * after the closing tag, or NULL. */
static const char *find_elem(const char *p, const char *end, const char *tag,
			     const char **text, size_t *len)
{
	size_t tl = strlen(tag);
	const char *open, *close;

	for (;;) {
		open = memmem(p, (size_t)(end - p), "<", 1);
		if (!open)
			return NULL;
		if ((size_t)(end - open) >= tl + 2 &&
		    memcmp(open + 1, tag, tl) == 0 && open[tl + 1] == '>')
			break;
		p = open + 1;
	}
	open += tl + 2;
	for (close = open;; close++) {
		close = memchr(close, '<', (size_t)(end - close));
		if (!close || (size_t)(end - close) < tl + 3)
			return NULL;
		if (close[1] == '/' && memcmp(close + 2, tag, tl) == 0 &&
		    close[tl + 2] == '>')
			break;
	}
	*text = open;
	*len = (size_t)(close - open);
	return close + tl + 3;
}

static int put_utf8(unsigned long cp, char *out, size_t cap, size_t *at)
{
	char b[4];
	size_t n;

	if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return -1;
	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xC0 | (cp >> 6));
		b[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xE0 | (cp >> 12));
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		b[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		b[0] = (char)(0xF0 | (cp >> 18));
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		b[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	if (*at + n >= cap)
		return -1;
	memcpy(out + *at, b, n);
	*at += n;
	return 0;
}

long ckpt_s3_xml_text(const char *s, size_t len, char *out, size_t cap)
{
	static const struct {
		const char *name;
		char c;
	} ents[] = {
		{ "amp;", '&' }, { "lt;", '<' }, { "gt;", '>' },
		{ "quot;", '"' }, { "apos;", '\'' },
	};
	size_t i = 0, at = 0, k;

	if (cap == 0)
		return -1;
	while (i < len) {
		if (s[i] == '\0')
			return -1;
		if (s[i] != '&') {
			if (at + 1 >= cap)
				return -1;
			out[at++] = s[i++];
			continue;
		}
		i++;
		if (i < len && s[i] == '#') {
			unsigned long cp = 0;
			bool hex = i + 1 < len && s[i + 1] == 'x';
			size_t digits = 0;

			i += hex ? 2 : 1;
			for (; i < len && s[i] != ';' && digits < 8;
			     i++, digits++) {
				char c = s[i];
				int d;

				if (c >= '0' && c <= '9')
					d = c - '0';
				else if (hex && c >= 'a' && c <= 'f')
					d = c - 'a' + 10;
				else if (hex && c >= 'A' && c <= 'F')
					d = c - 'A' + 10;
				else
					return -1;
				cp = cp * (hex ? 16 : 10) + (unsigned long)d;
			}
			if (digits == 0 || i >= len || s[i] != ';')
				return -1;
			i++;
			if (put_utf8(cp, out, cap, &at))
				return -1;
			continue;
		}
		for (k = 0; k < sizeof(ents) / sizeof(ents[0]); k++) {
			size_t el = strlen(ents[k].name);

			if (len - i >= el &&
			    memcmp(s + i, ents[k].name, el) == 0)
				break;
		}
		if (k == sizeof(ents) / sizeof(ents[0]) || at + 1 >= cap)
			return -1;
		out[at++] = ents[k].c;
		i += strlen(ents[k].name);
	}
	out[at] = '\0';
	return (long)at;
}

static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0)
		return -1;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9' ||
		    __builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v))
			return -1;
	}
	*out = v;
	return 0;
}

/* "2026-12-03T14:25:47.036Z" -> seconds since the epoch (UTC); 0 when
 * it is not that form. */
static int64_t parse_iso8601(const char *s, size_t len)
{
	char buf[40];
	struct tm tm = { 0 };
	int n = 0;

	if (len >= sizeof(buf))
		return 0;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
		   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 ||
	    n < 19)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm);
}

int ckpt_s3_xml_list_page(const char *xml, size_t len,
			  int (*fn)(void *ctx,
				    const struct ckpt_s3_xml_entry *e),
			  void *ctx, bool *truncated, char **token,
			  char *err, size_t errlen)
{
	const char *end = xml + len, *p = xml, *t, *blk;
	char *key, etag[128], *tok;
	size_t tl, bl;
	unsigned long nent = 0;
	int rc = 0;

	*truncated = false;
	*token = NULL;
	if (!memmem(xml, len, "<ListBucketResult", 17))
		return ckpt_errf(err, errlen, -EBADMSG,
				 "not a ListBucketResult");
	key = malloc(KEY_MAX);
	if (!key)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	while ((p = find_elem(p, end, "Contents", &blk, &bl))) {
		struct ckpt_s3_xml_entry e = { .key = key, .etag = etag };
		const char *bend = blk + bl;

		nent++;
		if (!find_elem(blk, bend, "Key", &t, &tl) ||
		    ckpt_s3_xml_text(t, tl, key, KEY_MAX) < 0) {
			rc = ckpt_errf(err, errlen, -EBADMSG,
				       "entry %lu: no usable <Key>", nent);
			goto out_free;
		}
		if (!find_elem(blk, bend, "Size", &t, &tl) ||
		    parse_u64(t, tl, &e.size)) {
			rc = ckpt_errf(err, errlen, -EBADMSG,
				       "entry %lu: no usable <Size>", nent);
			goto out_free;
		}
		if (!find_elem(blk, bend, "ETag", &t, &tl) ||
		    ckpt_s3_xml_text(t, tl, etag, sizeof(etag)) < 0)
			etag[0] = '\0';
		if (find_elem(blk, bend, "LastModified", &t, &tl))
			e.mtime = parse_iso8601(t, tl);
		rc = fn(ctx, &e);
		if (rc)
			goto out_free;
	}
	if (find_elem(xml, end, "IsTruncated", &t, &tl))
		*truncated = tl == 4 && memcmp(t, "true", 4) == 0;
	if (find_elem(xml, end, "NextContinuationToken", &t, &tl)) {
		tok = malloc(TOKEN_MAX);
		if (!tok) {
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_free;
		}
		if (ckpt_s3_xml_text(t, tl, tok, TOKEN_MAX) <= 0) {
			free(tok);
			rc = ckpt_errf(err, errlen, -EBADMSG,
				       "unusable <NextContinuationToken>");
			goto out_free;
		}
		*token = tok;
	}
	if (*truncated && !*token)
		rc = ckpt_errf(err, errlen, -EBADMSG,
			       "<IsTruncated> is true but there is no "
			       "<NextContinuationToken>");
out_free:
	free(key);
	if (rc) {
		free(*token);
		*token = NULL;
	}
	return rc;
}

void ckpt_s3_xml_error_code(const char *xml, size_t len, char *code,
			    size_t cap)
{
	const char *t;
	size_t tl;

	if (cap == 0)
		return;
	code[0] = '\0';
	if (!xml || !find_elem(xml, xml + len, "Code", &t, &tl) ||
	    ckpt_s3_xml_text(t, tl, code, cap) < 0)
		code[0] = '\0';
	for (t = code; *t; t++)	/* it goes into messages as it is */
		if (!((*t >= 'A' && *t <= 'Z') || (*t >= 'a' && *t <= 'z') ||
		      (*t >= '0' && *t <= '9') || *t == '.')) {
			code[0] = '\0';
			break;
		}
}

long ckpt_s3_xml_elem(const char *xml, size_t len, const char *tag,
		      char *out, size_t cap)
{
	const char *t;
	size_t tl;

	if (cap)
		out[0] = '\0';
	long n;

	if (!xml || !find_elem(xml, xml + len, tag, &t, &tl))
		return -1;
	n = ckpt_s3_xml_text(t, tl, out, cap);
	if (n < 0 && cap)
		out[0] = '\0';	/* never a truncated value */
	return n;
}
