/* SPDX-License-Identifier: MIT */
/*
 * Joined reads: a pending record read from one end of its tensor data is
 * fetched, with the zip structures that locate it, in one request (see
 * joined_read.h).  Nothing here knows the zip layout: it only fetches
 * byte ranges of the data files that are sure to hold both the bytes the
 * batch needs and the windows locating reads, and the format reader
 * locates from them with all its usual checks.
 */
#include "view/joined_read.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/grow.h"
#include "io/datafiles.h"
#include "io/store.h"

/* The most bytes one batch keeps fetched for its reads: chunks past it
 * are located first and read after, as without joining. */
#define JOIN_BUDGET ((uint64_t)256 << 20)
/* Locally a join saves a pread or two of a record's windows and costs a
 * copy of its bytes: only a record this small is joined. */
#define LOCAL_JOIN_MAX ((uint64_t)1 << 20)

struct ckpt_joined {
	struct ckpt_fetched_set set;
	struct ckpt_fetched *w;
	uint8_t *mem;
};

/* The bytes [a, b) of pending chunk `chunk`'s data that the batch needs. */
struct want {
	uint32_t chunk;
	bool nojoin;	/* some request only locates it */
	uint64_t a, b;
};

static int cmp_want(const void *x, const void *y)
{
	const struct want *p = x, *q = y;

	return p->chunk < q->chunk ? -1 : p->chunk > q->chunk;
}

static int cmp_fetched(const void *x, const void *y)
{
	const struct ckpt_fetched *p = x, *q = y;

	if (p->file != q->file)
		return p->file < q->file ? -1 : 1;
	return p->off < q->off ? -1 : p->off > q->off;
}

/*
 * The bytes of chunk c (of entry e, row-major as a pending chunk is
 * taken to be) that box meets: [*a, *b) of its data, from the first
 * element of the intersection to its last.  False when box misses c.
 * d0 = 4 rows of 8 float32, box rows 2..3: elements 16..31, [64, 128).
 */
static bool box_span(const struct ckpt_meta *m, const struct ckpt_entry *e,
		     uint32_t c, const struct ckpt_box *box, uint64_t *a,
		     uint64_t *b)
{
	const uint64_t *co = ckpt_chunk_offsets(m, &m->chunks[c]);
	const uint64_t *cs = ckpt_chunk_sizes(m, e, &m->chunks[c]);
	uint64_t first = 0, last = 0, isz = ckpt_dtype_size(e->dtype);
	unsigned d;

	for (d = 0; d < e->ndim; d++) {
		uint64_t lo = box->off[d] > co[d] ? box->off[d] : co[d];
		uint64_t bend = box->off[d] + box->size[d];
		uint64_t hi = bend < co[d] + cs[d] ? bend : co[d] + cs[d];

		if (lo >= hi)
			return false;
		/* below numel, whose byte size the parser checked */
		first = first * cs[d] + (lo - co[d]);
		last = last * cs[d] + (hi - 1 - co[d]);
	}
	*a = first * isz;
	*b = (last + 1) * isz;
	return true;
}

/*
 * The range to fetch for chunk u's needed bytes [a, b), when they touch
 * an end of its data: false when they touch neither, or the archive is
 * not where a read could use it.  The tensor data (L bytes) lies at some
 * D in [0, O] of its archive [boff, end), O = blen - L the zip overhead;
 * so from the start, [boff, boff + O + b) holds the head window and
 * bytes [0, b); to the end, [boff + a, end) holds bytes [a, L) and the
 * tail window.  Each goes one window further, into the neighbouring
 * archive: its tail or its head, which its own locating needs.
 */
