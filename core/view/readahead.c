/* SPDX-License-Identifier: MIT */
/*
 * Read-ahead windows for in-order readers of strided view files: see
 * readahead.h and ckptfs.h.  A small table of streams (reader x file),
 * replaced least recently used, each with its own lock held while its
 * window is filled or copied from, so that the kernel's concurrent
 * requests for one file wait for the window rather than read it twice.
 * Window memory is reserved from a budget before it is allocated; when
 * the budget is spent, reads go direct.  Over an object store, a reader
 * going from small file to small file gets the next files fetched in one
 * batch with the one it starts (fill_files()).
 */
#include "view/readahead.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "io/store.h"
#include "view/view_types.h"

#define STREAMS 16		/* readers followed at once */

struct ckpt_readahead {
	uint64_t window;	/* most bytes per window */
	uint64_t budget;	/* all windows together */
	pthread_mutex_t lock;	/* guards used, tick, fresh and the
				 * streams' slot, node and tick */
	uint64_t used;
	uint64_t tick;
	bool fresh[STREAMS];	/* taken over: reset before use */
	pthread_mutex_t slock[STREAMS];	/* guard each stream's position
					 * and window */
	struct ckpt_ra_stream s[STREAMS];
	/* the file a read reached the end of last (an object store's) */
	bool has_eof;
	uint32_t eof_slot, eof_node;
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
	int i;

	if (!window || !budget)
		return NULL;
	ra = calloc(1, sizeof(*ra));
	if (!ra)
		return NULL;
	ra->window = window;
	ra->budget = budget;
	pthread_mutex_init(&ra->lock, NULL);
	for (i = 0; i < STREAMS; i++)
		pthread_mutex_init(&ra->slock[i], NULL);
	return ra;
}

