/* SPDX-License-Identifier: MIT */
/* Reading chunk bytes, and the cache of decoded records: see
 * record_cache.h. */
#include "records/record_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "common/bigbuf.h"
#include "common/errbuf.h"
#include "common/lru.h"
#include "common/strides.h"
#include "io/datafiles.h"
#include "io/zstd_decode.h"
#include "model/transforms.h"
#include "torch/torch_record.h"

/* A record read within IDLE_NS is being read: it is evicted only after
 * that (so streaming readers of records larger than half the cache take
 * turns instead of evicting each other at every read), and never held so
 * for more than HOLD_NS after it was loaded. */
#define IDLE_NS (20ull * 1000 * 1000)
#define HOLD_NS (1000ull * 1000 * 1000)

/* The cache's state of one record stored with transforms. */
struct slot {
	uint8_t state;		/* enum ckpt_record_state */
	bool has_crc32;		/* the archive gave its storage's CRC ... */
	uint32_t crc32;		/* ... which matched: this (at load) */
	uint32_t refs;		/* readers copying from data now */
	uint8_t *buf;		/* LOADED: the decoded record, owned */
	const uint8_t *data;	/* the chunk's bytes (into buf) */
	uint64_t bytes;		/* buf's size, counted in used */
	uint64_t loaded_ns;	/* when it was loaded ... */
	uint64_t used_ns;	/* ... and last released */
	char *why;		/* FAILED: the reason, owned */
	struct ckpt_lru_link lru;	/* on lru while loaded */
};

struct ckpt_record_cache {
	pthread_mutex_t lock;
	pthread_cond_t changed;	/* a load ended, a reservation or a
				 * reference was given back */
	uint64_t cap;		/* used + reserved never passes this */
	uint64_t record_max;	/* the most one decode may hold, <= cap */
	uint64_t used;		/* bytes of loaded records */
	uint64_t reserved;	/* bytes held by loads in progress */
	uint64_t high_water;	/* the most used + reserved has been */
	uint64_t loads, waits, retries;
	struct ckpt_lru lru;	/* the loaded records */
	uint32_t nslots;
	struct slot slots[];	/* one per meta->zrecs; all guarded by
				 * lock, but a LOADED slot's data, which
				 * its reference holders read */
};

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static struct ckpt_record_cache *cache_new(uint32_t nslots, uint64_t cap,
					   uint64_t record_max)
{
	struct ckpt_record_cache *c;
	pthread_condattr_t ca;
	uint32_t i;

	c = calloc(1, sizeof(*c) + (size_t)nslots * sizeof(struct slot));
	if (!c)
		return NULL;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->changed, &ca);
	pthread_condattr_destroy(&ca);
	c->cap = cap ? cap : (uint64_t)CKPT_CACHE_MB << 20;
	c->record_max = record_max && record_max < c->cap ? record_max : c->cap;
	ckpt_lru_init(&c->lru);
	c->nslots = nslots;
	for (i = 0; i < nslots; i++)
		ckpt_lru_link_init(&c->slots[i].lru);
	return c;
}

int ckpt_record_cache_setup(struct ckpt_meta *m, uint64_t cap,
			    uint64_t record_max)
{
	struct ckpt_record_cache *c = cache_new(m->nzrecs, cap, record_max);

	if (!c)
		return -ENOMEM;
	ckpt_record_cache_free(__atomic_exchange_n(&m->records, c,
						   __ATOMIC_ACQ_REL));
	return 0;
}

void ckpt_record_cache_free(struct ckpt_record_cache *c)
{
	uint32_t i;

	if (!c)
		return;
	for (i = 0; i < c->nslots; i++) {
		ckpt_big_free(c->slots[i].buf, c->slots[i].bytes);
		free(c->slots[i].why);
	}
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->changed);
	free(c);
}

/* m's cache, made with the defaults if nobody has (two threads racing
 * both make one; one keeps its own).  NULL when out of memory. */
static struct ckpt_record_cache *cache_of(struct ckpt_meta *m)
{
	struct ckpt_record_cache *c, *want = NULL;

