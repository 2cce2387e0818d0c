/* SPDX-License-Identifier: MIT */
/* The checkpoint model's lookups and its release: see meta.h. */
#include "model/meta.h"
#include "model/transforms.h"
#include "common/cancel.h"
#include "common/errbuf.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

void ckpt_meta_free_parsed(struct ckpt_meta *m)
{
	if (!m)
		return;
	assert(!m->records);
	if (m->lazy) {
		uint32_t i;

		ckpt_fork_hook_remove(&m->locate_fork);
		for (i = 0; i < m->nchunks; i++)
			free(m->locate_err[i]);
		pthread_mutex_destroy(&m->locate_lock);
		pthread_cond_destroy(&m->located_cv);
		pthread_rwlock_destroy(&m->fetched_lock);
	}
	if (m->blob) {
		m->lazy = NULL;
		m->located = NULL;
		m->zrecs = NULL;
		m->guards = NULL;
		m->entries = NULL;
		m->chunks = NULL;
		m->dims = NULL;
		m->comps = NULL;
		m->files = NULL;
		m->strings = NULL;
		munmap(m->blob, m->blob_len);
	}
	free(m->torch_pkl);
	free(m->torch_mver);
	free(m->index_cache);
	free(m->lazy);
	free((void *)m->located);
	free(m->locate_err);
	free(m->zrecs);
	free(m->guards);
	ckpt_strtab_destroy(&m->by_fqn);
	free(m->entries);
	free(m->chunks);
	free(m->dims);
	free(m->comps);
	free(m->files);
	free(m->strings);
	free(m->dir);
	free(m->meta_path);
	free(m->warning);
	free(m);
}

void ckpt_meta_fqn_key(const void *ctx, uint32_t idx, uint64_t *seed,
		       const char **s, size_t *len)
{
	const struct ckpt_meta *m = ctx;

	*seed = 0;
	*s = m->strings + m->entries[idx].fqn;
	*len = m->entries[idx].fqn_len;
}

void ckpt_meta_path_key(const void *ctx, uint32_t idx, uint64_t *seed,
			const char **s, size_t *len)
{
	const struct ckpt_meta *m = ctx;

	*seed = 0;
	*s = m->strings + m->files[idx].path;
	*len = strlen(*s);
}

/* Before a fork: no other thread holds the locate or fetched lock across
 * it (neither nests in the other). */
static void locate_fork_prepare(void *arg)
{
	struct ckpt_meta *m = arg;

	pthread_mutex_lock(&m->locate_lock);
	pthread_rwlock_wrlock(&m->fetched_lock);
}

static void locate_fork_parent(void *arg)
{
	struct ckpt_meta *m = arg;

	pthread_rwlock_unlock(&m->fetched_lock);
	pthread_mutex_unlock(&m->locate_lock);
}

/* In the child: new locks; a record the parent's threads were locating
 * is pending again (no thread here will end that batch). */
static void locate_fork_child(void *arg)
{
	struct ckpt_meta *m = arg;
	uint32_t i;

	pthread_mutex_init(&m->locate_lock, NULL);
	pthread_cond_init(&m->located_cv, NULL);
	pthread_rwlock_init(&m->fetched_lock, NULL);
	for (i = 0; i < m->nchunks; i++)
		if (__atomic_load_n((uint8_t *)&m->located[i],
				    __ATOMIC_RELAXED) == CKPT_LOC_LOCATING)
			__atomic_store_n((uint8_t *)&m->located[i],
					 CKPT_LOC_PENDING, __ATOMIC_RELAXED);
}

