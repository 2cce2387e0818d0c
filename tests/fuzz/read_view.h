/* SPDX-License-Identifier: MIT */
/*
 * The fuzz targets' common ending: open the data files of an opened
 * checkpoint, build the view (world, rank) and read every file of it
 * whole, 4 KiB at a time.  Reads may fail; nothing may crash.
 */
#ifndef CKPT_FUZZ_READ_VIEW_H
#define CKPT_FUZZ_READ_VIEW_H

#include "ckptfs.h"

static inline void fuzz_read_view(struct ckpt_meta *m, uint32_t world,
				  uint32_t rank)
{
	struct ckpt_view_opts o = { .world = world, .rank = rank,
				    .dtype = CKPT_DTYPE_COUNT };
	struct ckpt_scratch *s = ckpt_scratch_new();
	struct ckpt_view *v = NULL;
	struct ckpt_view_info vi;
	char err[1024], buf[4096];
	uint32_t i;

	if (s && !ckpt_files_open(m, 0, 0, err, sizeof(err)) &&
	    !ckpt_view_new(m, &o, &v, err, sizeof(err))) {
		ckpt_view_info(v, &vi);
		for (i = 0; i < vi.nnodes; i++) {
			uint64_t off = 0, size = 0;
			size_t got;

			if (ckpt_view_size(v, 0, i, &size))
				continue;
			while (off < size &&
			       !ckpt_view_read(v, 0, i, off, sizeof(buf), buf,
					       &got, s) && got)
				off += got;
		}
	}
	ckpt_view_free(v);
	ckpt_scratch_free(s);
}

#endif
