/* SPDX-License-Identifier: MIT */
/*
 * Element strides of a strided (non-row-major) record: how far a layout
 * reaches, and whether it is plain C order.  Pure; thread-safe.
 */
#ifndef CKPT_STRIDES_H
#define CKPT_STRIDES_H

#include <stdbool.h>
#include <stdint.h>

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


#endif
