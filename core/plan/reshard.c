/* SPDX-License-Identifier: MIT */
/* The resharding rule: see reshard.h for the formula and examples. */
#include "plan/reshard.h"

#include <errno.h>
#include <string.h>

void ckpt_reshard_box_in(const struct ckpt_meta *m, const struct ckpt_entry *e,
			 const uint64_t *lo, const uint64_t *ls,
			 uint32_t world, uint32_t rank, struct ckpt_box *box)
{
	const uint64_t *shape = ckpt_entry_shape(m, e);
	uint64_t d0, cs, r0, r1;
	unsigned d;

	box->ndim = e->ndim;
	for (d = 0; d < e->ndim; d++) {
		box->off[d] = 0;
		box->size[d] = shape[d];
	}
	if (e->ndim == 0 || e->numel == 1)
		return;
	if (lo && ls) {
		for (d = 0; d < e->ndim; d++) {
			box->off[d] = lo[d];
			box->size[d] = ls[d];
		}
	}
	d0 = box->size[0];
	cs = d0 / world + (d0 % world != 0);
	/* rank < world, so rank * cs <= d0 + world: no overflow in
	 * practice, but saturate anyway. */
	if (__builtin_mul_overflow((uint64_t)rank, cs, &r0) || r0 > d0)
		r0 = d0;
	if (__builtin_add_overflow(r0, cs, &r1) || r1 > d0)
		r1 = d0;
	box->off[0] += r0;
	box->size[0] = r1 - r0;
}

void ckpt_reshard_box(const struct ckpt_meta *m, const struct ckpt_entry *e,
		      uint32_t world, uint32_t rank, struct ckpt_box *box)
{
	ckpt_reshard_box_in(m, e, NULL, NULL, world, rank, box);
}

uint64_t ckpt_box_numel(const struct ckpt_box *box)
{
	uint64_t n = 1;
	unsigned d;

	for (d = 0; d < box->ndim; d++)
		n *= box->size[d];
	return n;
}
