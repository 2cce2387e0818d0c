/* SPDX-License-Identifier: MIT */
/*
 * The daemon's signals and a shutdown that cannot hang the host.  SIGINT,
 * SIGTERM and SIGHUP are blocked in every thread and taken by one control
 * thread, which shuts down in order: cancel the reads that wait on an
 * object store (they would wait for the server's timeouts and retries),
 * stop the prefetch helper and wait for it while the FUSE workers still
 * serve, then end the session loop.  The same runs when the connection
 * ends without a signal (a fusectl abort, a lazy unmount), which the
 * control thread sees on the device within 100 ms.
 * Every wait from then on has a deadline; past it, one line says what was
 * stuck, the FUSE connection is aborted through fusectl and the process
 * exits with status 1.
 */
#ifndef CKFS_SHUTDOWN_H
#define CKFS_SHUTDOWN_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../fs/ops.h"

#define SHUTDOWN_SECONDS 3	/* the deadline, from the signal (or the
				 * loop's end) to the last release */

struct shutdown {
	struct fuse_session *se;	/* borrowed */
	struct ckfs *fs;		/* borrowed */
	struct ckpt_meta *meta;		/* borrowed: its store's reads are
					 * cancelled at a stop signal */
	const char *mnt;		/* borrowed, absolute */
	char abort_path[96];	/* the connection's fusectl abort file, or
				 * "" when it is not known */
	pthread_t main;		/* runs the session loop */
	pthread_t thread;	/* the control thread */
	bool started;
	atomic_int signo;	/* the signal that asked to stop, or 0 */
	atomic_bool loop_ended;	/* set by the main thread */
	_Atomic(const char *) stage;	/* what shutdown waits for now */
	pthread_mutex_t lock;
	pthread_cond_t cond;	/* done changed */
	bool done;		/* guarded by lock: all is released */
};

/* Reset SIGINT, SIGTERM and SIGHUP to their defaults (a shell starts
 * background jobs with SIGINT ignored), ignore SIGPIPE, and block the
 * three in the calling thread, so that every thread started later has
 * them blocked.  Call before any thread exists. */
void shutdown_block_signals(void);

/*
 * Start the control thread for session se (mounted on mnt, whose
 * connection is dev, the mount's st_dev as major:minor; dev_known false
 * when it was not found).  Call in the thread that will run the session
 * loop, after fuse_daemonize() and before the loop.  Returns 0 or -errno.
 */
int shutdown_start(struct shutdown *s, struct fuse_session *se,
		   struct ckfs *fs, struct ckpt_meta *meta, const char *mnt,
		   bool dev_known, unsigned major, unsigned minor);

/* The session loop returned (by a signal, or the mount went away): the
 * deadline starts now if no signal started it. */
void shutdown_loop_ended(struct shutdown *s);

/* Say what the main thread waits for now (a string literal), for the
 * line printed when the deadline passes. */
void shutdown_stage(struct shutdown *s, const char *what);

/* Everything is released: stop the control thread and wait for it. */
void shutdown_finish(struct shutdown *s);

/* The signal that ended the loop, or 0. */
int shutdown_signal(struct shutdown *s);

#endif