void ckpt_meta_fork_hook(struct ckpt_meta *m)
{
	m->locate_fork = (struct ckpt_fork_hook){ locate_fork_prepare,
						  locate_fork_parent,
						  locate_fork_child, m, NULL,
						  NULL };
	ckpt_fork_hook_add(&m->locate_fork);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

const struct ckpt_fetched *ckpt_fetched_find(const struct ckpt_fetched *w,
					     size_t n, uint64_t maxlen,
					     uint32_t file, uint64_t off,
					     uint64_t len)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {	/* the first after (file, off) */
		size_t mid = lo + (hi - lo) / 2;

		if (w[mid].file < file ||
		    (w[mid].file == file && w[mid].off <= off))
			lo = mid + 1;
		else
			hi = mid;
	}
	/* Ranges may overlap: look back while one could still hold it. */
	while (lo-- > 0 && w[lo].file == file && w[lo].off + maxlen > off)
		if (len <= w[lo].len && off - w[lo].off <= w[lo].len - len)
			return &w[lo];
	return NULL;
}

/* Chunk ci's location failed: -EIO, with the last error its reason. */
static int locate_failed(struct ckpt_meta *m, uint32_t ci)
{
	const struct ckpt_entry *e = ckpt_meta_chunk_entry(m, ci);
	const char *why;

	pthread_mutex_lock(&m->locate_lock);
	why = m->locate_err[ci];
	ckpt_errf_key(NULL, 0, -EIO, ckpt_entry_fqn(m, e), SIZE_MAX, "%s",
		      why ? why : "record could not be located");
	pthread_mutex_unlock(&m->locate_lock);
	return -EIO;
}

int ckpt_meta_locate(struct ckpt_meta *m, const uint32_t *ci, size_t n)
{
	return ckpt_meta_locate_pre(m, ci, n, NULL, 0);
}

static uint8_t loc_state(const struct ckpt_meta *m, uint32_t ci)
{
	return __atomic_load_n((const uint8_t *)&m->located[ci],
			       __ATOMIC_ACQUIRE);
}

static void loc_set(struct ckpt_meta *m, uint32_t ci, uint8_t st)
{
	__atomic_store_n((uint8_t *)&m->located[ci], st, __ATOMIC_RELEASE);
}

/* Under locate_lock: wait for another thread's batch to end, at most
 * CKPT_CANCEL_POLL_MS (the caller polls its cancel flag). */
static void located_wait(struct ckpt_meta *m)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += CKPT_CANCEL_POLL_MS * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&m->located_cv, &m->locate_lock, &ts);
}

/*
 * Each pending chunk of want[0..n) (sorted, unique) is marked LOCATING
 * under locate_lock and located outside it, so that other threads'
 * reads (of located records, or of other pending ones) do not queue
 * behind this batch's requests; what it found is published under the
 * lock, waking the threads that wait for one of its chunks.  A thread
 * whose chunks another is locating waits for located_cv, polling its
 * cancel flag; when that batch was cancelled its chunks are pending
 * again and the waiter locates them itself.
 */
int ckpt_meta_locate_pre(struct ckpt_meta *m, const uint32_t *ci, size_t n,
			 const struct ckpt_fetched *pre, size_t npre)
{
	uint32_t *want, *mine;
	size_t i, k = 0, u, nmine;
	bool others;
	int rc = 0;

	if (!m->located)
		return 0;
	for (i = 0; i < n && ckpt_chunk_is_located(m, ci[i]); i++)
		;
	if (i == n)
		return 0;
	want = malloc(2 * n * sizeof(*want));
	if (!want)
		return -ENOMEM;
	mine = want + n;
	for (i = 0; i < n; i++)
		if (!ckpt_chunk_is_located(m, ci[i]))
			want[k++] = ci[i];
	qsort(want, k, sizeof(*want), cmp_u32);
	for (i = 0, u = k, k = 0; i < u; i++)
		if (!k || want[k - 1] != want[i])
			want[k++] = want[i];
	pthread_mutex_lock(&m->locate_lock);
	for (;;) {
		nmine = 0;
		others = false;
		for (i = 0; i < k; i++) {
			uint8_t st = loc_state(m, want[i]);

			if (st == CKPT_LOC_PENDING) {
				loc_set(m, want[i], CKPT_LOC_LOCATING);
				mine[nmine++] = want[i];
			} else if (st == CKPT_LOC_LOCATING) {
				others = true;
			}
		}
		if (nmine) {
			pthread_mutex_unlock(&m->locate_lock);
			if (m->locate)
				rc = m->locate(m, mine, nmine, pre, npre);
			pthread_mutex_lock(&m->locate_lock);
			for (i = 0; i < nmine; i++) {
				uint8_t st = loc_state(m, mine[i]);

				if (!m->locate)
					loc_set(m, mine[i], CKPT_LOC_FAILED);
				else if (st == CKPT_LOC_LOCATING)
					loc_set(m, mine[i], CKPT_LOC_PENDING);
			}
			pthread_cond_broadcast(&m->located_cv);
			if (rc)
				break;
			continue;	/* then wait for the others' */
		}
		if (!others)
			break;
		if (ckpt_is_cancelled()) {
			rc = ckpt_errf(NULL, 0, -ECANCELED, "cancelled");
			break;
		}
		located_wait(m);
	}
	pthread_mutex_unlock(&m->locate_lock);
	free(want);
	if (rc)
		return rc;
	for (i = 0; i < n; i++)
		if (!ckpt_chunk_is_located(m, ci[i]))
			return locate_failed(m, ci[i]);
	return 0;
}

