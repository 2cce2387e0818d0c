/* SPDX-License-Identifier: MIT */
/*
 * Read-ahead windows for in-order readers of strided view files: see
 * readahead.h and ckptfs.h.  A small table of streams (reader x file),
 * replaced least recently used, each held by one read (or batch) while its
 * window is filled or copied from, so that the kernel's concurrent
 * requests for one file wait for the window rather than read it twice.
 * Window memory is reserved from a budget before it is allocated; when
 * the budget is spent, reads go direct.  Over an object store, a reader
 * going from small file to small file gets the next files fetched in one
 * batch with the one it starts (fill_files()), and the files after those
 * fetched by a thread of their own while it reads them (fetch_next()).
 */
#include "view/readahead.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "io/store.h"
#include "view/order.h"
#include "view/view_types.h"

#define STREAMS 32		/* readers followed at once */
#define FETCHES_MAX 4		/* batches fetched ahead by threads at once */

struct ckpt_readahead {
	uint64_t window;	/* most bytes per window */
	uint64_t budget;	/* all windows together */
	pthread_mutex_t lock;	/* guards used, tick, fresh and the
				 * streams' slot, node and tick */
	uint64_t used;
	uint64_t tick;
	bool fresh[STREAMS];	/* taken over: reset before use */
	/* A stream is held by one read, or by a batch that a thread of
	 * ra's own fetches and releases (fetch_next()), so its hold is a
	 * flag under ra->lock rather than a mutex, which the thread that
	 * locked it must unlock: busy[i] is set by stream_of() (waiting on
	 * freed) or claim_stream(), cleared by release_stream() or
	 * release_batch().  Each stream's position (next, seq) and window
	 * (buf, boff, blen) are written by its holder with ra->lock held,
	 * and read by its holder alone or under ra->lock (claim_stream(),
	 * has_window()).  served: its holder's. */
	bool busy[STREAMS];
	pthread_cond_t freed;	/* a busy[] cleared */
	struct ckpt_ra_stream s[STREAMS];
	/* the file a read reached the end of last (an object store's) */
	bool has_eof;
	uint32_t eof_slot, eof_node;
	/* claimed by a batch that a thread fetches (fetch_next()): counts
	 * as a window until the batch ends */
	bool pending[STREAMS];
	unsigned fetching;	/* such batches; ckpt_readahead_free()
				 * waits for them (idle) */
	pthread_cond_t idle;
};

enum ckpt_ra_action ckpt_ra_decide(struct ckpt_ra_stream *st, uint64_t off,
				   uint64_t len, uint64_t size, uint64_t max,
				   uint64_t *wlen)
{
	uint64_t before = 0;

	/* in order: from where the reader's furthest read ended, give or
	 * take what the kernel's concurrent requests reorder */
	if (st->next != UINT64_MAX && off + CKPT_RA_SLACK >= st->next &&
	    off <= st->next + CKPT_RA_SLACK)
		before = st->seq;
	if (!before || off + len > st->next)
		st->next = off + len;
	st->seq = before + len;
	if (st->buf && off >= st->boff && off + len <= st->boff + st->blen)
		return CKPT_RA_HIT;
	if (!before || len >= max || off < st->next - len)
		return CKPT_RA_DIRECT;	/* new, or a straggler: alone */
	/* capped to whole requests, so that a steady reader's requests
	 * do not straddle windows */
	*wlen = len + (before < max - len ? before : (max - len) / len * len);
	if (*wlen > size - off)
		*wlen = size - off;
	return *wlen > len ? CKPT_RA_FILL : CKPT_RA_DIRECT;
}

struct ckpt_readahead *ckpt_readahead_new(uint64_t window, uint64_t budget)
{
	struct ckpt_readahead *ra;

	if (!window || !budget)
		return NULL;
	ra = calloc(1, sizeof(*ra));
	if (!ra)
		return NULL;
	ra->window = window;
	ra->budget = budget;
	pthread_mutex_init(&ra->lock, NULL);
	pthread_cond_init(&ra->idle, NULL);
	pthread_cond_init(&ra->freed, NULL);
	return ra;
}