static bool join_range(const struct ckpt_meta *m, const struct want *u,
		       uint64_t *start, uint64_t *stop)
{
	const struct ckpt_chunk *c = &m->chunks[u->chunk];
	const struct ckpt_lazy *lz = &m->lazy[u->chunk];
	const struct ckpt_file_open *f = &m->opened[c->file];
	const uint64_t W = CKPT_LOCATE_WINDOW;
	uint64_t L = c->len, end;

	if (u->nojoin || lz->boff > f->size ||
	    lz->blen > f->size - lz->boff || L > lz->blen || u->b > L ||
	    (u->a != 0 && u->b != L))
		return false;
	end = lz->boff + lz->blen;
	if (u->a == 0)
		*start = lz->boff - (lz->boff < W ? lz->boff : W);
	else if (lz->blen <= 2 * W)
		*start = lz->boff;
	else
		*start = lz->boff + u->a < end - W ? lz->boff + u->a : end - W;
	if (u->b == L)
		*stop = end + (f->size - end < W ? f->size - end : W);
	else
		*stop = lz->boff + (lz->blen - L) + u->b;
	return *start < *stop;
}

/* The windows locating chunk `chunk` reads first (torch_index.c's
 * pf_add()) that w[0..nj) does not hold, appended at w[*n...]. */
static void add_windows(const struct ckpt_meta *m, uint32_t chunk,
			struct ckpt_fetched *w, size_t nj, uint64_t maxlen,
			size_t *n)
{
	const struct ckpt_lazy *lz = &m->lazy[chunk];
	uint32_t file = m->chunks[chunk].file;
	const struct ckpt_file_open *f = &m->opened[file];
	const uint64_t W = CKPT_LOCATE_WINDOW;
	uint64_t at[2], len[2];
	unsigned k, nk = 1;

	if (lz->boff > f->size || lz->blen > f->size - lz->boff || !lz->blen)
		return;		/* locating says why */
	at[0] = lz->boff;
	len[0] = lz->blen <= 2 * W ? lz->blen : W;
	if (lz->blen > len[0]) {
		at[1] = lz->boff + lz->blen - W;
		len[1] = W;
		nk = 2;
	}
	for (k = 0; k < nk; k++)
		if (!ckpt_fetched_find(w, nj, maxlen, file, at[k], len[k]))
			w[(*n)++] = (struct ckpt_fetched){ file, at[k], len[k],
							   NULL };
}

/* The pending chunks the boxes meet, each once with the union of its
 * needed bytes, into *out (caller frees); their count, or -ENOMEM. */
static ssize_t wanted(const struct ckpt_meta *m,
		      const struct ckpt_entry *const *ents,
		      const struct ckpt_box *box, const bool *join, size_t n,
		      struct want **out)
{
	struct want *wt = NULL;
	size_t i, k, nw = 0, cap = 0;

	for (i = 0; i < n; i++) {
		const struct ckpt_entry *e = ents[i];
		uint32_t c;

		if (e->kind != CKPT_KIND_TENSOR)
			continue;
		for (c = e->chunk_first; c < e->chunk_first + e->nchunks;
		     c++) {
			uint64_t a, b;

			if (ckpt_chunk_is_located(m, c) ||
			    !box_span(m, e, c, &box[i], &a, &b))
				continue;
			if (ckpt_grow((void **)&wt, &cap, nw + 1, sizeof(*wt))) {
				free(wt);
				return -ENOMEM;
			}
			wt[nw++] = (struct want){ c, join && !join[i], a, b };
		}
	}
	*out = wt;
	if (!nw)
		return 0;
	qsort(wt, nw, sizeof(*wt), cmp_want);
	for (i = k = 0; i < nw; i++) {
		if (k && wt[k - 1].chunk == wt[i].chunk) {
			if (wt[i].a < wt[k - 1].a)
				wt[k - 1].a = wt[i].a;
			if (wt[i].b > wt[k - 1].b)
				wt[k - 1].b = wt[i].b;
			wt[k - 1].nojoin |= wt[i].nojoin;
			continue;
		}
		wt[k++] = wt[i];
	}
	return (ssize_t)k;
}

/*
 * Fetch, for wt[0..nu), the joined ranges and the windows locating needs
 * beside them, into a new registration (not yet in m); NULL when nothing
 * is joined or the fetch failed (then locating reads as usual).
 */
