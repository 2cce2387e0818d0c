/* SPDX-License-Identifier: MIT */
/*
 * Read planning: a byte range of a view file, mapped onto the saved chunks
 * as a sequence of (data file, offset, length) runs.  The work is per run,
 * never per element: each run is the longest stretch that is contiguous
 * both in the view and in one chunk's storage.
 */
#ifndef CKPT_PLAN_H
#define CKPT_PLAN_H

#include <stdint.h>

#include "model/meta.h"
#include "plan/gather.h"
#include "plan/reshard.h"

struct ckpt_run {
	uint32_t chunk;		/* meta->chunks index */
	uint32_t file;		/* meta->files index */
	uint64_t foff;		/* offset in the data file; a gather: of
				 * the record's element 0 */
	uint64_t len;		/* bytes */
	bool gather;		/* the planner's gather describes it */
};

/* Iterator state; caller-owned storage, no heap. */
struct ckpt_planner {
	const struct ckpt_meta *m;
	const struct ckpt_entry *e;
	const struct ckpt_box *box;	/* borrowed; unused for bytes */
	uint64_t pos, end;		/* byte range left to plan */
	uint32_t hint;			/* chunk of the last run */
	bool boxes;			/* strided chunks as gathers */
	struct ckpt_gather gather;	/* the last run's, when a gather */
};

/*
 * Plan bytes [off, off+len) of entry e's view (box, for tensors), clipped
 * to the view's size.  m, e and box are borrowed and must outlive p.
 */
void ckpt_planner_init(struct ckpt_planner *p, const struct ckpt_meta *m,
		       const struct ckpt_entry *e, const struct ckpt_box *box,
		       uint64_t off, uint64_t len);

/*
 * With boxes set (after ckpt_planner_init()), the whole elements of the
 * range that lie in a strided chunk come as runs with gather set, each
 * a box of that chunk whose elements are consecutive in the view (at
 * most 2 * ndim - 1 of them per chunk and request): p->gather says which
 * record elements go where (dbase 0: the run's first byte).  Without it,
 * a strided chunk gives a run per element (or per stretch of an
 * innermost dim of stride 1).  Elements cut by the range's ends always
 * come as plain runs.
 */
void ckpt_planner_want_boxes(struct ckpt_planner *p);

/*
 * The next run, in view order.  Returns 1 with *run set, 0 at the end, or
 * -EIO when no chunk covers a coordinate (impossible after validation).
 */
int ckpt_planner_next(struct ckpt_planner *p, struct ckpt_run *run);

#endif
