/* SPDX-License-Identifier: MIT */
/*
 * Serving a read of a key file (see data_read.h).  The byte range is planned into runs and
 * runs that continue each other in the same data file are merged.  When
 * that leaves a few runs (dim-0 tilings: usually one), each is pread
 * straight into the caller's buffer.  When it leaves many short runs
 * (dim-1 tilings: one per row per chunk), runs of the same chunk, which
 * come in ascending storage order and are usually adjacent there, are
 * merged into a few extents, read into a staging buffer, and copied into
 * place: a handful of reads instead of thousands, and still only the
 * bytes needed.  Either way the ranges of one flush go to the store as
 * one batch (io/store.h), which may run them at once (S3).
 *
 * The elements of a strided chunk (a non-row-major record, e.g. a
 * transposed tensor) are scattered over its record: the planner gives
 * them as boxes of the chunk, and each is gathered in blocks
 * (plan/gather.h): spans of the record read into a staging buffer of at
 * most GATHER_STAGE bytes, each at most twice the bytes it serves, then
 * one tiled strided copy into place.  Memory stays bounded by the stage
 * and the bytes read by twice those delivered, however the file is read.
 */
#include "view/data_read.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "common/strides.h"
#include "io/datafiles.h"
#include "io/store.h"
#include "plan/plan.h"
#include "records/record_cache.h"
#include "records/verify.h"
#include "view/convert.h"
#include "view/geom.h"
#include "view/order.h"

#define BATCH_RUNS 4096		/* runs gathered per staged batch */
#define DIRECT_MAX 8		/* at most this many runs: pread directly */
#define OPEN_EXTENTS 64		/* chunks tracked at once while merging */
#define GATHER_STAGE ((uint64_t)8 << 20)	/* staging for a strided gather */

struct pending {
	uint32_t file;
	uint32_t chunk;		/* the chunk the run ends in */
	uint64_t foff, len;
	uint64_t dst;		/* offset in the caller's buffer */
	uint64_t at;		/* offset inside its extent */
};

struct extent {
	uint32_t file;
	uint64_t foff, len;
	uint64_t stage;		/* offset in the staging buffer */
};

struct ckpt_scratch *ckpt_scratch_new(void)
{
	return calloc(1, sizeof(struct ckpt_scratch));
}

void ckpt_scratch_free(struct ckpt_scratch *s)
{
	if (!s)
		return;
	free(s->runs);
	free(s->stage);
	free(s->conv);
	free(s->gext);
	free(s->sstage);
	free(s->ranges);
	free(s);
}

/* buf (of *cap bytes), or a new buffer of at least need bytes in its
 * place (contents not kept; buf freed); NULL when out of memory. */
static void *reserve(void *buf, size_t *cap, size_t need)
{
	if (buf && *cap >= need)
		return buf;
	free(buf);
	buf = malloc(need ? need : 1);
	*cap = buf ? need : 0;
	return buf;
}

/*
 * Read the ranges r[0..n), whose ids are chunks' `file`s: a data file's
 * ranges go to the store together, as one batch; a record stored with
 * transforms is copied from the record cache.  r is rewritten.
 */
static int read_ranges(struct ckpt_meta *m, struct ckpt_store_range *r,
		       size_t n)
{
	size_t i, k = 0;
	int rc;

	for (i = 0; i < n; i++) {
		if (!ckpt_is_zrec(r[i].id)) {
			r[k++] = r[i];
			continue;
		}
		rc = ckpt_record_pread(m, r[i].id, r[i].dst, r[i].len,
				       r[i].off);
		if (rc)
			return rc;
	}
	return ckpt_files_read(m, r, k);
}

/* The scratch's range array, for at least n ranges; NULL on no memory. */
static struct ckpt_store_range *ranges_for(struct ckpt_scratch *s, size_t n)
{
	size_t cap = s->cap_ranges * sizeof(struct ckpt_store_range);

	if (n > SIZE_MAX / sizeof(struct ckpt_store_range))
		return NULL;
	s->ranges = reserve(s->ranges, &cap,
			    n * sizeof(struct ckpt_store_range));
	s->cap_ranges = cap / sizeof(struct ckpt_store_range);
	return s->ranges;
}

