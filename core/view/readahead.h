/* SPDX-License-Identifier: MIT */
/*
 * Read-ahead for in-order readers of view files whose bytes come from
 * strided records or from an object store (ckptfs.h's ckpt_readahead_*):
 * a window of the file ahead of the reader is read at once, so the record
 * is gathered in large blocks (plan/gather.h) instead of one stored row
 * per request, or fetched by many GETs in flight instead of one round
 * trip per request, and the reader's next requests are served from it.  This header holds
 * the policy, pure so it can be tested alone.
 */
#ifndef CKPT_READAHEAD_H
#define CKPT_READAHEAD_H

#include <stdbool.h>
#include <stdint.h>

/* One reader of one view file. */
struct ckpt_ra_stream {
	uint32_t slot, node;
	uint64_t next;		/* end of its last read */
	uint64_t seq;		/* bytes it read in order so far */
	uint64_t boff, blen;	/* the window it holds */
	char *buf;		/* owned; NULL when none */
	uint64_t served;	/* bytes served from this window so far */
	uint64_t tick;		/* last use; 0: a free slot */
};

enum ckpt_ra_action { CKPT_RA_DIRECT, CKPT_RA_HIT, CKPT_RA_FILL };

/* Requests this close to where a reader's furthest read ended still
 * continue it: the kernel sends a reader's readahead requests to several
 * threads at once, so they arrive a little out of order. */
#define CKPT_RA_SLACK ((uint64_t)2 << 20)

/*
 * A read of [off, off + len) of a file of size bytes by stream st: serve
 * it from the window (HIT), read a new window [off, off + *wlen) first
 * (FILL), or read it alone (DIRECT).  A reader continues its stream when
 * it reads from about where its furthest read ended (CKPT_RA_SLACK); the
 * request that reaches furthest gets a window
 * of its request plus as much as it already read in order (so the
 * window about doubles each time, as the kernel's readahead does), at
 * most max bytes, never past the end: all told it reads at most twice
 * what it is served, and once when it reads to the end.  Updates st's
 * position (not its window).  Pure.
 */
enum ckpt_ra_action ckpt_ra_decide(struct ckpt_ra_stream *st, uint64_t off,
				   uint64_t len, uint64_t size, uint64_t max,
				   uint64_t *wlen);

#endif
