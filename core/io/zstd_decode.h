/* SPDX-License-Identifier: MIT */
/*
 * Decoding a record stored with transforms (model/transforms.h): the
 * stored bytes go through each transform in stored order, today only
 * zstd (one or more frames).  Every output is bounded by a cap, so a
 * record that claims, or turns out, to decode to more (a "zstd bomb") is
 * an error, not an allocation.
 */
#ifndef CKPT_ZSTD_DECODE_H
#define CKPT_ZSTD_DECODE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The memory a decode may use.  take(ctx, n) is asked before every
 * allocation of n bytes (the stored bytes, each layer's output, zstd's
 * own context and window) and returns 0, or -errno to refuse it: the
 * decode then stops and returns that -errno (-EFBIG is reported as going
 * past the cap).  give(ctx, n) follows every free of n bytes.
 */
struct ckpt_decode_budget {
	int (*take)(void *ctx, uint64_t n);
	void (*give)(void *ctx, uint64_t n);
	void *ctx;
};

/* Bytes of zstd's decoding context, which every decode holds at once
 * with its buffers. */
uint64_t ckpt_zstd_context_bytes(void);

/* Reads exactly len bytes at off of the stored record; 0 or -errno. */
typedef int (*ckpt_stored_read_fn)(void *ctx, uint64_t off, void *buf,
				   size_t len);

#define CKPT_DECODE_ANY UINT64_MAX	/* the decoded size is not known */

/*
 * Decode the len stored bytes behind read(ctx, ...) through the n
 * transforms (enum ckpt_transform, stored order).  expect is the size the
 * output should have (CKPT_DECODE_ANY: not known): frames that do not
 * declare their size are then decoded straight into a buffer of that
 * size.  With out, *out gets the
 * decoded bytes (caller frees with ckpt_big_free(*out, *outlen), then
 * gives *outlen bytes back to the budget; NULL when empty) and *outlen their count; without, only
 * *outlen is computed (little memory for one transform).  No output, final
 * or intermediate, may pass cap bytes.  Every allocation is taken from
 * budget first (NULL: no budget but cap).  Returns 0, or -EBADMSG (not a
 * valid stream: corrupt, truncated, trailing bytes), -EFBIG (decodes past
 * cap, or the budget refused for good), -EAGAIN (the budget refused for
 * now), -EIO (read), -ENOMEM, with the reason in why.  Nothing stays
 * taken from the budget on an error.
 */
int ckpt_decode_stored(ckpt_stored_read_fn read, void *ctx, uint64_t len,
		       const uint8_t *transforms, unsigned n, uint64_t cap,
		       uint64_t expect, const struct ckpt_decode_budget *budget,
		       uint8_t **out, uint64_t *outlen, char *why,
		       size_t whylen);

/* A stored record (or any bytes) in memory, read by ckpt_mem_read(). */
struct ckpt_mem_src {
	const uint8_t *p;
	uint64_t len;
};

/* A ckpt_stored_read_fn over a struct ckpt_mem_src: -EIO past its end. */
int ckpt_mem_read(void *ctx, uint64_t off, void *buf, size_t len);

/* Does buf (len bytes) start like a zstd frame (or a skippable one)? */
int ckpt_zstd_magic_ok(const uint8_t *buf, size_t len);

#endif