void ckpt_readahead_free(struct ckpt_readahead *ra)
{
	int i;

	if (!ra)
		return;
	/* the batches threads fetch end with their reads (the store's
	 * deadlines bound them; a cancelled store ends them at once) */
	pthread_mutex_lock(&ra->lock);
	while (ra->fetching)
		pthread_cond_wait(&ra->idle, &ra->lock);
	pthread_mutex_unlock(&ra->lock);
	pthread_cond_destroy(&ra->idle);
	pthread_cond_destroy(&ra->freed);
	for (i = 0; i < STREAMS; i++)
		free(ra->s[i].buf);
	pthread_mutex_destroy(&ra->lock);
	free(ra);
}

/* Whether the checkpoint's bytes come from a store where each request is
 * a round trip that many others may overlap (an object store). */
static bool is_remote(const struct ckpt_view *v)
{
	return v->meta->store && ckpt_store_parallelism(v->meta->store) > 0;
}

/* Whether node's file is worth a window: it has a strided chunk, or its
 * bytes come from an object store. */
static bool wants_window(const struct ckpt_view *v, uint32_t slot,
			 uint32_t node)
{
	const uint32_t *used;
	uint32_t n, k;

	if (is_remote(v))
		return true;
	n = ckpt_view_chunks(v, slot, node, &used);
	for (k = 0; k < n; k++)
		if (v->meta->chunks[used[k]].strides_at != CKPT_NONE)
			return true;
	return false;
}

/* Under ra->lock, st held: st's window freed and its memory back in the
 * budget. */
static void drop_window(struct ckpt_readahead *ra, struct ckpt_ra_stream *st)
{
	ra->used -= st->blen;
	free(st->buf);
	st->buf = NULL;
	st->boff = st->blen = 0;
}

/* The stream of (slot, node), held (waiting while another holds it):
 * the least recently used one taken over if none is.  Returns its
 * index; release_stream() releases it. */
static int stream_of(struct ckpt_readahead *ra, uint32_t slot,
		     uint32_t node)
{
	struct ckpt_ra_stream *st;
	int i, old;

	pthread_mutex_lock(&ra->lock);
	for (;;) {
		for (i = 0, old = 0; i < STREAMS; i++) {
			if (ra->s[i].tick && ra->s[i].slot == slot &&
			    ra->s[i].node == node)
				break;
			if (ra->s[i].tick < ra->s[old].tick)
				old = i;
		}
		if (i == STREAMS) {	/* take over: reset once held */
			i = old;
			ra->s[i].slot = slot;
			ra->s[i].node = node;
			ra->fresh[i] = true;
		}
		ra->s[i].tick = ++ra->tick;
		if (!ra->busy[i])
			break;
		/* then look again: it may be taken over meanwhile */
		pthread_cond_wait(&ra->freed, &ra->lock);
	}
	ra->busy[i] = true;
	st = &ra->s[i];
	if (ra->fresh[i]) {
		ra->fresh[i] = false;
		drop_window(ra, st);
		st->seq = 0;
		st->next = UINT64_MAX;	/* no read yet */
	}
	pthread_mutex_unlock(&ra->lock);
	return i;
}

/* Stream i, held by the caller, released. */
static void release_stream(struct ckpt_readahead *ra, int i)
{
	pthread_mutex_lock(&ra->lock);
	ra->busy[i] = false;
	pthread_cond_broadcast(&ra->freed);
	pthread_mutex_unlock(&ra->lock);
}

/*
 * An object store's window is read as REMOTE_PART pieces at once by the
 * parallel engine, so that it arrives over as many GETs in flight (an
 * 8 MiB window: 8 GETs of 1 MiB) rather than one after the other.
 */
#define REMOTE_PART ((uint64_t)1 << 20)
#define REMOTE_PARTS 64

