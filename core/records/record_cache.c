/* SPDX-License-Identifier: MIT */
/* Reading chunk bytes, and the cache of decoded records: see
 * record_cache.h. */
#include "records/record_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/errbuf.h"
#include "common/strides.h"
#include "io/datafiles.h"
#include "io/zstd_decode.h"
#include "model/transforms.h"
#include "torch/torch_record.h"

struct stored_src {
	struct ckpt_meta *m;
	uint32_t file;
	uint64_t base;
};

static int stored_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct stored_src *s = ctx;

	return ckpt_files_pread(s->m, s->file, buf, len, s->base + off);
}

/* Copy the elements size/stride address from src into dst, row-major. */
static void gather(uint8_t *dst, const uint8_t *src, const uint64_t *size,
		   const uint64_t *stride, unsigned ndim, size_t isz)
{
	uint64_t idx[CKPT_MAX_DIMS] = { 0 };
	uint64_t at = 0;
	unsigned d;

	for (d = 0; d < ndim; d++)
		if (size[d] == 0)
			return;
	for (;;) {
		memcpy(dst, src + at * isz, isz);
		dst += isz;
		for (d = ndim; d-- > 0;) {
			if (++idx[d] < size[d]) {
				at += stride[d];
				break;
			}
			at -= (idx[d] - 1) * stride[d];
			idx[d] = 0;
		}
		if (d == (unsigned)-1)
			return;
	}
}

/* The chunk's bytes inside a decoded torch.save archive, checked against
 * the metadata; strided ones are gathered into a new buffer. */
static int from_archive(struct ckpt_meta *m, struct ckpt_zrec *z,
			uint8_t **buf, uint64_t *bytes, char *why,
			size_t whylen)
{
	const struct ckpt_chunk *c = &m->chunks[z->chunk];
	const struct ckpt_entry *e = ckpt_meta_chunk_entry(m, z->chunk);
	const uint64_t *sz = ckpt_chunk_sizes(m, e, c);
	struct ckpt_mem_src a = { *buf, *bytes };
	struct torch_tensor_rec r;
	size_t isz = ckpt_dtype_size(e->dtype);
	char s1[256], s2[256];
	uint32_t crc;
	uint8_t *g;
	int rc;

	rc = torch_record_locate(ckpt_mem_read, &a, *bytes, "decoded archive",
				 &r, why, whylen);
	if (rc)
		return -EBADMSG;
	if (r.dtype != e->dtype)
		return ckpt_errf(why, whylen, -EBADMSG,
				 "decoded data.pkl stores %s, the metadata says %s",
				 ckpt_dtype_name(r.dtype),
				 ckpt_dtype_name(e->dtype));
	if (r.ndim != e->ndim || memcmp(r.size, sz, e->ndim * sizeof(*sz)))
		return ckpt_errf(why, whylen, -EBADMSG,
				 "decoded data.pkl's size %s is not the chunk's %s",
				 ckpt_fmt_dims(s1, sizeof(s1), r.size, r.ndim),
				 ckpt_fmt_dims(s2, sizeof(s2), sz, e->ndim));
	if (r.crc32) {
		crc = (uint32_t)crc32_z(0, *buf + r.data_off, r.data_len);
		if (crc != r.crc32)
			return ckpt_errf(why, whylen, -EBADMSG,
					 "decoded storage's CRC-32 is %08" PRIx32 ", the archive says %08" PRIx32,
					 crc, r.crc32);
		z->crc32 = crc;
		z->has_crc32 = true;
	}
	if (c->len == 0) {
		z->data = *buf;
		return 0;
	}
	if (ckpt_strides_row_major(sz, r.stride, e->ndim)) {
		z->data = *buf + r.data_off + r.storage_offset * isz;
		return 0;
	}
	g = malloc(c->len);
	if (!g)
		return ckpt_errf(why, whylen, -ENOMEM, "out of memory");
	gather(g, *buf + r.data_off + r.storage_offset * isz, sz, r.stride,
	       e->ndim, isz);
	free(*buf);
	*buf = g;
	*bytes = c->len;
	z->data = g;
	return 0;
}