void ckpt_readahead_free(struct ckpt_readahead *ra)
{
	int i;

	if (!ra)
		return;
	for (i = 0; i < STREAMS; i++) {
		free(ra->s[i].buf);
		pthread_mutex_destroy(&ra->slock[i]);
	}
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

/* The stream of (slot, node), its lock held: the least recently used
 * one taken over if none is.  Returns its index. */
static int stream_of(struct ckpt_readahead *ra, uint32_t slot,
		     uint32_t node)
{
	struct ckpt_ra_stream *st;
	int i, old;

	for (;;) {
		pthread_mutex_lock(&ra->lock);
		for (i = 0, old = 0; i < STREAMS; i++) {
			if (ra->s[i].tick && ra->s[i].slot == slot &&
			    ra->s[i].node == node)
				break;
			if (ra->s[i].tick < ra->s[old].tick)
				old = i;
		}
		if (i == STREAMS) {	/* take over: reset under its lock */
			i = old;
			ra->s[i].slot = slot;
			ra->s[i].node = node;
			ra->fresh[i] = true;
		}
		ra->s[i].tick = ++ra->tick;
		pthread_mutex_unlock(&ra->lock);
		pthread_mutex_lock(&ra->slock[i]);
		st = &ra->s[i];
		pthread_mutex_lock(&ra->lock);
		if (st->slot != slot || st->node != node) {
			/* taken over again meanwhile */
			pthread_mutex_unlock(&ra->lock);
			pthread_mutex_unlock(&ra->slock[i]);
			continue;
		}
		if (ra->fresh[i]) {
			ra->fresh[i] = false;
			ra->used -= st->blen;
			free(st->buf);
			st->buf = NULL;
			st->boff = st->blen = 0;
			st->seq = 0;
			st->next = UINT64_MAX;	/* no read yet */
			pthread_mutex_unlock(&ra->lock);
			return i;
		}
		pthread_mutex_unlock(&ra->lock);
		return i;
	}
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

/* The key file before node in the view's order, or UINT32_MAX. */
static uint32_t key_before(const struct ckpt_view *v, uint32_t node)
{
	while (node-- > 0)
		if (ckpt_node_is_key(&v->nodes[node]))
			return node;
	return UINT32_MAX;
}

/* The key file after node in the view's order, or UINT32_MAX. */
static uint32_t key_after(const struct ckpt_view *v, uint32_t node)
{
	while (++node < v->nnodes)
		if (ckpt_node_is_key(&v->nodes[node]))
			return node;
	return UINT32_MAX;
}

/*
 * A stream for (slot, node) that no read holds, its lock taken without
 * waiting and its window emptied: the one of that file, else the least
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
			if (k == nheld && !(ra->s[i].buf &&
					    ra->s[i].next == UINT64_MAX) &&
			    (old < 0 || ra->s[i].tick < ra->s[old].tick))
				old = i;
		}
		if (old < 0)
			goto out_busy;
		i = old;
	}
	if (pthread_mutex_trylock(&ra->slock[i]))
		goto out_busy;
	st = &ra->s[i];
	ra->used -= st->blen;
	free(st->buf);
	st->buf = NULL;
	st->boff = st->blen = 0;
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

/*
 * Fetch node's file whole (size bytes, read from its start by a reader
 * that just read the previous file to its end; its stream si held) with
 * the next small files, into windows (see AHEAD_FILES).  Returns true
 * when node's window is filled.
 */
static bool fill_files(struct ckpt_readahead *ra, const struct ckpt_view *v,
		       uint32_t slot, uint32_t node, uint64_t size, int si)
{
	struct ckpt_read_req r[AHEAD_FILES];
	int idx[AHEAD_FILES];
	uint64_t total = size, fsz;
	uint32_t j = node;
	char err[512];
	bool ok = false;
	int n = 1, k;

	idx[0] = si;
	r[0] = (struct ckpt_read_req){ slot, node, 0, size, NULL };
	while (n < AHEAD_FILES) {
		j = key_after(v, j);
		if (j == UINT32_MAX || ckpt_view_size(v, slot, j, &fsz) ||
		    !fsz || fsz > SMALL_FILE || fsz > ra->window - total)
			break;
		k = claim_stream(ra, slot, j, idx, n);
		if (k < 0)
			break;
		idx[n] = k;
		r[n++] = (struct ckpt_read_req){ slot, j, 0, fsz, NULL };
		total += fsz;
	}
	pthread_mutex_lock(&ra->lock);
	if (ra->used + total > ra->budget) {
		pthread_mutex_unlock(&ra->lock);
		goto out_unlock;	/* no room: read alone */
	}
	ra->used += total;	/* reserved before allocating */
	pthread_mutex_unlock(&ra->lock);
	for (k = 0; k < n; k++)
		if (!(r[k].dst = malloc(r[k].len)))
			break;
	if (k == n && !ckpt_view_read_batch(v, r, (size_t)n, 0, err,
					    sizeof(err)))
		ok = true;
	pthread_mutex_lock(&ra->lock);
	for (k = 0; k < n; k++) {
		struct ckpt_ra_stream *st = &ra->s[idx[k]];

		if (!ok) {
			free(r[k].dst);
			ra->used -= r[k].len;
			continue;
		}
		ra->used -= st->blen;
		free(st->buf);
		st->buf = r[k].dst;
		st->boff = 0;
		st->blen = r[k].len;
	}
	pthread_mutex_unlock(&ra->lock);
out_unlock:
	for (k = 1; k < n; k++)
		pthread_mutex_unlock(&ra->slock[idx[k]]);
	return ok;
}

/* Whether a read of [off, off + len) of node's file (size bytes) starts
 * a small file right after the previous file was read to its end. */
static bool follows_file(struct ckpt_readahead *ra, const struct ckpt_view *v,
			 uint32_t slot, uint32_t node, uint64_t off,
			 uint64_t size)
{
	bool yes;

	if (off || size > SMALL_FILE || size > ra->window)
		return false;
	pthread_mutex_lock(&ra->lock);
	yes = ra->has_eof && ra->eof_slot == slot &&
	      ra->eof_node == key_before(v, node);
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
	size_t wgot;
	char *w;
	int i, rc;

	if (!ra || ckpt_view_size(v, slot, node, &size) || off >= size ||
	    !wants_window(v, slot, node))
		return ckpt_view_read(v, slot, node, off, len, buf, got, s);
	i = stream_of(ra, slot, node);
	st = &ra->s[i];
	act = ckpt_ra_decide(st, off, len, size, ra->window, &wlen);
	if (act != CKPT_RA_HIT && is_remote(v) &&
	    follows_file(ra, v, slot, node, off, size) &&
	    fill_files(ra, v, slot, node, size, i))
		act = CKPT_RA_HIT;
	if (act == CKPT_RA_FILL) {
		pthread_mutex_lock(&ra->lock);
		if (ra->used - st->blen + wlen > ra->budget) {
			act = CKPT_RA_DIRECT;	/* no room: read alone */
		} else {
			ra->used += wlen;	/* reserved before allocating */
			ra->used -= st->blen;
			free(st->buf);
			st->buf = NULL;
			st->blen = 0;
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
			st->buf = w;
			st->boff = off;
			st->blen = wlen;
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
	}
	pthread_mutex_unlock(&ra->slock[i]);
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
