/* SPDX-License-Identifier: MIT */
/*
 * dtype views: floating-point elements converted on read to float32 or
 * bfloat16, rounding to nearest even, NaN and Inf kept.
 */
#ifndef CKPT_CONVERT_H
#define CKPT_CONVERT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/dtype.h"

/* The targets a view may convert to: float32 and bfloat16. */
bool ckpt_convert_is_target(enum ckpt_dtype dt);

/* The dtype a view shows for a tensor of dtype src when asked for target
 * (CKPT_DTYPE_COUNT: no conversion).  Integer and bool are unchanged. */
enum ckpt_dtype ckpt_convert_view_dtype(enum ckpt_dtype src,
					enum ckpt_dtype target);

/* Convert n elements from src to dst (dst a target, src floating).  in and
 * out must not overlap.  Pure; thread-safe. */
void ckpt_convert(enum ckpt_dtype src, enum ckpt_dtype dst, const void *in,
		  void *out, size_t n);

/* Element values as double, for statistics: every dtype (floats exactly
 * except nothing is lost: all fit a double; integers exactly below 2^53;
 * bool 0/1).  Pure; thread-safe. */
void ckpt_convert_to_double(enum ckpt_dtype src, const void *in, double *out,
			    size_t n);

#endif