/* Decode record z: no lock held, z is LOADING (ours alone). */
static int load(struct ckpt_meta *m, struct ckpt_zrec *z, uint8_t **buf,
		uint64_t *bytes, char *why, size_t whylen)
{
	struct stored_src src = { m, z->file, z->off };
	const struct ckpt_chunk *c = &m->chunks[z->chunk];
	int rc;

	rc = ckpt_decode_stored(stored_read, &src, z->len, z->transforms,
				z->ntransforms, m->zc.cap, buf, bytes, why,
				whylen);
	if (rc)
		return rc == -EFBIG ? -EBADMSG : rc;
	if (z->payload == CKPT_PAYLOAD_TORCH_SAVE)
		return from_archive(m, z, buf, bytes, why, whylen);
	if (*bytes != c->len)
		return ckpt_errf(why, whylen, -EBADMSG,
				 "decodes to %" PRIu64 " bytes, the metadata implies %" PRIu64,
				 *bytes, c->len);
	z->data = *buf;
	return 0;
}

/* LRU list of loaded records, guarded by m->zc.lock. */
static void lru_unlink(struct ckpt_meta *m, uint32_t zi)
{
	ckpt_lru_unlink(&m->zc.lru, &m->zrecs[0].lru, sizeof(*m->zrecs), zi);
}

static void lru_push(struct ckpt_meta *m, uint32_t zi)
{
	ckpt_lru_push(&m->zc.lru, &m->zrecs[0].lru, sizeof(*m->zrecs), zi);
}

/* Drop least recently used records nobody reads until the cache fits
 * (the most recent one always stays).  Lock held. */
static void evict(struct ckpt_meta *m)
{
	uint32_t zi = m->zc.lru.tail;

	while (m->zc.used > m->zc.cap && zi != CKPT_NONE &&
	       zi != m->zc.lru.head) {
		struct ckpt_zrec *z = &m->zrecs[zi];
		uint32_t prev = z->lru.prev;

		if (z->refs == 0) {
			lru_unlink(m, zi);
			m->zc.used -= z->bytes;
			free(z->buf);
			z->buf = NULL;
			z->data = NULL;
			z->bytes = 0;
			z->state = CKPT_ZREC_COLD;
		}
		zi = prev;
	}
}

static void where_of(struct ckpt_meta *m, const struct ckpt_zrec *z,
		     char *out, size_t cap)
{
	const struct ckpt_entry *e = ckpt_meta_chunk_entry(m, z->chunk);

	snprintf(out, cap, "%s/%s: offset %" PRIu64 ": key '%s': record stored with %s",
		 m->dir ? m->dir : ".", m->strings + m->files[z->file].path,
		 z->off, ckpt_entry_fqn(m, e),
		 ckpt_transform_name(z->transforms[0]));
}

/* The last error's fields for record z: its file, offset and key. */
static void error_fields(struct ckpt_meta *m, const struct ckpt_zrec *z)
{
	ckpt_last_error_file(m->dir, m->strings + m->files[z->file].path,
			     z->off);
	ckpt_last_error_key(ckpt_entry_fqn(m,
					   ckpt_meta_chunk_entry(m, z->chunk)));
}

/* Record zi loaded, with a reference held; or -errno with the last error
 * set. */
