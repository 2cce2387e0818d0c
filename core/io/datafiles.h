/* SPDX-License-Identifier: MIT */
/*
 * The data files behind an open checkpoint, over its store (io/store.h):
 * opened and checked once (beneath the checkpoint, regular, long enough
 * for their records), then read by model file index.  The map from a
 * model file index to the store's id is the open handle's
 * (meta->opened), set here; the model itself only names the files.
 */
#ifndef CKPT_DATAFILES_H
#define CKPT_DATAFILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/store.h"
#include "model/meta.h"

/*
 * Open and check every data file of m through m->store.  Each must be a
 * regular file at least as long as its last record, reached beneath the
 * checkpoint (unless flags has CKPT_FILES_FOLLOW_SYMLINKS or m was opened
 * with follow_symlinks).  Up to max_open files stay open (0: choose from
 * RLIMIT_NOFILE, raised first with CKPT_FILES_RAISE_NOFILE).  Returns 0,
 * or -errno with a message naming the file and a key.  ckpt_meta_free()
 * closes everything.  Call once, before serving reads; not thread-safe.
 */
int ckpt_files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		    char *err, size_t errlen);

/*
 * Open data file name of s for key (keylen bytes of it, shown cut and
 * recorded as the last error's key on failure; NULL: no key), as
 * ckpt_store_open(), with the message every reader gives:
 * "ROOT/NAME: key 'K': data file " CKPT_STORE_OUTSIDE, "... data file is
 * not a regular file", "... cannot open data file: REASON".  s may be
 * NULL (an image parsed from memory): then -EBADF.
 */
int ckpt_files_open_one(struct ckpt_store *s, const char *name,
			const char *key, size_t keylen, uint32_t *id,
			struct ckpt_store_file_info *info, char *err,
			size_t errlen);

/* Read exactly len bytes of data file fi at off into buf.  Returns 0, or
 * -EIO with ckpt_last_error() naming the file, the offset and the reason
 * (the file shrank, or was replaced since it was opened).  Thread-safe. */
int ckpt_files_pread(struct ckpt_meta *m, uint32_t fi, void *buf, size_t len,
		     uint64_t off);

/*
 * Read the ranges r[0..n) as one batch (the store may run them at once):
 * on entry each r[i].id is a data file index of m, which this rewrites
 * into the store's id.  Returns as ckpt_store_read().  Thread-safe.
 */
int ckpt_files_read(struct ckpt_meta *m, struct ckpt_store_range *r,
		    size_t n);

/* Ask the store to start reading [off, off + len) of file fi now
 * (local: POSIX_FADV_WILLNEED), so the reads that follow find it ready.
 * A hint; errors are ignored.  Thread-safe. */
void ckpt_files_willneed(struct ckpt_meta *m, uint32_t fi, uint64_t off,
			 uint64_t len);

/* True when ckpt_files_open() has succeeded on m. */
bool ckpt_files_are_open(const struct ckpt_meta *m);

/* Close m's data files and free its store (for ckpt_meta_free()). */
void ckpt_files_close(struct ckpt_meta *m);

/* Everything m's store did until now was the open's: ckpt_meta_io_stats()
 * splits its counters here.  Called as ckpt_meta_open_opts() returns, and
 * again as ckpt_files_open() does (opening the data files, HEADs on S3, is
 * the open's too). */
void ckpt_meta_mark_open(struct ckpt_meta *m);

#endif
