/* SPDX-License-Identifier: MIT */
/* The bounds-checked msgpack cursor: see mpcursor.h. */
#include "common/mpcursor.h"

#include <errno.h>
#include <string.h>

static uint64_t be(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	unsigned i;

	for (i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Read an n-byte big-endian field after a 1-byte tag. */
static int fetch(struct mp_cursor *c, unsigned n, uint64_t *v)
{
	if (mp_left(c) < 1 + (size_t)n)
		return -EBADMSG;
	*v = be(c->p + 1, n);
	return 0;
}

/* A container count must fit the bytes that remain: an element is >= 1
 * byte, and a map entry two elements. */
static int take_count(struct mp_cursor *c, unsigned hdr, uint64_t n,
		      unsigned per, uint32_t *out)
{
	if (n * per > mp_left(c) - hdr)
		return -EBADMSG;
	c->p += hdr;
	*out = (uint32_t)n;
	return 0;
}

int mp_read_map(struct mp_cursor *c, uint32_t *n)
{
	uint64_t v;
	int rc;

	if (mp_left(c) < 1)
		return -EBADMSG;
	if ((c->p[0] & 0xf0) == 0x80)
		return take_count(c, 1, c->p[0] & 0x0f, 2, n);
	if (c->p[0] == 0xde || c->p[0] == 0xdf) {
		unsigned w = c->p[0] == 0xde ? 2 : 4;
		rc = fetch(c, w, &v);
		if (rc)
			return rc;
		return take_count(c, 1 + w, v, 2, n);
	}
	return -EPROTO;
}

int mp_read_array(struct mp_cursor *c, uint32_t *n)
{
	uint64_t v;
	int rc;

	if (mp_left(c) < 1)
		return -EBADMSG;
	if ((c->p[0] & 0xf0) == 0x90)
		return take_count(c, 1, c->p[0] & 0x0f, 1, n);
	if (c->p[0] == 0xdc || c->p[0] == 0xdd) {
		unsigned w = c->p[0] == 0xdc ? 2 : 4;
		rc = fetch(c, w, &v);
		if (rc)
			return rc;
		return take_count(c, 1 + w, v, 1, n);
	}
	return -EPROTO;
}

int mp_read_str(struct mp_cursor *c, const char **s, uint32_t *len)
{
	unsigned hdr;
	uint64_t n;
	int rc;

	if (mp_left(c) < 1)
		return -EBADMSG;
	if ((c->p[0] & 0xe0) == 0xa0) {
		hdr = 1;
		n = c->p[0] & 0x1f;
	} else if (c->p[0] >= 0xd9 && c->p[0] <= 0xdb) {
		unsigned w = 1u << (c->p[0] - 0xd9);
		rc = fetch(c, w, &n);
		if (rc)
			return rc;
		hdr = 1 + w;
	} else {
		return -EPROTO;
	}
	if (n > mp_left(c) - hdr)
		return -EBADMSG;
	*s = (const char *)c->p + hdr;
	*len = (uint32_t)n;
	c->p += hdr + n;
	return 0;
}

bool mp_is_int(const struct mp_cursor *c)
{
	uint8_t t;

	if (mp_left(c) < 1)
		return false;
	t = c->p[0];
	return t <= 0x7f || t >= 0xe0 || (t >= 0xcc && t <= 0xd3);
}

bool mp_is_str(const struct mp_cursor *c)
{
	uint8_t t;

	if (mp_left(c) < 1)
		return false;
	t = c->p[0];
	return (t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb);
}

int mp_read_int(struct mp_cursor *c, int64_t *v)
{
	uint8_t t;
	uint64_t u;
	unsigned w;
	int rc;

	if (mp_left(c) < 1)
		return -EBADMSG;
	t = c->p[0];
	if (t <= 0x7f) {
		*v = t;
		c->p++;
		return 0;
	}
	if (t >= 0xe0) {
		*v = (int8_t)t;
		c->p++;
		return 0;
	}
	if (t >= 0xcc && t <= 0xcf) {
		w = 1u << (t - 0xcc);
		rc = fetch(c, w, &u);
		if (rc)
			return rc;
		if (u > INT64_MAX)
			return -ERANGE;
		*v = (int64_t)u;
		c->p += 1 + w;
		return 0;
	}
	if (t >= 0xd0 && t <= 0xd3) {
		w = 1u << (t - 0xd0);
		rc = fetch(c, w, &u);
		if (rc)
			return rc;
		if (w < 8 && (u >> (8 * w - 1)))	/* sign-extend */
			u |= ~(uint64_t)0 << (8 * w);
		*v = (int64_t)u;
		c->p += 1 + w;
		return 0;
	}
	return -EPROTO;
}

int mp_read_bin(struct mp_cursor *c, const uint8_t **b, uint32_t *len)
{
	unsigned hdr, w;
	uint64_t n;
	int rc;

	if (mp_left(c) < 1)
		return -EBADMSG;
	if (c->p[0] < 0xc4 || c->p[0] > 0xc6)
		return -EPROTO;
	w = 1u << (c->p[0] - 0xc4);
	rc = fetch(c, w, &n);
	if (rc)
		return rc;
	hdr = 1 + w;
	if (n > mp_left(c) - hdr)
		return -EBADMSG;
	*b = c->p + hdr;
	*len = (uint32_t)n;
	c->p += hdr + n;
	return 0;
}

int mp_read_uint(struct mp_cursor *c, uint64_t *v)
{
	uint8_t t;
	unsigned w;
	int64_t s;
	int rc;

	if (mp_left(c) < 1)
		return -EBADMSG;
	t = c->p[0];
	if (t < 0x80) {		/* a positive fixint: most of an image's */
		*v = t;
		c->p++;
		return 0;
	}
	if (t >= 0xcc && t <= 0xcf) {
		w = 1u << (t - 0xcc);
		rc = fetch(c, w, v);
		if (rc)
			return rc;
		c->p += 1 + w;
		return 0;
	}
	if (!mp_is_int(c))
		return -EPROTO;
	{
		struct mp_cursor save = *c;

		rc = mp_read_int(c, &s);
		if (rc)
			return rc;
		if (s < 0) {
			*c = save;
			return -ERANGE;
		}
	}
	*v = (uint64_t)s;
	return 0;
}

int mp_read_bool(struct mp_cursor *c, bool *v)
{
	if (mp_left(c) < 1)
		return -EBADMSG;
	if (c->p[0] != 0xc2 && c->p[0] != 0xc3)
		return -EPROTO;
	*v = c->p[0] == 0xc3;
	c->p++;
	return 0;
}

bool mp_take_nil(struct mp_cursor *c)
{
	if (mp_left(c) < 1 || c->p[0] != 0xc0)
		return false;
	c->p++;
	return true;
}

/* Size of the value's header and payload, and how many child values
 * follow it.  Returns 0, or -EBADMSG. */
static int value_extent(const struct mp_cursor *c, uint64_t *bytes,
			uint64_t *children)
{
	uint8_t t = c->p[0];
	uint64_t n;
	unsigned w;

	*children = 0;
	if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
		*bytes = 1;
		return 0;
	}
	if ((t & 0xf0) == 0x80 || (t & 0xf0) == 0x90) {
		*bytes = 1;
		*children = (uint64_t)(t & 0x0f) * ((t & 0xf0) == 0x80 ? 2 : 1);
		return 0;
	}
	if ((t & 0xe0) == 0xa0) {
		*bytes = 1 + (uint64_t)(t & 0x1f);
		return 0;
	}
	switch (t) {
	case 0xcc: case 0xd0: *bytes = 2; return 0;
	case 0xcd: case 0xd1: *bytes = 3; return 0;
	case 0xca: case 0xce: case 0xd2: *bytes = 5; return 0;
	case 0xcb: case 0xcf: case 0xd3: *bytes = 9; return 0;
	case 0xd4: *bytes = 3; return 0;	/* fixext 1 */
	case 0xd5: *bytes = 4; return 0;
	case 0xd6: *bytes = 6; return 0;
	case 0xd7: *bytes = 10; return 0;
	case 0xd8: *bytes = 18; return 0;
	case 0xc4: case 0xc5: case 0xc6:	/* bin 8/16/32 */
	case 0xd9: case 0xda: case 0xdb:	/* str 8/16/32 */
		w = (t >= 0xd9) ? 1u << (t - 0xd9) : 1u << (t - 0xc4);
		if (mp_left(c) < 1 + (size_t)w)
			return -EBADMSG;
		*bytes = 1 + w + be(c->p + 1, w);
		return 0;
	case 0xc7: case 0xc8: case 0xc9:	/* ext 8/16/32 */
		w = 1u << (t - 0xc7);
		if (mp_left(c) < 2 + (size_t)w)
			return -EBADMSG;
		*bytes = 2 + w + be(c->p + 1, w);
		return 0;
	case 0xdc: case 0xdd: case 0xde: case 0xdf:
		w = (t == 0xdc || t == 0xde) ? 2 : 4;
		if (mp_left(c) < 1 + (size_t)w)
			return -EBADMSG;
		n = be(c->p + 1, w);
		*bytes = 1 + w;
		*children = t >= 0xde ? 2 * n : n;
		return 0;
	default:	/* 0xc1 is never used */
		return -EBADMSG;
	}
}

int mp_skip(struct mp_cursor *c)
{
	uint64_t pending = 1, bytes, children;
	int rc;

	while (pending > 0) {
		if (mp_left(c) < 1)
			return -EBADMSG;
		rc = value_extent(c, &bytes, &children);
		if (rc)
			return rc;
		if (bytes > mp_left(c))
			return -EBADMSG;
		c->p += bytes;
		pending += children - 1;
		if (pending > mp_left(c))	/* each value is >= 1 byte */
			return -EBADMSG;
	}
	return 0;
}

const char *mp_type_name(const struct mp_cursor *c)
{
	uint8_t t;

	if (mp_left(c) < 1)
		return "end of data";
	t = c->p[0];
	if (t >= 0xe0 || (t >= 0xd0 && t <= 0xd3 && mp_left(c) > 1 &&
			  (c->p[1] & 0x80)))
		return "negative integer";
	if (mp_is_int(c))
		return "integer";
	if (mp_is_str(c))
		return "string";
	if ((t & 0xf0) == 0x80 || t == 0xde || t == 0xdf)
		return "map";
	if ((t & 0xf0) == 0x90 || t == 0xdc || t == 0xdd)
		return "array";
	if (t == 0xc0)
		return "nil";
	if (t == 0xc2 || t == 0xc3)
		return "bool";
	if (t == 0xca || t == 0xcb)
		return "float";
	if (t >= 0xc4 && t <= 0xc6)
		return "bin";
	return "ext";
}
