/* SPDX-License-Identifier: MIT */
/*
 * The parallel direct-read engine behind ckpt_view_read_batch() and
 * ckpt_meta_read_boxes(): requests are cut into pieces of at most PIECE
 * bytes, and a pool of threads takes pieces in turn (an atomic counter),
 * each with its own scratch, reading straight into the caller's memory.
 * The first error, or the caller's cancel flag, stops the others at their
 * next piece; the error is handed to the calling thread as its last error
 * (code, file, offset, key and message).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/cancel.h"
#include "common/errbuf.h"
#include "io/datafiles.h"
#include "io/store.h"
#include "plan/plan.h"
#include "records/record_cache.h"
#include "view/data_read.h"
#include "view/geom.h"
#include "view/joined_read.h"

#define PIECE ((uint64_t)4 << 20)	/* bytes per piece */
#define AHEAD 8			/* pieces hinted ahead of the readers */
#define MAX_THREADS 256

/* One piece: [off, off + len) of request req; or, when the request is a
 * box in one strided chunk (gather), indices [off, off + len) of its
 * gather's dim gdim (the record's outermost), in whatever order they lie
 * in the view. */
struct piece {
	size_t req;
	uint64_t off, len;
	bool gather;
	unsigned gdim;
};

struct job {
	const struct ckpt_view *v;		/* view batch, or NULL */
	struct ckpt_meta *m;			/* box batch */
	const struct ckpt_read_req *vreqs;
	const struct ckpt_box_req *breqs;
	const struct ckpt_entry **bent;		/* box batch: entries */
	struct ckpt_box *boxes;			/* box batch: boxes */
	const volatile int *cancel;		/* the caller's, or NULL */
	struct piece *pieces;
	size_t npieces;
	atomic_size_t next;
	atomic_int failed;
	pthread_mutex_t lock;			/* guards rc and error */
	int rc;
	struct ckpt_error error;
};

/* The first failure wins: rc, and the calling thread's last error. */
static void fail(struct job *j, int rc)
{
	pthread_mutex_lock(&j->lock);
	if (!j->rc) {
		j->rc = rc;
		ckpt_last_error_finish(rc, NULL);
		ckpt_last_error_get(&j->error);
	}
	pthread_mutex_unlock(&j->lock);
	atomic_store(&j->failed, 1);
}

static bool cancelled(const struct job *j)
{
	return j->cancel && *j->cancel;
}

/* Request i as one strided chunk's gather: *run, *g, *isz; or false. */
static bool req_gather(const struct job *j, size_t i, struct ckpt_run *run,
		       struct ckpt_gather *g, size_t *isz)
{
	struct ckpt_meta *m = j->v ? ckpt_view_meta(j->v) : j->m;
	bool ok;

	if (j->v) {
		const struct ckpt_read_req *r = &j->vreqs[i];

		ok = ckpt_data_whole_gather_view(j->v, r->slot, r->node, r->off,
						 r->len, run, g);
	} else {
		ok = ckpt_data_whole_gather(j->m, j->bent[i], &j->boxes[i], run,
					    g);
	}
	if (ok)
		*isz = ckpt_dtype_size(
			(enum ckpt_dtype)ckpt_meta_chunk_entry(m, run->chunk)->dtype);
	return ok;
}

/* The dim a gather is cut along: the record's outermost (largest
 * stride), so each piece is a contiguous part of the record. */
static unsigned gather_dim(const struct ckpt_gather *g)
{
	unsigned d, dd = 0;

	for (d = 1; d < g->ndim; d++)
		if (g->size[d] > 1 && (g->size[dd] <= 1 ||
				       g->stride[d] > g->stride[dd]))
			dd = d;
	return dd;
}

/* Piece p's part of request p->req's gather (p->gather). */
static bool piece_gather(const struct job *j, const struct piece *p,
			 struct ckpt_run *run, struct ckpt_gather *g,
			 size_t *isz)
{
	if (!req_gather(j, p->req, run, g, isz))
		return false;
	g->size[p->gdim] = p->len;
	g->base += p->off * g->stride[p->gdim];
	g->dbase += p->off * g->dstride[p->gdim];
	return true;
}

/* Runs of one piece, coalesced per file, become WILLNEED hints; with
 * warm, records stored with transforms are decoded now (by the thread
 * ahead of the readers, so several records decode at once). */
