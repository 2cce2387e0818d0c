/* SPDX-License-Identifier: MIT */
/*
 * Signals and an ordered, bounded shutdown: see shutdown.h.
 *
 * Why in this order: the prefetch helper reads through the mount, and a
 * request of it that a serving thread has taken must be answered before
 * the helper can die, so the helper is stopped while the workers serve.
 * Reads that wait on an object store are cancelled first, so that they
 * answer within the deadline.  The same order runs whether a signal, the
 * end of the connection (a fusectl abort, a lazy unmount) or the loop's
 * own return started it.
 */
#include "shutdown.h"

#include "../fs/prefetch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 100		/* how often the control thread looks up */
#define WAKE_MS 20		/* how often it pokes the loop to return */
#define WAKE_SIGNAL SIGUSR1	/* interrupts the loop's wait; does
				 * nothing else */
#define FUSECTL "/sys/fs/fuse/connections"

static void stop_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
}

static void wake_handler(int sig)
{
	(void)sig;
}

void shutdown_block_signals(void)
{
	struct sigaction sa;
	sigset_t set;

	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	/* No SA_RESTART: the loop's sem_wait() or read() returns EINTR and
	 * the loop sees that the session has exited. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = wake_handler;
	sigemptyset(&sa.sa_mask);
	sigaction(WAKE_SIGNAL, &sa, NULL);
	stop_set(&set);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void deadline_in(struct timespec *ts, int seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += seconds;
}

static bool is_past(const struct timespec *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline->tv_sec ||
	       (now.tv_sec == deadline->tv_sec &&
		now.tv_nsec >= deadline->tv_nsec);
}

/* Write "1" to the connection's fusectl abort file, mounting fusectl
 * first when nobody has.  Returns 0 or -errno. */
static int abort_connection(const struct shutdown *s)
{
	int fd, rc = 0;

	if (!s->abort_path[0])
		return -ENOENT;
	fd = open(s->abort_path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT &&
	    mount("fusectl", FUSECTL, "fusectl", 0, NULL) == 0)
		fd = open(s->abort_path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "1", 1) != 1)
		rc = -errno;
	close(fd);
	return rc;
}

static void say(const struct shutdown *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void say(const struct shutdown *s, const char *fmt, ...)
{
	char raw[1024], line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	ckpt_line_for_msg(raw, line, sizeof(line));
	fprintf(stderr, "ckptfs: %s\n", line);
	if (s->fs->use_syslog)
		syslog(LOG_ERR, "%s", line);
}

/* The deadline passed: say what was stuck, abort the connection (every
 * request waiting on it fails, every page lock it held is released),
 * detach the mount and exit. */
__attribute__((noreturn)) static void stuck(const struct shutdown *s)
{
	const char *what = atomic_load(&s->stage);
	unsigned busy = atomic_load(&s->fs->busy);
	int rc = abort_connection(s);

	if (rc)
		say(s, "shutdown stuck for %d s %s (%u reads in progress); cannot abort the FUSE connection through %s: %s",
		    SHUTDOWN_SECONDS, what, busy,
		    s->abort_path[0] ? s->abort_path : FUSECTL,
		    strerror(-rc));
	else
		say(s, "shutdown stuck for %d s %s (%u reads in progress); aborted the FUSE connection (%s)",
		    SHUTDOWN_SECONDS, what, busy, s->abort_path);
	umount2(s->mnt, MNT_DETACH);	/* best effort: needs root */
	_exit(1);
}

/*
 * Has the connection ended (aborted through fusectl, or its mount gone
 * after a lazy unmount)?  The device then polls POLLERR, which poll()
 * reports whatever events were asked for: with none asked, nothing else
 * wakes it.  The loop itself sees it only when each serving thread has
 * finished its request, which may wait on an object store.
 */
static bool is_connection_gone(const struct shutdown *s)
{
	struct pollfd p = { .fd = fuse_session_fd(s->se), .events = 0 };

	return p.fd >= 0 && poll(&p, 1, 0) == 1 &&
	       (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

static void *control_main(void *arg)
{
	struct shutdown *s = arg;
	struct timespec tick = { 0, TICK_MS * 1000000L };
	struct timespec wake = { 0, WAKE_MS * 1000000L };
	struct timespec deadline;
	bool gone = false;
	sigset_t set;
	int sig = 0;

	sigemptyset(&set);
	sigaddset(&set, WAKE_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	stop_set(&set);
	while (!atomic_load(&s->loop_ended)) {
		sig = sigtimedwait(&set, NULL, &tick);
		if (sig > 0)
			break;
		if (is_connection_gone(s)) {
			gone = true;
			break;
		}
	}
	deadline_in(&deadline, SHUTDOWN_SECONDS);
	if (sig > 0)
		atomic_store(&s->signo, sig);
	/* A signal, a connection that ended, or a loop that returned by
	 * itself: the same order, within the same deadline.  Reads waiting
	 * on an object store end now (EINTR), so that the workers and the
	 * prefetch thread answer within the deadline instead of after the
	 * store's timeouts and retries. */
	ckpt_meta_cancel(s->meta);
	shutdown_stage(s, "waiting for the prefetch thread to stop");
	if (ckfs_prefetch_stop_wait(s->fs, &deadline))
		stuck(s);
	if (sig > 0 || gone) {
		shutdown_stage(s, "waiting for the serving threads to finish their requests");
		fuse_session_exit(s->se);
		/* The loop may have been about to wait when the first poke
		 * came: poke until it has returned. */
		while (!atomic_load(&s->loop_ended)) {
			if (is_past(&deadline))
				stuck(s);
			pthread_kill(s->main, WAKE_SIGNAL);
			nanosleep(&wake, NULL);
		}
	}
	pthread_mutex_lock(&s->lock);
	while (!s->done) {
		if (pthread_cond_timedwait(&s->cond, &s->lock, &deadline) ==
		    ETIMEDOUT && !s->done) {
			pthread_mutex_unlock(&s->lock);
			stuck(s);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int shutdown_start(struct shutdown *s, struct fuse_session *se,
		   struct ckfs *fs, struct ckpt_meta *meta, const char *mnt,
		   bool dev_known, unsigned major, unsigned minor)
{
	pthread_condattr_t ca;
	int rc;

	memset(s, 0, sizeof(*s));
	s->se = se;
	s->fs = fs;
	s->meta = meta;
	s->mnt = mnt;
	s->main = pthread_self();
	atomic_init(&s->signo, 0);
	atomic_init(&s->loop_ended, false);
	atomic_init(&s->stage, "waiting for the session loop to end");
	/* fusectl names a connection by the kernel's dev_t of the mount:
	 * MKDEV(major, minor), major << 20 | minor. */
	if (dev_known)
		snprintf(s->abort_path, sizeof(s->abort_path),
			 FUSECTL "/%u/abort", major << 20 | minor);
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	rc = pthread_create(&s->thread, NULL, control_main, s);
	if (rc) {
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->lock);
		return -rc;
	}
	s->started = true;
	return 0;
}

void shutdown_loop_ended(struct shutdown *s)
{
	atomic_store(&s->loop_ended, true);
}

void shutdown_stage(struct shutdown *s, const char *what)
{
	atomic_store(&s->stage, what);
}

void shutdown_finish(struct shutdown *s)
{
	if (!s->started)
		return;
	pthread_mutex_lock(&s->lock);
	s->done = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	s->started = false;
}

int shutdown_signal(struct shutdown *s)
{
	return atomic_load(&s->signo);
}