/* Read n runs into buf: directly when few, else through extents. */
static int flush(struct ckpt_meta *m, struct pending *r, uint32_t n,
		 char *buf, struct ckpt_scratch *s)
{
	uint32_t open_chunk[OPEN_EXTENTS], open_ext[OPEN_EXTENTS];
	uint32_t nopen = 0, next = 0, i, k;
	struct ckpt_store_range *rr;
	struct extent *ext;
	uint64_t total = 0;
	int rc;

	if (n <= DIRECT_MAX || !s) {	/* straight into buf */
		struct ckpt_store_range direct[DIRECT_MAX + 1];

		for (i = 0; i < n; i++)
			direct[i] = (struct ckpt_store_range){ r[i].file,
				r[i].foff, r[i].len, buf + r[i].dst };
		return read_ranges(m, direct, n);
	}
	ext = s->extents;
	for (i = 0; i < n; i++) {
		for (k = 0; k < nopen && open_chunk[k] != r[i].chunk; k++)
			;
		if (k < nopen && ext[open_ext[k]].file == r[i].file &&
		    ext[open_ext[k]].foff + ext[open_ext[k]].len == r[i].foff) {
			s->order[i] = open_ext[k];
			r[i].at = ext[open_ext[k]].len;
			ext[open_ext[k]].len += r[i].len;
			continue;
		}
		ext[next].file = r[i].file;
		ext[next].foff = r[i].foff;
		ext[next].len = r[i].len;
		s->order[i] = next;
		r[i].at = 0;
		if (k == nopen && nopen < OPEN_EXTENTS)
			nopen++;
		if (k < OPEN_EXTENTS) {
			open_chunk[k] = r[i].chunk;
			open_ext[k] = next;
		}
		next++;
	}
	for (k = 0; k < next; k++) {
		ext[k].stage = total;
		total += ext[k].len;
	}
	rr = ranges_for(s, next);
	s->stage = reserve(s->stage, &s->cap_stage, total);
	if (!rr || !s->stage)
		return -ENOMEM;
	for (k = 0; k < next; k++)
		rr[k] = (struct ckpt_store_range){ ext[k].file, ext[k].foff,
			ext[k].len, s->stage + ext[k].stage };
	rc = read_ranges(m, rr, next);
	if (rc)
		return rc;
	for (i = 0; i < n; i++)
		memcpy(buf + r[i].dst,
		       s->stage + ext[s->order[i]].stage + r[i].at, r[i].len);
	return 0;
}

enum { UNCHECKED, GOOD, CORRUPT, CHECKING };

/* One line naming a corrupt record: file, offset, key, checksum. */
static void corrupt_line(const struct ckpt_meta *m, uint32_t ci, char *line,
			 size_t cap)
{
	const struct ckpt_chunk *c = &m->chunks[ci];
	const struct ckpt_zrec *z = ckpt_chunk_zrec(m, c);

	if (z) {
		snprintf(line, cap,
			 "%s/%s: offset %llu: key '%s': record stored with transforms is corrupt (decoding or its CRC failed), reads of it fail with EIO",
			 m->dir, m->strings + m->files[z->file].path,
			 (unsigned long long)z->off,
			 ckpt_entry_fqn(m, ckpt_meta_chunk_entry(m, ci)));
		return;
	}
	snprintf(line, cap,
		 "%s/%s: offset %llu: key '%s': %s mismatch, reads of it fail with EIO",
		 m->dir, m->strings + m->files[c->file].path,
		 (unsigned long long)c->foff,
		 ckpt_entry_fqn(m, ckpt_meta_chunk_entry(m, ci)),
		 ckpt_verify_kind(c));
}

/* The last error's fields for corrupt chunk ci: file, offset, key. */
static void corrupt_fields(const struct ckpt_meta *m, uint32_t ci)
{
	const struct ckpt_chunk *c = &m->chunks[ci];
	const struct ckpt_zrec *z = ckpt_chunk_zrec(m, c);

	ckpt_last_error_file(m->dir,
			     m->strings + m->files[z ? z->file : c->file].path,
			     z ? z->off : c->foff);
	ckpt_last_error_key(ckpt_entry_fqn(m, ckpt_meta_chunk_entry(m, ci)));
}

