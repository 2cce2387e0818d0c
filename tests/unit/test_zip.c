/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the zip locator (torch/torch_zip.c) on archives built
 * here byte by byte as torch.save writes them (stored entries): records
 * found with their offsets, sizes and CRCs, and malformed archives
 * refused with a message.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "testhelp.h"
#include "torch/torch_zip.h"

struct zbuf {
	uint8_t b[8192];
	size_t n;
};

static void put16(struct zbuf *z, unsigned v)
{
	z->b[z->n++] = (uint8_t)v;
	z->b[z->n++] = (uint8_t)(v >> 8);
}

static void put32(struct zbuf *z, uint32_t v)
{
	put16(z, v & 0xffff);
	put16(z, v >> 16);
}

static void putb(struct zbuf *z, const void *p, size_t n)
{
	memcpy(z->b + z->n, p, n);
	z->n += n;
}

struct ent {
	const char *name;
	const char *data;
	uint32_t off;	/* of its local header */
};

/* Stored entries, a central directory and its end record. */
static void build(struct zbuf *z, struct ent *e, unsigned n)
{
	uint32_t cd;
	unsigned i;

	z->n = 0;
	for (i = 0; i < n; i++) {
		size_t nl = strlen(e[i].name), dl = strlen(e[i].data);
		uint32_t crc = (uint32_t)crc32(0, (const Bytef *)e[i].data, (uInt)dl);

		e[i].off = (uint32_t)z->n;
		put32(z, 0x04034b50);
		put16(z, 20); put16(z, 0); put16(z, 0);	/* stored */
		put16(z, 0); put16(z, 0);
		put32(z, crc); put32(z, (uint32_t)dl); put32(z, (uint32_t)dl);
		put16(z, (unsigned)nl); put16(z, 0);
		putb(z, e[i].name, nl);
		putb(z, e[i].data, dl);
	}
	cd = (uint32_t)z->n;
	for (i = 0; i < n; i++) {
		size_t nl = strlen(e[i].name), dl = strlen(e[i].data);
		uint32_t crc = (uint32_t)crc32(0, (const Bytef *)e[i].data, (uInt)dl);

		put32(z, 0x02014b50);
		put16(z, 20); put16(z, 20); put16(z, 0); put16(z, 0);
		put16(z, 0); put16(z, 0);
		put32(z, crc); put32(z, (uint32_t)dl); put32(z, (uint32_t)dl);
		put16(z, (unsigned)nl); put16(z, 0); put16(z, 0);
		put16(z, 0); put16(z, 0); put32(z, 0);
		put32(z, e[i].off);
		putb(z, e[i].name, nl);
	}
	put32(z, 0x06054b50);
	put16(z, 0); put16(z, 0);
	put16(z, n); put16(z, n);
	put32(z, (uint32_t)(z->n - 12 - cd));	/* central directory size */
	put32(z, cd);
	put16(z, 0);
}

static int mem_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct zbuf *z = ctx;

	if (off > z->n || len > z->n - off)
		return -EIO;
	memcpy(buf, z->b + off, len);
	return 0;
}

static void test_find(void)
{
	struct ent e[3] = { { "archive/data.pkl", "PICKLE", 0 },
			    { "archive/data/0", "0123456789abcdef", 0 },
			    { "archive/byteorder", "little", 0 } };
	static struct zbuf z;
	struct tz_archive a;
	struct tz_record r;
	const char *name;
	char err[512];

	build(&z, e, 3);
	CHECK(tz_open(&a, mem_read, &z, z.n, "t.distcp", err, sizeof(err)) == 0);
	CHECK(tz_find(&a, NULL, 0, "data/0", &r, &name, NULL, err,
		      sizeof(err)) == 0);
	CHECK(r.size == 16 && memcmp(z.b + r.data_off, "0123456789abcdef", 16) == 0);
	CHECK(r.crc32 == (uint32_t)crc32(0, (const Bytef *)"0123456789abcdef", 16));
	CHECK(tz_find(&a, "archive/", 8, "byteorder", &r, NULL, NULL, err,
		      sizeof(err)) == 0 && r.size == 6);
	CHECK(tz_find(&a, NULL, 0, "data/1", &r, NULL, NULL, err,
		      sizeof(err)) == -ENOENT);
	/* "data/0" must end at a '/' boundary: "xdata/0" is not it. */
	CHECK(tz_find(&a, NULL, 0, "ta/0", &r, NULL, NULL, err,
		      sizeof(err)) == -ENOENT);
	tz_close(&a);
}

static void test_malformed(void)
{
	struct ent e[1] = { { "archive/data/0", "abcd", 0 } };
	static struct zbuf z;
	struct tz_archive a;
	struct tz_record r;
	char err[512];
	size_t eocd;

	build(&z, e, 1);
	eocd = z.n - 22;
	/* Not a zip at all. */
	CHECK(tz_open(&a, mem_read, &z, 10, "t.distcp", err, sizeof(err)) == -EINVAL);
	CHECK(err[0] != '\0');
	/* The central directory said to lie past the end. */
	z.b[eocd + 16] = 0xff; z.b[eocd + 17] = 0xff;
	err[0] = '\0';
	CHECK(tz_open(&a, mem_read, &z, z.n, "t.distcp", err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "t.distcp") != NULL);
	/* A record whose size runs past the archive. */
	build(&z, e, 1);
	eocd = z.n - 22;
	{
		size_t cd = z.b[eocd + 16] | (size_t)z.b[eocd + 17] << 8;

		z.b[e[0].off + 18 + 1] = 0xff;	/* local sizes */
		z.b[e[0].off + 22 + 1] = 0xff;
		z.b[cd + 20 + 1] = 0xff;	/* central sizes */
		z.b[cd + 24 + 1] = 0xff;
	}
	CHECK(tz_open(&a, mem_read, &z, z.n, "t.distcp", err, sizeof(err)) == 0);
	err[0] = '\0';
	CHECK(tz_find(&a, NULL, 0, "data/0", &r, NULL, NULL, err,
		      sizeof(err)) == -EINVAL);
	CHECK(err[0] != '\0');
	tz_close(&a);
}

int main(void)
{
	TEST(test_find);
	TEST(test_malformed);
	return TEST_REPORT();
}
