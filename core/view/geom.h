/* SPDX-License-Identifier: MIT */
/*
 * Each key file's geometry for each rank a view serves: the box of the
 * global tensor it shows (the dim-0 split, inside a layout box if one is
 * bound), its dtype after conversion, its size, its .npy header and the
 * saved chunks it touches.  Decided once, in ckpt_view_new(); requests
 * only read it.
 */
#ifndef CKPT_GEOM_H
#define CKPT_GEOM_H

#include <stddef.h>

#include "plan/reshard.h"
#include "view/view_types.h"

/* Compute v->geom and its pools for every slot and key file (the tree
 * must be built).  Returns 0 or -ENOMEM / -EOVERFLOW with the reason in
 * err; on error ckpt_geom_destroy() frees what was made. */
int ckpt_geom_build(struct ckpt_view *v, char *err, size_t errlen);

void ckpt_geom_destroy(struct ckpt_view *v);

/* The box of a tensor's geometry (ndim 0 for bytes entries). */
void ckpt_geom_box(const struct ckpt_view *v, const struct ckpt_geom *g,
		   struct ckpt_box *box);

#endif
