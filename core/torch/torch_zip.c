/* SPDX-License-Identifier: MIT */
/*
 * Zip reading for torch.save archives.  Layout facts relied on, all
 * checked: the end of central directory record (EOCD) is the archive's
 * last 22 bytes (torch writes no comment); when its fields saturate, the
 * zip64 locator just before it points at the zip64 EOCD; central
 * directory entries give sizes and local header offsets, with a zip64
 * extra field (id 1) for saturated ones; data begins after the local
 * header's own name and extra field.
 */
#include "torch/torch_zip.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"

#define EOCD_LEN 22
#define LOC64_LEN 20
#define EOCD64_LEN 56
#define CDH_LEN 46
#define LFH_LEN 30

static uint64_t rd(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

static int bad(struct tz_archive *z, char *err, size_t errlen,
	       const char *what)
{
	return ckpt_errf(err, errlen, -EINVAL, "%s: %s", z->where, what);
}

/* A read of the archive failed: say so with the reader's own reason (the
 * store's last error: "replaced since it was opened: HTTP 412", ...),
 * which callers would otherwise lose. */
static int read_failed(const char *where, char *err, size_t errlen)
{
	const char *last = ckpt_last_error();
	char why[400];

	/* A copy: formatting err may set the last error itself. */
	snprintf(why, sizeof(why), "%s", last ? last : "");
	return ckpt_errf(err, errlen, -EIO, "%s: read error%s%s", where,
			 why[0] ? ": " : "", why);
}

/* Read [off, off+len) of the archive, from the windows when they hold it. */
static int zread(struct tz_archive *z, uint64_t off, void *buf, size_t len,
		 char *err, size_t errlen)
{
	uint64_t end;

	if (__builtin_add_overflow(off, (uint64_t)len, &end) || end > z->len)
		return bad(z, err, errlen, "zip structure points past the end of the archive");
	if (end <= z->head_len) {
		memcpy(buf, z->head + off, len);
		return 0;
	}
	if (off >= z->len - z->tail_len) {
		memcpy(buf, z->tail + (off - (z->len - z->tail_len)), len);
		return 0;
	}
	ckpt_clear_last_error();
	if (z->read(z->ctx, off, buf, len))
		return read_failed(z->where, err, errlen);
	return 0;
}

int tz_open(struct tz_archive *z, tz_read_fn read, void *ctx, uint64_t len,
	    const char *where, char *err, size_t errlen)
{
	uint64_t nent, cd_len, cd_off, end;
	const uint8_t *e;
	int rc;

	/* Every field but the windows, which are read into below: clearing
	 * 8 KiB per record was a fifth of indexing a checkpoint. */
	z->head = z->tail = NULL;
	z->head_len = z->tail_len = 0;
	z->cd = NULL;
	z->cd_off = 0;
	z->cd_len = 0;
	z->nent = 0;
	z->read = read;
	z->ctx = ctx;
	z->len = len;
	z->where = where;
	if (len < EOCD_LEN)
		return bad(z, err, errlen, "record too short for a zip archive");
	ckpt_clear_last_error();
	if (len <= sizeof(z->win)) {
		z->head = z->tail = z->win;
		z->head_len = z->tail_len = (size_t)len;
		rc = read(ctx, 0, z->win, (size_t)len);
	} else {
		z->head = z->win;
		z->tail = z->win + TZ_WINDOW;
		z->head_len = z->tail_len = TZ_WINDOW;
		rc = read(ctx, 0, z->win, TZ_WINDOW);
		if (!rc)
			rc = read(ctx, len - TZ_WINDOW, z->win + TZ_WINDOW,
				  TZ_WINDOW);
	}
	if (rc)
		return read_failed(where, err, errlen);
	if (rd(z->head, 4) != 0x04034b50)
		return bad(z, err, errlen,
			   "record is not a torch.save zip archive (no PK\\3\\4 at its start; compressed or another format?)");
	e = z->tail + z->tail_len - EOCD_LEN;
	if (rd(e, 4) != 0x06054b50)
		return bad(z, err, errlen,
			   "no zip end record in the record's last 22 bytes");
	if (rd(e + 4, 2) != 0 || rd(e + 6, 2) != 0)
		return bad(z, err, errlen, "multi-disk zip archive");
	nent = rd(e + 10, 2);
	cd_len = rd(e + 12, 4);
	cd_off = rd(e + 16, 4);
	if (nent == 0xffff || cd_len == 0xffffffff || cd_off == 0xffffffff) {
		uint8_t loc[LOC64_LEN], e64[EOCD64_LEN];
		uint64_t e64_off;

		if (len < EOCD_LEN + LOC64_LEN)
			return bad(z, err, errlen, "zip64 locator missing");
		rc = zread(z, len - EOCD_LEN - LOC64_LEN, loc, LOC64_LEN, err,
			   errlen);
		if (rc)
			return rc;
		if (rd(loc, 4) != 0x07064b50)
			return bad(z, err, errlen, "zip64 locator missing");
		e64_off = rd(loc + 8, 8);
		rc = zread(z, e64_off, e64, EOCD64_LEN, err, errlen);
		if (rc)
			return rc;
		if (rd(e64, 4) != 0x06064b50)
			return bad(z, err, errlen, "zip64 end record missing");
		nent = rd(e64 + 32, 8);
		cd_len = rd(e64 + 40, 8);
		cd_off = rd(e64 + 48, 8);
	}
	if (__builtin_add_overflow(cd_off, cd_len, &end) || end > len)
		return bad(z, err, errlen, "central directory lies outside the record");
	if (cd_len > TZ_CD_MAX)
		return bad(z, err, errlen, "central directory larger than 1 MiB");
	if (nent > cd_len / CDH_LEN)
		return bad(z, err, errlen, "central directory entry count does not fit its size");
	z->cd = malloc(cd_len ? cd_len : 1);
	if (!z->cd)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	rc = zread(z, cd_off, z->cd, cd_len, err, errlen);
	if (rc) {
		tz_close(z);
		return rc;
	}
	z->cd_off = cd_off;
	z->cd_len = cd_len;
	z->nent = nent;
	return 0;
}

void tz_close(struct tz_archive *z)
{
	free(z->cd);
	z->cd = NULL;
}

/* Resolve a central directory entry's saturated fields from its zip64
 * extra field. */
static int zip64_fields(const uint8_t *x, size_t xlen, uint64_t *usize,
			uint64_t *csize, uint64_t *lho)
{
	uint64_t *want[3] = { usize, csize, lho };
	size_t i = 0;

	while (i + 4 <= xlen) {
		size_t id = rd(x + i, 2), n = rd(x + i + 2, 2), at = i + 4;
		int k;

		if (at + n > xlen)
			return -EINVAL;
		if (id == 1) {
			for (k = 0; k < 3; k++) {
				if (*want[k] != 0xffffffff)
					continue;
				if (at + 8 > i + 4 + n)
					return -EINVAL;
				*want[k] = rd(x + at, 8);
				at += 8;
			}
			return 0;
		}
		i = at + n;
	}
	return (*usize == 0xffffffff || *csize == 0xffffffff ||
		*lho == 0xffffffff) ? -EINVAL : 0;
}

static int entry_record(struct tz_archive *z, const uint8_t *h,
			const char *name, size_t nlen, struct tz_record *r,
			char *err, size_t errlen)
{
	uint64_t usize = rd(h + 24, 4), csize = rd(h + 20, 4);
	uint64_t lho = rd(h + 42, 4), data_off, end;
	uint8_t lfh[LFH_LEN];
	char *lname;
	int rc;

	if (zip64_fields(h + CDH_LEN + nlen, rd(h + 30, 2), &usize, &csize,
			 &lho))
		return bad(z, err, errlen, "bad zip64 extra field in the central directory");
	if (rd(h + 10, 2) != 0 || csize != usize)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: record '%.*s' is compressed; only stored records can be served",
				 z->where, (int)(nlen > 200 ? 200 : nlen), name);
	rc = zread(z, lho, lfh, LFH_LEN, err, errlen);
	if (rc)
		return rc;
	if (rd(lfh, 4) != 0x04034b50 || rd(lfh + 26, 2) != nlen)
		return bad(z, err, errlen, "local header does not match the central directory");
	lname = malloc(nlen ? nlen : 1);
	if (!lname)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	rc = zread(z, lho + LFH_LEN, lname, nlen, err, errlen);
	if (!rc && memcmp(lname, name, nlen))
		rc = bad(z, err, errlen, "local header name does not match the central directory");
	free(lname);
	if (rc)
		return rc;
	data_off = lho + LFH_LEN + nlen + rd(lfh + 28, 2);
	if (__builtin_add_overflow(data_off, usize, &end) || end > z->cd_off)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: record '%.*s' (%" PRIu64 " bytes at %" PRIu64
				 ") runs past the data area of the %" PRIu64 "-byte archive",
				 z->where, (int)(nlen > 200 ? 200 : nlen), name,
				 usize, data_off, z->len);
	r->hdr_off = lho;
	r->data_off = data_off;
	r->size = usize;
	r->crc32 = (uint32_t)rd(h + 16, 4);
	return 0;
}

