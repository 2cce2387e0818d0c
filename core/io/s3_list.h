/* SPDX-License-Identifier: MIT */
/*
 * Listing the objects under an S3 prefix with ListObjectsV2 (list-type=2,
 * delimiter '/'), following NextContinuationToken page after page.
 */
#ifndef CKPT_S3_LIST_H
#define CKPT_S3_LIST_H

#include <stdint.h>

#include "io/s3_http.h"

/*
 * Call fn(ctx, name, size, etag, mtime) for each object directly under
 * prefix
 * ("" or "a/b", no trailing '/'): name is the key less "prefix/", never
 * "" and never holding '/' (deeper keys and "directory" markers are
 * skipped).  max_keys > 0 asks for pages of at most that many keys (the
 * server's default, 1000, otherwise).  fn returns 0 to go on, anything
 * else to stop (then returned).  root names the listing in err
 * ("s3://bucket/prefix").  endpoint and bucket address the bucket as
 * ckpt_s3_url() takes them (bucket NULL: endpoint is the bucket's
 * virtual-hosted one).
 *
 * A listing that never ends is an error: a continuation token given
 * twice (a cycle A, B, A, ...) at once; more than key_cap keys (0: no
 * cap), or more than 2 * key_cap / page + 16 pages (page: max_keys, or
 * 1000), ends it with -EFBIG naming the cap.  So memory and time stay
 * bounded whatever the server says.  A cancelled engine ends it at once
 * (-EINTR), between pages and within one.
 *
 * Returns 0, fn's value, or -errno with err.  Strings are borrowed for
 * the call.  Thread-safe.
 */
int ckpt_s3_list(struct ckpt_s3_http *h, const char *endpoint,
		 const char *bucket, const char *prefix, unsigned max_keys,
		 uint32_t key_cap, const char *root,
		 int (*fn)(void *ctx, const char *name, uint64_t size,
			   const char *etag, int64_t mtime),
		 void *ctx, char *err, size_t errlen);

#endif
