/* SPDX-License-Identifier: MIT */
/*
 * Listing the blobs under an Azure prefix with List Blobs
 * (restype=container&comp=list, delimiter '/'), following NextMarker
 * page after page, with the bounds S3's listing keeps (s3_list.h): a
 * marker given twice is a loop and an error; more than key_cap blobs, or
 * more than 2 * key_cap / page + 16 pages, ends it with -EFBIG.
 */
#ifndef CKPT_AZ_LIST_H
#define CKPT_AZ_LIST_H

#include <stdint.h>

#include "io/az_config.h"
#include "io/s3_http.h"

/*
 * Call fn(ctx, name, size, etag, mtime) for each blob directly under
 * cfg's prefix: name is the blob name less "prefix/", never "" and never
 * holding '/'; etag is quoted as a HEAD's ETag header is ("\"0x8D...\"").
 * max_results > 0 asks for pages of at most that many (else the
 * server's default, 5000).  fn returns 0 to go on, anything else to stop
 * (then returned).  Returns 0, fn's value, or -errno with err naming
 * cfg->root, never a SAS.  Thread-safe.
 */
int ckpt_az_list(struct ckpt_s3_http *h, const struct ckpt_az_cfg *cfg,
		 unsigned max_results, uint32_t key_cap,
		 int (*fn)(void *ctx, const char *name, uint64_t size,
			   const char *etag, int64_t mtime),
		 void *ctx, char *err, size_t errlen);

#endif
