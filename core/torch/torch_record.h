/* SPDX-License-Identifier: MIT */
/*
 * One tensor record of a .distcp file: a complete torch.save archive.
 * Its data.pkl (a protocol-2 pickle calling _rebuild_tensor_v2) gives the
 * storage dtype, element count, storage offset, size and strides; the
 * storage's raw bytes are the stored record `<prefix>data/<key>`.
 */
#ifndef CKPT_TORCH_RECORD_H
#define CKPT_TORCH_RECORD_H

#include <stdint.h>

#include "common/dtype.h"
#include "model/meta.h"
#include "torch/torch_zip.h"

#define TORCH_DATAPKL_MAX ((size_t)1 << 20)

struct torch_tensor_rec {
	enum ckpt_dtype dtype;
	unsigned ndim;
	uint64_t size[CKPT_MAX_DIMS];
	uint64_t stride[CKPT_MAX_DIMS];	/* in elements */
	uint64_t storage_offset;	/* in elements */
	uint64_t storage_numel;
	uint64_t hdr_off;		/* its zip local header, archive-relative:
					 * [hdr_off, data_off) is the header with
					 * its name and extra field */
	uint64_t data_off;		/* the storage's bytes, archive-relative */
	uint64_t data_len;		/* = storage_numel * itemsize */
	uint32_t crc32;			/* of the storage's bytes, from the
					 * central directory; 0: none */
};

/*
 * Read the archive of len bytes behind read(ctx, ...) as a saved tensor
 * and fill *t.  Every element the size and strides address is checked to
 * lie inside the storage.  where prefixes messages.  Returns 0 or -errno
 * (-EINVAL malformed, -EIO read error, -ENOMEM).
 */
int torch_record_locate(tz_read_fn read, void *ctx, uint64_t len,
			const char *where, struct torch_tensor_rec *t,
			char *err, size_t errlen);

#endif
