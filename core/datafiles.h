/* SPDX-License-Identifier: MIT */
/*
 * The data files behind a checkpoint: opened once, beneath the checkpoint
 * directory, checked to be regular files long enough for their records,
 * and read with pread only (never mmap: a file truncated under us must give
 * EIO, not SIGBUS).
 */
#ifndef CKPT_DATAFILES_H
#define CKPT_DATAFILES_H

#include <stddef.h>
#include <stdint.h>

#include "meta.h"

/* Open every data file of m beneath m->dir, without following symlinks
 * out of it.  Each must be a regular file at least as long as its last
 * record.  Returns 0, or -errno with a message naming the file and key.
 * The fds are closed by ckpt_meta_free().  Not thread-safe; call once
 * before serving reads. */
int ckpt_files_open(struct ckpt_meta *m, char *err, size_t errlen);

/* Read exactly len bytes of file fi at off into buf.  Returns 0, or -EIO
 * on any error or short read (the file shrank).  Thread-safe. */
int ckpt_files_pread(const struct ckpt_meta *m, uint32_t fi, void *buf,
		     size_t len, uint64_t off);

#endif
