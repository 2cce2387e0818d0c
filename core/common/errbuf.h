/* SPDX-License-Identifier: MIT */
/*
 * Error-message helpers shared by core/: every action that can fail on
 * input fills a caller-supplied buffer with one line naming the file, the
 * key and the fact.
 */
#ifndef CKPT_ERRBUF_H
#define CKPT_ERRBUF_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

/*
 * Format into err (at most errlen bytes, always NUL-terminated when errlen
 * > 0) and return rc, so callers can write `return ckpt_errf(...)`.
 * err may be NULL when errlen is 0.
 */
int ckpt_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Write dims as "[a,b,c]" into buf (truncated to buflen).  Returns buf.
 */
char *ckpt_fmt_dims(char *buf, size_t buflen, const uint64_t *dims,
		    unsigned ndim);

/*
 * The calling thread's last read failure: core sets it where a read fails
 * (naming the file and offset) and the view adds the key; the FUSE layer
 * logs it.  ckpt_last_error() is declared in ckptfs.h.
 */
void ckpt_set_last_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/* Prefix the last error with more context ("PREFIX: reason"). */
void ckpt_wrap_last_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
void ckpt_clear_last_error(void);

#endif
