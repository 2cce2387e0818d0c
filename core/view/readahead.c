/* SPDX-License-Identifier: MIT */
/*
 * Read-ahead windows for in-order readers of strided view files: see
 * readahead.h and ckptfs.h.  A small table of streams (reader x file),
 * replaced least recently used, each with its own lock held while its
 * window is filled or copied from, so that the kernel's concurrent
 * requests for one file wait for the window rather than read it twice.
 * Window memory is reserved from a budget before it is allocated; when
 * the budget is spent, reads go direct.
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
	return rc;
}