/*
 * -o verify: check chunk ci's record the first time any of it is read.
 * One thread checks it; readers that come meanwhile wait for its verdict
 * instead of checking it again.  A read error is no verdict: the record
 * is left unchecked and the next read tries again.
 */
static int check_record(const struct ckpt_view *v, uint32_t ci)
{
	/* The verify state is, with vfiles, the view's mutable part. */
	struct ckpt_view *mv = (struct ckpt_view *)v;
	struct ckpt_meta *m = v->meta;
	uint8_t st = __atomic_load_n(&v->vstate[ci], __ATOMIC_ACQUIRE);
	uint64_t got = 0;
	char line[1024];
	char *buf;
	int rc;

	if (st == GOOD)
		return 0;
	if (st != CORRUPT) {
		pthread_mutex_lock(&mv->vlock);
		while ((st = __atomic_load_n(&v->vstate[ci], __ATOMIC_ACQUIRE)) ==
		       CHECKING)
			pthread_cond_wait(&mv->vdone, &mv->vlock);
		if (st == UNCHECKED)
			__atomic_store_n(&v->vstate[ci], CHECKING,
					 __ATOMIC_RELEASE);
		pthread_mutex_unlock(&mv->vlock);
	}
	if (st == UNCHECKED) {
		/* No larger than the chunk: a fixed 1 MiB per chunk cost an
		 * mmap each under some allocators (issue 31). */
		size_t vlen = m->chunks[ci].len < ((size_t)1 << 20) ?
			      (size_t)m->chunks[ci].len + 1 : (size_t)1 << 20;

		buf = malloc(vlen);
		rc = buf ? ckpt_verify_chunk(m, ci, buf, vlen, &got) :
			   -ENOMEM;
		free(buf);
		st = rc == -EIO || rc == -ENOMEM ? UNCHECKED :
		     rc == -EBADMSG ? CORRUPT : GOOD;
		pthread_mutex_lock(&mv->vlock);
		__atomic_store_n(&v->vstate[ci], st, __ATOMIC_RELEASE);
		if (st != UNCHECKED)
			atomic_fetch_add(&mv->nverified, 1);
		pthread_cond_broadcast(&mv->vdone);
		pthread_mutex_unlock(&mv->vlock);
		if (st == UNCHECKED)
			return rc;	/* not a verdict: try again next time */
		if (st == CORRUPT && v->report) {
			corrupt_line(m, ci, line, sizeof(line));
			v->report(v->report_ctx, line);
		}
	}
	if (st != CORRUPT)
		return 0;
	corrupt_line(m, ci, line, sizeof(line));
	ckpt_set_last_error("%s", line);
	corrupt_fields(m, ci);
	return -EIO;
}

/* A gather in progress: the strided chunk's record and the destination. */
struct gather_ctx {
	struct ckpt_meta *m;
	struct ckpt_scratch *s;
	uint32_t file;
	uint64_t foff;		/* the record's element 0 */
	size_t isz;
	char *dst;
};

/* Read a batch's extents into the stage, side by side, and copy. */
static int gather_batch(void *ctx, const struct ckpt_gather_batch *b)
{
	struct gather_ctx *g = ctx;
	struct ckpt_scratch *s = g->s;
	struct ckpt_store_range *rr;
	uint64_t at = 0, bytes = b->stage * g->isz;
	uint32_t i;
	int rc;

	rr = ranges_for(s, b->next);
	s->sstage = reserve(s->sstage, &s->cap_sstage, bytes);
	if (!rr || !s->sstage)
		return -ENOMEM;
	for (i = 0; i < b->next; i++) {	/* one batch for the store */
		rr[i] = (struct ckpt_store_range){ g->file,
			g->foff + b->ext[i].at * g->isz,
			b->ext[i].count * g->isz, s->sstage + at };
		at += b->ext[i].count * g->isz;
	}
	rc = read_ranges(g->m, rr, b->next);
	if (rc)
		return rc;
	s->strided_read += bytes;
	ckpt_strided_copy(g->dst + b->copy.dbase * g->isz, b->copy.dstride,
			  s->sstage + b->copy.base * g->isz, b->copy.stride,
			  b->copy.size, b->copy.ndim, g->isz);
	return 0;
}