struct hint {
	struct ckpt_meta *m;
	bool warm;
	uint32_t file;
	uint64_t off, len;
};

static void hint_flush(struct hint *h)
{
	if (h->len)
		ckpt_files_willneed(h->m, h->file, h->off, h->len);
	h->len = 0;
}

/* A ckpt_data_extents() callback: add run to the hint ctx. */
static int hint_run(void *ctx, const struct ckpt_run *run)
{
	struct hint *h = ctx;

	if (ckpt_is_zrec(run->file)) {
		if (h->warm)
			ckpt_record_warm(h->m, run->file);
		return 0;
	}
	if (h->len && run->file == h->file && run->foff >= h->off &&
	    run->foff <= h->off + h->len + (64 << 10)) {
		if (run->foff + run->len > h->off + h->len)
			h->len = run->foff + run->len - h->off;
		return 0;
	}
	hint_flush(h);
	h->file = run->file;
	h->off = run->foff;
	h->len = run->len;
	return 0;
}

/*
 * Tell the kernel which file bytes piece i will read, so that on a cold
 * page cache they are read asynchronously ahead of the readers (data
 * files are opened without readahead: only these exact ranges are read).
 * A view piece with a .npy header or a dtype conversion is hinted through
 * its raw plan, which covers the same records.
 */
static void hint_piece(struct job *j, size_t i, bool warm)
{
	const struct piece *p;
	struct hint h = { .warm = warm };

	if (i >= j->npieces)
		return;
	p = &j->pieces[i];
	if (p->gather) {
		struct ckpt_gather g;
		struct ckpt_run run;
		size_t isz;

		h.m = j->v ? ckpt_view_meta(j->v) : j->m;
		if (piece_gather(j, p, &run, &g, &isz))
			ckpt_data_gather_extents(&run, &g, isz, hint_run,
						 &h);
	} else if (j->v) {
		const struct ckpt_read_req *r = &j->vreqs[p->req];

		h.m = ckpt_view_meta(j->v);
		ckpt_data_extents_view(j->v, r->slot, r->node, r->off + p->off,
				       p->len, hint_run, &h);
	} else {
		h.m = j->m;
		ckpt_data_extents(j->m, j->bent[p->req], &j->boxes[p->req],
				  p->off, p->len, hint_run, &h);
	}
	hint_flush(&h);
}

/* A gather piece: straight from the record into the request's memory. */
static int one_gather(struct job *j, const struct piece *p,
		      struct ckpt_scratch *s)
{
	struct ckpt_meta *m = j->v ? ckpt_view_meta(j->v) : j->m;
	void *dst = j->v ? j->vreqs[p->req].dst : j->breqs[p->req].dst;
	struct ckpt_gather g;
	struct ckpt_run run;
	size_t isz;
	int rc;

	ckpt_clear_last_error();
	if (!piece_gather(j, p, &run, &g, &isz)) {	/* cut() found one */
		ckpt_set_last_error("a strided request is no longer one");
		return -EIO;
	}
	rc = j->v ? ckpt_data_check_chunk(j->v, run.chunk) : 0;
	if (!rc)
		rc = ckpt_data_gather(m, &run, &g, isz, dst, s);
	if (rc)
		ckpt_last_error_add_key(ckpt_entry_fqn(m,
					ckpt_meta_chunk_entry(m, run.chunk)));
	return rc;
}

static int one_piece(struct job *j, const struct piece *p,
		     struct ckpt_scratch *s)
{
	uint64_t done = 0;
	size_t got;
	int rc;

	if (p->gather)
		return one_gather(j, p, s);
	while (done < p->len) {
		size_t want = (size_t)(p->len - done);

		if (j->v) {
			const struct ckpt_read_req *r = &j->vreqs[p->req];

			rc = ckpt_view_read(j->v, r->slot, r->node,
					    r->off + p->off + done, want,
					    (char *)r->dst + p->off + done,
					    &got, s);
		} else {
			const struct ckpt_box_req *r = &j->breqs[p->req];

			ckpt_clear_last_error();
			rc = ckpt_data_read_box(j->m, j->bent[p->req],
						&j->boxes[p->req], p->off + done,
						want, (char *)r->dst + p->off + done,
						&got, s);
			if (rc)
				ckpt_last_error_add_key(ckpt_entry_fqn(j->m,
							j->bent[p->req]));
		}
		if (!rc && got == 0) {
			ckpt_set_last_error("a read gave no bytes");
			rc = -EIO;
		}
		if (rc)
			return rc;
		done += got;
	}
	return 0;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct ckpt_scratch *s = ckpt_scratch_new();
	/* The batch's flag is this thread's too: the waits under a piece
	 * (HTTP transfers, their backoff) poll it. */
	const volatile int *outer = ckpt_thread_cancel_set(j->cancel);
	size_t i;
	int rc;

