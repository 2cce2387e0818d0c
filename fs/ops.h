/* SPDX-License-Identifier: MIT */
/*
 * The FUSE low-level operations that serve a view.  Every handler sends
 * exactly one reply; core's -errno results become fuse_reply_err().
 */
#ifndef CKFS_OPS_H
#define CKFS_OPS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "ckptfs.h"

/* What the handlers share; owned by the caller of fuse_session_new(),
 * read-only while the session runs. */
struct ckfs {
	const struct ckpt_view *view;	/* borrowed */
	struct ckpt_view_info vi;	/* ckpt_view_info() of view */
	struct timespec mtime;		/* of the checkpoint's metadata */
	bool use_syslog;		/* daemonized: log to syslog */
	uid_t uid;
	gid_t gid;
	double timeout;			/* entry and attr timeout, seconds */
	bool debug;
	bool no_open;			/* set in init: kernel skips opens */
	char readahead_path[128];	/* sysfs knob, "" = leave it */
	unsigned readahead_kb;
	int tuned;			/* atomic; set once readahead is set */
	struct ckpt_readahead *ra;	/* -o ahead_kb; borrowed, or NULL */
	/* -o prefetch (fs/prefetch.h): a thread and its helper process,
	 * which reads the view through the mount point. */
	const char *mnt;		/* borrowed, absolute */
	pthread_mutex_t prefetch_lock;	/* guards the four below */
	pthread_cond_t prefetch_ended;	/* prefetch_done was set */
	pthread_t prefetch_thread;
	bool prefetch_running;		/* started and not joined */
	bool prefetch_done;		/* its last act: about to return */
	pid_t prefetch_pid;		/* the helper, unreaped; 0: none */
	atomic_bool prefetch_stop;	/* set by ckfs_prefetch_stop_wait() */
	atomic_uint busy;		/* reads being served now */
};

/* Log one line of an error (a failed read: file, offset, key), at most a
 * few lines per second; to stderr, or to syslog when fs->use_syslog. */
void ckfs_log(const struct ckfs *fs, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* -o verify's report (struct ckpt_view_opts.report, with the struct ckfs
 * as ctx): a corrupt record, one line, to stderr, or to syslog when
 * daemonized.  Not rate-limited: each record is reported once. */
void ckfs_report_corrupt(void *ctx, const char *line);

/* The operations table, to pass to fuse_session_new() with a struct ckfs
 * as userdata. */
extern const struct fuse_lowlevel_ops ckfs_ops;

/* Free the calling thread's read buffer (serving threads free theirs when
 * they exit; the main thread calls this after the loop). */
void ckfs_release_thread_buffer(void);

#endif