int tz_find(struct tz_archive *z, const char *prefix, size_t plen,
	    const char *suffix, struct tz_record *r, const char **name,
	    size_t *prefix_len, char *err, size_t errlen)
{
	size_t slen = strlen(suffix), at = 0;
	uint64_t i;

	for (i = 0; i < z->nent; i++) {
		const uint8_t *h = z->cd + at;
		size_t nlen, skip;
		const char *nm;

		if (z->cd_len - at < CDH_LEN || rd(h, 4) != 0x02014b50)
			return bad(z, err, errlen, "corrupt central directory");
		nlen = rd(h + 28, 2);
		skip = CDH_LEN + nlen + rd(h + 30, 2) + rd(h + 32, 2);
		if (z->cd_len - at < skip)
			return bad(z, err, errlen, "corrupt central directory");
		nm = (const char *)h + CDH_LEN;
		at += skip;
		if (prefix) {
			if (nlen != plen + slen || memcmp(nm, prefix, plen) ||
			    memcmp(nm + plen, suffix, slen))
				continue;
		} else if (nlen < slen || memcmp(nm + nlen - slen, suffix, slen) ||
			   (nlen > slen && nm[nlen - slen - 1] != '/')) {
			continue;
		}
		if (name)
			*name = nm;
		if (prefix_len)
			*prefix_len = nlen - slen;
		return entry_record(z, h, nm, nlen, r, err, errlen);
	}
	return -ENOENT;
}

int tz_read(struct tz_archive *z, const struct tz_record *r, size_t max,
	    uint8_t **out, char *err, size_t errlen)
{
	uint8_t *b;
	int rc;

	*out = NULL;
	if (r->size > max)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: record of %" PRIu64 " bytes exceeds the %zu-byte limit",
				 z->where, r->size, max);
	b = malloc(r->size ? (size_t)r->size : 1);
	if (!b)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	rc = zread(z, r->data_off, b, (size_t)r->size, err, errlen);
	if (rc) {
		free(b);
		return rc;
	}
	*out = b;
	return 0;
}