	if (!s) {
		ckpt_errf(NULL, 0, -ENOMEM, "out of memory");
		fail(j, -ENOMEM);
		ckpt_thread_cancel_set(outer);
		return NULL;
	}
	while (!atomic_load(&j->failed) &&
	       (i = atomic_fetch_add(&j->next, 1)) < j->npieces) {
		if (cancelled(j)) {
			ckpt_clear_last_error();
			ckpt_errf(NULL, 0, -ECANCELED, "cancelled");
			fail(j, -ECANCELED);
			break;
		}
		hint_piece(j, i + AHEAD, true);
		rc = one_piece(j, &j->pieces[i], s);
		if (rc)
			fail(j, rc);
	}
	ckpt_scratch_free(s);
	ckpt_thread_cancel_set(outer);
	return NULL;
}

#define HUGE_PAGE ((uintptr_t)2 << 20)

/*
 * The destinations are usually fresh memory (new tensors), and faulting
 * it in 4 KiB at a time costs more than the copy: ask for huge pages on
 * the 2 MiB-aligned inside of each large destination.  Advisory: memory
 * already faulted in, or a kernel without THP, is unaffected.  It is the
 * caller's memory, so only when the caller asked (CKPT_FILES_HUGE_PAGES).
 */
static void want_huge_pages(const struct ckpt_meta *m, void *dst,
			    uint64_t len)
{
	uintptr_t lo = ((uintptr_t)dst + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	uintptr_t hi = ((uintptr_t)dst + len) & ~(HUGE_PAGE - 1);

	if (m->huge_pages && dst && hi > lo)
		madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
}

/* How a request is cut: PIECE bytes at a time (per = 0), or per indices
 * of gather dim gdim (of nidx) at a time. */
struct cutting {
	uint64_t per, nidx;
	unsigned gdim;
};

/* Request i (len bytes): how it is cut (*c), and into how many pieces. */
static size_t cut_one(const struct job *j, size_t i, uint64_t len,
		      struct cutting *c)
{
	struct ckpt_gather g;
	struct ckpt_run run;
	uint64_t slice;
	size_t isz;

	c->per = 0;
	if (!len || !req_gather(j, i, &run, &g, &isz))
		return (size_t)((len + PIECE - 1) / PIECE);
	c->gdim = gather_dim(&g);
	c->nidx = g.size[c->gdim];
	slice = len / c->nidx;
	c->per = slice >= PIECE ? 1 : PIECE / slice;
	return (size_t)((c->nidx + c->per - 1) / c->per);
}

/* Cut requests of sizes len[0..n) into pieces. */
static int cut(struct job *j, const uint64_t *len, size_t n)
{
	size_t k = 0, np = 0, i, q, cnt;
	struct cutting c;

	for (i = 0; i < n; i++)
		np += cut_one(j, i, len[i], &c);
	j->pieces = malloc((np ? np : 1) * sizeof(*j->pieces));
	if (!j->pieces)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		cnt = cut_one(j, i, len[i], &c);
		for (q = 0; q < cnt && k < np; q++, k++) {
			struct piece *p = &j->pieces[k];
			uint64_t whole = c.per ? c.nidx : len[i];
			uint64_t step = c.per ? c.per : PIECE;

			p->req = i;
			p->gather = c.per != 0;
			p->gdim = c.per ? c.gdim : 0;
			p->off = q * step;
			p->len = whole - p->off < step ? whole - p->off : step;
		}
	}
	j->npieces = k;
	return 0;
}

