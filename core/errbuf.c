/* SPDX-License-Identifier: MIT */
/* Error-message helpers for core/: see errbuf.h. */
#include "errbuf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

int ckpt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

char *ckpt_fmt_dims(char *buf, size_t buflen, const uint64_t *dims,
		    unsigned ndim)
{
	size_t at = 0;
	unsigned i;
	int n;

	if (buflen == 0)
		return buf;
	buf[0] = '\0';
	n = snprintf(buf, buflen, "[");
	for (i = 0; n >= 0 && i < ndim; i++) {
		at += (size_t)n;
		if (at >= buflen)
			return buf;
		n = snprintf(buf + at, buflen - at, "%s%" PRIu64,
			     i ? "," : "", dims[i]);
	}
	if (n >= 0) {
		at += (size_t)n;
		if (at < buflen)
			snprintf(buf + at, buflen - at, "]");
	}
	return buf;
}
