/* SPDX-License-Identifier: MIT */
/*
 * The mount point, checked before anything is opened or daemonized: an
 * existing directory, not already holding a ckptfs mount, empty unless
 * -o nonempty; and whether a directory is a mount point (for umount).
 */
#ifndef CKFS_MOUNTPOINT_H
#define CKFS_MOUNTPOINT_H
#include <stdbool.h>
#include <stddef.h>

/*
 * Whether mnt may be mounted on: 0, or -errno with a one-line reason in
 * err ("cannot mount on M: not a directory ...", "... it already holds
 * a ckptfs mount of SRC, world W, rank R ...", "... not empty ...").
 * nonempty: a directory holding files is accepted (-o nonempty).
 * Reads /proc/self/mountinfo and, for a ckptfs mount found there, its
 * .ckptfs/view.json.
 */
int mountpoint_check(const char *mnt, bool nonempty, char *err,
		     size_t errlen);

/* Whether path is a mount point (/proc/self/mountinfo), or a mount whose
 * daemon is gone (ENOTCONN). */
bool mountpoint_is_mounted(const char *path);
#endif
