/* SPDX-License-Identifier: MIT */
/* Element-stride arithmetic for strided records: see strides.h. */
#include "common/strides.h"

#include <errno.h>

int ckpt_strided_span(const uint64_t *size, const uint64_t *stride,
		      unsigned ndim, uint64_t *elems)
{
	uint64_t span = 1, x;
	unsigned d;

	for (d = 0; d < ndim; d++) {
		if (size[d] == 0) {
			*elems = 0;
			return 0;
		}
	}
	for (d = 0; d < ndim; d++) {
		if (__builtin_mul_overflow(size[d] - 1, stride[d], &x) ||
		    __builtin_add_overflow(span, x, &span))
			return -EOVERFLOW;
	}
	*elems = span;
	return 0;
}

bool ckpt_strides_row_major(const uint64_t *size, const uint64_t *stride,
			    unsigned ndim)
{
	uint64_t expect = 1;
	unsigned d;

	for (d = 0; d < ndim; d++) {
		if (size[d] == 0)
			return true;	/* no element to address */
	}
	for (d = ndim; d-- > 0;) {
		if (size[d] != 1 && stride[d] != expect)
			return false;
		if (__builtin_mul_overflow(expect, size[d], &expect))
			return false;	/* more elements than fit: not a layout */
	}
	return true;
}