static struct ckpt_joined *fetch_joined(struct ckpt_meta *m,
					const struct want *wt, size_t nu)
{
	struct ckpt_joined *j = calloc(1, sizeof(*j));
	struct ckpt_store_range *r = NULL;
	uint64_t total = 0, maxlen = 0, at = 0;
	uint64_t most = ckpt_store_parallelism(m->store) ? JOIN_BUDGET :
			LOCAL_JOIN_MAX;
	size_t i, nj = 0, n;

	if (!j)
		return NULL;
	j->w = calloc(3 * nu + 1, sizeof(*j->w));
	if (!j->w)
		goto out_free;
	for (i = 0; i < nu; i++) {
		uint64_t start, stop;

		if (!join_range(m, &wt[i], &start, &stop) ||
		    stop - start > JOIN_BUDGET - total ||
		    stop - start > most)
			continue;
		total += stop - start;
		j->w[nj++] = (struct ckpt_fetched){ m->chunks[wt[i].chunk].file,
						    start, stop - start, NULL };
		if (stop - start > maxlen)
			maxlen = stop - start;
	}
	if (!nj)
		goto out_free;
	qsort(j->w, nj, sizeof(*j->w), cmp_fetched);
	n = nj;
	for (i = 0; i < nu; i++)
		add_windows(m, wt[i].chunk, j->w, nj, maxlen, &n);
	for (i = nj; i < n; i++)
		total += j->w[i].len;	/* at most 2 KiB a chunk */
	j->mem = malloc(total);
	r = calloc(n, sizeof(*r));
	if (!j->mem || !r)
		goto out_free;
	for (i = 0; i < n; i++) {
		j->w[i].buf = j->mem + at;
		at += j->w[i].len;
		r[i] = (struct ckpt_store_range){
			m->opened[j->w[i].file].id, j->w[i].off, j->w[i].len,
			j->w[i].buf };
		if (j->w[i].len > maxlen)
			maxlen = j->w[i].len;
	}
	if (ckpt_store_read(m->store, r, n))
		goto out_free;
	free(r);
	qsort(j->w, n, sizeof(*j->w), cmp_fetched);
	j->set = (struct ckpt_fetched_set){ j->w, n, maxlen, NULL };
	return j;
out_free:
	free(r);
	free(j->mem);
	free(j->w);
	free(j);
	return NULL;
}

struct ckpt_joined *ckpt_joined_locate(struct ckpt_meta *m,
				       const struct ckpt_entry *const *ents,
				       const struct ckpt_box *box,
				       const bool *join, size_t n)
{
	struct ckpt_joined *j = NULL;
	struct want *wt = NULL;
	uint32_t *ci = NULL;
	ssize_t nu;
	size_t i;

	if (!m->located)
		return NULL;
	nu = wanted(m, ents, box, join, n, &wt);
	if (nu <= 0)
		goto out_free;
	ci = malloc((size_t)nu * sizeof(*ci));
	if (!ci)
		goto out_free;
	for (i = 0; i < (size_t)nu; i++)
		ci[i] = wt[i].chunk;
	/* On every store: an object store's one GET, a local file's one
	 * pread, instead of locating first and reading after. */
	if (m->opened && m->store)
		j = fetch_joined(m, wt, (size_t)nu);
	/* Best effort: a record that fails is marked, and reported by the
	 * read that needs it. */
	if (j) {
		(void)ckpt_meta_locate_pre(m, ci, (size_t)nu, j->set.w,
					   j->set.n);
		pthread_rwlock_wrlock(&m->fetched_lock);
		j->set.next = m->fetched;
		m->fetched = &j->set;
		pthread_rwlock_unlock(&m->fetched_lock);
	} else {
		(void)ckpt_meta_locate(m, ci, (size_t)nu);
	}
out_free:
	free(ci);
	free(wt);
	return j;
}

void ckpt_joined_free(struct ckpt_meta *m, struct ckpt_joined *j)
{
	struct ckpt_fetched_set **p;

	if (!j)
		return;
	pthread_rwlock_wrlock(&m->fetched_lock);
	for (p = &m->fetched; *p; p = &(*p)->next) {
		if (*p == &j->set) {
			*p = j->set.next;
			break;
		}
	}
	pthread_rwlock_unlock(&m->fetched_lock);
	free(j->mem);
	free(j->w);
	free(j);
}
