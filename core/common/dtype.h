/* SPDX-License-Identifier: MIT */
/* The element types a checkpoint may hold: names and sizes. */
#ifndef CKPT_DTYPE_H
#define CKPT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

#include "ckptfs.h"


/* Look up a dtype by its format name (e.g. "float32"), given as a
 * non-terminated string.  Returns 0 and sets *out, or -EINVAL. */
int ckpt_dtype_from_name(const char *s, size_t len, enum ckpt_dtype *out);

/* The format name ("bfloat16"), static storage. */
const char *ckpt_dtype_name(enum ckpt_dtype dt);

/* Bytes per element. */
unsigned ckpt_dtype_size(enum ckpt_dtype dt);

bool ckpt_dtype_is_float(enum ckpt_dtype dt);

#endif