static int fill_remote(const struct ckpt_view *v, uint32_t slot,
		       uint32_t node, uint64_t off, uint64_t wlen, char *w,
		       size_t *got)
{
	struct ckpt_read_req r[REMOTE_PARTS];
	uint64_t part = REMOTE_PART, at;
	char err[512];
	size_t n = 0;

	while (wlen / part >= REMOTE_PARTS)
		part *= 2;
	for (at = 0; at < wlen; at += part, n++)
		r[n] = (struct ckpt_read_req){ slot, node, off + at,
					       wlen - at < part ? wlen - at :
					       part, w + at };
	*got = 0;
	if (ckpt_view_read_batch(v, r, n, 0, err, sizeof(err)))
		return -EIO;	/* the caller reads alone, and says why */
	*got = (size_t)wlen;
	return 0;
}

/*
 * A reader that reads small files of an object store one after another
 * (cat of a mount, a copy) waits a round trip per file: each file is
 * read whole by its first request, so no window forms in it.  When a
 * read starts a small file right after the view's previous file was read
 * to its end, that file and the next small files (at most AHEAD_FILES,
 * all together at most the window) are fetched in one parallel batch
 * into windows of their own, from which the reader's next files are then
 * served.  A file whose stream is busy ends the batch.
 */
#define AHEAD_FILES 8
#define SMALL_FILE REMOTE_PART

/*
 * A stream for (slot, node) that no read holds, held without waiting
 * and its window emptied: the one of that file, else the least
 * recently used one other than held[0..nheld).  Returns its index, or -1
 * when it is busy or already has a window.
 */
static int claim_stream(struct ckpt_readahead *ra, uint32_t slot,
			uint32_t node, const int *held, int nheld)
{
	struct ckpt_ra_stream *st;
	int i, k, old = -1;

	pthread_mutex_lock(&ra->lock);
	for (i = 0; i < STREAMS; i++)
		if (ra->s[i].tick && ra->s[i].slot == slot &&
		    ra->s[i].node == node)
			break;
	if (i < STREAMS && ra->s[i].buf && !ra->fresh[i])
		goto out_busy;	/* a window is there already */
	if (i == STREAMS) {
		/* not a window fetched ahead that its reader has not read
		 * yet (its file comes later in the reader's order) */
		for (i = 0; i < STREAMS; i++) {
			for (k = 0; k < nheld && held[k] != i; k++)
				;
			if (k == nheld && !ra->pending[i] &&
			    !(ra->s[i].buf && ra->s[i].next == UINT64_MAX) &&
			    (old < 0 || ra->s[i].tick < ra->s[old].tick))
				old = i;
		}
		if (old < 0)
			goto out_busy;
		i = old;
	}
	if (ra->busy[i])
		goto out_busy;
	ra->busy[i] = true;
	st = &ra->s[i];
	drop_window(ra, st);
	st->seq = 0;
	st->next = UINT64_MAX;
	st->slot = slot;
	st->node = node;
	st->tick = ++ra->tick;
	ra->fresh[i] = false;
	pthread_mutex_unlock(&ra->lock);
	return i;
out_busy:
	pthread_mutex_unlock(&ra->lock);
	return -1;
}

/* A batch of small files, each fetched whole into a window of its own:
 * r[k] into stream idx[k], which the batch holds. */
struct ra_batch {
	struct ckpt_readahead *ra;
	const struct ckpt_view *v;
	int n;
	int idx[AHEAD_FILES];
	struct ckpt_read_req r[AHEAD_FILES];
	uint64_t total;
};

/*
 * Add to b (which holds b->n files, b->total bytes) the small files
 * after node in readdir order (view/order.h), while they fit AHEAD_FILES
 * and the window and their streams can be claimed (claim_stream()).
 * pending: mark them as fetched by a thread (fetch_next()).
 */
