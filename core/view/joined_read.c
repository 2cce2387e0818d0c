/* SPDX-License-Identifier: MIT */
/*
 * Joined reads: a pending record read from one end of its tensor data (or
 * near one) is
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

/* The most bytes a handle's joined reads keep fetched in side buffers at
 * once, all batches together (less when the open's cache_bytes is less:
 * m->side_cap): a batch's chunks past what is left are located first and
 * read after, as without joining.  (Bytes fetched straight into their
 * destination do not count.) */
#define JOIN_BUDGET ((uint64_t)256 << 20)

/* Bytes in the middle of a record's data join the nearer end when the
 * bytes between are at most 1/JOIN_SLACK of them (join_range()). */
#define JOIN_SLACK 8u

/* A chunk's bytes go into its destination only when that saves at least
 * this much side buffer. */
#define DIRECT_MIN ((uint64_t)4 << 10)

struct ckpt_joined {
	struct ckpt_fetched_set set;	/* the side buffers only */
	struct ckpt_fetched *w;
	uint8_t *mem;
	uint64_t side;			/* bytes of mem, in m->side_bytes */
};

/* The bytes [a, b) of pending chunk `chunk`'s data that the batch needs. */
struct want {
	uint32_t chunk;
	bool nojoin;	/* some request only locates it */
	uint64_t a, b;
	size_t req;	/* the request that meets it, when nreq is 1 */
	size_t nreq;	/* how many requests meet it */
	uint8_t *dst;	/* non-NULL: request req's bytes are [a, b) of the
			 * chunk, row-major, nothing else */
};

/*
 * A joined range whose middle [s, s + len) of file `file` was fetched
 * into the destination of request req, dst (which has n >= len bytes
 * for the chunk's data bytes [a, a + n): a run of the request's bytes):
 * once the chunk is located, its bytes are moved into place there, and
 * the rest of them copied from the side buffers beside (all of them
 * when len is 0).
 */
