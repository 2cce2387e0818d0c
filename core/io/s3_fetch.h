/* SPDX-License-Identifier: MIT */
/*
 * Batch reads from S3: the ranges a read asks for, sorted by (object,
 * offset), merged when a small gap apart, split into parts of about
 * part_bytes, and fetched by ranged GETs with If-Match, many at once.
 * Each GET's body is copied straight into the callers' buffers as it
 * arrives (gap bytes are dropped, never copied), so memory does not grow
 * with the size of a read.
 */
#ifndef CKPT_S3_FETCH_H
#define CKPT_S3_FETCH_H

#include <stdint.h>

#include "io/s3_http.h"
#include "io/store.h"

/* An opened object, fixed at open: immutable once published. */
struct ckpt_s3_object {
	char *name;		/* as opened, relative to the root */
	char *uri;		/* "s3://bucket/key", for messages */
	char *url;		/* the GET URL, key encoded */
	uint64_t size;
	char etag[CKPT_STORE_VERSION_MAX];	/* sent as If-Match */
};

/*
 * A merge never makes a GET carry more gap bytes than 1/MERGE_WASTE_DIV
 * of the bytes asked for in it, whatever merge_gap says, so bytes
 * fetched stay within 1 + 1/32 of bytes delivered.
 */
#define CKPT_S3_MERGE_WASTE_DIV 32

/*
 * Read r[0..n) (ids resolved by obj(ctx, id), NULL for an unknown id)
 * with ranges at most merge_gap apart merged and parts of at most
 * part_bytes.  Each of r[first_join..n) also brings, in the same GET, a
 * range of its object that starts at most join bytes after it, however
 * small the two are beside the gap (a zip local header and its record's
 * bytes).  Returns 0 and adds the bytes delivered to *delivered, or
 * -EIO / -ENOMEM with ckpt_last_error() naming the object
 * (s3://bucket/key), the byte range and the reason.  Thread-safe.
 */
int ckpt_s3_fetch(struct ckpt_s3_http *h, uint64_t merge_gap,
		  uint64_t part_bytes,
		  const struct ckpt_s3_object *(*obj)(void *ctx, uint32_t id),
		  void *ctx, const struct ckpt_store_range *r, size_t n,
		  size_t first_join, uint32_t join, uint64_t *delivered);

#endif