static int acquire(struct ckpt_meta *m, uint32_t zi)
{
	struct ckpt_zrec *z = &m->zrecs[zi];
	char why[512], where[768];
	uint8_t *buf = NULL;
	uint64_t bytes = 0;
	int rc;

	pthread_mutex_lock(&m->zc.lock);
	for (;;) {
		if (z->state == CKPT_ZREC_LOADED) {
			z->refs++;
			lru_unlink(m, zi);
			lru_push(m, zi);
			pthread_mutex_unlock(&m->zc.lock);
			return 0;
		}
		if (z->state == CKPT_ZREC_FAILED) {
			rc = -EBADMSG;
			ckpt_set_last_error("%s", z->why ? z->why : "corrupt record");
			error_fields(m, z);
			pthread_mutex_unlock(&m->zc.lock);
			return rc;
		}
		if (z->state == CKPT_ZREC_COLD)
			break;
		pthread_cond_wait(&m->zc.loaded, &m->zc.lock);
	}
	z->state = CKPT_ZREC_LOADING;
	pthread_mutex_unlock(&m->zc.lock);

	why[0] = '\0';
	rc = load(m, z, &buf, &bytes, why, sizeof(why));

	pthread_mutex_lock(&m->zc.lock);
	if (rc) {
		free(buf);
		where_of(m, z, where, sizeof(where));
		ckpt_set_last_error("%s: %s", where, why);
		error_fields(m, z);
		if (rc == -EBADMSG) {
			z->state = CKPT_ZREC_FAILED;
			free(z->why);
			z->why = strdup(ckpt_last_error());
		} else {
			z->state = CKPT_ZREC_COLD;	/* try again later */
		}
	} else {
		z->state = CKPT_ZREC_LOADED;
		z->buf = buf;
		z->bytes = bytes;
		z->refs = 1;
		m->zc.used += bytes;
		lru_push(m, zi);
		evict(m);
	}
	pthread_cond_broadcast(&m->zc.loaded);
	pthread_mutex_unlock(&m->zc.lock);
	return rc;
}

static void release(struct ckpt_meta *m, uint32_t zi)
{
	pthread_mutex_lock(&m->zc.lock);
	m->zrecs[zi].refs--;
	evict(m);
	pthread_mutex_unlock(&m->zc.lock);
}

int ckpt_record_pread(struct ckpt_meta *m, uint32_t file, void *buf,
		      size_t len, uint64_t off)
{
	uint32_t zi = file & ~CKPT_ZREC;
	const struct ckpt_chunk *c;
	int rc;

	if (!ckpt_is_zrec(file))
		return ckpt_files_pread(m, file, buf, len, off);
	if (zi >= m->nzrecs)
		return -EIO;
	c = &m->chunks[m->zrecs[zi].chunk];
	if (off > c->len || len > c->len - off)
		return -EIO;
	if (len == 0)
		return 0;
	rc = acquire(m, zi);
	if (rc)
		return rc == -ENOMEM ? rc : -EIO;
	memcpy(buf, m->zrecs[zi].data + off, len);
	release(m, zi);
	return 0;
}

void ckpt_record_warm(struct ckpt_meta *m, uint32_t file)
{
	uint32_t zi = file & ~CKPT_ZREC;
	bool cold;

	if (!ckpt_is_zrec(file) || zi >= m->nzrecs)
		return;
	pthread_mutex_lock(&m->zc.lock);
	cold = m->zrecs[zi].state == CKPT_ZREC_COLD &&
	       m->zc.used + m->chunks[m->zrecs[zi].chunk].len <= m->zc.cap;
	pthread_mutex_unlock(&m->zc.lock);
	if (cold && acquire(m, zi) == 0)
		release(m, zi);
}

int ckpt_record_check(struct ckpt_meta *m, uint32_t zi, uint64_t *got)
{
	struct ckpt_zrec *z = &m->zrecs[zi];
	int rc;

	rc = acquire(m, zi);
	if (rc)
		return rc;
	*got = z->crc32;
	rc = z->has_crc32 ? 0 : 1;
	release(m, zi);
	return rc;
}

void ckpt_record_cache_set(struct ckpt_meta *m, uint64_t bytes)
{
	m->zc.cap = bytes ? bytes : (uint64_t)CKPT_CACHE_MB_DEFAULT << 20;
}
