/* SPDX-License-Identifier: MIT */
/*
 * Reading a chunk's bytes.  A plain record is read straight from its data
 * file (io/datafiles.h).  A record stored with transforms (zstd; see
 * model/meta.h, struct ckpt_zrec) is decoded once, on first touch, into a
 * bounded LRU cache of decoded records, checked (its decoded size, or for
 * a torch.save archive its data.pkl against the metadata and its CRC),
 * and then served from memory like any record.
 *
 * The cache is an object of its own, owned by the open handle
 * (meta->records): the meta stays immutable.  Its byte budget holds while
 * work is in flight: every buffer a decode holds (the stored bytes, each
 * layer's output, zstd's context and window, a gathered copy) is reserved
 * under the cache's lock before it is allocated, and a loaded record stays
 * counted until it is evicted, so loaded + reserved never passes the cap.
 * A record is decoded by one thread; the others wait for it.  A decode
 * that does not fit waits on the condition variable, holding nothing,
 * until records are released and evicted (a record being read, or read
 * in the last few milliseconds, is evicted only once idle, so streaming
 * readers do not evict each other's records at every read); a record that
 * could never fit (more than the per-record limit) fails at once.  A
 * record found corrupt stays failed; a read error is retried next time.
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
 * cache beside what is there, without evicting or waiting: a reader ahead
 * of its readers calls this so that records are decoded by several
 * threads at once.  The check and the claim are one step under the lock.
 * Anything else (a plain data file, a record loaded, being loaded or
 * failed, no room) returns at once.  Errors are left for the read that
 * needs the record.  Thread-safe.
 */
void ckpt_record_warm(struct ckpt_meta *m, uint32_t file);

/*
 * Make m's record cache: cap bytes in all (0: CKPT_CACHE_MB MiB), of which
 * one record's decode may hold at most record_max (0, or more than cap:
 * cap); that is also the most a record may decode to.  Call once, when
 * the meta is opened, before any read (a meta read without it gets a
 * cache with the defaults on first use).  Returns 0 or -ENOMEM.
 */
int ckpt_record_cache_setup(struct ckpt_meta *m, uint64_t cap,
			    uint64_t record_max);

/* Free a record cache and every decoded record.  Accepts NULL.  No read
 * may be running.  (ckpt_meta_free() calls this.) */
void ckpt_record_cache_free(struct ckpt_record_cache *c);

/* A snapshot of a record cache's accounting. */
struct ckpt_record_cache_stats {
	uint64_t cap;		/* bytes in all */
	uint64_t record_max;	/* the most one decode may hold */
	uint64_t used;		/* decoded records kept now */
	uint64_t reserved;	/* held by decodes in progress now */
	uint64_t high_water;	/* the most used + reserved has been */
	uint64_t loads;		/* decodes started */
	uint64_t waits;		/* times a decode waited for room */
	uint64_t retries;	/* decodes started again with a larger
				 * reservation */
};

/* Fill *out (all zero when m has no cache yet).  Thread-safe. */
void ckpt_record_cache_stats(struct ckpt_meta *m,
			     struct ckpt_record_cache_stats *out);

/* Record z's state in the cache, for tests. */
enum ckpt_record_state {
	CKPT_RECORD_COLD,	/* not in memory */
	CKPT_RECORD_LOADING,	/* being decoded by one thread */
	CKPT_RECORD_LOADED,
	CKPT_RECORD_FAILED,	/* corrupt: reads get -EBADMSG */
};
enum ckpt_record_state ckpt_record_state(struct ckpt_meta *m, uint32_t z);

#endif