static void claim_after(struct ra_batch *b, uint32_t slot, uint32_t node,
			bool pending)
{
	struct ckpt_readahead *ra = b->ra;
	uint32_t j = node;
	uint64_t fsz;
	int k;

	while (b->n < AHEAD_FILES) {
		j = ckpt_view_key_after(b->v, j);
		if (j == UINT32_MAX || ckpt_view_size(b->v, slot, j, &fsz) ||
		    !fsz || fsz > SMALL_FILE || fsz > ra->window - b->total)
			break;
		k = claim_stream(ra, slot, j, b->idx, b->n);
		if (k < 0)
			break;
		if (pending) {
			pthread_mutex_lock(&ra->lock);
			ra->pending[k] = true;
			pthread_mutex_unlock(&ra->lock);
		}
		b->idx[b->n] = k;
		b->r[b->n++] = (struct ckpt_read_req){ slot, j, 0, fsz, NULL };
		b->total += fsz;
	}
}

/* b's streams no longer pending; b->idx[first..n) released (by
 * whichever thread: the one that claimed them, or the one that fetched
 * them). */
static void release_batch(struct ra_batch *b, int first)
{
	struct ckpt_readahead *ra = b->ra;
	int k;

	pthread_mutex_lock(&ra->lock);
	for (k = 0; k < b->n; k++)
		ra->pending[b->idx[k]] = false;
	for (k = first; k < b->n; k++)
		ra->busy[b->idx[k]] = false;
	if (first < b->n)
		pthread_cond_broadcast(&ra->freed);
	pthread_mutex_unlock(&ra->lock);
}

/*
 * Fetch b's files into their streams' windows (memory reserved from the
 * budget first; none when it is spent) and release
 * b->idx[first..n).  Returns true when every file's window is filled;
 * else none is, and their readers read directly (and say why).
 */
static bool fetch_batch(struct ra_batch *b, int first)
{
	struct ckpt_readahead *ra = b->ra;
	char err[512];
	bool ok = false;
	int k;

	pthread_mutex_lock(&ra->lock);
	if (ra->used + b->total > ra->budget) {
		pthread_mutex_unlock(&ra->lock);
		goto out_unlock;	/* no room: read alone */
	}
	ra->used += b->total;	/* reserved before allocating */
	pthread_mutex_unlock(&ra->lock);
	for (k = 0; k < b->n; k++)
		if (!(b->r[k].dst = malloc(b->r[k].len)))
			break;
	if (k == b->n && !ckpt_view_read_batch(b->v, b->r, (size_t)b->n, 0,
					       err, sizeof(err)))
		ok = true;
	pthread_mutex_lock(&ra->lock);
	for (k = 0; k < b->n; k++) {
		struct ckpt_ra_stream *st = &ra->s[b->idx[k]];

		if (!ok) {
			free(b->r[k].dst);
			ra->used -= b->r[k].len;
			continue;
		}
		/* (a stream taken over meanwhile is fresh: its new reader
		 * empties it before use) */
		ra->used -= st->blen;
		free(st->buf);
		st->buf = b->r[k].dst;
		st->boff = 0;
		st->blen = b->r[k].len;
		st->served = 0;
	}
	pthread_mutex_unlock(&ra->lock);
out_unlock:
	release_batch(b, first);
	return ok;
}

/*
 * Fetch node's small file whole (size bytes, read from its start; its
 * stream si held) into a window, as a batch: an object store's record
 * read from one end is then located from the bytes of its read (one GET:
 * view/joined_read.h) rather than first by a GET of its own.  ahead:
 * the reader just read the previous file to its end, so the next small
 * files come in the same batch, into windows of their own (see
 * AHEAD_FILES).  Returns true when node's window is filled.
 */
static bool fill_files(struct ckpt_readahead *ra, const struct ckpt_view *v,
		       uint32_t slot, uint32_t node, uint64_t size, int si,
		       bool ahead)
{
	struct ra_batch b = { .ra = ra, .v = v, .n = 1, .total = size };

	b.idx[0] = si;
	b.r[0] = (struct ckpt_read_req){ slot, node, 0, size, NULL };
	if (ahead)
		claim_after(&b, slot, node, false);
	return fetch_batch(&b, 1);
}

