/* SPDX-License-Identifier: MIT */
/* Checks that a tensor's saved chunks tile its shape exactly. */
#ifndef CKPT_TILING_H
#define CKPT_TILING_H

#include <stddef.h>

#include "model/meta.h"

/*
 * The chunks of tensor entry e (sorted by offsets, each already inside the
 * shape) must cover the shape with no gap and no overlap.  name is used in
 * messages.  Returns 0, or -EINVAL (or -E2BIG when too many chunks overlap
 * in dim 0 to compare pairwise) with the reason in err.
 */
int ckpt_tiling_check(const struct ckpt_meta *m, const struct ckpt_entry *e,
		      const char *name, char *err, size_t errlen);

#endif
