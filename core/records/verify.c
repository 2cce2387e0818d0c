/* SPDX-License-Identifier: MIT */
/* Record checksums: see verify.h. */
#include "records/verify.h"

#include <errno.h>
#include <xxhash.h>
#include <zlib.h>

#include "records/record_cache.h"

const char *ckpt_verify_kind(const struct ckpt_chunk *c)
{
	return c->has_xxh3 ? "xxh3" : "crc32";
}

int ckpt_verify_chunk(struct ckpt_meta *m, uint32_t ci, char *buf,
		      size_t buflen, uint64_t *got)
{
	const struct ckpt_chunk *c = &m->chunks[ci];
	XXH3_state_t *st = NULL;
	uint32_t crc = 0;
	uint64_t off = 0;
	int rc;

	/* A record opened lazily: located first (its checksum with it). */
	rc = ckpt_meta_locate(m, &ci, 1);
	if (rc)
		return rc;
	if (ckpt_is_zrec(c->file)) {
		/* Decoding checks the stream and the payload's own CRC. */
		rc = ckpt_record_check(m, c->file & ~CKPT_ZREC, got);
		if (rc < 0 || (!c->has_xxh3 && !c->has_crc32))
			return rc;
	}
	if (!c->has_xxh3 && !c->has_crc32)
		return 1;
	if (c->has_xxh3) {
		st = XXH3_createState();
		if (!st)
			return -ENOMEM;
		XXH3_64bits_reset(st);
	}
	while (off < c->len) {
		size_t n = c->len - off < buflen ? (size_t)(c->len - off) : buflen;

		rc = ckpt_record_pread(m, c->file, buf, n, c->foff + off);
		if (rc)
			goto out_free;
		if (st)
			XXH3_64bits_update(st, buf, n);
		else
			crc = (uint32_t)crc32_z(crc, (const Bytef *)buf, n);
		off += n;
	}
	*got = st ? XXH3_64bits_digest(st) : crc;
	rc = *got == (st ? c->xxh3 : c->crc32) ? 0 : -EBADMSG;
out_free:
	XXH3_freeState(st);
	return rc;
}
