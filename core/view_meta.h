/* SPDX-License-Identifier: MIT */
/*
 * Internal to the view module: the .ckptfs/ files (view_meta.c) and the
 * raw data read they share with view_read.c.
 */
#ifndef CKPT_VIEW_META_H
#define CKPT_VIEW_META_H

#include "view.h"

/* Allocate / free the per-slot files of v (built lazily). */
int ckpt_vfiles_new(struct ckpt_view *v);
void ckpt_vfiles_free(struct ckpt_view *v);

/* Size and bytes of .ckptfs/ file kind (CKPT_VIRT_*) for slot. */
uint64_t ckpt_vfile_size(const struct ckpt_view *v, uint32_t slot,
			 uint32_t kind);
int ckpt_vfile_read(const struct ckpt_view *v, uint32_t slot, uint32_t kind,
		    uint64_t off, size_t len, char *buf, size_t *got,
		    struct ckpt_read_scratch *s);

/* A key's view bytes without any .npy header (after dtype conversion). */
int ckpt_view_read_data(const struct ckpt_view *v, uint32_t slot,
			uint32_t node, uint64_t off, size_t len, void *buf,
			size_t *got, struct ckpt_read_scratch *s);

/* The .npy header of tensor node for slot into buf; its length, or 0. */
size_t ckpt_view_npy_header(const struct ckpt_view *v, uint32_t slot,
			    uint32_t node, char *buf, size_t cap);

#endif
