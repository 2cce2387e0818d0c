/* SPDX-License-Identifier: MIT */
#include "mpwrite.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put(struct mp_writer *w, const void *p, size_t n)
{
	if (w->failed)
		return;
	if (n > w->cap - w->len) {
		size_t ncap = w->cap ? w->cap : 4096;
		uint8_t *nb;

		while (ncap - w->len < n) {
			if (ncap > SIZE_MAX / 2) {
				w->failed = true;
				return;
			}
			ncap *= 2;
		}
		nb = realloc(w->buf, ncap);
		if (!nb) {
			w->failed = true;
			return;
		}
		w->buf = nb;
		w->cap = ncap;
	}
	memcpy(w->buf + w->len, p, n);
	w->len += n;
}

/* Tag byte then v big-endian in n bytes. */
static void tagged(struct mp_writer *w, uint8_t tag, uint64_t v, unsigned n)
{
	uint8_t b[9];
	unsigned i;

	b[0] = tag;
	for (i = 0; i < n; i++)
		b[1 + i] = (uint8_t)(v >> (8 * (n - 1 - i)));
	put(w, b, 1 + n);
}

static void header(struct mp_writer *w, uint32_t n, uint8_t fix,
		   uint32_t fixmax, uint8_t t16, uint8_t t32)
{
	if (n <= fixmax)
		tagged(w, (uint8_t)(fix | n), 0, 0);
	else if (n <= 0xffff)
		tagged(w, t16, n, 2);
	else
		tagged(w, t32, n, 4);
}

void mpw_map(struct mp_writer *w, uint32_t n)
{
	header(w, n, 0x80, 15, 0xde, 0xdf);
}

void mpw_array(struct mp_writer *w, uint32_t n)
{
	header(w, n, 0x90, 15, 0xdc, 0xdd);
}

void mpw_str(struct mp_writer *w, const char *s, size_t len)
{
	if (len > UINT32_MAX) {
		w->failed = true;
		return;
	}
	if (len <= 31)
		tagged(w, (uint8_t)(0xa0 | len), 0, 0);
	else if (len <= 0xff)
		tagged(w, 0xd9, len, 1);
	else if (len <= 0xffff)
		tagged(w, 0xda, len, 2);
	else
		tagged(w, 0xdb, len, 4);
	put(w, s, len);
}

void mpw_cstr(struct mp_writer *w, const char *s)
{
	mpw_str(w, s, strlen(s));
}

void mpw_uint(struct mp_writer *w, uint64_t v)
{
	if (v <= 0x7f)
		tagged(w, (uint8_t)v, 0, 0);
	else if (v <= 0xff)
		tagged(w, 0xcc, v, 1);
	else if (v <= 0xffff)
		tagged(w, 0xcd, v, 2);
	else if (v <= 0xffffffff)
		tagged(w, 0xce, v, 4);
	else
		tagged(w, 0xcf, v, 8);
}

void mpw_int(struct mp_writer *w, int64_t v)
{
	if (v >= 0)
		mpw_uint(w, (uint64_t)v);
	else if (v >= -32)
		tagged(w, (uint8_t)(int8_t)v, 0, 0);
	else
		tagged(w, 0xd3, (uint64_t)v, 8);
}

void mpw_nil(struct mp_writer *w)
{
	tagged(w, 0xc0, 0, 0);
}

void mpw_bool(struct mp_writer *w, bool v)
{
	tagged(w, v ? 0xc3 : 0xc2, 0, 0);
}

int mpw_finish(struct mp_writer *w, uint8_t **buf, size_t *len)
{
	if (w->failed) {
		mpw_discard(w);
		return -ENOMEM;
	}
	*buf = w->buf;
	*len = w->len;
	memset(w, 0, sizeof(*w));
	return 0;
}

void mpw_discard(struct mp_writer *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}
