/* SPDX-License-Identifier: MIT */
/*
 * Element strides of a strided (non-row-major) record: how far a layout
 * reaches, and whether it is plain C order.  Pure; thread-safe.
 */
#ifndef CKPT_STRIDES_H
#define CKPT_STRIDES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

/*
 * A strided layout of a box of sizes size[0, ndim) (element strides
 * stride): *elems gets how many storage elements it spans, 1 + the
 * highest element index addressed (0 when the box is empty).  Returns 0,
 * or -EOVERFLOW.
 */
int ckpt_strided_span(const uint64_t *size, const uint64_t *stride,
		      unsigned ndim, uint64_t *elems);

/* True when the strides are row-major (C order) for size; dims of size 1
 * may have any stride, and an empty box is row-major. */
bool ckpt_strides_row_major(const uint64_t *size, const uint64_t *stride,
			    unsigned ndim);

/*
 * Copy the box of sizes size[0, ndim) from src (element strides sstride)
 * to dst (element strides dstride), elements of isz bytes.  Dims that are
 * contiguous in both are merged; when the innermost destination dim is
 * not the innermost source dim (a transpose), the two are copied in small
 * square tiles so that both sides stay in cache.  The regions may not
 * overlap.  Pure; thread-safe.
 */
void ckpt_strided_copy(void *dst, const uint64_t *dstride, const void *src,
		       const uint64_t *sstride, const uint64_t *size,
		       unsigned ndim, size_t isz);

#endif