static int run(struct job *j, unsigned threads, char *err, size_t errlen)
{
	struct ckpt_meta *m = j->v ? ckpt_view_meta(j->v) : j->m;
	pthread_t th[MAX_THREADS];
	unsigned t, started = 0;

	if (cancelled(j))
		return ckpt_errf(err, errlen, -ECANCELED, "cancelled");
	if (!threads && m->store)	/* S3: as many as GETs in flight */
		threads = ckpt_store_parallelism(m->store);
	if (!threads) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);

		threads = c > 0 ? (unsigned)c : 1;
	}
	if (threads > MAX_THREADS)
		threads = MAX_THREADS;
	if ((size_t)threads > j->npieces)
		threads = j->npieces ? (unsigned)j->npieces : 1;
	for (t = 0; t < AHEAD && t < j->npieces; t++)
		hint_piece(j, t, false);	/* the first pieces, before
						 * anyone reads */
	for (t = 1; t < threads; t++) {
		if (pthread_create(&th[t], NULL, worker, j))
			break;
		started++;
	}
	worker(j);	/* the calling thread works too */
	for (t = 1; t <= started; t++)
		pthread_join(th[t], NULL);
	if (j->rc && j->rc != -ECANCELED && cancelled(j)) {
		/* a piece broken off by the flag failed as it could */
		ckpt_clear_last_error();
		ckpt_errf(NULL, 0, -ECANCELED, "cancelled");
		ckpt_last_error_finish(-ECANCELED, NULL);
		ckpt_last_error_get(&j->error);
		j->rc = -ECANCELED;
	}
	if (j->rc) {
		ckpt_last_error_put(&j->error);
		if (err && errlen)
			snprintf(err, errlen, "%s", j->error.message);
		return j->rc;
	}
	return 0;
}

/* A job for n requests read with options o (may be NULL), and room for
 * their lengths in *len (caller frees both with free()); NULL when out of
 * memory. */
static struct job *job_new(size_t n, const struct ckpt_batch_opts *o,
			   uint64_t **len)
{
	struct job *j = calloc(1, sizeof(*j));

	*len = malloc((n ? n : 1) * sizeof(uint64_t));
	if (!j || !*len) {
		free(j);
		free(*len);
		*len = NULL;
		return NULL;
	}
	j->cancel = o && o->cancel ? o->cancel : ckpt_cancel_flag();
	return j;
}

/* Cut the requests of sizes len[0..n) of job j into pieces and serve
 * them (j's requests are set).  Returns 0 or -errno with err. */
static int run_pieces(struct job *j, const uint64_t *len, size_t n,
		      const struct ckpt_batch_opts *o, char *err,
		      size_t errlen)
{
	int rc;

	pthread_mutex_init(&j->lock, NULL);
	rc = cut(j, len, n);
	if (rc)
		rc = ckpt_errf(err, errlen, rc, "out of memory");
	else
		rc = run(j, o ? o->threads : 0, err, errlen);
	pthread_mutex_destroy(&j->lock);
	free(j->pieces);
	return rc;
}

/*
 * Locate every pending record that requests [0, n) need (the view's
 * when v, else boxes over bent), all in one batch: on an object store
 * each archive's head and tail in one parallel round of requests, before
 * the batch's data, and a record read from one end of its data with them
 * (view/joined_read.h).  Best effort: a record that cannot be located
 * fails the piece that reads it, with its reason.  A box batch's
 * request whose bytes a joined read put into its destination gets
 * len[i] = 0 (nothing left to read).  Returns what to free with
 * ckpt_joined_free() once the batch is read (may be NULL).
 */
