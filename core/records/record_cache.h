/* SPDX-License-Identifier: MIT */
/*
 * Reading a chunk's bytes.  A plain record is read straight from its data
 * file (io/datafiles.h).  A record stored with transforms (zstd; see
 * model/meta.h, struct ckpt_zrec) is decoded once, on first touch, into a
 * bounded LRU cache of decoded records (meta->zc, -o cache_mb), checked
 * (its decoded size, or for a torch.save archive its data.pkl against the
 * metadata and its CRC), and then served from memory like any record.
 * A record that is being decoded is decoded by one thread; the others
 * wait for it.  A record found corrupt stays failed; a read error is
 * retried next time.
 */
#ifndef CKPT_RECORD_CACHE_H
#define CKPT_RECORD_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model/meta.h"

/*
 * Read exactly len bytes at off of `file`: a data file index, or
 * CKPT_ZREC | z for record z's decoded chunk bytes.  Returns 0, or -EIO
 * (-ENOMEM) with ckpt_last_error() naming the file, offset and reason.
 * Thread-safe.
 */
int ckpt_record_pread(struct ckpt_meta *m, uint32_t file, void *buf,
		      size_t len, uint64_t off);

/*
 * Decode record z (through the cache) for a verdict: 0 when it decoded
 * and its payload carried a checksum that matched (*got: that CRC-32), 1
 * when it decoded and carried none, -EBADMSG when it is corrupt (bad
 * stream, wrong size, mismatching CRC, past the cap), -EIO / -ENOMEM when
 * it could not be read.  ckpt_last_error() has the reason.  Thread-safe.
 */
int ckpt_record_check(struct ckpt_meta *m, uint32_t z, uint64_t *got);

/*
 * Decode record `file` (CKPT_ZREC | z) now if nobody has and it fits the
 * cache beside what is there: a reader ahead of its readers calls this so
 * that records are decoded by several threads at once.  Anything else
 * (a plain data file, a record loaded, being loaded or failed) returns at
 * once.  Errors are left for the read that needs the record.  Thread-safe.
 */
void ckpt_record_warm(struct ckpt_meta *m, uint32_t file);

/* Bytes of decoded records the cache keeps (0: the default,
 * CKPT_CACHE_MB_DEFAULT MiB); also the most one record may decode to.
 * Call before serving reads. */
void ckpt_record_cache_set(struct ckpt_meta *m, uint64_t bytes);

#endif