int ckpt_data_gather(struct ckpt_meta *m, const struct ckpt_run *run,
		     const struct ckpt_gather *gt, size_t isz, void *dst,
		     struct ckpt_scratch *s)
{
	struct gather_ctx g = {
		.m = m, .s = s, .file = run->file, .foff = run->foff,
		.isz = isz, .dst = dst,
	};

	if (!s->gext) {
		s->gext = malloc(CKPT_GATHER_MAX_EXT *
				 sizeof(struct ckpt_gather_ext));
		if (!s->gext)
			return -ENOMEM;
	}
	return ckpt_gather_plan(gt, isz, GATHER_STAGE, s->gext, gather_batch,
				&g);
}

bool ckpt_data_whole_gather(struct ckpt_meta *m, const struct ckpt_entry *e,
			    const struct ckpt_box *box, struct ckpt_run *run,
			    struct ckpt_gather *g)
{
	struct ckpt_planner p;

	if (e->kind != CKPT_KIND_TENSOR || ckpt_data_locate_box(m, e, box))
		return false;
	ckpt_planner_init(&p, m, e, box, 0, UINT64_MAX);
	ckpt_planner_want_boxes(&p);
	if (ckpt_planner_next(&p, run) != 1 || !run->gather ||
	    p.pos != p.end)
		return false;
	*g = p.gather;
	return true;
}

bool ckpt_data_whole_gather_view(const struct ckpt_view *v, uint32_t slot,
				 uint32_t node, uint64_t off, uint64_t len,
				 struct ckpt_run *run, struct ckpt_gather *g)
{
	const struct ckpt_entry *e;
	const struct ckpt_geom *geom;
	struct ckpt_box box;

	if (node >= v->nnodes || !ckpt_node_is_key(&v->nodes[node]) ||
	    slot >= v->nslots)
		return false;
	e = &v->meta->entries[v->nodes[node].entry];
	geom = ckpt_view_geom(v, slot, node);
	if (geom->npy_len || geom->dtype != e->dtype || off != 0 ||
	    len != geom->size)
		return false;
	ckpt_geom_box(v, geom, &box);
	return ckpt_data_whole_gather(v->meta, e, &box, run, g);
}

int ckpt_data_box_pending(const struct ckpt_meta *m,
			  const struct ckpt_entry *e,
			  const struct ckpt_box *box, uint32_t **ci,
			  size_t *n, size_t *cap)
{
	uint32_t k;
	unsigned d;

	if (!m->located || e->kind != CKPT_KIND_TENSOR)
		return 0;
	for (k = 0; k < e->nchunks; k++) {
		uint32_t c = e->chunk_first + k;
		const uint64_t *co, *cs;

		if (ckpt_chunk_is_located(m, c))
			continue;
		co = ckpt_chunk_offsets(m, &m->chunks[c]);
		cs = ckpt_chunk_sizes(m, e, &m->chunks[c]);
		for (d = 0; d < e->ndim; d++)
			if (co[d] >= box->off[d] + box->size[d] ||
			    box->off[d] >= co[d] + cs[d])
				break;
		if (d < e->ndim)
			continue;
		if (ckpt_grow((void **)ci, cap, *n + 1, sizeof(**ci)))
			return -ENOMEM;
		(*ci)[(*n)++] = c;
	}
	return 0;
}

int ckpt_data_locate_box(struct ckpt_meta *m, const struct ckpt_entry *e,
			 const struct ckpt_box *box)
{
	uint32_t *ci = NULL;
	size_t n = 0, cap = 0;
	int rc;

	rc = ckpt_data_box_pending(m, e, box, &ci, &n, &cap);
	if (!rc && n)
		rc = ckpt_meta_locate(m, ci, n);
	free(ci);
	return rc;
}

