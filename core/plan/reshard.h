/* SPDX-License-Identifier: MIT */
/*
 * Resharding: which part of a saved tensor one rank of a new world sees.
 * This is the rule of load_sharded_optimizer_state_dict / torch.chunk.
 */
#ifndef CKPT_RESHARD_H
#define CKPT_RESHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "model/meta.h"

/* A box of a tensor: offsets and sizes in global coordinates. */
struct ckpt_box {
	unsigned ndim;
	uint64_t off[CKPT_MAX_DIMS];
	uint64_t size[CKPT_MAX_DIMS];
};

/*
 * The box of tensor entry e seen by rank `rank` of `world` (world >= 1,
 * rank < world):
 *   - a tensor with exactly one element is seen whole by every rank;
 *   - otherwise rows [R*cs, min(d0, (R+1)*cs)) of dim 0 with cs =
 *     ceil(d0 / W), and all of every other dim.  The box is empty when
 *     R*cs >= d0.
 * Worked example: d0=10, W=4: cs=3, ranks see rows 0-2, 3-5, 6-8 and 9
 * (sizes 3,3,3,1); d0=5, W=4: cs=2, sizes 2,2,1,0.
 * Pure function; thread-safe.
 */
void ckpt_reshard_box(const struct ckpt_meta *m, const struct ckpt_entry *e,
		      uint32_t world, uint32_t rank, struct ckpt_box *box);

/*
 * The same rule inside a layout box (2-D, TP x DP layouts): with the box
 * at offsets O of sizes L (lo, ls; NULL for the whole tensor) and
 * cs = ceil(L[0] / W), rank R sees rows [O[0] + R*cs, O[0] + min(L[0],
 * (R+1)*cs)) and [O[i], O[i] + L[i]) in every other dim.  One-element
 * tensors stay whole.  lo/ls must lie inside the shape (checked by
 * ckpt_layout_bind()).  Example: shape [8,6], box [0,3]+[8,3] (TP rank 1
 * of 2 on dim 1), W=2: rank 1 sees rows 4-7 of columns 3-5.
 */
void ckpt_reshard_box_in(const struct ckpt_meta *m, const struct ckpt_entry *e,
			 const uint64_t *lo, const uint64_t *ls,
			 uint32_t world, uint32_t rank, struct ckpt_box *box);

/* Elements in the box (cannot overflow: the box lies in a checked shape). */
uint64_t ckpt_box_numel(const struct ckpt_box *box);

#endif
