/* SPDX-License-Identifier: MIT */
/* Decoding stored records: see zstd_decode.h. */
#include "io/zstd_decode.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "common/errbuf.h"
#include "model/transforms.h"

#define OUT_FIRST ((size_t)1 << 20)	/* first output buffer, unless the
					 * frame says its size */
#define COUNT_BUF ((size_t)128 << 10)	/* output scratch when counting */

int ckpt_mem_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct ckpt_mem_src *s = ctx;

	if (off > s->len || len > s->len - off)
		return -EIO;
	memcpy(buf, s->p + off, len);
	return 0;
}

int ckpt_zstd_magic_ok(const uint8_t *buf, size_t len)
{
	uint32_t m;

	if (len < 4)
		return 0;
	m = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 |
	    (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
	return m == ZSTD_MAGICNUMBER ||
	       (m & ZSTD_MAGIC_SKIPPABLE_MASK) == ZSTD_MAGIC_SKIPPABLE_START;
}

/* Make room for at least one more byte of output, within cap + 1 (the
 * extra byte is how a stream going past cap is seen). */
static int grow_out(uint8_t **buf, size_t *cap_now, uint64_t cap)
{
	uint64_t want = *cap_now ? (uint64_t)*cap_now * 2 : OUT_FIRST;
	uint8_t *p;

	if (want > cap + 1)
		want = cap + 1;
	if (want <= *cap_now || want > SIZE_MAX)
		return -EFBIG;
	p = realloc(*buf, (size_t)want);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap_now = (size_t)want;
	return 0;
}

/* One zstd layer of the len bytes at src, streamed into *out (or only
 * counted): for frames that do not declare their size, or that must be
 * told apart from corrupt ones. */
static int zstd_stream(const uint8_t *src, size_t len, uint64_t cap,
		       bool keep, uint8_t **out, uint64_t *outlen, char *why,
		       size_t whylen)
{
	ZSTD_inBuffer ib = { src, len, 0 };
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	uint8_t *ob = keep ? NULL : malloc(COUNT_BUF);
	size_t ocap = keep ? 0 : COUNT_BUF, ret;
	uint64_t total = 0;
	int rc;

	*outlen = 0;
	if (!dc || (!keep && !ob)) {
		rc = ckpt_errf(why, whylen, -ENOMEM, "out of memory");
		goto out;
	}
	for (;;) {
		size_t in_before = ib.pos;
		ZSTD_outBuffer o;

		if (keep && total == ocap) {
			rc = grow_out(&ob, &ocap, cap);
			if (rc == -EFBIG)
				goto bomb;
			if (rc) {
				rc = ckpt_errf(why, whylen, rc, "out of memory");
				goto out;
			}
		}
		o.dst = keep ? ob + total : ob;
		o.size = keep ? ocap - (size_t)total : ocap;
		o.pos = 0;
		ret = ZSTD_decompressStream(dc, &o, &ib);
		if (ZSTD_isError(ret)) {
			rc = ckpt_errf(why, whylen, -EBADMSG, "zstd: %s",
				       ZSTD_getErrorName(ret));
			goto out;
		}
		total += o.pos;
		if (total > cap)
			goto bomb;
		if (ib.pos == ib.size && ret == 0)
			break;		/* every frame whole and flushed */
		if (ib.pos == in_before && o.pos < o.size) {
			rc = ckpt_errf(why, whylen, -EBADMSG,
				       "zstd: the stored record ends inside a frame (truncated)");
			goto out;
		}
	}
	*outlen = total;
	if (keep && total) {
		*out = ob;
		ob = NULL;
	}
	rc = 0;
	goto out;
bomb:
	rc = ckpt_errf(why, whylen, -EFBIG,
		       "zstd: decodes to more than the %" PRIu64 "-byte cap (a zstd bomb, or raise -o cache_mb)",
		       cap);
out:
	free(ob);
	ZSTD_freeDCtx(dc);
	return rc;
}

/* The total size the frames declare: 0 and *n, 1 when one does not say,
 * or -EBADMSG when they are not whole frames. */
static int declared_size(const uint8_t *src, size_t len, uint64_t *n)
{
	size_t pos = 0;

	*n = 0;
	while (pos < len) {
		unsigned long long fcs = ZSTD_getFrameContentSize(src + pos,
								  len - pos);
		size_t fsz;

		if (fcs == ZSTD_CONTENTSIZE_UNKNOWN)
			return 1;
		if (fcs == ZSTD_CONTENTSIZE_ERROR ||
		    __builtin_add_overflow(*n, (uint64_t)fcs, n))
			return -EBADMSG;
		fsz = ZSTD_findFrameCompressedSize(src + pos, len - pos);
		if (ZSTD_isError(fsz) || fsz == 0)
			return -EBADMSG;
		pos += fsz;
	}
	return 0;
}

/*
 * One zstd layer whose frames all declare their size (what zstd's one-shot
 * compressors and torch's writer give): decoded in one call straight into
 * a buffer of that size; a declared size past the cap fails at once.
 * Returns 1 to have zstd_stream() do it instead: when a frame does not say
 * its size, when the frames are not whole (it names the fault), or when
 * only counting (it needs little memory).
 */
static int zstd_oneshot(const uint8_t *src, size_t len, uint64_t cap,
			bool keep, uint8_t **out, uint64_t *outlen, char *why,
			size_t whylen)
{
	uint64_t n;
	ZSTD_DCtx *dc;
	uint8_t *buf;
	size_t got;

	if (declared_size(src, len, &n))
		return 1;
	if (n > cap)
		return ckpt_errf(why, whylen, -EFBIG,
				 "zstd frame says it decodes to %" PRIu64 " bytes, past the %" PRIu64 "-byte cap",
				 n, cap);
	if (!keep)
		return 1;
	buf = malloc(n ? (size_t)n : 1);
	dc = ZSTD_createDCtx();
	if (!buf || !dc) {
		free(buf);
		ZSTD_freeDCtx(dc);
		return ckpt_errf(why, whylen, -ENOMEM, "out of memory");
	}
	got = ZSTD_decompressDCtx(dc, buf, (size_t)n, src, len);
	ZSTD_freeDCtx(dc);
	if (ZSTD_isError(got) || got != n) {
		free(buf);
		return ckpt_errf(why, whylen, -EBADMSG, "zstd: %s",
				 ZSTD_isError(got) ? ZSTD_getErrorName(got) :
				 "frames decode to another size than they declare");
	}
	*outlen = n;
	if (n)
		*out = buf;
	else
		free(buf);
	return 0;
}

/* The whole stored record in memory, when it can be (a record bigger
 * than the cap plus zstd's worst-case framing cannot decode within it). */
static int read_stored(ckpt_stored_read_fn read, void *ctx, uint64_t len,
		       uint64_t cap, uint8_t **buf, char *why, size_t whylen)
{
	if (len == 0)
		return ckpt_errf(why, whylen, -EBADMSG,
				 "zstd: stored record is empty");
	if (len > cap + cap / 64 + (1 << 20) || len > SIZE_MAX)
		return ckpt_errf(why, whylen, -EFBIG,
				 "zstd: a %" PRIu64 "-byte stored record cannot decode within the %" PRIu64 "-byte cap",
				 len, cap);
	*buf = malloc((size_t)len);
	if (!*buf)
		return ckpt_errf(why, whylen, -ENOMEM, "out of memory");
	if (read(ctx, 0, *buf, (size_t)len)) {
		free(*buf);
		*buf = NULL;
		return ckpt_errf(why, whylen, -EIO,
				 "cannot read the %" PRIu64 "-byte stored record", len);
	}
	return 0;
}

int ckpt_decode_stored(ckpt_stored_read_fn read, void *ctx, uint64_t len,
		       const uint8_t *transforms, unsigned n, uint64_t cap,
		       uint8_t **out, uint64_t *outlen, char *why,
		       size_t whylen)
{
	uint8_t *cur = NULL, *next = NULL;
	uint64_t curlen = 0;
	unsigned i;
	int rc;

	if (out)
		*out = NULL;
	*outlen = 0;
	rc = read_stored(read, ctx, len, cap, &cur, why, whylen);
	if (rc)
		return rc;
	curlen = len;
	for (i = 0; i < n; i++) {
		bool keep = out || i + 1 < n;

		if (transforms[i] != CKPT_XFORM_ZSTD) {
			rc = ckpt_errf(why, whylen, -ENOTSUP,
				       "unknown transform");
			goto out;
		}
		rc = zstd_oneshot(cur, (size_t)curlen, cap, keep, &next,
				  &curlen, why, whylen);
		if (rc == 1)
			rc = zstd_stream(cur, (size_t)curlen, cap, keep, &next,
					 &curlen, why, whylen);
		free(cur);
		cur = next;
		next = NULL;
		if (rc)
			goto out;
	}
	*outlen = curlen;
	if (out) {
		*out = cur;
		cur = NULL;
	}
	rc = 0;
out:
	free(cur);
	return rc;
}
