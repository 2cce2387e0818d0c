/* SPDX-License-Identifier: MIT */
/*
 * Finding records inside one torch.save archive (a zip, possibly zip64)
 * through its central directory, the only place torch writes real sizes:
 * its local headers carry zeros.  Only the end records, the central
 * directory and the local headers of the records asked for are read.
 *
 * The archive is reached through a read callback, so the same code serves
 * a blob inside a .distcp file and a fuzzer's buffer.
 */
#ifndef CKPT_TORCH_ZIP_H
#define CKPT_TORCH_ZIP_H

#include <stddef.h>
#include <stdint.h>

#define TZ_CD_MAX ((size_t)1 << 20)	/* central directory size cap */
#define TZ_WINDOW 1024			/* head and tail read at open; an
					 * archive of up to twice this is
					 * read whole, in one call */

/* Reads exactly len bytes at off of the archive; 0 or -errno. */
typedef int (*tz_read_fn)(void *ctx, uint64_t off, void *buf, size_t len);

struct tz_archive {
	tz_read_fn read;
	void *ctx;
	uint64_t len;		/* archive length */
	const char *where;	/* message prefix, borrowed */
	uint8_t win[2 * TZ_WINDOW];	/* the archive's head and tail */
	const uint8_t *head, *tail;	/* into win */
	size_t head_len, tail_len;
	uint8_t *cd;		/* the central directory, owned */
	uint64_t cd_off;
	size_t cd_len;
	uint64_t nent;
};

/* One record: its data at [data_off, data_off + size) of the archive. */
struct tz_record {
	uint64_t hdr_off;	/* its local file header */
	uint64_t data_off;
	uint64_t size;
	uint32_t crc32;
};

/*
 * Read the end records and the central directory of the archive of len
 * bytes behind read(ctx, ...).  where prefixes messages and must outlive
 * z.  Returns 0 (release with tz_close()) or -errno: -EINVAL for a
 * malformed archive, -EIO when read fails.
 */
int tz_open(struct tz_archive *z, tz_read_fn read, void *ctx, uint64_t len,
	    const char *where, char *err, size_t errlen);

void tz_close(struct tz_archive *z);

/*
 * Find the record whose name ends with suffix at a '/' boundary (or equals
 * it).  With prefix non-NULL, the name must be exactly prefix + suffix.
 * Returns 0 with *r filled, *name (when name is non-NULL) pointing at the
 * record's name inside z (not NUL-terminated, valid until tz_close()) and,
 * when prefix_len is non-NULL, the length of the matched name's prefix; -ENOENT when there is none (err untouched);
 * -EINVAL when the record is compressed, lies outside the archive or its
 * local header disagrees.
 */
int tz_find(struct tz_archive *z, const char *prefix, size_t plen,
	    const char *suffix, struct tz_record *r, const char **name,
	    size_t *prefix_len, char *err, size_t errlen);

/* Read record r (at most max bytes) into a new buffer (caller frees). */
int tz_read(struct tz_archive *z, const struct tz_record *r, size_t max,
	    uint8_t **out, char *err, size_t errlen);

#endif