/* Under ra->lock: whether (slot, node) has a window, or one being
 * fetched by a thread. */
static bool has_window(const struct ckpt_readahead *ra, uint32_t slot,
		       uint32_t node)
{
	int i;

	for (i = 0; i < STREAMS; i++)
		if (ra->s[i].tick && ra->s[i].slot == slot &&
		    ra->s[i].node == node && !ra->fresh[i])
			return ra->s[i].buf || ra->pending[i];
	return false;
}

static void *fetch_thread(void *arg)
{
	struct ra_batch *b = arg;
	struct ckpt_readahead *ra = b->ra;

	fetch_batch(b, 0);
	pthread_mutex_lock(&ra->lock);
	if (!--ra->fetching)
		pthread_cond_broadcast(&ra->idle);
	pthread_mutex_unlock(&ra->lock);
	free(b);
	return NULL;
}

/*
 * A reader that starts node's file from a window fetched ahead: when
 * fewer than FETCHES_MAX x AHEAD_FILES files after it have windows (or
 * are being fetched), the small files after the last of those are
 * fetched by a thread of its own (at most FETCHES_MAX such threads at
 * once), so that the reader reads one batch while the next ones arrive
 * (up to FETCHES_MAX x AHEAD_FILES GETs in flight) instead of waiting a
 * round trip per batch.  cat of a mount at 20 ms a request: 0.44x the
 * parallel-GET ceiling with 2 threads, 0.55x with 4 (make bench).  Best
 * effort: nothing is fetched when no thread or memory can be had.
 */
static void fetch_next(struct ckpt_readahead *ra, const struct ckpt_view *v,
		       uint32_t slot, uint32_t node)
{
	struct ra_batch *b;
	pthread_attr_t attr;
	pthread_t t;
	uint32_t j = node, last = node;
	int ahead = 0, rc;
	bool yes;

	for (;;) {
		j = ckpt_view_key_after(v, j);
		if (j == UINT32_MAX)
			return;		/* the view's end is fetched */
		pthread_mutex_lock(&ra->lock);
		yes = has_window(ra, slot, j);
		pthread_mutex_unlock(&ra->lock);
		if (!yes)
			break;
		last = j;
		if (++ahead >= FETCHES_MAX * AHEAD_FILES)
			return;		/* far enough ahead */
	}
	pthread_mutex_lock(&ra->lock);
	yes = ra->fetching < FETCHES_MAX;
	if (yes)
		ra->fetching++;
	pthread_mutex_unlock(&ra->lock);
	if (!yes)
		return;
	b = calloc(1, sizeof(*b));
	if (!b)
		goto out_done;
	b->ra = ra;
	b->v = v;
	claim_after(b, slot, last, true);
	if (!b->n)
		goto out_free;
	rc = pthread_attr_init(&attr);
	if (!rc) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&t, &attr, fetch_thread, b);
		pthread_attr_destroy(&attr);
	}
	if (!rc)
		return;		/* fetch_thread() frees b and counts down */
	release_batch(b, 0);	/* no thread: fetch nothing */
out_free:
	free(b);
out_done:
	pthread_mutex_lock(&ra->lock);
	if (!--ra->fetching)
		pthread_cond_broadcast(&ra->idle);
	pthread_mutex_unlock(&ra->lock);
}

/* Whether the file a read last reached the end of is the one before
 * node's (in readdir order): a reader going from file to file. */
static bool follows_file(struct ckpt_readahead *ra, const struct ckpt_view *v,
			 uint32_t slot, uint32_t node)
{
	uint32_t before = ckpt_view_key_before(v, node);
	bool yes;

	pthread_mutex_lock(&ra->lock);
	yes = ra->has_eof && ra->eof_slot == slot && ra->eof_node == before;
	pthread_mutex_unlock(&ra->lock);
	return yes;
}