const struct ckpt_entry *ckpt_meta_chunk_entry(const struct ckpt_meta *m,
					       uint32_t ci)
{
	uint32_t lo = 0, hi = m->nentries;

	/* The last entry starting at or before ci: an entry without chunks
	 * shares its start with the next, which comes later. */
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (m->entries[mid].chunk_first <= ci)
			lo = mid;
		else
			hi = mid;
	}
	return &m->entries[lo];
}

const struct ckpt_entry *ckpt_meta_find(const struct ckpt_meta *m,
					const char *fqn, size_t len)
{
	uint32_t i;

	if (!m->by_fqn.slots)
		return NULL;
	i = ckpt_strtab_find(&m->by_fqn, 0, fqn, len);
	return i == UINT32_MAX ? NULL : &m->entries[i];
}

const char *ckpt_version(void)
{
	return CKPT_LIB_VERSION;
}

void ckpt_meta_info(const struct ckpt_meta *m, struct ckpt_meta_info *out)
{
	memset(out, 0, sizeof(*out));
	out->dir = m->dir;
	out->meta_path = m->meta_path;
	out->format = m->format[0] ? m->format : CKPT_FORMAT_NAME;
	out->version = m->version;
	out->origin = m->origin;
	out->nkeys = m->nentries;
	out->nchunks = m->nchunks;
	out->nfiles = m->nfiles;
	out->mtime_sec = m->mtime.tv_sec;
	out->mtime_nsec = m->mtime.tv_nsec;
}

const char *ckpt_meta_warning(const struct ckpt_meta *m)
{
	return m->warning;
}

/* CKPT_ORIGIN_TORCH with records located lazily: its own description */
#define ORIGIN_TORCH_LAZY 64

void ckpt_meta_set_origin(struct ckpt_meta *m, uint8_t origin,
			  uint8_t variants)
{
	static const char *const names[][2] = {
		[CKPT_ORIGIN_NATIVE] = { CKPT_FORMAT_NAME, "" },
		[CKPT_ORIGIN_TORCH] = { "torch-dcp",
			"PyTorch distributed checkpoint, indexed now" },
		[ORIGIN_TORCH_LAZY] = { "torch-dcp",
			"PyTorch distributed checkpoint, records located as read" },
		[CKPT_ORIGIN_TORCH_INDEX] = { "torch-dcp",
			"PyTorch distributed checkpoint, via its " CKPT_INDEX_NAME },
		[CKPT_ORIGIN_TORCH_LOCAL] = { "torch-dcp-rank-local",
			"PyTorch distributed checkpoint, one __R.metadata per rank, merged" },
		[CKPT_ORIGIN_SAFETENSORS] = { "safetensors",
			"a directory of .safetensors files" },
		[CKPT_ORIGIN_SAFETENSORS_SHARDED] = { "safetensors-dcp-sharded",
			"torch DCP's sharded safetensors, chunks at DCP_SHARDING_INFO's saved_offsets" },
		[CKPT_ORIGIN_TORCH_INDEX_CACHE] = { "torch-dcp",
			"PyTorch distributed checkpoint, via this node's index cache" },
	};
	unsigned at = origin == CKPT_ORIGIN_TORCH && m->lazy ?
		      ORIGIN_TORCH_LAZY : origin;
	const char *const *n = at < sizeof(names) / sizeof(names[0]) &&
			       names[at][0] ? names[at] : names[0];

	m->origin = origin;
	if (m->nzrecs)
		variants |= CKPT_VARIANT_ZSTD;
	snprintf(m->format, sizeof(m->format), "%s%s%s%s%s%s", n[0],
		 variants & CKPT_VARIANT_ST_PAYLOAD ? "+safetensors" : "",
		 variants & CKPT_VARIANT_ZSTD ? "+zstd" : "",
		 n[1][0] ? " (" : "", n[1], n[1][0] ? ")" : "");
}

