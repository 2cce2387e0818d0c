/* SPDX-License-Identifier: MIT */
/* numpy .npy v1.0 headers: see npy.h and numpy's format.py. */
#include "view/npy.h"

#include <stdio.h>
#include <string.h>

const char *ckpt_npy_descr(enum ckpt_dtype dt)
{
	static const char *const d[CKPT_DTYPE_COUNT] = {
		[CKPT_F64] = "<f8", [CKPT_F32] = "<f4", [CKPT_F16] = "<f2",
		[CKPT_BF16] = "<u2", [CKPT_F8E4M3] = "|u1",
		[CKPT_F8E5M2] = "|u1", [CKPT_I64] = "<i8", [CKPT_I32] = "<i4",
		[CKPT_I16] = "<i2", [CKPT_I8] = "|i1", [CKPT_U8] = "|u1",
		[CKPT_BOOL] = "|b1",
	};

	return dt < CKPT_DTYPE_COUNT ? d[dt] : "|u1";
}

size_t ckpt_npy_header(enum ckpt_dtype dt, const uint64_t *shape,
		       unsigned ndim, char *buf, size_t cap)
{
	char dict[CKPT_NPY_MAX_HEADER];
	size_t n, total;
	unsigned i;

	n = (size_t)snprintf(dict, sizeof(dict),
			     "{'descr': '%s', 'fortran_order': False, 'shape': (",
			     ckpt_npy_descr(dt));
	for (i = 0; i < ndim && n < sizeof(dict); i++)
		n += (size_t)snprintf(dict + n, sizeof(dict) - n, "%llu%s",
				      (unsigned long long)shape[i],
				      ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
	if (n < sizeof(dict))
		n += (size_t)snprintf(dict + n, sizeof(dict) - n, "), }");
	/* magic(6) + version(2) + len(2) + dict + padding + '\n' */
	total = (10 + n + 1 + 63) / 64 * 64;
	if (n >= sizeof(dict) || total > cap || total - 10 > 0xffff)
		return 0;
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (char)((total - 10) & 0xff);
	buf[9] = (char)((total - 10) >> 8);
	memcpy(buf + 10, dict, n);
	memset(buf + 10 + n, ' ', total - 10 - n - 1);
	buf[total - 1] = '\n';
	return total;
}
