/* SPDX-License-Identifier: MIT */
/* Error-message helpers for core/: see errbuf.h. */
#include "common/errbuf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LAST_ERROR_MAX 1024

static __thread char last_error[LAST_ERROR_MAX];

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

void ckpt_set_last_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

void ckpt_wrap_last_error(const char *fmt, ...)
{
	char old[LAST_ERROR_MAX];
	size_t at;
	va_list ap;
	int n;

	memcpy(old, last_error, sizeof(old));
	va_start(ap, fmt);
	n = vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	at = n < 0 ? 0 : (size_t)n;
	if (at < sizeof(last_error))
		snprintf(last_error + at, sizeof(last_error) - at, ": %s",
			 old[0] ? old : "read failed");
}

void ckpt_clear_last_error(void)
{
	last_error[0] = '\0';
}

const char *ckpt_last_error(void)
{
	return last_error;
}
