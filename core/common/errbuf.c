/* SPDX-License-Identifier: MIT */
/* Error-message helpers for core/: see errbuf.h. */
#include "common/errbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static __thread struct ckpt_error last = { .offset = CKPT_NO_OFFSET };

static void copy_text(char *dst, const char *src)
{
	snprintf(dst, CKPT_ERROR_TEXT, "%s", src ? src : "");
}

int ckpt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last.message, sizeof(last.message), fmt, ap);
	va_end(ap);
	last.code = rc < 0 ? -rc : rc;
	if (err && errlen > 0)
		snprintf(err, errlen, "%s", last.message);
	return rc;
}

void ckpt_msg_put(char *buf, size_t room, size_t *at, const char *s,
		  size_t n)
{
	size_t k;

	if (room == 0 || *at >= room)
		return;
	k = room - 1 - *at < n ? room - 1 - *at : n;
	memcpy(buf + *at, s, k);
	*at += k;
	buf[*at] = '\0';
}

void ckpt_msg_put_u64(char *buf, size_t room, size_t *at, uint64_t v)
{
	char num[24], *p = num + sizeof(num);

	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	ckpt_msg_put(buf, room, at, p, (size_t)(num + sizeof(num) - p));
}

/* Without snprintf: indexing a checkpoint formats the dims of every
 * chunk it names, and vfprintf's machinery cost more than the rest. */
char *ckpt_fmt_dims(char *buf, size_t buflen, const uint64_t *dims,
		    unsigned ndim)
{
	size_t at = 0;
	unsigned i;

	if (buflen == 0)
		return buf;
	buf[0] = '\0';
	ckpt_msg_put(buf, buflen, &at, "[", 1);
	for (i = 0; i < ndim; i++) {
		if (i)
			ckpt_msg_put(buf, buflen, &at, ",", 1);
		ckpt_msg_put_u64(buf, buflen, &at, dims[i]);
	}
	ckpt_msg_put(buf, buflen, &at, "]", 1);
	return buf;
}

void ckpt_set_last_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last.message, sizeof(last.message), fmt, ap);
	va_end(ap);
}

void ckpt_clear_last_error(void)
{
	last.code = 0;
	last.offset = CKPT_NO_OFFSET;
	last.path[0] = '\0';
	last.key[0] = '\0';
	last.message[0] = '\0';
}

void ckpt_last_error_file(const char *dir, const char *rel, uint64_t off)
{
	if (dir)
		snprintf(last.path, sizeof(last.path), "%s/%s", dir,
			 rel ? rel : "");
	else
		copy_text(last.path, rel);
	last.offset = off;
}

void ckpt_last_error_key(const char *fqn)
{
	copy_text(last.key, fqn);
}

void ckpt_last_error_add_key(const char *fqn)
{
	char old[sizeof(last.message)];
	size_t at;
	int n;

	if (last.key[0] || !fqn)
		return;
	copy_text(last.key, fqn);
	memcpy(old, last.message, sizeof(old));
	n = snprintf(last.message, sizeof(last.message), "key '%s': ", fqn);
	at = n < 0 ? 0 : (size_t)n;
	if (at < sizeof(last.message))
		snprintf(last.message + at, sizeof(last.message) - at, "%s",
			 old[0] ? old : "read failed");
}

int ckpt_last_error_finish(int rc, const char *path)
{
	last.code = rc < 0 ? -rc : rc;
	if (!last.message[0] && rc)
		copy_text(last.message, strerror(last.code));
	if (!last.path[0] && path)
		copy_text(last.path, path);
	return rc;
}

void ckpt_last_error_put(const struct ckpt_error *e)
{
	if (e != &last)
		memcpy(&last, e, sizeof(last));
}

void ckpt_last_error_get(struct ckpt_error *out)
{
	memcpy(out, &last, sizeof(*out));
}

const char *ckpt_last_error(void)
{
	return last.message;
}
