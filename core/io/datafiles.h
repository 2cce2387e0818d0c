/* SPDX-License-Identifier: MIT */
/*
 * The data files behind a checkpoint: validated once at mount (beneath the
 * checkpoint directory, regular, long enough for their records), then read
 * with pread through a bounded cache of open fds.  Never mmap'ed: a file
 * truncated under us gives EIO, not SIGBUS.
 *
 * A file is identified by (st_dev, st_ino) when validated.  While its fd is
 * open the mount keeps reading that file even if it is deleted or replaced;
 * when the cache has to reopen it and finds another file (or none), reads
 * fail with EIO.  Bytes of two different files are never mixed.
 */
#ifndef CKPT_DATAFILES_H
#define CKPT_DATAFILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/meta.h"

/*
 * Open and check every data file of m.  Each must be a regular file at least
 * as long as its last record, reached beneath m->dir (unless flags has
 * CKPT_FILES_FOLLOW_SYMLINKS).  Up to max_open files stay open (0: choose
 * from RLIMIT_NOFILE).  Returns 0, or -errno with a message naming the file
 * and a key.  ckpt_meta_free() closes everything.  Call once, before
 * serving reads; not thread-safe.
 */
int ckpt_files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		    char *err, size_t errlen);

/* Open path read-only beneath dirfd (any symlink leading outside fails
 * with EXDEV) or, with follow, anywhere.  Returns an fd the caller closes,
 * or -1 with errno. */
int ckpt_open_beneath(int dirfd, const char *path, bool follow);

/* Read exactly len bytes of fd at off into buf (retrying short reads and
 * EINTR).  Returns 0, or -EIO on an error or end of file. */
int ckpt_pread_exact(int fd, void *buf, size_t len, uint64_t off);

/* Read exactly len bytes of file fi at off into buf.  Returns 0, or -EIO on
 * any error, short read (the file shrank), or when the file had to be
 * reopened and is no longer the one validated.  Thread-safe. */
int ckpt_files_pread(struct ckpt_meta *m, uint32_t fi, void *buf, size_t len,
		     uint64_t off);

/* Ask the kernel to start reading [off, off + len) of file fi now
 * (POSIX_FADV_WILLNEED): the reads that follow find it in the page cache.
 * A hint; errors are ignored.  Thread-safe. */
void ckpt_files_willneed(struct ckpt_meta *m, uint32_t fi, uint64_t off,
			 uint64_t len);

#endif
