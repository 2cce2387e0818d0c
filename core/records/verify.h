/* SPDX-License-Identifier: MIT */
/* Record checksums: XXH3-64 of a record's bytes against its "xxh3" field,
 * or, without one, CRC-32 against its "crc32" field (torch records).  A
 * record stored with transforms is decoded, which checks its stream and
 * its torch.save archive's CRC-32 (the verdict when it has no other). */
#ifndef CKPT_VERIFY_H
#define CKPT_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "model/meta.h"

/*
 * Hash chunk ci's record (read through the fd cache into buf, buflen
 * bytes at a time) and compare it with its xxh3 (or crc32).  Returns 0
 * when it matches, 1 when the record has no checksum, -EBADMSG on a
 * mismatch (with *got set to the hash read), -EIO when the bytes cannot be
 * read.  Thread-safe with a buffer per thread.
 */
int ckpt_verify_chunk(struct ckpt_meta *m, uint32_t ci, char *buf,
		      size_t buflen, uint64_t *got);

/* "xxh3" or "crc32": the checksum ckpt_verify_chunk() checks for c. */
const char *ckpt_verify_kind(const struct ckpt_chunk *c);

#endif
