/* SPDX-License-Identifier: MIT */
/*
 * Resharding: which part of a saved tensor one rank of a new world sees.
 * This is the rule of load_sharded_optimizer_state_dict / torch.chunk.
 */
#ifndef CKPT_RESHARD_H
#define CKPT_RESHARD_H

#include <stdint.h>

#include "meta.h"

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

/* Elements in the box (cannot overflow: the box lies in a checked shape). */
uint64_t ckpt_box_numel(const struct ckpt_box *box);

/* Bytes a rank's file holds for entry e: the box's bytes for tensors, the
 * record for bytes entries. */
uint64_t ckpt_reshard_nbytes(const struct ckpt_meta *m,
			     const struct ckpt_entry *e, uint32_t world,
			     uint32_t rank);

#endif
