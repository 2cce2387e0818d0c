/* SPDX-License-Identifier: MIT */
/* Decoding stored records: see zstd_decode.h. */
#include "io/zstd_decode.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
/* ZSTD_customMem, ZSTD_createDCtx_advanced() and ZSTD_estimateDCtxSize():
 * zstd's advanced API, which libzstd 1.5 exports; it lets every buffer
 * zstd allocates be taken from the budget first. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include "common/bigbuf.h"
#include "common/errbuf.h"
#include "model/transforms.h"

#define OUT_FIRST ((size_t)1 << 20)	/* first output buffer at most,
					 * unless the frame says its size */
#define OUT_MIN ((size_t)64 << 10)	/* and at least */
#define COUNT_BUF ((size_t)128 << 10)	/* output scratch when counting */
#define ZHDR 16			/* size header before each block zstd
				 * allocates (keeps malloc's alignment) */

/* A budget (or none), and its first refusal: what a failed allocation
 * means. */
struct mem {
	const struct ckpt_decode_budget *b;
	int refused;
};

static int mem_take(struct mem *m, uint64_t n)
{
	int rc;

	if (!m->b)
		return 0;
	rc = m->b->take(m->b->ctx, n);
	if (rc && !m->refused)
		m->refused = rc;
	return rc;
}

static void mem_give(struct mem *m, uint64_t n)
{
	if (m->b)
		m->b->give(m->b->ctx, n);
}

/* malloc(n), taken from the budget first; NULL when refused (then
 * m->refused says why) or out of memory. */
static void *mem_alloc(struct mem *m, size_t n)
{
	void *p;

	if (mem_take(m, n))
		return NULL;
	p = ckpt_big_alloc(n);
	if (!p)
		mem_give(m, n);
	return p;
}

/* Free p, of n bytes as taken, and give them back.  Accepts NULL. */
static void mem_free(struct mem *m, void *p, size_t n)
{
	if (!p)
		return;
	ckpt_big_free(p, n);
	mem_give(m, n);
}

/* zstd's own allocations, through the budget; each block records its
 * size in front. */
static void *zmem_alloc(void *opaque, size_t n)
{
	uint8_t *p;

	if (n > SIZE_MAX - ZHDR)
		return NULL;
	p = mem_alloc(opaque, n + ZHDR);
	if (!p)
		return NULL;
	memcpy(p, &n, sizeof(n));
	return p + ZHDR;
}

static void zmem_free(void *opaque, void *q)
{
	uint8_t *p;
	size_t n;

	if (!q)
		return;
	p = (uint8_t *)q - ZHDR;
	memcpy(&n, p, sizeof(n));
	mem_free(opaque, p, n + ZHDR);
}

static ZSTD_DCtx *dctx_new(struct mem *m)
{
	ZSTD_customMem cm = { zmem_alloc, zmem_free, m };

	return m->b ? ZSTD_createDCtx_advanced(cm) : ZSTD_createDCtx();
}

uint64_t ckpt_zstd_context_bytes(void)
{
	return (uint64_t)ZSTD_estimateDCtxSize() + ZHDR;
}

/* An allocation failed: past the cap, the budget full for now, or out of
 * memory. */
static int no_memory(const struct mem *m, uint64_t cap, char *why,
		     size_t whylen)
{
	if (m->refused == -EFBIG)
		return ckpt_errf(why, whylen, -EFBIG,
				 "zstd: decodes to more than the %" PRIu64 "-byte cap (a zstd bomb, or raise -o cache_mb)",
				 cap);
	if (m->refused)
		return ckpt_errf(why, whylen, m->refused,
				 "no room in the record cache now");
	return ckpt_errf(why, whylen, -ENOMEM, "out of memory");
}

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

/* Make room for at least one more byte of output (first bytes to begin
 * with), within cap + 1 (the extra byte is how a stream going past cap is
 * seen): -EFBIG at the cap, or the budget's refusal, or -ENOMEM. */
static int grow_out(struct mem *m, uint8_t **buf, size_t *cap_now,
		    uint64_t first, uint64_t cap)
{
	uint64_t want = *cap_now ? (uint64_t)*cap_now * 2 : first;
	uint8_t *p;
	int rc;

	if (want > cap + 1)
		want = cap + 1;
	if (want <= *cap_now || want > SIZE_MAX)
		return -EFBIG;
	rc = mem_take(m, want - *cap_now);
	if (rc)
		return rc;
	p = ckpt_big_realloc(*buf, *cap_now, (size_t)want);
	if (!p) {
		mem_give(m, want - *cap_now);
		return -ENOMEM;
	}
	*buf = p;
	*cap_now = (size_t)want;
	return 0;
}

/* One zstd layer of the len bytes at src, streamed into *out (or only
 * counted): for frames that do not declare their size, or that must be
 * told apart from corrupt ones.  *out is exactly *outlen bytes, taken. */
static int zstd_stream(struct mem *m, const uint8_t *src, size_t len,
		       uint64_t cap, bool keep, uint8_t **out,
		       uint64_t *outlen, char *why, size_t whylen)
{
	ZSTD_inBuffer ib = { src, len, 0 };
	ZSTD_DCtx *dc = dctx_new(m);
	uint8_t *ob = keep ? NULL : mem_alloc(m, COUNT_BUF);
	size_t ocap = keep ? 0 : COUNT_BUF, ret;
	uint64_t total = 0;
	int rc;

	*outlen = 0;
	if (!dc || (!keep && !ob)) {
		rc = no_memory(m, cap, why, whylen);
		goto out;
	}
	for (;;) {
		size_t in_before = ib.pos;
		ZSTD_outBuffer o;

		if (keep && total == ocap) {
			/* A few times the input, so that a small record
			 * does not take a large buffer from the budget. */
			uint64_t first = (uint64_t)len * 4 < OUT_MIN ? OUT_MIN :
					 (uint64_t)len * 4 > OUT_FIRST ?
					 OUT_FIRST : (uint64_t)len * 4;

			rc = grow_out(m, &ob, &ocap, first, cap);
			if (rc == -EFBIG)
				goto bomb;
			if (rc) {
				rc = no_memory(m, cap, why, whylen);
				goto out;
			}
		}
		o.dst = keep ? ob + total : ob;
		o.size = keep ? ocap - (size_t)total : ocap;
		o.pos = 0;
		ret = ZSTD_decompressStream(dc, &o, &ib);
		if (ZSTD_isError(ret)) {
			if (m->refused ||
			    ZSTD_getErrorCode(ret) == ZSTD_error_memory_allocation)
				rc = no_memory(m, cap, why, whylen);
			else
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
	if (keep && total) {
		/* Give back what the doubling took beyond the output. */
		uint8_t *p = ckpt_big_realloc(ob, ocap, (size_t)total);

		if (!p) {
			rc = ckpt_errf(why, whylen, -ENOMEM, "out of memory");
			goto out;
		}
		mem_give(m, ocap - total);
		*out = p;
		ob = NULL;
	}
	*outlen = total;
	rc = 0;
	goto out;
bomb:
	rc = ckpt_errf(why, whylen, -EFBIG,
		       "zstd: decodes to more than the %" PRIu64 "-byte cap (a zstd bomb, or raise -o cache_mb)",
		       cap);
out:
	mem_free(m, ob, ocap);
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
 * Decode the len bytes at src with one call straight into a new buffer of
 * size bytes (no window buffer).  Returns 0 with *buf (size bytes, taken
 * from the budget; freed and NULL when nothing came out) and *got, 1 when
 * zstd refused the input (its error in *zerr, nothing left taken), or
 * -errno when memory was refused or short (said in why).
 */
static int decode_flat(struct mem *m, const uint8_t *src, size_t len,
		       size_t size, uint64_t cap, uint8_t **buf, size_t *got,
		       size_t *zerr, char *why, size_t whylen)
{
	ZSTD_DCtx *dc;
	size_t n;

	*buf = mem_alloc(m, size);
	if (!*buf)
		return no_memory(m, cap, why, whylen);
	dc = dctx_new(m);
	if (!dc) {
		mem_free(m, *buf, size);
		*buf = NULL;
		return no_memory(m, cap, why, whylen);
	}
	n = ZSTD_decompressDCtx(dc, *buf, size, src, len);
	ZSTD_freeDCtx(dc);
	if (ZSTD_isError(n)) {
		mem_free(m, *buf, size);
		*buf = NULL;
		if (m->refused ||
		    ZSTD_getErrorCode(n) == ZSTD_error_memory_allocation)
			return no_memory(m, cap, why, whylen);
		*zerr = n;
		return 1;
	}
	if (n == 0) {
		mem_free(m, *buf, size);
		*buf = NULL;
	}
	*got = n;
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
static int zstd_oneshot(struct mem *m, const uint8_t *src, size_t len,
			uint64_t cap, bool keep, uint8_t **out,
			uint64_t *outlen, char *why, size_t whylen)
{
	size_t got = 0, zerr = 0;
	uint8_t *buf;
	uint64_t n;
	int rc;

	if (declared_size(src, len, &n))
		return 1;
	if (n > cap)
		return ckpt_errf(why, whylen, -EFBIG,
				 "zstd frame says it decodes to %" PRIu64 " bytes, past the %" PRIu64 "-byte cap",
				 n, cap);
	if (!keep || n > SIZE_MAX)
		return 1;
	rc = decode_flat(m, src, len, (size_t)n, cap, &buf, &got, &zerr, why,
			 whylen);
	if (rc < 0)
		return rc;
	if (rc == 0 && got != n)
		mem_free(m, buf, (size_t)n);
	if (rc || got != n)
		return ckpt_errf(why, whylen, -EBADMSG, "zstd: %s",
				 rc ? ZSTD_getErrorName(zerr) :
				 "frames decode to another size than they declare");
	*outlen = n;
	*out = buf;
	return 0;
}

/*
 * The last layer of a record whose decoded size the caller knows (expect
 * bytes) but whose frames do not say it: decoded in one call straight
 * into a buffer of that size, with no window buffer.  Returns 1 to have
 * zstd_stream() do it instead (it decodes to more, so the stream can say
 * how much; or the frames are not whole, and it names the fault).
 */
static int zstd_into(struct mem *m, const uint8_t *src, size_t len,
		     uint64_t expect, uint64_t cap, uint8_t **out,
		     uint64_t *outlen, char *why, size_t whylen)
{
	size_t got = 0, zerr = 0;
	uint8_t *buf, *p;
	int rc;

	if (expect > cap || expect > SIZE_MAX || expect == 0)
		return 1;
	rc = decode_flat(m, src, len, (size_t)expect, cap, &buf, &got, &zerr,
			 why, whylen);
	if (rc)
		return rc;
	if (buf && got < expect) {
		p = ckpt_big_realloc(buf, (size_t)expect, got);
		if (!p) {
			mem_free(m, buf, (size_t)expect);
			return ckpt_errf(why, whylen, -ENOMEM, "out of memory");
		}
		buf = p;
		mem_give(m, expect - got);
	}
	*out = buf;
	*outlen = got;
	return 0;
}

/* The whole stored record in memory, when it can be (a record bigger
 * than the cap plus zstd's worst-case framing cannot decode within it). */
static int read_stored(struct mem *m, ckpt_stored_read_fn read, void *ctx,
		       uint64_t len, uint64_t cap, uint8_t **buf, char *why,
		       size_t whylen)
{
	if (len == 0)
		return ckpt_errf(why, whylen, -EBADMSG,
				 "zstd: stored record is empty");
	if (len > cap + cap / 64 + (1 << 20) || len > SIZE_MAX)
		return ckpt_errf(why, whylen, -EFBIG,
				 "zstd: a %" PRIu64 "-byte stored record cannot decode within the %" PRIu64 "-byte cap",
				 len, cap);
	*buf = mem_alloc(m, (size_t)len);
	if (!*buf)
		return no_memory(m, cap, why, whylen);
	if (read(ctx, 0, *buf, (size_t)len)) {
		mem_free(m, *buf, (size_t)len);
		*buf = NULL;
		return ckpt_errf(why, whylen, -EIO,
				 "cannot read the %" PRIu64 "-byte stored record", len);
	}
	return 0;
}

int ckpt_decode_stored(ckpt_stored_read_fn read, void *ctx, uint64_t len,
		       const uint8_t *transforms, unsigned n, uint64_t cap,
		       uint64_t expect, const struct ckpt_decode_budget *budget,
		       uint8_t **out, uint64_t *outlen, char *why,
		       size_t whylen)
{
	struct mem m = { budget, 0 };
	uint8_t *cur = NULL, *next = NULL;
	uint64_t curlen = 0, nextlen = 0;
	unsigned i;
	int rc;

	if (out)
		*out = NULL;
	*outlen = 0;
	rc = read_stored(&m, read, ctx, len, cap, &cur, why, whylen);
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
		rc = zstd_oneshot(&m, cur, (size_t)curlen, cap, keep, &next,
				  &nextlen, why, whylen);
		if (rc == 1 && out && i + 1 == n && expect != CKPT_DECODE_ANY)
			rc = zstd_into(&m, cur, (size_t)curlen, expect, cap,
				       &next, &nextlen, why, whylen);
		if (rc == 1)
			rc = zstd_stream(&m, cur, (size_t)curlen, cap, keep,
					 &next, &nextlen, why, whylen);
		mem_free(&m, cur, (size_t)curlen);
		cur = next;
		curlen = nextlen;
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
	/* Counting leaves no buffer: cur is NULL with curlen the count. */
	if (cur)
		mem_free(&m, cur, (size_t)curlen);
	return rc;
}
