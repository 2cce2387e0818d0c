/* SPDX-License-Identifier: MIT */
/* The dtype table: see dtype.h. */
#include "common/dtype.h"

#include <errno.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned size;
	bool is_float;
} dtypes[CKPT_DTYPE_COUNT] = {
	[CKPT_F64] = { "float64", 8, true },
	[CKPT_F32] = { "float32", 4, true },
	[CKPT_F16] = { "float16", 2, true },
	[CKPT_BF16] = { "bfloat16", 2, true },
	[CKPT_F8E4M3] = { "float8_e4m3fn", 1, true },
	[CKPT_F8E5M2] = { "float8_e5m2", 1, true },
	[CKPT_I64] = { "int64", 8, false },
	[CKPT_I32] = { "int32", 4, false },
	[CKPT_I16] = { "int16", 2, false },
	[CKPT_I8] = { "int8", 1, false },
	[CKPT_U8] = { "uint8", 1, false },
	[CKPT_BOOL] = { "bool", 1, false },
};

int ckpt_dtype_from_name(const char *s, size_t len, enum ckpt_dtype *out)
{
	int i;

	for (i = 0; i < CKPT_DTYPE_COUNT; i++) {
		if (strlen(dtypes[i].name) == len &&
		    memcmp(dtypes[i].name, s, len) == 0) {
			*out = (enum ckpt_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *ckpt_dtype_name(enum ckpt_dtype dt)
{
	return dt < CKPT_DTYPE_COUNT ? dtypes[dt].name : "?";
}

unsigned ckpt_dtype_size(enum ckpt_dtype dt)
{
	return dt < CKPT_DTYPE_COUNT ? dtypes[dt].size : 0;
}

bool ckpt_dtype_is_float(enum ckpt_dtype dt)
{
	return dt < CKPT_DTYPE_COUNT && dtypes[dt].is_float;
}