struct direct {
	uint32_t chunk, file;
	uint64_t s, len, a, n;
	uint8_t *dst;
	size_t req;
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

/* By request, then destination. */
static int cmp_direct(const void *x, const void *y)
{
	const struct direct *p = x, *q = y;

	if (p->req != q->req)
		return p->req < q->req ? -1 : 1;
	return p->dst < q->dst ? -1 : p->dst > q->dst;
}

static int cmp_range(const void *x, const void *y)
{
	const struct ckpt_store_range *p = x, *q = y;

	if (p->id != q->id)
		return p->id < q->id ? -1 : 1;
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
 *
 * Bytes in the middle of the data, [a, b) with 0 < a and b < L, are
 * fetched from the nearer end too when the bytes between are at most
 * 1/JOIN_SLACK of theirs: one GET for a few more bytes, instead of a GET
 * of the windows first and one of the bytes after.  (A reshard by
 * torch.chunk's rounding leaves such pieces: a sliver of a saved chunk
 * read by one rank, the rest by the next.)
 */
static bool join_range(const struct ckpt_meta *m, const struct want *u,
		       uint64_t *start, uint64_t *stop)
{
	const struct ckpt_chunk *c = &m->chunks[u->chunk];
	const struct ckpt_lazy *lz = &m->lazy[u->chunk];
	const struct ckpt_file_open *f = &m->opened[c->file];
	const uint64_t W = CKPT_LOCATE_WINDOW;
	uint64_t L = c->len, end;
	bool head, tail;

	if (u->nojoin || lz->boff > f->size ||
	    lz->blen > f->size - lz->boff || L > lz->blen || u->b > L ||
	    u->a >= u->b)
		return false;
	head = u->a == 0;
	tail = u->b == L;
	if (!head && !tail) {
		uint64_t slack = (u->b - u->a) / JOIN_SLACK;

		if (u->a <= slack && u->a <= L - u->b)
			head = true;
		else if (L - u->b <= slack)
			tail = true;
		else
			return false;
	}
	end = lz->boff + lz->blen;
	if (head)
		*start = lz->boff - (lz->boff < W ? lz->boff : W);
	else if (lz->blen <= 2 * W)
		*start = lz->boff;
	else
		*start = lz->boff + u->a < end - W ? lz->boff + u->a : end - W;
	if (tail)
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

/* Does box lie inside chunk c of e? */
static bool box_inside(const struct ckpt_meta *m, const struct ckpt_entry *e,
		       uint32_t c, const struct ckpt_box *box)
{
	const uint64_t *co = ckpt_chunk_offsets(m, &m->chunks[c]);
	const uint64_t *cs = ckpt_chunk_sizes(m, e, &m->chunks[c]);
	unsigned d;

	for (d = 0; d < e->ndim; d++)
		if (box->off[d] < co[d] ||
		    box->off[d] - co[d] > cs[d] ||
		    box->size[d] > cs[d] - (box->off[d] - co[d]))
			return false;
	return true;
}

/*
 * Where chunk c's needed bytes [a, b) lie in the box's row-major bytes
 * (len of them), when they are one run there too: *at.  So when c and
 * the box span the same extent of every dim but the first (a split
 * along dim 0 of both: the rows they share are contiguous in each), or
 * when the box lies inside c and [a, b) is all of it.  False otherwise.
 */
static bool run_in_dst(const struct ckpt_meta *m, const struct ckpt_entry *e,
		       uint32_t c, const struct ckpt_box *box, uint64_t a,
		       uint64_t b, uint64_t len, uint64_t *at)
{
	const uint64_t *co = ckpt_chunk_offsets(m, &m->chunks[c]);
	const uint64_t *cs = ckpt_chunk_sizes(m, e, &m->chunks[c]);
	uint64_t lo, hi, row;
	unsigned d;

	if (b - a == len && box_inside(m, e, c, box)) {
		*at = 0;
		return true;
	}
	if (!e->ndim)
		return false;
	for (d = 1; d < e->ndim; d++)
		if (co[d] != box->off[d] || cs[d] != box->size[d])
			return false;
	lo = box->off[0] > co[0] ? box->off[0] : co[0];
	hi = box->off[0] + box->size[0] < co[0] + cs[0] ?
	     box->off[0] + box->size[0] : co[0] + cs[0];
	if (lo >= hi || (b - a) % (hi - lo))
		return false;
	row = (b - a) / (hi - lo);	/* bytes of one dim-0 slice */
	if (__builtin_mul_overflow(lo - box->off[0], row, at) ||
	    *at > len || b - a > len - *at)
		return false;
	return true;
}

/* The pending chunks the boxes meet, each once with the union of its
 * needed bytes, into *out (caller frees); their count, or -ENOMEM.  With
 * dst (len[i] bytes of request i at dst[i]), a chunk that one request
 * alone meets, and whose needed bytes are one run of that request's
 * destination (run_in_dst()), gets that run as its dst; ncover[i] (with
 * dst) counts the chunks, located or not, that box i meets. */
static ssize_t wanted(const struct ckpt_meta *m,
		      const struct ckpt_entry *const *ents,
		      const struct ckpt_box *box, const bool *join, size_t n,
		      uint8_t *const *dst, const uint64_t *len,
		      uint32_t *ncover, struct want **out)
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
			uint64_t a, b, at;

			if (!box_span(m, e, c, &box[i], &a, &b))
				continue;
			if (ncover)
				ncover[i]++;
			if (ckpt_chunk_is_located(m, c))
				continue;
			if (ckpt_grow((void **)&wt, &cap, nw + 1, sizeof(*wt))) {
				free(wt);
				return -ENOMEM;
			}
			wt[nw] = (struct want){ c, join && !join[i], a, b,
						i, 1, NULL };
			if (dst && dst[i] && len[i] &&
			    run_in_dst(m, e, c, &box[i], a, b, len[i], &at))
				wt[nw].dst = dst[i] + at;
			nw++;
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
			wt[k - 1].nreq++;
			wt[k - 1].dst = NULL;
			continue;
		}
		wt[k++] = wt[i];
	}
	return (ssize_t)k;
}