/*
 * A read that must locate its records (a PyTorch checkpoint opened lazily
 * from an object store) locates, in the same batch, the pending records
 * of the files after its own in the view's order, up to LOCATE_AHEAD
 * records: a reader that reads the files one after another (cat, a copy)
 * then waits for one locate batch per LOCATE_AHEAD records instead of one
 * per file, and a record's tail and the next one's head (adjacent in a
 * .distcp file) are fetched by one GET instead of two.  Bounded: the batch
 * holds 2 KiB of zip windows per record (torch_index.c).
 */
#define LOCATE_AHEAD 64u

void ckpt_data_locate_ahead(const struct ckpt_view *v, uint32_t slot,
			    uint32_t node)
{
	struct ckpt_meta *m = v->meta;
	uint32_t *ci = NULL, i;
	size_t n = 0, cap = 0;

	if (!m->located)
		return;
	/* node's file, then the next ones in the order readers go */
	for (i = node; i != UINT32_MAX && n < LOCATE_AHEAD;
	     i = ckpt_view_key_after(v, i)) {
		const struct ckpt_node *nd = &v->nodes[i];
		struct ckpt_box box;

		if (!ckpt_node_is_key(nd))
			continue;
		ckpt_geom_box(v, ckpt_view_geom(v, slot, i), &box);
		if (ckpt_data_box_pending(m, &m->entries[nd->entry], &box,
					  &ci, &n, &cap))
			break;
		if (i == node && !n)
			break;	/* its own records are located: no batch */
	}
	/* Best effort: a record that fails is marked, and reported by the
	 * read that needs it (ckpt_data_locate_box()). */
	if (n)
		(void)ckpt_meta_locate(m, ci, n);
	free(ci);
}

int ckpt_data_check_chunk(const struct ckpt_view *v, uint32_t chunk)
{
	return v->verify ? check_record(v, chunk) : 0;
}

/* Bytes [off, off+len) of entry e's box as stored, into buf. */
static int read_raw(struct ckpt_meta *m, const struct ckpt_view *v,
		    const struct ckpt_entry *e,
		    const struct ckpt_box *box, uint64_t off, size_t len,
		    char *buf, size_t *got, struct ckpt_scratch *s)
{
	struct pending local[DIRECT_MAX + 1], *r = local;
	uint32_t cap = DIRECT_MAX + 1, n = 0;
	struct ckpt_planner p;
	struct ckpt_run run;
	uint64_t dst = 0;
	int rc;

	*got = 0;
	rc = ckpt_data_locate_box(m, e, box);
	if (rc)
		return rc;
	if (s && !s->runs) {
		s->runs = malloc(BATCH_RUNS * (sizeof(struct pending) +
					       sizeof(struct extent) +
					       sizeof(uint32_t)));
		if (!s->runs)
			return -ENOMEM;
		s->extents = (struct pending *)s->runs + BATCH_RUNS;
		s->order = (uint32_t *)((struct extent *)s->extents +
					BATCH_RUNS);
	}
	if (s) {
		r = s->runs;
		cap = BATCH_RUNS;
	}
	ckpt_planner_init(&p, m, e, box, off, len);
	if (s)
		ckpt_planner_want_boxes(&p);
	while ((rc = ckpt_planner_next(&p, &run)) > 0) {
		if (v && v->verify) {
			rc = check_record(v, run.chunk);
			if (rc)
				return rc;
		}
		if (run.gather || m->chunks[run.chunk].strides_at != CKPT_NONE) {
			/* a strided chunk's box, or an element cut by the
			 * range's ends (or no scratch): exact */
			rc = run.gather ?
				ckpt_data_gather(m, &run, &p.gather,
						 ckpt_dtype_size((enum ckpt_dtype)e->dtype),
						 buf + dst, s) :
				ckpt_record_pread(m, run.file, buf + dst,
						  run.len, run.foff);
			if (rc)
				return rc;
			dst += run.len;
			continue;
		}
		/* Merge only runs adjacent in the buffer too: a strided
		 * chunk's run may lie between two that are adjacent in
		 * their file (a row of a grid's plain chunk, then the row
		 * of its strided neighbour, then the plain one's next). */
		if (n && run.file == r[n - 1].file &&
		    r[n - 1].foff + r[n - 1].len == run.foff &&
		    r[n - 1].dst + r[n - 1].len == dst) {
			r[n - 1].len += run.len;
			r[n - 1].chunk = run.chunk;
		} else {
			if (n == cap) {
				rc = flush(m, r, n, buf, s);
				if (rc)
					return rc;
				n = 0;
			}
			r[n].file = run.file;
			r[n].chunk = run.chunk;
			r[n].foff = run.foff;
			r[n].len = run.len;
			r[n].dst = dst;
			n++;
		}
		dst += run.len;
	}
	if (rc < 0)
		return rc;
	rc = flush(m, r, n, buf, s);
	if (rc)
		return rc;
	*got = dst;
	return 0;
}