int ckpt_readahead_read(struct ckpt_readahead *ra, const struct ckpt_view *v,
			uint32_t slot, uint32_t node, uint64_t off, size_t len,
			void *buf, size_t *got, struct ckpt_scratch *s)
{
	struct ckpt_ra_stream *st;
	struct ckpt_scratch *fs;
	enum ckpt_ra_action act;
	uint64_t size, wlen = 0;
	bool small, seq;
	size_t wgot;
	char *w;
	int i, rc = 0;	/* set on every path; gcc -fsanitize cannot tell */

	if (!ra || ckpt_view_size(v, slot, node, &size) || off >= size ||
	    !wants_window(v, slot, node))
		return ckpt_view_read(v, slot, node, off, len, buf, got, s);
	if (len > size - off)	/* a window holds the file's bytes only */
		len = (size_t)(size - off);
	i = stream_of(ra, slot, node);
	st = &ra->s[i];
	pthread_mutex_lock(&ra->lock);	/* it moves the position */
	act = ckpt_ra_decide(st, off, len, size, ra->window, &wlen);
	pthread_mutex_unlock(&ra->lock);
	small = is_remote(v) && !off && size <= SMALL_FILE &&
		size <= ra->window;
	seq = small && follows_file(ra, v, slot, node);
	if (act != CKPT_RA_HIT && small &&
	    fill_files(ra, v, slot, node, size, i, seq))
		act = CKPT_RA_HIT;
	if (act == CKPT_RA_FILL) {
		pthread_mutex_lock(&ra->lock);
		if (ra->used - st->blen + wlen > ra->budget) {
			act = CKPT_RA_DIRECT;	/* no room: read alone */
		} else {
			ra->used += wlen;	/* reserved before allocating */
			drop_window(ra, st);
		}
		pthread_mutex_unlock(&ra->lock);
	}
	if (act == CKPT_RA_FILL) {
		/* its own scratch: a window's staging is freed with it */
		w = malloc(wlen);
		fs = ckpt_scratch_new();
		if (!w || !fs)
			rc = -ENOMEM;
		else if (is_remote(v))
			rc = fill_remote(v, slot, node, off, wlen, w, &wgot);
		else
			rc = ckpt_view_read(v, slot, node, off, wlen, w, &wgot,
					    fs);
		ckpt_scratch_free(fs);
		if (!rc && wgot == wlen) {
			pthread_mutex_lock(&ra->lock);
			st->buf = w;
			st->boff = off;
			st->blen = wlen;
			pthread_mutex_unlock(&ra->lock);
			st->served = 0;
			act = CKPT_RA_HIT;
		} else {
			free(w);
			pthread_mutex_lock(&ra->lock);
			ra->used -= wlen;
			pthread_mutex_unlock(&ra->lock);
			act = CKPT_RA_DIRECT;	/* the read says why */
		}
	}
	if (act == CKPT_RA_HIT) {
		memcpy(buf, st->buf + (off - st->boff), len);
		*got = len;
		rc = 0;
		/* A whole small file fetched ahead is read once: dropped
		 * once served, so that a later read of it (after the page
		 * cache let it go) fetches it again, as any read would. */
		st->served += len;
		if (is_remote(v) && !st->boff && st->blen == size &&
		    st->served >= st->blen) {
			pthread_mutex_lock(&ra->lock);
			drop_window(ra, st);
			pthread_mutex_unlock(&ra->lock);
		}
	}
	release_stream(ra, i);
	if (act == CKPT_RA_HIT && seq)
		fetch_next(ra, v, slot, node);
	if (act != CKPT_RA_HIT)
		rc = ckpt_view_read(v, slot, node, off, len, buf, got, s);
	if (!rc && is_remote(v) && off + len >= size) {
		pthread_mutex_lock(&ra->lock);
		ra->has_eof = true;
		ra->eof_slot = slot;
		ra->eof_node = node;
		pthread_mutex_unlock(&ra->lock);
	}
	return rc;
}