static struct ckpt_joined *locate_batch(struct ckpt_meta *m,
					const struct ckpt_view *v,
					const struct ckpt_read_req *vreqs,
					const struct ckpt_entry *const *bent,
					const struct ckpt_box *boxes,
					const struct ckpt_box_req *breqs,
					uint64_t *len, size_t n)
{
	const struct ckpt_entry **ents;
	struct ckpt_box *box;
	struct ckpt_joined *j = NULL;
	bool *whole, *done;
	uint8_t **dst;
	uint64_t *dlen;
	size_t i, k = 0, *idx;

	if (!m->located)
		return NULL;
	if (!v) {
		dst = calloc(n ? n : 1, sizeof(*dst));
		done = calloc(n ? n : 1, sizeof(*done));
		if (dst && done) {
			for (i = 0; i < n; i++)
				dst[i] = breqs[i].dst;
			j = ckpt_joined_locate(m, bent, boxes, NULL, n, dst,
					       len, done);
			for (i = 0; i < n; i++)
				if (done[i])
					len[i] = 0;
		} else {
			j = ckpt_joined_locate(m, bent, boxes, NULL, n, NULL,
					       NULL, NULL);
		}
		free(dst);
		free(done);
		return j;
	}
	ents = calloc(n ? n : 1, sizeof(*ents));
	box = calloc(n ? n : 1, sizeof(*box));
	whole = calloc(n ? n : 1, sizeof(*whole));
	dst = calloc(n ? n : 1, sizeof(*dst));
	dlen = calloc(n ? n : 1, sizeof(*dlen));
	done = calloc(n ? n : 1, sizeof(*done));
	idx = malloc((n ? n : 1) * sizeof(*idx));
	if (ents && box && whole && dst && dlen && done && idx) {
		for (i = 0; i < n; i++) {
			const struct ckpt_node *nd = &v->nodes[vreqs[i].node];
			const struct ckpt_geom *g;
			uint64_t size;

			if (!ckpt_node_is_key(nd))
				continue;
			g = ckpt_view_geom(v, vreqs[i].slot, vreqs[i].node);
			ents[k] = &m->entries[nd->entry];
			ckpt_geom_box(v, g, &box[k]);
			/* The box is the whole file's: a request for part
			 * of it (a window of a large file) is located, not
			 * joined, lest the join fetch the rest. */
			whole[k] = vreqs[i].off == 0 &&
				   !ckpt_view_size(v, vreqs[i].slot,
						   vreqs[i].node, &size) &&
				   vreqs[i].len >= size;
			/* Its data, after the npy header, is the box's saved
			 * bytes (no conversion; no check to run on them). */
			if (whole[k] && vreqs[i].dst && !v->verify &&
			    g->dtype == ents[k]->dtype &&
			    g->size == (uint64_t)g->npy_len + g->data_size) {
				dst[k] = (uint8_t *)vreqs[i].dst + g->npy_len;
				dlen[k] = g->data_size;
			}
			idx[k++] = i;
		}
		j = ckpt_joined_locate(m, ents, box, whole, k, dst, dlen,
				       done);
		/* (the npy header is still to read) */
		for (i = 0; i < k; i++)
			if (done[i])
				len[idx[i]] = ckpt_view_geom(v,
						vreqs[idx[i]].slot,
						vreqs[idx[i]].node)->npy_len;
	}
	/* Out of memory: the reads locate what they need themselves. */
	free(ents);
	free(box);
	free(whole);
	free(dst);
	free(dlen);
	free(done);
	free(idx);
	return j;
}

int ckpt_view_read_batch_opts(const struct ckpt_view *v,
			      const struct ckpt_read_req *reqs, size_t n,
			      const struct ckpt_batch_opts *o, char *err,
			      size_t errlen)
{
	struct ckpt_joined *joined;
	struct job *j;
	uint64_t *len;
	size_t i;
	int rc;

	ckpt_clear_last_error();
	j = job_new(n, o, &len);
	if (!j)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	j->v = v;
	j->vreqs = reqs;
	for (i = 0; i < n; i++) {
		struct ckpt_entry_info e;
		uint64_t size;
		char path[512];

		rc = ckpt_view_size(v, reqs[i].slot, reqs[i].node, &size);
		if (!rc && (reqs[i].off > size || reqs[i].len > size - reqs[i].off))
			rc = -EINVAL;
		if (rc) {
			ckpt_view_path(v, reqs[i].node, path, sizeof(path));
			rc = ckpt_errf(err, errlen, rc,
				       "request %zu: '%s' (rank %" PRIu32 "): bytes [%" PRIu64 ", +%" PRIu64 ") %s",
				       i, path, ckpt_view_slot_rank(v, reqs[i].slot),
				       reqs[i].off, reqs[i].len,
				       rc == -EINVAL ? "lie past its end" : strerror(-rc));
			if (!ckpt_view_entry(v, reqs[i].slot, reqs[i].node, &e) &&
			    e.fqn)
				ckpt_last_error_key(e.fqn);
			goto out_free;
		}
		len[i] = reqs[i].len;
		want_huge_pages(ckpt_view_meta(v), reqs[i].dst, reqs[i].len);
	}
	joined = locate_batch(ckpt_view_meta(v), v, reqs, NULL, NULL, NULL,
			      len, n);
	rc = run_pieces(j, len, n, o, err, errlen);
	ckpt_joined_free(ckpt_view_meta(v), joined);
out_free:
	free(len);
	free(j);
	return rc;
}

