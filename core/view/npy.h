/* SPDX-License-Identifier: MIT */
/* numpy .npy v1.0 headers for tensor views. */
#ifndef CKPT_NPY_H
#define CKPT_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

/* The numpy descr of a dtype ("<f4").  numpy has no bfloat16 or float8:
 * those are the same-size unsigned type ("<u2", "|u1").  Static storage. */
const char *ckpt_npy_descr(enum ckpt_dtype dt);

/*
 * Write the .npy v1.0 header for a C-order array of dtype dt and shape
 * (ndim dims) into buf, padded with spaces and a newline so the data starts
 * at a multiple of 64 bytes (numpy.load(mmap_mode='r') maps it).  Returns
 * the header length (always <= CKPT_NPY_MAX_HEADER), or 0 if cap is too
 * small.
 */
#define CKPT_NPY_MAX_HEADER 640
size_t ckpt_npy_header(enum ckpt_dtype dt, const uint64_t *shape,
		       unsigned ndim, char *buf, size_t cap);

#endif