/* m's side-buffer cap (m->side_cap, at most JOIN_BUDGET). */
static uint64_t side_cap(const struct ckpt_meta *m)
{
	return m->side_cap && m->side_cap < JOIN_BUDGET ? m->side_cap :
	       JOIN_BUDGET;
}

/* What is left of m's side-buffer cap now. */
static uint64_t side_room(struct ckpt_meta *m)
{
	uint64_t used = __atomic_load_n(&m->side_bytes, __ATOMIC_RELAXED);

	return used < side_cap(m) ? side_cap(m) - used : 0;
}

/* Release side-buffer bytes. */
static void release_side(struct ckpt_meta *m, uint64_t bytes)
{
	__atomic_sub_fetch(&m->side_bytes, bytes, __ATOMIC_RELAXED);
}

/* Charge a batch's side-buffer bytes: false, charging nothing, when they
 * would take the handle past its cap (another batch took the room
 * meanwhile).  Keeps the peak. */
static bool charge_side(struct ckpt_meta *m, uint64_t bytes)
{
	uint64_t now, peak, cur;

	cur = __atomic_load_n(&m->side_bytes, __ATOMIC_RELAXED);
	do {
		if (cur > side_cap(m) || bytes > side_cap(m) - cur)
			return false;
	} while (!__atomic_compare_exchange_n(&m->side_bytes, &cur,
					      cur + bytes, true,
					      __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	now = cur + bytes;
	peak = __atomic_load_n(&m->side_bytes_peak, __ATOMIC_RELAXED);
	while (now > peak &&
	       !__atomic_compare_exchange_n(&m->side_bytes_peak, &peak, now,
					    true, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
	return true;
}

/*
 * Where the middle of want u's joined range [start, stop) can go
 * straight into its destination: [*s, *s + *len), which holds neither
 * locating window of its archive (nor any other archive's) and is at
 * most the destination's size.  False when that saves too little.
 */
static bool direct_part(const struct ckpt_meta *m, const struct want *u,
			uint64_t start, uint64_t stop, uint64_t *s,
			uint64_t *len)
{
	const struct ckpt_lazy *lz = &m->lazy[u->chunk];
	const uint64_t W = CKPT_LOCATE_WINDOW;
	uint64_t end = lz->boff + lz->blen, lo, hi;

	if (!u->dst || lz->blen <= 2 * W)
		return false;
	lo = start > lz->boff + W ? start : lz->boff + W;
	hi = stop < end - W ? stop : end - W;
	if (hi > lo && hi - lo > u->b - u->a)
		hi = lo + (u->b - u->a);
	if (hi <= lo || hi - lo < DIRECT_MIN)
		return false;
	*s = lo;
	*len = hi - lo;
	return true;
}

/* The gap below which hint_ranges() hints two ranges as one. */
#define HINT_GAP ((uint64_t)64 << 10)
/* The most bytes hint_ranges() hints: a batch of a large load is read
 * by the kernel's own read-ahead past that, rather than all of it
 * brought in at once, where it could evict its own first pages. */
#define HINT_MAX ((uint64_t)256 << 20)

/*
 * Hint r[0..n) (sorted by file and offset) to the store before reading
 * them, the first HINT_MAX bytes: a local store's reads then find their
 * pages coming in (the kernel reads the ranges ahead at once) instead of
 * waiting for each in turn; an object store ignores it.
 */
static void hint_ranges(struct ckpt_meta *m, const struct ckpt_store_range *r,
			size_t n)
{
	uint64_t off = 0, end = 0, hinted = 0;
	uint32_t id = 0;
	size_t i;

	for (i = 0; i <= n && hinted < HINT_MAX; i++) {
		if (i < n && end && r[i].id == id && r[i].off <= end + HINT_GAP) {
			if (r[i].off + r[i].len > end)
				end = r[i].off + r[i].len;
			continue;
		}
		if (end) {
			uint64_t len = end - off < HINT_MAX - hinted ?
				       end - off : HINT_MAX - hinted;

			ckpt_store_willneed(m->store, id, off, len);
			hinted += len;
		}
		if (i < n) {
			id = r[i].id;
			off = r[i].off;
			end = r[i].off + r[i].len;
		}
	}
}

/*
 * Which of wt[0..nu) put their bytes into their destinations (use[i]):
 * those of requests whose every chunk (ncover[req] of them) is pending
 * and joined; a request with one chunk left to its read is read whole,
 * so its others go to side buffers as without a destination.  False
 * when out of memory (then none does).
 */
static bool dst_users(const struct ckpt_meta *m, const struct want *wt,
		      size_t nu, const uint32_t *ncover, size_t nreq,
		      bool *use)
{
	uint32_t *cnt = calloc(nreq ? nreq : 1, sizeof(*cnt));
	uint64_t start, stop;
	size_t i;

	if (!cnt)
		return false;
	for (i = 0; i < nu; i++) {
		use[i] = wt[i].dst && join_range(m, &wt[i], &start, &stop);
		if (use[i])
			cnt[wt[i].req]++;
	}
	for (i = 0; i < nu; i++)
		if (use[i] && cnt[wt[i].req] != ncover[wt[i].req])
			use[i] = false;
	free(cnt);
	return true;
}

/*
 * Fetch, for wt[0..nu), the joined ranges and the windows locating needs
 * beside them, into a new registration (not yet in m): into side
 * buffers, except the middles that go straight into their destinations
 * (*dir, *ndir; caller frees *dir: each chunk whose bytes go into its
 * destination, len 0 when all of them come from side buffers).  NULL
 * when nothing is joined or the fetch failed (then locating reads as
 * usual).  ncover (NULL: no destinations) as from wanted(), over nreq
 * requests.
 */
static struct ckpt_joined *fetch_joined(struct ckpt_meta *m,
					const struct want *wt, size_t nu,
					const uint32_t *ncover, size_t nreq,
					struct direct **dir, size_t *ndir)
{
	struct ckpt_joined *j = calloc(1, sizeof(*j));
	struct ckpt_store_range *r = NULL;
	struct direct *d = NULL;
	bool *use = NULL;
	uint64_t total = 0, maxlen = 0, at = 0, room = side_room(m);
	size_t i, nj = 0, nd = 0, nr = 0, n;

	/* The locating windows come out of the same room: at most two of
	 * CKPT_LOCATE_WINDOW bytes a chunk; the joined ranges get the rest. */
	room = (uint64_t)nu < room / (2 * CKPT_LOCATE_WINDOW) ?
	       room - (uint64_t)nu * 2 * CKPT_LOCATE_WINDOW : 0;

	*dir = NULL;
	*ndir = 0;
	if (!j)
		return NULL;
	j->w = calloc(4 * nu + 1, sizeof(*j->w));
	d = calloc(nu ? nu : 1, sizeof(*d));
	use = calloc(nu ? nu : 1, sizeof(*use));
	if (!j->w || !d || !use)
		goto out_free;
	if (ncover && !dst_users(m, wt, nu, ncover, nreq, use))
		memset(use, 0, nu * sizeof(*use));
	for (i = 0; i < nu; i++) {
		uint32_t file = m->chunks[wt[i].chunk].file;
		uint64_t start, stop, s = 0, len = 0;

		if (!join_range(m, &wt[i], &start, &stop))
			continue;
		if (!use[i] ||
		    !direct_part(m, &wt[i], start, stop, &s, &len)) {
			s = stop;
			len = 0;
		}
		if ((stop - start) - len > room - total)
			continue;
		total += (stop - start) - len;
		if (use[i])	/* its bytes are put in place from s, len */
			d[nd++] = (struct direct){ wt[i].chunk, file, s, len,
						   wt[i].a, wt[i].b - wt[i].a,
						   wt[i].dst, wt[i].req };
		if (len) {
			nr++;
			if (s + len < stop)
				j->w[nj++] = (struct ckpt_fetched){
					file, s + len, stop - (s + len), NULL };
		}
		if (s > start)
			j->w[nj++] = (struct ckpt_fetched){ file, start,
							    s - start, NULL };
		if (stop - start > maxlen)
			maxlen = stop - start;
	}
	if (!nj && !nd)
		goto out_free;
	qsort(j->w, nj, sizeof(*j->w), cmp_fetched);
	n = nj;
	for (i = 0; i < nu; i++)
		add_windows(m, wt[i].chunk, j->w, nj, maxlen, &n);
	for (i = nj; i < n; i++)
		total += j->w[i].len;	/* at most 2 KiB a chunk, as reserved */
	j->mem = malloc(total ? total : 1);
	r = calloc(n + nr, sizeof(*r));
	if (!j->mem || !r)
		goto out_free;
	maxlen = 0;
	for (i = 0; i < n; i++) {
		j->w[i].buf = j->mem + at;
		at += j->w[i].len;
		r[i] = (struct ckpt_store_range){
			m->opened[j->w[i].file].id, j->w[i].off, j->w[i].len,
			j->w[i].buf };
		if (j->w[i].len > maxlen)
			maxlen = j->w[i].len;
	}
	for (i = 0, nr = 0; i < nd; i++)
		if (d[i].len)
			r[n + nr++] = (struct ckpt_store_range){
				m->opened[d[i].file].id, d[i].s, d[i].len,
				d[i].dst };
	/* in file order: a record's side buffers and the middle between
	 * them are one run of its file (a local store's one preadv) */
	qsort(r, n + nr, sizeof(*r), cmp_range);
	if (!charge_side(m, total))
		goto out_free;
	hint_ranges(m, r, n + nr);
	j->side = total;
	if (ckpt_store_read(m->store, r, n + nr)) {
		release_side(m, j->side);
		goto out_free;
	}
	free(r);
	free(use);
	qsort(j->w, n, sizeof(*j->w), cmp_fetched);
	j->set = (struct ckpt_fetched_set){ j->w, n, maxlen, NULL };
	*dir = d;
	*ndir = nd;
	return j;
out_free:
	free(use);
	free(d);
	free(r);
	free(j->mem);
	free(j->w);
	free(j);
	return NULL;
}

/*
 * The ranges locating may read from: the side buffers and the
 * destinations' middles, sorted (*pre, *npre, caller frees), or false
 * (out of memory: then the side buffers alone).
 */
static bool all_ranges(const struct ckpt_joined *j, const struct direct *d,
		       size_t nd, struct ckpt_fetched **pre, size_t *npre)
{
	struct ckpt_fetched *p = malloc((j->set.n + nd) * sizeof(*p) + 1);
	size_t i;

	if (!p)
		return false;
	memcpy(p, j->set.w, j->set.n * sizeof(*p));
	*npre = j->set.n;
	for (i = 0; i < nd; i++)
		if (d[i].len)
			p[(*npre)++] = (struct ckpt_fetched){
				d[i].file, d[i].s, d[i].len, d[i].dst };
	qsort(p, *npre, sizeof(*p), cmp_fetched);
	*pre = p;
	return true;
}

/*
 * Put chunk d->chunk's bytes [a, a + n) (at [q, q + n) of its file once
 * located) in place in d->dst, which holds the file's [s, s + len): the
 * part both share moved, the rest copied from the side buffers.  False
 * when the chunk is not located as a plain row-major record, or a side
 * buffer lacks a part (then the batch's read of it reads it again).
 */
static bool place(const struct ckpt_meta *m, const struct ckpt_joined *j,
		  const struct direct *d)
{
	const struct ckpt_chunk *c = &m->chunks[d->chunk];
	const struct ckpt_fetched *head = NULL, *tail = NULL;
	uint64_t q, lo, hi;

	if (!ckpt_chunk_is_located(m, d->chunk) || c->file != d->file ||
	    c->strides_at != CKPT_NONE || d->a > c->len ||
	    d->n > c->len - d->a ||
	    __builtin_add_overflow(c->foff, d->a, &q) ||
	    q > UINT64_MAX - d->n)
		return false;
	lo = q > d->s ? q : d->s;
	hi = q + d->n < d->s + d->len ? q + d->n : d->s + d->len;
	if (lo >= hi)
		lo = hi = q + d->n;	/* nothing shared: all from a side */
	if (lo > q && !(head = ckpt_fetched_find(j->set.w, j->set.n,
						 j->set.maxlen, d->file, q,
						 lo - q)))
		return false;
	if (q + d->n > hi &&
	    !(tail = ckpt_fetched_find(j->set.w, j->set.n, j->set.maxlen,
				       d->file, hi, q + d->n - hi)))
		return false;
	if (hi > lo)
		memmove(d->dst + (lo - q), d->dst + (lo - d->s), hi - lo);
	if (head)
		memcpy(d->dst, head->buf + (q - head->off), lo - q);
	if (tail)
		memcpy(d->dst + (hi - q), tail->buf + (hi - tail->off),
		       q + d->n - hi);
	return true;
}

struct ckpt_joined *ckpt_joined_locate(struct ckpt_meta *m,
				       const struct ckpt_entry *const *ents,
				       const struct ckpt_box *box,
				       const bool *join, size_t n,
				       uint8_t *const *dst,
				       const uint64_t *len, bool *done)
{
	struct ckpt_joined *j = NULL;
	struct ckpt_fetched *pre = NULL;
	struct direct *d = NULL;
	struct want *wt = NULL;
	uint32_t *ci = NULL, *ncover = NULL, *nplaced = NULL;
	uint64_t *placed = NULL;
	size_t i, nd = 0, npre;
	ssize_t nu;

	if (!m->located)
		return NULL;
	if (done) {
		ncover = calloc(n ? n : 1, sizeof(*ncover));
		nplaced = calloc(n ? n : 1, sizeof(*nplaced));
		placed = calloc(n ? n : 1, sizeof(*placed));
		if (!ncover || !nplaced || !placed)
			done = NULL;	/* nothing goes into a destination */
	}
	nu = wanted(m, ents, box, join, n, done ? dst : NULL, len,
		    done ? ncover : NULL, &wt);
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
		j = fetch_joined(m, wt, (size_t)nu, done ? ncover : NULL, n,
				 &d, &nd);
	/* Best effort: a record that fails is marked, and reported by the
	 * read that needs it. */
	if (j) {
		if (nd && all_ranges(j, d, nd, &pre, &npre))
			(void)ckpt_meta_locate_pre(m, ci, (size_t)nu, pre,
						   npre);
		else
			(void)ckpt_meta_locate_pre(m, ci, (size_t)nu,
						   j->set.w, j->set.n);
		/* The destinations are the caller's: never registered, so
		 * no other batch reads them while they are moved. */
		for (i = 0; i < nd; i++)
			if (place(m, j, &d[i])) {
				nplaced[d[i].req]++;
				placed[d[i].req] += d[i].n;
			}
		/* A request is read when every chunk its box meets was
		 * put in place, and they filled it, each its own part:
		 * chunks that overlap (a rank-local checkpoint's tiling
		 * is not checked) or one located before this batch leave
		 * it to its read, which reads it whole. */
		qsort(d, nd, sizeof(*d), cmp_direct);
		for (i = 0; i + 1 < nd; i++)
			if (d[i].req == d[i + 1].req &&
			    d[i + 1].dst < d[i].dst + d[i].n)
				nplaced[d[i].req] = 0;	/* overlap */
		for (i = 0; i < nd; i++)
			if (ncover[d[i].req] == nplaced[d[i].req] &&
			    placed[d[i].req] == len[d[i].req])
				done[d[i].req] = true;
		pthread_rwlock_wrlock(&m->fetched_lock);
		j->set.next = m->fetched;
		m->fetched = &j->set;
		pthread_rwlock_unlock(&m->fetched_lock);
	} else {
		(void)ckpt_meta_locate(m, ci, (size_t)nu);
	}
out_free:
	free(pre);
	free(d);
	free(ci);
	free(wt);
	free(ncover);
	free(nplaced);
	free(placed);
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
	release_side(m, j->side);
	free(j->mem);
	free(j->w);
	free(j);
}