/* Hints: each batch's extents, as runs of the chunk's file. */
struct extents_ctx {
	int (*fn)(void *ctx, const struct ckpt_run *run);
	void *ctx;
	struct ckpt_run run;	/* the gather's: chunk, file, foff */
	size_t isz;
};

static int extents_batch(void *ctx, const struct ckpt_gather_batch *b)
{
	struct extents_ctx *x = ctx;
	struct ckpt_run r = x->run;
	uint32_t i;
	int rc;

	r.gather = false;
	for (i = 0; i < b->next; i++) {
		r.foff = x->run.foff + b->ext[i].at * x->isz;
		r.len = b->ext[i].count * x->isz;
		rc = x->fn(x->ctx, &r);
		if (rc)
			return rc;
	}
	return 0;
}

int ckpt_data_extents(struct ckpt_meta *m, const struct ckpt_entry *e,
		      const struct ckpt_box *box, uint64_t off, uint64_t len,
		      int (*fn)(void *ctx, const struct ckpt_run *run),
		      void *ctx)
{
	struct ckpt_gather_ext *ext = NULL;
	struct extents_ctx x = { .fn = fn, .ctx = ctx };
	struct ckpt_planner p;
	struct ckpt_run run;
	int rc;

	rc = ckpt_data_locate_box(m, e, box);
	if (rc)
		return rc;
	ckpt_planner_init(&p, m, e, box, off, len);
	ckpt_planner_want_boxes(&p);
	while ((rc = ckpt_planner_next(&p, &run)) > 0) {
		if (!run.gather) {
			rc = fn(ctx, &run);
			if (rc)
				break;
			continue;
		}
		if (!ext) {
			ext = malloc(CKPT_GATHER_MAX_EXT * sizeof(*ext));
			if (!ext) {
				rc = -ENOMEM;
				break;
			}
		}
		x.run = run;
		x.isz = ckpt_dtype_size((enum ckpt_dtype)e->dtype);
		rc = ckpt_gather_plan(&p.gather, x.isz, GATHER_STAGE, ext,
				      extents_batch, &x);
		if (rc)
			break;
	}
	free(ext);
	return rc;
}

int ckpt_data_gather_extents(const struct ckpt_run *run,
			      const struct ckpt_gather *g, size_t isz,
			      int (*fn)(void *ctx, const struct ckpt_run *run),
			      void *ctx)
{
	struct extents_ctx x = { .fn = fn, .ctx = ctx, .run = *run,
				 .isz = isz };
	struct ckpt_gather_ext *ext;
	int rc;

	ext = malloc(CKPT_GATHER_MAX_EXT * sizeof(*ext));
	if (!ext)
		return -ENOMEM;
	rc = ckpt_gather_plan(g, isz, GATHER_STAGE, ext, extents_batch, &x);
	free(ext);
	return rc;
}

int ckpt_data_extents_view(const struct ckpt_view *v, uint32_t slot,
			   uint32_t node, uint64_t off, uint64_t len,
			   int (*fn)(void *ctx, const struct ckpt_run *run),
			   void *ctx)
{
	struct ckpt_box box;

	if (node >= v->nnodes || !ckpt_node_is_key(&v->nodes[node]) ||
	    slot >= v->nslots)
		return -EISDIR;
	ckpt_geom_box(v, ckpt_view_geom(v, slot, node), &box);
	return ckpt_data_extents(v->meta, &v->meta->entries[v->nodes[node].entry],
				 &box, off, len, fn, ctx);
}

