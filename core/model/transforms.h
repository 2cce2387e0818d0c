/* SPDX-License-Identifier: MIT */
/*
 * Stream transforms of a stored record (torch's
 * _StorageInfo.transform_descriptors, e.g. ["stream.zstd/1"]): each
 * descriptor is `name[@domain][/version]`, and the stored bytes are
 * decoded by the descriptors in stored order, the first applied to the
 * bytes in the file.  ckptfs knows one: stream.zstd, major version 1
 * (torch's ZStandard extension).  A name with a domain is another
 * extension, as in torch's registry.
 */
#ifndef CKPT_TRANSFORMS_H
#define CKPT_TRANSFORMS_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAX_TRANSFORMS 4	/* descriptors per record */

enum ckpt_transform {
	CKPT_XFORM_ZSTD = 1,	/* stream.zstd/1: zstd frames */
};

/* What the decoded bytes of a record are. */
enum ckpt_payload {
	CKPT_PAYLOAD_RAW,	/* the chunk's bytes, row-major */
	CKPT_PAYLOAD_TORCH_SAVE,	/* a torch.save archive of the chunk */
};

/*
 * Parse descriptor d (len bytes, not NUL-terminated) into *out.  Returns 0,
 * or -EINVAL (malformed) / -ENOTSUP (well formed, not known) with the
 * reason in why, which names the descriptor.
 */
int ckpt_transform_parse(const char *d, size_t len, enum ckpt_transform *out,
			 char *why, size_t whylen);

/* The descriptor ckptfs writes for t ("stream.zstd/1"). */
const char *ckpt_transform_name(enum ckpt_transform t);

/* "raw" / "torch.save", and back (-1: unknown). */
const char *ckpt_payload_name(enum ckpt_payload p);
int ckpt_payload_parse(const char *s, size_t len);

#endif
