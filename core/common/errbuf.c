/* SPDX-License-Identifier: MIT */
/* Error-message helpers for core/: see errbuf.h. */
#include "common/errbuf.h"
#include "common/escape.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread struct ckpt_error last = { .offset = CKPT_NO_OFFSET };

static void copy_text(char *dst, const char *src)
{
	snprintf(dst, CKPT_ERROR_TEXT, "%s", src ? src : "");
}

/*
 * fmt into last.message through ckpt_escape_line(): a name a caller put
 * in raw (a key, a file, an object) reaches no terminal or log with its
 * control bytes, and a message too long is shortened in the middle, so
 * the reason at its end always shows (issue 26 item 11).
 */
static void format_line(const char *fmt, va_list ap)
	__attribute__((format(printf, 1, 0)));
static void format_line(const char *fmt, va_list ap)
{
	char small[1024], *big = NULL;
	const char *line = small;
	va_list again;
	int n;

	va_copy(again, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(small)) {
		big = malloc((size_t)n + 1);
		if (big) {
			vsnprintf(big, (size_t)n + 1, fmt, again);
			line = big;
		} else {
			n = sizeof(small) - 1;
		}
	}
	va_end(again);
	ckpt_escape_line(line, (size_t)n, last.message, sizeof(last.message));
	free(big);
}

/* The message and code of the last error, copied into err. */
static void put_message(char *err, size_t errlen, int rc, const char *fmt,
			va_list ap) __attribute__((format(printf, 4, 0)));
static void put_message(char *err, size_t errlen, int rc, const char *fmt,
			va_list ap)
{
	format_line(fmt, ap);
	last.code = rc < 0 ? -rc : rc;
	/* A short err is cut in the middle too, keeping the reason. */
	if (err && errlen > 0)
		ckpt_escape_line(last.message, strlen(last.message), err,
				 errlen);
}

int ckpt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	put_message(err, errlen, rc, fmt, ap);
	va_end(ap);
	return rc;
}

/* At most keylen bytes of key, up to a NUL, into last.key; a key too long
 * is cut before a UTF-8 continuation byte, so what is kept stays valid
 * UTF-8 when the key was. */
static void copy_key(const char *key, size_t keylen)
{
	size_t n;

	if (!key) {
		last.key[0] = '\0';
		return;
	}
	n = strnlen(key, keylen < sizeof(last.key) ? keylen :
					sizeof(last.key));
	if (n >= sizeof(last.key)) {
		n = sizeof(last.key) - 1;
		while (n > 0 && ((unsigned char)key[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(last.key, key, n);
	last.key[n] = '\0';
}

int ckpt_errf_key(char *err, size_t errlen, int rc, const char *key,
		  size_t keylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	put_message(err, errlen, rc, fmt, ap);
	va_end(ap);
	copy_key(key, keylen);
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
	format_line(fmt, ap);
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
	copy_key(fqn, SIZE_MAX);
}

void ckpt_last_error_keyn(const char *key, size_t keylen)
{
	copy_key(key, keylen);
}

void ckpt_last_error_add_key(const char *fqn)
{
	char old[sizeof(last.message)], shown[CKPT_NAME_SHOWN];
	size_t at;
	int n;

	if (last.key[0] || !fqn)
		return;
	copy_text(last.key, fqn);
	memcpy(old, last.message, sizeof(old));
	n = snprintf(last.message, sizeof(last.message), "key '%s': ",
		     ckpt_name_for_msg(fqn, shown, sizeof(shown)));
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