/* A dtype view: read whole source elements covering the range, convert,
 * and copy out the bytes asked for. */
static int read_converted(const struct ckpt_view *v,
			  const struct ckpt_entry *e,
			  const struct ckpt_box *box, enum ckpt_dtype to,
			  uint64_t off, size_t len, char *buf, size_t *got,
			  struct ckpt_scratch *s)
{
	unsigned ssz = ckpt_dtype_size((enum ckpt_dtype)e->dtype);
	unsigned tsz = ckpt_dtype_size(to);
	uint64_t size = ckpt_box_numel(box) * tsz, e0, e1, n;
	size_t need, raw;
	int rc;

	*got = 0;
	if (off >= size || len == 0)
		return 0;
	if (len > size - off)
		len = (size_t)(size - off);
	e0 = off / tsz;
	e1 = (off + len + tsz - 1) / tsz;
	n = e1 - e0;
	need = (size_t)(n * ssz + n * tsz);
	if (!s)
		return -ENOMEM;
	s->conv = reserve(s->conv, &s->cap_conv, need);
	if (!s->conv)
		return -ENOMEM;
	rc = read_raw(v->meta, v, e, box, e0 * ssz, (size_t)(n * ssz), s->conv,
		      &raw, s);
	if (rc)
		return rc;
	if (raw != n * ssz)
		return -EIO;
	ckpt_convert((enum ckpt_dtype)e->dtype, to, s->conv,
		     s->conv + n * ssz, (size_t)n);
	memcpy(buf, s->conv + n * ssz + (off - e0 * tsz), len);
	*got = len;
	return 0;
}

int ckpt_data_read_raw(const struct ckpt_view *v, uint32_t slot,
		       uint32_t node, uint64_t off, size_t len, void *buf,
		       size_t *got, struct ckpt_scratch *s)
{
	const struct ckpt_entry *e;
	const struct ckpt_geom *g;
	struct ckpt_box box;

	*got = 0;
	if (node >= v->nnodes || !ckpt_node_is_key(&v->nodes[node]) ||
	    slot >= v->nslots)
		return -EISDIR;
	e = &v->meta->entries[v->nodes[node].entry];
	g = ckpt_view_geom(v, slot, node);
	ckpt_geom_box(v, g, &box);
	if (e->kind == CKPT_KIND_TENSOR && g->dtype != e->dtype)
		return read_converted(v, e, &box, (enum ckpt_dtype)g->dtype,
				      off, len, buf, got, s);
	return read_raw(v->meta, v, e, &box, off, len, buf, got, s);
}

int ckpt_data_read_box(struct ckpt_meta *m, const struct ckpt_entry *e,
		       const struct ckpt_box *box, uint64_t off, size_t len,
		       void *buf, size_t *got, struct ckpt_scratch *s)
{
	return read_raw(m, NULL, e, box, off, len, buf, got, s);
}

int ckpt_data_read(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, size_t len, void *buf, size_t *got,
		   struct ckpt_scratch *s)
{
	const struct ckpt_geom *g;
	size_t h, done = 0, more;
	int rc;

	*got = 0;
	if (node >= v->nnodes || !ckpt_node_is_key(&v->nodes[node]) ||
	    slot >= v->nslots)
		return -EISDIR;
	g = ckpt_view_geom(v, slot, node);
	h = g->npy_len;
	if (!h)
		return ckpt_data_read_raw(v, slot, node, off, len, buf, got, s);
	/* --format npy: the header, then the data. */
	if (off < h) {
		done = h - (size_t)off < len ? h - (size_t)off : len;
		memcpy(buf, v->npy_heads + g->npy_at + off, done);
	}
	if (done < len) {
		rc = ckpt_data_read_raw(v, slot, node, off + done - h,
					len - done, (char *)buf + done, &more, s);
		if (rc)
			return rc;
		done += more;
	}
	*got = done;
	return 0;
}
