/* SPDX-License-Identifier: MIT */
/*
 * Reading a key file of a view: plan the byte range into runs over the
 * saved chunks, merge and read them, convert dtypes, and prepend the .npy
 * header.  The per-thread working memory is struct ckpt_scratch.
 */
#ifndef CKPT_DATA_READ_H
#define CKPT_DATA_READ_H

#include <stddef.h>
#include <stdint.h>

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
	void *sruns;		/* pending runs of strided chunks */
	uint32_t *sorder;
	uint32_t cap_sruns;
	char *sstage;		/* staging for strided extents */
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

#endif