int ckpt_view_read_batch(const struct ckpt_view *v,
			 const struct ckpt_read_req *reqs, size_t n,
			 unsigned threads, char *err, size_t errlen)
{
	struct ckpt_batch_opts o = { .threads = threads };

	return ckpt_view_read_batch_opts(v, reqs, n, &o, err, errlen);
}

int ckpt_meta_read_boxes_opts(struct ckpt_meta *m,
			      const struct ckpt_box_req *reqs, size_t n,
			      const struct ckpt_batch_opts *o, char *err,
			      size_t errlen)
{
	struct ckpt_joined *joined;
	struct job *j;
	uint64_t *len;
	size_t i;
	int rc = 0;

	ckpt_clear_last_error();
	j = job_new(n, o, &len);
	if (!j)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	j->m = m;
	j->breqs = reqs;
	j->bent = malloc((n ? n : 1) * sizeof(*j->bent));
	j->boxes = malloc((n ? n : 1) * sizeof(*j->boxes));
	if (!j->bent || !j->boxes) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	if (!ckpt_files_are_open(m)) {
		rc = ckpt_errf(err, errlen, -EBADF,
			       "%s: data files are not open (ckpt_files_open())",
			       m->dir ? m->dir : "checkpoint");
		goto out_free;
	}
	for (i = 0; i < n; i++) {
		const struct ckpt_entry *e;
		const uint64_t *shape;
		uint64_t numel = 1;
		unsigned d;

		if (reqs[i].key >= m->nentries) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "request %zu: no key %" PRIu32, i,
				       reqs[i].key);
			goto out_free;
		}
		e = j->bent[i] = &m->entries[reqs[i].key];
		if (e->kind == CKPT_KIND_BYTES) {
			j->boxes[i].ndim = 0;
			len[i] = e->nbytes;
			want_huge_pages(m, reqs[i].dst, len[i]);
			continue;
		}
		shape = ckpt_entry_shape(m, e);
		j->boxes[i].ndim = e->ndim;
		for (d = 0; d < e->ndim; d++) {
			if (reqs[i].off[d] > shape[d] ||
			    reqs[i].size[d] > shape[d] - reqs[i].off[d]) {
				char a[256], b[256], c[256];

				rc = ckpt_errf_key(err, errlen, -EINVAL,
						   ckpt_entry_fqn(m, e), SIZE_MAX,
						   "%s: key '%s': box %s+%s lies outside the shape %s",
						   m->dir ? m->dir : "checkpoint",
						   ckpt_entry_fqn(m, e),
						   ckpt_fmt_dims(a, sizeof(a), reqs[i].off, e->ndim),
						   ckpt_fmt_dims(b, sizeof(b), reqs[i].size, e->ndim),
						   ckpt_fmt_dims(c, sizeof(c), shape, e->ndim));
				goto out_free;
			}
			j->boxes[i].off[d] = reqs[i].off[d];
			j->boxes[i].size[d] = reqs[i].size[d];
			numel *= reqs[i].size[d];
		}
		len[i] = numel * ckpt_dtype_size((enum ckpt_dtype)e->dtype);
		want_huge_pages(m, reqs[i].dst, len[i]);
	}
	joined = locate_batch(m, NULL, NULL, j->bent, j->boxes, reqs, len, n);
	rc = run_pieces(j, len, n, o, err, errlen);
	ckpt_joined_free(m, joined);
out_free:
	free(j->bent);
	free(j->boxes);
	free(len);
	free(j);
	return rc;
}

int ckpt_meta_read_boxes(struct ckpt_meta *m, const struct ckpt_box_req *reqs,
			 size_t n, unsigned threads, char *err, size_t errlen)
{
	struct ckpt_batch_opts o = { .threads = threads };

	return ckpt_meta_read_boxes_opts(m, reqs, n, &o, err, errlen);
}
