/* SPDX-License-Identifier: MIT */
/*
 * Gathering a box of a strided (non-row-major) record in blocks: which
 * spans of the record to read into a staging buffer, and how to copy the
 * staged elements into place.  Pure planning, no I/O: the caller reads
 * and copies (view/data_read.c).  Every read is at most twice the bytes
 * it serves and fits the staging budget, so a gather reads at most 2x
 * what it delivers in bounded memory, with as few reads as that allows.
 */
#ifndef CKPT_GATHER_H
#define CKPT_GATHER_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

/* A box of elements of a record: index l (0 <= l[d] < size[d]) is the
 * record's element base + sum(l[d] * stride[d]) and goes to destination
 * element dbase + sum(l[d] * dstride[d]). */
struct ckpt_gather {
	unsigned ndim;
	uint64_t size[CKPT_MAX_DIMS];
	uint64_t stride[CKPT_MAX_DIMS];
	uint64_t dstride[CKPT_MAX_DIMS];
	uint64_t base;
	uint64_t dbase;
};

/* count elements of the record from element at. */
struct ckpt_gather_ext {
	uint64_t at;
	uint64_t count;
};

/*
 * One batch: read ext[0..next) one after another into the staging
 * buffer (ext[i] at element sum of the counts before it; stage elements
 * in all), then copy box `copy` from the stage (copy.base, copy.stride
 * in stage elements) to the destination (copy.dbase, copy.dstride).
 */
struct ckpt_gather_batch {
	const struct ckpt_gather_ext *ext;
	uint32_t next;
	uint64_t stage;
	struct ckpt_gather copy;
};

#define CKPT_GATHER_MAX_EXT 1024	/* extents per batch */

/*
 * Plan gathering g (elements of isz bytes) with a staging buffer of at
 * most budget bytes (at least one element), using ext (room for
 * CKPT_GATHER_MAX_EXT, caller-owned) for the batches' extents: call fn for each batch, in an order
 * that reads the record forwards where the layout allows.  A batch
 * whose reads would stage more than twice its elements is split: along
 * the dim of largest stride first, into groups read as one span when
 * they stay within 2x, else into slices read one by one side by side in
 * the stage (a transpose: one read per stored row), else recursively.
 * fn returns 0 to go on, anything else to stop (then returned).
 * Returns 0 or fn's value.  The batch is borrowed for the call.
 * Thread-safe (no state outside ext).
 */
int ckpt_gather_plan(const struct ckpt_gather *g, size_t isz,
		     uint64_t budget, struct ckpt_gather_ext *ext,
		     int (*fn)(void *ctx, const struct ckpt_gather_batch *b),
		     void *ctx);

/* 1 + the highest element g addresses, relative to g->base (0 when the
 * box is empty): the bytes a single read of it would take, / isz. */
uint64_t ckpt_gather_span(const struct ckpt_gather *g);

#endif
