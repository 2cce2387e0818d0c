/* SPDX-License-Identifier: MIT */
/* The mount lifecycle: validate, mount, daemonize, serve, unmount. */
#ifndef CKFS_MOUNT_RUN_H
#define CKFS_MOUNT_RUN_H

#include "mount_opts.h"

/* Validate the checkpoint fully, then mount and serve until unmounted or
 * signalled.  Errors before the mount print one line on stderr and leave
 * nothing mounted.  Returns the process exit code. */
int mount_run(const struct mount_opts *o, const char *argv0);

#endif
