/* SPDX-License-Identifier: MIT */
/*
 * Writing files beneath a directory the user named (`ckptfs extract`,
 * `ckptfs index`): no symlink below it is ever followed, an existing file
 * is replaced only when the caller asks, and a file appears under its
 * name whole or not at all, because it is written to an unnamed
 * (O_TMPFILE) or uniquely named temporary file first.
 */
#ifndef CKFS_OUT_BENEATH_H
#define CKFS_OUT_BENEATH_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Open the directory rel ("a/b/c", or "" for dirfd itself) beneath dirfd,
 * one component at a time with O_NOFOLLOW | O_DIRECTORY, creating missing
 * ones (mode 0755) when create is set.  A symlink anywhere in rel fails
 * with -ELOOP, a component that is not a directory with -ENOTDIR, an
 * empty, "." or ".." component with -EINVAL.  Returns an fd the caller
 * closes, or -errno; on failure *bad (when not NULL) is the length of the
 * prefix of rel that failed, for messages.
 */
int out_dir_open(int dirfd, const char *rel, bool create, size_t *bad);

/* A file being written: an O_TMPFILE, or a temporary name in its
 * directory when the filesystem has no O_TMPFILE. */
struct out_tmp {
	int fd;			/* read-write; -1 when none */
	bool named;		/* tmp holds the temporary's name */
	char tmp[40];
};

/* Create an empty temporary file (mode 0644 less the umask) in dirfd.
 * Returns 0, or -errno. */
int out_tmp_create(int dirfd, struct out_tmp *t);

/*
 * Give t the name name in dirfd (its directory) and close it.  Without
 * replace, an existing name (a file, a symlink, anything) is left alone
 * and -EEXIST returned, atomically; with replace, the name is replaced by
 * rename(2), so a symlink there is replaced, never written through.  On
 * failure t is discarded.  Returns 0 or -errno.
 */
int out_tmp_publish(int dirfd, struct out_tmp *t, const char *name,
		    bool replace);

/* Close t and remove its temporary name, if any.  Harmless on a t that
 * holds nothing (fd -1). */
void out_tmp_discard(int dirfd, struct out_tmp *t);

#endif
