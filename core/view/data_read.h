/* SPDX-License-Identifier: MIT */
/*
 * Reading a key file of a view: plan the byte range into runs over the
 * saved chunks, merge and read them, convert dtypes, and prepend the .npy
 * header.  The per-thread working memory is struct ckpt_scratch.
 */
#ifndef CKPT_DATA_READ_H
#define CKPT_DATA_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"
#include "plan/reshard.h"
#include "view/view_types.h"

/* Reusable working memory for reads, one per thread (ckptfs.h's
 * ckpt_scratch_new()/ckpt_scratch_free()). */
struct ckpt_scratch {
	void *runs;		/* pending runs */
	void *extents;		/* inside runs' allocation */
	uint32_t *order;	/* inside runs' allocation */
	char *stage;		/* staging buffer for gathers */
	size_t cap_stage;
	char *conv;		/* source elements of a dtype view */
	size_t cap_conv;
	void *gext;		/* a strided gather's extents */
	char *sstage;		/* staging for strided gathers */
	size_t cap_sstage;
	void *ranges;		/* struct ckpt_store_range[cap_ranges]:
				 * one flush's batch for the store */
	size_t cap_ranges;
	uint64_t strided_read;	/* bytes read for strided chunks (stats) */
};

/* Bytes [off, off + len) of key file node for slot, npy header included
 * (see ckpt_view_read()). */
int ckpt_data_read(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, size_t len, void *buf, size_t *got,
		   struct ckpt_scratch *s);

/* The same without any .npy header: the key's view bytes. */
int ckpt_data_read_raw(const struct ckpt_view *v, uint32_t slot,
		       uint32_t node, uint64_t off, size_t len, void *buf,
		       size_t *got, struct ckpt_scratch *s);

/* Bytes [off, off + len) of box (row-major, as saved, no conversion) of
 * entry e of m, into buf; a bytes entry's blob when e is one (box
 * unused).  No -o verify.  For the parallel engine (parallel_read.c). */
int ckpt_data_read_box(struct ckpt_meta *m, const struct ckpt_entry *e,
		       const struct ckpt_box *box, uint64_t off, size_t len,
		       void *buf, size_t *got, struct ckpt_scratch *s);

/*
 * The file ranges a read of [off, off + len) of box (row-major, as saved)
 * of entry e would read, without reading: plain runs as planned, and for
 * strided chunks the spans their gathers read.  fn gets each (gather
 * false); returns 0 to go on, else stops (then returned).  Returns 0,
 * fn's value, -EIO or -ENOMEM.  For WILLNEED hints.
 */
int ckpt_data_extents(struct ckpt_meta *m, const struct ckpt_entry *e,
		      const struct ckpt_box *box, uint64_t off, uint64_t len,
		      int (*fn)(void *ctx, const struct ckpt_run *run),
		      void *ctx);

/* The same for key file node of slot's view (its raw bytes: no .npy
 * header, no conversion). */
int ckpt_data_extents_view(const struct ckpt_view *v, uint32_t slot,
			   uint32_t node, uint64_t off, uint64_t len,
			   int (*fn)(void *ctx, const struct ckpt_run *run),
			   void *ctx);

/*
 * A request that is all of a box lying in one strided chunk can be
 * gathered in pieces of its own choosing (along the record's layout)
 * rather than in view order.  ckpt_data_whole_gather() says whether
 * box of e is such: true with *run (chunk, file, foff of the record's
 * element 0, len) and *g (the box's gather, dst row-major from 0).
 * The _view form takes a request of view file node ([off, off + len)
 * must be the whole file, with no .npy header or conversion).
 */
bool ckpt_data_whole_gather(struct ckpt_meta *m, const struct ckpt_entry *e,
			    const struct ckpt_box *box, struct ckpt_run *run,
			    struct ckpt_gather *g);
bool ckpt_data_whole_gather_view(const struct ckpt_view *v, uint32_t slot,
				 uint32_t node, uint64_t off, uint64_t len,
				 struct ckpt_run *run, struct ckpt_gather *g);

/* Gather g (elements of isz bytes) of run's record into dst (see
 * plan/gather.h), staging in s.  Returns 0, -EIO or -ENOMEM with
 * ckpt_last_error() set. */
int ckpt_data_gather(struct ckpt_meta *m, const struct ckpt_run *run,
		     const struct ckpt_gather *g, size_t isz, void *dst,
		     struct ckpt_scratch *s);

/* The extents ckpt_data_gather() would read, to fn (as in
 * ckpt_data_extents()). */
int ckpt_data_gather_extents(const struct ckpt_run *run,
			     const struct ckpt_gather *g, size_t isz,
			     int (*fn)(void *ctx, const struct ckpt_run *run),
			     void *ctx);

/* -o verify: 0 when chunk's record may be read, -EIO when it is
 * corrupt (checked on first use). */
/*
 * Append to *ci (grown with *cap; caller frees) the chunks of entry e that
 * box meets and that are not located yet (model/meta.h); *n counts them.
 * Returns 0 or -ENOMEM.
 */
int ckpt_data_box_pending(const struct ckpt_meta *m,
			  const struct ckpt_entry *e,
			  const struct ckpt_box *box, uint32_t **ci,
			  size_t *n, size_t *cap);

/* Locate the chunks of entry e that box meets (ckpt_meta_locate()):
 * 0, -ENOMEM, or -EIO naming the record that cannot be located. */
int ckpt_data_locate_box(struct ckpt_meta *m, const struct ckpt_entry *e,
			 const struct ckpt_box *box);

/* Before a read of node (as slot's rank sees it): when its records are
 * not located yet, locate them together with the pending records of the
 * view's next files in readdir order (view/order.h; LOCATE_AHEAD
 * records in all).  Best effort: errors are left to the reads.
 * Thread-safe (ckpt_meta_locate()). */
void ckpt_data_locate_ahead(const struct ckpt_view *v, uint32_t slot,
			    uint32_t node);

int ckpt_data_check_chunk(const struct ckpt_view *v, uint32_t chunk);

#endif
