/* SPDX-License-Identifier: MIT */
/*
 * The files of a view's .ckptfs/ directory (view.json, manifest.tsv,
 * view.safetensors), built per slot on first use.
 */
#ifndef CKPT_VFILES_H
#define CKPT_VFILES_H

#include <stddef.h>
#include <stdint.h>

#include "view/view_types.h"

/* Allocate / free the per-slot holders of v (contents built lazily). */
int ckpt_vfiles_new(struct ckpt_view *v);
void ckpt_vfiles_free(struct ckpt_view *v);

/* Size of .ckptfs/ file kind (CKPT_VIRT_*) for slot: 0, or -ENOMEM when
 * it could not be built (nothing is cached; the next call tries again). */
int ckpt_vfile_size(const struct ckpt_view *v, uint32_t slot, uint32_t kind,
		    uint64_t *size);

/* Bytes of .ckptfs/ file kind for slot (see ckpt_view_read()). */
int ckpt_vfile_read(const struct ckpt_view *v, uint32_t slot, uint32_t kind,
		    uint64_t off, size_t len, char *buf, size_t *got,
		    struct ckpt_scratch *s);

#endif
