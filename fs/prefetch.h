/* SPDX-License-Identifier: MIT */
/*
 * -o prefetch: fill the kernel's page cache with the view after mounting,
 * through the kernel's own read path.  A helper process reads the view's
 * files through the mount point; its READs are answered by the serving
 * threads like anyone's, so the daemon itself never writes into the page
 * cache and never waits on its own mount (see docs/prefetch.md).
 */
#ifndef CKFS_PREFETCH_H
#define CKFS_PREFETCH_H

#include <time.h>

#include "ops.h"

/* Set up fs's prefetch fields (before anything else uses fs). */
void ckfs_prefetch_init(struct ckfs *fs);

/*
 * Start prefetching: a thread lists the view's files, then forks a helper
 * process that reads them through fs->mnt (set before the call) and waits
 * for it.  Call after fuse_daemonize() (threads do not survive its fork)
 * and before the session loop: the helper's first request waits for the
 * loop.  Returns 0 or -errno.
 *
 * The helper keeps no descriptor of the FUSE device, so a daemon that is
 * killed (SIGKILL, the OOM killer) ends its connection at once: the
 * helper's requests then fail and it is killed with its parent thread
 * (PR_SET_PDEATHSIG).  No thread of the daemon ever waits on the mount.
 */
int ckfs_prefetch_start(struct ckfs *fs);

/*
 * Stop prefetching: kill the helper (SIGKILL) and wait for the thread to
 * end, until deadline (CLOCK_MONOTONIC; NULL: no limit).  While the loop
 * serves, the helper's requests in flight are answered and it dies at
 * once; after the connection has ended they fail at once.  Returns 0 once
 * the thread has ended or when none runs, -ETIMEDOUT past the deadline.
 * Thread-safe; may be called again.
 */
int ckfs_prefetch_stop_wait(struct ckfs *fs, const struct timespec *deadline);

/* Free what ckfs_prefetch_init() set up; the thread must have ended. */
void ckfs_prefetch_destroy(struct ckfs *fs);

#endif