int ckpt_meta_key(const struct ckpt_meta *m, uint32_t i,
		  struct ckpt_key_info *out)
{
	const struct ckpt_entry *e;

	memset(out, 0, sizeof(*out));
	if (i >= m->nentries)
		return -ENOENT;
	e = &m->entries[i];
	out->fqn = ckpt_entry_fqn(m, e);
	out->kind = e->kind;
	out->dtype = e->kind == CKPT_KIND_TENSOR ? e->dtype : CKPT_DTYPE_COUNT;
	out->ndim = e->ndim;
	if (e->ndim)	/* m->dims is NULL when no key has a dim */
		memcpy(out->shape, ckpt_entry_shape(m, e),
		       e->ndim * sizeof(uint64_t));
	out->numel = e->numel;
	out->nbytes = e->nbytes;
	out->chunk_first = e->chunk_first;
	out->nchunks = e->nchunks;
	return 0;
}

int ckpt_meta_find_key(const struct ckpt_meta *m, const char *fqn,
		       uint32_t *i)
{
	const struct ckpt_entry *e = ckpt_meta_find(m, fqn, strlen(fqn));

	if (!e)
		return -ENOENT;
	*i = (uint32_t)(e - m->entries);
	return 0;
}

int ckpt_meta_chunk(const struct ckpt_meta *m, uint32_t ci,
		    struct ckpt_chunk_info *out)
{
	const struct ckpt_entry *e;
	const struct ckpt_chunk *c;

	memset(out, 0, sizeof(*out));
	if (ci >= m->nchunks)
		return -ENOENT;
	c = &m->chunks[ci];
	e = ckpt_meta_chunk_entry(m, ci);
	out->key = (uint32_t)(e - m->entries);
	out->ndim = e->ndim;
	if (e->ndim) {	/* m->dims is NULL when no key has a dim */
		memcpy(out->offsets, ckpt_chunk_offsets(m, c),
		       e->ndim * sizeof(uint64_t));
		memcpy(out->sizes, ckpt_chunk_sizes(m, e, c),
		       e->ndim * sizeof(uint64_t));
	}
	out->has_record = c->file != CKPT_NONE;
	out->file = c->file;
	out->foff = c->foff;
	out->len = c->len;
	if (!ckpt_chunk_is_located(m, ci)) {	/* its whole archive */
		out->foff = m->lazy[ci].boff;
		out->len = m->lazy[ci].blen;
	}
	if (ckpt_chunk_zrec(m, c)) {
		const struct ckpt_zrec *z = ckpt_chunk_zrec(m, c);

		out->file = z->file;
		out->foff = z->off;
		out->len = z->len;
		out->transforms = ckpt_transform_name(z->transforms[0]);
		out->decoded_len = c->len;
	}
	out->path = out->has_record ? m->strings + m->files[out->file].path : NULL;
	out->strided = c->strides_at != CKPT_NONE;
	out->checksum = c->has_xxh3 ? "xxh3" : c->has_crc32 ? "crc32" : NULL;
	out->stored_checksum = c->has_xxh3 ? c->xxh3 : c->crc32;
	return 0;
}
