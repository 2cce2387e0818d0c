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
 * ckpt_errf() for a message that names a key: also records the key in the
 * calling thread's last error (ckpt_last_error_get()'s .key), so callers
 * read it as a field.  key: at most keylen bytes, up to its first NUL
 * (SIZE_MAX for a C string), the raw bytes as the checkpoint spells them
 * (the message may cut or escape them), cut to CKPT_ERROR_TEXT - 1 bytes
 * at a UTF-8 character boundary; NULL: no key ("").  When the message
 * names two keys, key is the first.
 */
int ckpt_errf_key(char *err, size_t errlen, int rc, const char *key,
		  size_t keylen, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/*
 * Write dims as "[a,b,c]" into buf (truncated to buflen).  Returns buf.
 */
char *ckpt_fmt_dims(char *buf, size_t buflen, const uint64_t *dims,
		    unsigned ndim);

/*
 * Append to a message without printf, for paths that name every record
 * they pass (indexing a checkpoint): buf holds room bytes of which *at are
 * used; appends the n bytes at s (or v in decimal), truncating, and keeps
 * buf NUL-terminated.
 */
void ckpt_msg_put(char *buf, size_t room, size_t *at, const char *s,
		  size_t n);
void ckpt_msg_put_u64(char *buf, size_t room, size_t *at, uint64_t v);

/*
 * The calling thread's last failure (struct ckpt_error, ckptfs.h): its
 * message, code, file, offset and key.  ckpt_errf() records its code and
 * message there too, so every action that fails leaves them; where a read
 * fails, core names the file and offset, and the layer that knows the key
 * adds it.  ckpt_last_error() and ckpt_last_error_get() are in ckptfs.h.
 */
void ckpt_set_last_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
void ckpt_clear_last_error(void);
/* The file of the last error: "dir/rel" (rel alone when dir is NULL), at
 * byte off (CKPT_NO_OFFSET: none). */
void ckpt_last_error_file(const char *dir, const char *rel, uint64_t off);
/* The key of the last error, which its message already names (fqn: a C
 * string; keyn: at most keylen bytes, up to a NUL, as ckpt_errf_key()).
 * For a caller whose callee's message names the key through a "where"
 * string it was given. */
void ckpt_last_error_key(const char *fqn);
void ckpt_last_error_keyn(const char *key, size_t keylen);
/* When the last error has no key yet: record fqn and prefix the message
 * with "key 'FQN': ". */
void ckpt_last_error_add_key(const char *fqn);
/* The code of the last error (rc = -errno; every message written into an
 * err buffer went through ckpt_errf(), so the message is there already,
 * else strerror's), and path when it has none yet.  Returns rc. */
int ckpt_last_error_finish(int rc, const char *path);
/* The last error is *e (the calling thread's, e.g. a batch worker's
 * failure handed to the thread that started the batch). */
void ckpt_last_error_put(const struct ckpt_error *e);

#endif