	c = __atomic_load_n(&m->records, __ATOMIC_ACQUIRE);
	if (c)
		return c;
	c = cache_new(m->nzrecs, 0, 0);
	if (!c)
		return NULL;
	if (__atomic_compare_exchange_n(&m->records, &want, c, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return c;
	ckpt_record_cache_free(c);
	return want;
}

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

/* LRU list of loaded records and the accounting: lock held. */
static void lru_unlink(struct ckpt_record_cache *c, uint32_t zi)
{
	ckpt_lru_unlink(&c->lru, &c->slots[0].lru, sizeof(*c->slots), zi);
}

static void lru_push(struct ckpt_record_cache *c, uint32_t zi)
{
	ckpt_lru_push(&c->lru, &c->slots[0].lru, sizeof(*c->slots), zi);
}

static bool fits(const struct ckpt_record_cache *c, uint64_t n)
{
	return n <= c->cap - c->used - c->reserved;
}

static void take_reserved(struct ckpt_record_cache *c, uint64_t n)
{
	c->reserved += n;
	if (c->used + c->reserved > c->high_water)
		c->high_water = c->used + c->reserved;
}

static void evict(struct ckpt_record_cache *c, uint32_t zi)
{
	struct slot *s = &c->slots[zi];

	lru_unlink(c, zi);
	c->used -= s->bytes;
	ckpt_big_free(s->buf, s->bytes);
	s->buf = NULL;
	s->data = NULL;
	s->bytes = 0;
	s->state = CKPT_RECORD_COLD;
}

/*
 * Evict unreferenced records, least recently used first, until n more
 * bytes fit; with evict false, only look.  A record read within IDLE_NS
 * is left, and *until gets the earliest time one of those may go (0:
 * none).  Returns true when n fits now.
 */
static bool make_room(struct ckpt_record_cache *c, uint64_t n, bool may_evict,
		      uint64_t *until)
{
	uint64_t now = 0;
	uint32_t zi = c->lru.tail;

	*until = 0;
	while (!fits(c, n) && may_evict && zi != CKPT_NONE) {
		struct slot *s = &c->slots[zi];
		uint32_t prev = s->lru.prev;

		if (s->refs == 0) {
			uint64_t free_at;

			if (!now)
				now = now_ns();
			free_at = s->used_ns + IDLE_NS;
			if (free_at > s->loaded_ns + HOLD_NS)
				free_at = s->loaded_ns + HOLD_NS;
			if (free_at <= now)
				evict(c, zi);
			else if (!*until || free_at < *until)
				*until = free_at;
		}
		zi = prev;
	}
	return fits(c, n);
}

enum room { ROOM_WAIT, ROOM_TRY };

/* Reserve n bytes: with ROOM_WAIT evicting and waiting on the condition
 * variable (holding no reservation) until they fit, n <= record_max; with
 * ROOM_TRY only when they fit beside what is there.  Lock held.  Returns
 * 0, or -EAGAIN (ROOM_TRY). */
static int reserve(struct ckpt_record_cache *c, uint64_t n, enum room how)
{
	uint64_t until;
	bool waited = false;

	while (!make_room(c, n, how == ROOM_WAIT, &until)) {
		if (how == ROOM_TRY)
			return -EAGAIN;
		if (!waited)
			c->waits++;
		waited = true;
		if (until) {
			struct timespec ts = {
				(time_t)(until / 1000000000ull),
				(long)(until % 1000000000ull)
			};

			pthread_cond_timedwait(&c->changed, &c->lock, &ts);
		} else {
			pthread_cond_wait(&c->changed, &c->lock);
		}
	}
	take_reserved(c, n);
	return 0;
}

/*
 * One load's reservation.  What the decoder frees goes back to the pool
 * and is reused; what it asks beyond the pool is reserved in the cache
 * then and there, never waited for: a load that does not fit gives all
 * back and starts again with a reservation of what it learned it needs
 * (so no thread ever waits while holding a reservation).
 */
struct load_budget {
	struct ckpt_record_cache *c;
	uint64_t held;		/* reserved in the cache by this load */
	uint64_t pool;		/* of which not in use now */
	uint64_t need;		/* the most in use at once, or asked for */
};

static int lb_take(void *ctx, uint64_t n)
{
	struct load_budget *b = ctx;
	struct ckpt_record_cache *c = b->c;
	uint64_t in_use = b->held - b->pool, more, until;
	int rc = 0;

	if (in_use + n > b->need)
		b->need = in_use + n;
	if (n <= b->pool) {
		b->pool -= n;
		return 0;
	}
	more = n - b->pool;
	pthread_mutex_lock(&c->lock);
	if (more > c->record_max - b->held)
		rc = -EFBIG;
	else if (!make_room(c, more, true, &until))
		rc = -EAGAIN;
	else {
		take_reserved(c, more);
		b->held += more;
		b->pool = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static void lb_give(void *ctx, uint64_t n)
{
	struct load_budget *b = ctx;

	b->pool += n;
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

/* What a load gives its slot (filled with no lock held). */
struct loaded {
	uint8_t *buf;
	uint64_t bytes;
	const uint8_t *data;
	uint32_t crc32;
	bool has_crc32;
};

/* The chunk's bytes inside a decoded torch.save archive, checked against
 * the metadata; strided ones are gathered into a new buffer, taken from
 * the load's budget. */
static int from_archive(const struct ckpt_meta *m, const struct ckpt_zrec *z,
			const struct ckpt_decode_budget *budget,
			struct loaded *out, char *why, size_t whylen)
{
	const struct ckpt_chunk *c = &m->chunks[z->chunk];
	const struct ckpt_entry *e = ckpt_meta_chunk_entry(m, z->chunk);
	const uint64_t *sz = ckpt_chunk_sizes(m, e, c);
	struct ckpt_mem_src a = { out->buf, out->bytes };
	struct torch_tensor_rec r;
	size_t isz = ckpt_dtype_size(e->dtype);
	char s1[256], s2[256];
	uint32_t crc;
	uint8_t *g;
	int rc;

	rc = torch_record_locate(ckpt_mem_read, &a, out->bytes,
				 "decoded archive", &r, why, whylen);
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
		crc = (uint32_t)crc32_z(0, out->buf + r.data_off, r.data_len);
		if (crc != r.crc32)
			return ckpt_errf(why, whylen, -EBADMSG,
					 "decoded storage's CRC-32 is %08" PRIx32 ", the archive says %08" PRIx32,
					 crc, r.crc32);
		out->crc32 = crc;
		out->has_crc32 = true;
	}
	if (c->len == 0) {
		out->data = out->buf;
		return 0;
	}
	if (ckpt_strides_row_major(sz, r.stride, e->ndim)) {
		uint64_t at;

		/* (the locate bounds the storage; the chunk's length is the
		 * metadata's, which must fit in it too) */
		if (__builtin_mul_overflow(r.storage_offset, (uint64_t)isz,
					   &at) ||
		    __builtin_add_overflow(at, r.data_off, &at) ||
		    at > out->bytes || c->len > out->bytes - at)
			return ckpt_errf(why, whylen, -EBADMSG,
					 "decoded tensor's %" PRIu64 " bytes run past the archive's %" PRIu64,
					 c->len, out->bytes);
		out->data = out->buf + at;
		return 0;
	}
	rc = budget->take(budget->ctx, c->len);
	if (rc == -EFBIG)
		return ckpt_errf(why, whylen, -EBADMSG,
				 "gathering its strided elements needs more than the cap (raise -o cache_mb)");
	if (rc)
		return ckpt_errf(why, whylen, rc, "no room in the record cache now");
	g = ckpt_big_alloc(c->len);
	if (!g) {
		budget->give(budget->ctx, c->len);
		return ckpt_errf(why, whylen, -ENOMEM, "out of memory");
	}
	gather(g, out->buf + r.data_off + r.storage_offset * isz, sz, r.stride,
	       e->ndim, isz);
	ckpt_big_free(out->buf, out->bytes);
	budget->give(budget->ctx, out->bytes);
	out->buf = g;
	out->bytes = c->len;
	out->data = g;
	return 0;
}

/* Decode record z into *out, every buffer taken from budget first: no
 * lock held, z is LOADING (ours alone).  On an error out->buf may still
 * need freeing. */
static int load(struct ckpt_meta *m, const struct ckpt_zrec *z,
		const struct ckpt_decode_budget *budget, uint64_t record_max,
		struct loaded *out, char *why, size_t whylen)
{
	struct stored_src src = { m, z->file, z->off };
	const struct ckpt_chunk *c = &m->chunks[z->chunk];
	int rc;

	rc = ckpt_decode_stored(stored_read, &src, z->len, z->transforms,
				z->ntransforms, record_max,
				z->payload == CKPT_PAYLOAD_TORCH_SAVE ?
				CKPT_DECODE_ANY : c->len, budget, &out->buf,
				&out->bytes, why, whylen);
	if (rc)
		return rc == -EFBIG ? -EBADMSG : rc;
	if (z->payload == CKPT_PAYLOAD_TORCH_SAVE)
		return from_archive(m, z, budget, out, why, whylen);
	if (out->bytes != c->len)
		return ckpt_errf(why, whylen, -EBADMSG,
				 "decodes to %" PRIu64 " bytes, the metadata implies %" PRIu64,
				 out->bytes, c->len);
	out->data = out->buf;
	return 0;
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

/* What a decode of z holds at once at first: its stored bytes, its
 * decoded chunk and zstd's context (a torch.save archive, or a stream
 * whose frames do not say their size, may take more as it goes). */
static uint64_t first_need(const struct ckpt_meta *m, const struct ckpt_zrec *z)
{
	uint64_t n;

	if (__builtin_add_overflow(z->len, m->chunks[z->chunk].len, &n) ||
	    __builtin_add_overflow(n, ckpt_zstd_context_bytes(), &n))
		return UINT64_MAX;
	return n;
}

/* Mark slot zi failed for good (lock held): its reason becomes the last
 * error. */
static void fail_slot(struct ckpt_record_cache *c, uint32_t zi)
{
	struct slot *s = &c->slots[zi];

	s->state = CKPT_RECORD_FAILED;
	free(s->why);
	s->why = strdup(ckpt_last_error());
}

/*
 * Record zi loaded, with a reference held; or -errno with the last error
 * set.  With how ROOM_TRY (warming), -EAGAIN unless it could be claimed
 * and reserved at once beside what is there, without waiting for anyone.
 */
static int acquire(struct ckpt_meta *m, uint32_t zi, enum room how)
{
	struct ckpt_record_cache *c = cache_of(m);
	const struct ckpt_zrec *z = &m->zrecs[zi];
	struct ckpt_decode_budget budget;
	struct load_budget lb;
	struct loaded got;
	char why[512], where[768];
	struct slot *s;
	uint64_t need;
	int rc;

	if (!c) {
		ckpt_set_last_error("out of memory");
		return -ENOMEM;
	}
	s = &c->slots[zi];
	pthread_mutex_lock(&c->lock);
	for (;;) {
		if (s->state == CKPT_RECORD_LOADED) {
			s->refs++;
			lru_unlink(c, zi);
			lru_push(c, zi);
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (s->state == CKPT_RECORD_FAILED) {
			ckpt_set_last_error("%s", s->why ? s->why : "corrupt record");
			error_fields(m, z);
			pthread_mutex_unlock(&c->lock);
			return -EBADMSG;
		}
		if (s->state == CKPT_RECORD_COLD)
			break;
		if (how == ROOM_TRY) {
			pthread_mutex_unlock(&c->lock);
			return -EAGAIN;
		}
		pthread_cond_wait(&c->changed, &c->lock);
	}
	need = first_need(m, z);
	if (need > c->record_max) {
		where_of(m, z, where, sizeof(where));
		ckpt_set_last_error("%s: needs %" PRIu64 " bytes to decode (%" PRIu64 " stored, %" PRIu64 " decoded), past the %" PRIu64 "-byte cap (raise -o cache_mb)",
				    where, need, z->len, m->chunks[z->chunk].len,
				    c->record_max);
		error_fields(m, z);
		fail_slot(c, zi);
		pthread_cond_broadcast(&c->changed);
		pthread_mutex_unlock(&c->lock);
		return -EBADMSG;
	}
	/* Claimed before waiting for room (the wait lets go of the lock),
	 * so that others wait for this load instead of starting their own;
	 * warming claims only with the room reserved, in the same step. */
	if (how == ROOM_TRY && reserve(c, need, ROOM_TRY)) {
		pthread_mutex_unlock(&c->lock);
		return -EAGAIN;
	}
	s->state = CKPT_RECORD_LOADING;
	if (how == ROOM_WAIT)
		reserve(c, need, ROOM_WAIT);
	c->loads++;
	budget = (struct ckpt_decode_budget){ lb_take, lb_give, &lb };
	for (;;) {
		lb = (struct load_budget){ c, need, need, 0 };
		memset(&got, 0, sizeof(got));
		pthread_mutex_unlock(&c->lock);

		why[0] = '\0';
		rc = load(m, z, &budget, c->record_max, &got, why, sizeof(why));

		pthread_mutex_lock(&c->lock);
		if (rc != -EAGAIN)
			break;
		/* It needs more than it holds and that does not fit now:
		 * give all back and wait, holding nothing, for what it
		 * learned it needs. */
		ckpt_big_free(got.buf, got.bytes);
		c->reserved -= lb.held;
		pthread_cond_broadcast(&c->changed);
		if (how == ROOM_TRY) {
			s->state = CKPT_RECORD_COLD;
			pthread_mutex_unlock(&c->lock);
			return -EAGAIN;
		}
		if (lb.need > need)
			need = lb.need;
		c->retries++;
		reserve(c, need, ROOM_WAIT);
	}
	c->reserved -= lb.held;
	if (rc) {
		ckpt_big_free(got.buf, got.bytes);
		where_of(m, z, where, sizeof(where));
		ckpt_set_last_error("%s: %s", where, why);
		error_fields(m, z);
		if (rc == -EBADMSG)
			fail_slot(c, zi);
		else
			s->state = CKPT_RECORD_COLD;	/* try again later */
	} else {
		s->state = CKPT_RECORD_LOADED;
		s->buf = got.buf;
		s->data = got.data;
		s->bytes = got.bytes;
		s->crc32 = got.crc32;
		s->has_crc32 = got.has_crc32;
		s->refs = 1;
		s->loaded_ns = s->used_ns = now_ns();
		c->used += got.bytes;	/* within what was held */
		if (c->used + c->reserved > c->high_water)
			c->high_water = c->used + c->reserved;
		lru_push(c, zi);
	}
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* m's cache once acquire() has made it. */
static struct ckpt_record_cache *cache(const struct ckpt_meta *m)
{
	return __atomic_load_n(&m->records, __ATOMIC_ACQUIRE);
}

static void release(struct ckpt_meta *m, uint32_t zi)
{
	struct ckpt_record_cache *c = cache(m);
	struct slot *s = &c->slots[zi];

	pthread_mutex_lock(&c->lock);
	s->refs--;
	s->used_ns = now_ns();
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
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
	rc = acquire(m, zi, ROOM_WAIT);
	if (rc)
		return rc == -ENOMEM ? rc : -EIO;
	/* Our reference keeps the record loaded: no lock needed. */
	memcpy(buf, cache(m)->slots[zi].data + off, len);
	release(m, zi);
	return 0;
}

void ckpt_record_warm(struct ckpt_meta *m, uint32_t file)
{
	uint32_t zi = file & ~CKPT_ZREC;

	if (!ckpt_is_zrec(file) || zi >= m->nzrecs)
		return;
	if (acquire(m, zi, ROOM_TRY) == 0)
		release(m, zi);
}

int ckpt_record_check(struct ckpt_meta *m, uint32_t zi, uint64_t *got)
{
	struct slot *s;
	int rc;

	rc = acquire(m, zi, ROOM_WAIT);
	if (rc)
		return rc;
	s = &cache(m)->slots[zi];
	pthread_mutex_lock(&cache(m)->lock);
	*got = s->crc32;
	rc = s->has_crc32 ? 0 : 1;
	pthread_mutex_unlock(&cache(m)->lock);
	release(m, zi);
	return rc;
}

void ckpt_record_cache_stats(struct ckpt_meta *m,
			     struct ckpt_record_cache_stats *out)
{
	struct ckpt_record_cache *c = cache(m);

	memset(out, 0, sizeof(*out));
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	out->cap = c->cap;
	out->record_max = c->record_max;
	out->used = c->used;
	out->reserved = c->reserved;
	out->high_water = c->high_water;
	out->loads = c->loads;
	out->waits = c->waits;
	out->retries = c->retries;
	pthread_mutex_unlock(&c->lock);
}

enum ckpt_record_state ckpt_record_state(struct ckpt_meta *m, uint32_t z)
{
	struct ckpt_record_cache *c = cache(m);
	enum ckpt_record_state st;

	if (!c || z >= c->nslots)
		return CKPT_RECORD_COLD;
	pthread_mutex_lock(&c->lock);
	st = (enum ckpt_record_state)c->slots[z].state;
	pthread_mutex_unlock(&c->lock);
	return st;
}
