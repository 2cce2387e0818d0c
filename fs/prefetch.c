/* SPDX-License-Identifier: MIT */
/*
 * -o prefetch through the kernel's own read path: a thread lists the
 * view's files, forks a helper process that reads them through the mount
 * point (POSIX_FADV_WILLNEED a chunk ahead, then pread), and waits for
 * it.  The daemon never writes into the page cache itself, so no kill of
 * the daemon can leave a write to the FUSE device waiting on a page lock.
 */
#include "prefetch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK ((uint64_t)8 << 20)	/* read per open of a file */
#define PIECE ((size_t)1 << 20)		/* bytes per pread */

/* The helper's exit statuses. */
enum {
	HELPER_DONE = 0,
	HELPER_ORPHAN = 2,	/* the daemon ended before it started */
	HELPER_GONE = 3,	/* a file could not be opened: unmounted */
	HELPER_READ = 4,	/* a read failed */
	HELPER_NOMEM = 5,
};

/* The files to read: paths under the mount, NUL-separated, and sizes. */
struct plist {
	char *names;
	size_t len, cap;
	uint64_t *sizes;
	size_t n, ncap;
};

static void plist_free(struct plist *l)
{
	free(l->names);
	free(l->sizes);
}

/* Append path (size bytes) to l.  Returns 0 or -ENOMEM. */
static int plist_add(struct plist *l, const char *path, uint64_t size)
{
	size_t need = strlen(path) + 1;

	if (l->cap - l->len < need) {
		size_t cap = l->cap ? l->cap : 4096;
		char *p;

		while (cap - l->len < need)
			cap *= 2;
		p = realloc(l->names, cap);
		if (!p)
			return -ENOMEM;
		l->names = p;
		l->cap = cap;
	}
	if (l->n == l->ncap) {
		size_t ncap = l->ncap ? 2 * l->ncap : 256;
		uint64_t *s = realloc(l->sizes, ncap * sizeof(*s));

		if (!s)
			return -ENOMEM;
		l->sizes = s;
		l->ncap = ncap;
	}
	memcpy(l->names + l->len, path, need);
	l->len += need;
	l->sizes[l->n++] = size;
	return 0;
}

static bool is_stopping(const struct ckfs *fs)
{
	return atomic_load_explicit(&fs->prefetch_stop, memory_order_acquire);
}

/* The path of slot's node i under the mount point, into out (PATH_MAX
 * bytes). */
static void node_path(const struct ckfs *fs, uint32_t slot, uint32_t i,
		      char *out)
{
	const struct ckpt_view *v = fs->view;
	size_t at;

	if (fs->vi.multi)
		at = (size_t)snprintf(out, PATH_MAX, "%s/rank%u/", fs->mnt,
				      ckpt_view_slot_rank(v, slot));
	else
		at = (size_t)snprintf(out, PATH_MAX, "%s/", fs->mnt);
	if (at < PATH_MAX)
		ckpt_view_path(v, i, out + at, PATH_MAX - at);
}

/* Every non-empty key file of every slot, in the view's order.  Returns
 * 0, -ENOMEM, or -ECANCELED when asked to stop. */
static int plist_build(const struct ckfs *fs, struct plist *l)
{
	const struct ckpt_view *v = fs->view;
	char *path = malloc(PATH_MAX);
	uint32_t slot, i;
	int rc = path ? 0 : -ENOMEM;

	for (slot = 0; rc == 0 && slot < fs->vi.nslots; slot++) {
		for (i = 1; rc == 0 && i < fs->vi.nnodes; i++) {
			struct ckpt_node_info ni;
			uint64_t size;

			if (is_stopping(fs))
				rc = -ECANCELED;
			else if (ckpt_view_node(v, i, &ni) == 0 &&
				 ni.type == CKPT_NODE_KEY &&
				 ckpt_view_size(v, slot, i, &size) == 0 &&
				 size > 0) {
				node_path(fs, slot, i, path);
				rc = plist_add(l, path, size);
			}
		}
	}
	free(path);
	return rc;
}

/*
 * The helper, in the child of fork(): only system calls from here on (the
 * daemon has other threads, whose locks may be held).  It dies with the
 * prefetch thread (PR_SET_PDEATHSIG), keeps none of the daemon's
 * descriptors (above all not the FUSE device: a copy here would keep the
 * connection of a killed daemon alive), and reads each file a chunk per
 * open, so that a lazy unmount frees the mount within a chunk.
 */
__attribute__((noreturn)) static void helper_main(const struct plist *l,
						  pid_t daemon_pid)
{
	const char *p = l->names;
	sigset_t none;
	char *buf;
	size_t k;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != daemon_pid)
		_exit(HELPER_ORPHAN);
	close_range(3, ~0U, 0);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	buf = mmap(NULL, PIECE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		_exit(HELPER_NOMEM);
	for (k = 0; k < l->n; k++, p += strlen(p) + 1) {
		uint64_t off, at, end;

		for (off = 0; off < l->sizes[k]; off = end) {
			int fd = open(p, O_RDONLY | O_CLOEXEC);

			if (fd < 0)
				_exit(HELPER_GONE);
			end = l->sizes[k] - off < CHUNK ? l->sizes[k] : off + CHUNK;
			/* The whole chunk's READs at once: the serving threads
			 * answer them in parallel. */
			posix_fadvise(fd, (off_t)off, (off_t)(end - off),
				      POSIX_FADV_WILLNEED);
			for (at = off; at < end;) {
				size_t want = end - at < PIECE ?
					      (size_t)(end - at) : PIECE;
				ssize_t got = pread(fd, buf, want, (off_t)at);

				if (got <= 0)
					_exit(HELPER_READ);
				at += (uint64_t)got;
			}
			close(fd);
		}
	}
	_exit(HELPER_DONE);
}

static void log_helper_end(const struct ckfs *fs, int st)
{
	if (WIFSIGNALED(st))
		ckfs_log(fs, "prefetch: the helper process was killed by signal %d; the rest is read on demand",
			 WTERMSIG(st));
	else if (WIFEXITED(st) && WEXITSTATUS(st) == HELPER_GONE)
		ckfs_log(fs, "prefetch: stopped: the mount went away");
	else if (WIFEXITED(st) && WEXITSTATUS(st) == HELPER_READ)
		ckfs_log(fs, "prefetch: stopped at a failed read; the rest is read on demand");
	else if (WIFEXITED(st) && WEXITSTATUS(st) != HELPER_DONE)
		ckfs_log(fs, "prefetch: the helper process ended with status %d",
			 WEXITSTATUS(st));
}

static void *prefetch_main(void *arg)
{
	struct ckfs *fs = arg;
	struct plist l = { 0 };
	pid_t pid = -1, daemon_pid = getpid();
	siginfo_t si;
	int rc, st = 0;

	rc = plist_build(fs, &l);
	if (rc == -ENOMEM)
		ckfs_log(fs, "prefetch: out of memory listing the view; serving without");
	pthread_mutex_lock(&fs->prefetch_lock);
	if (rc == 0 && l.n > 0 && !is_stopping(fs)) {
		pid = fork();
		if (pid == 0)
			helper_main(&l, daemon_pid);
		if (pid < 0)
			ckfs_log(fs, "prefetch: cannot start the helper process: %s",
				 strerror(errno));
		else
			fs->prefetch_pid = pid;
	}
	pthread_mutex_unlock(&fs->prefetch_lock);
	if (pid > 0) {
		/* Wait, but leave it unreaped until nobody can kill() its pid
		 * any more: a reaped pid may be reused. */
		memset(&si, 0, sizeof(si));
		while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 &&
		       errno == EINTR)
			;
		pthread_mutex_lock(&fs->prefetch_lock);
		fs->prefetch_pid = 0;
		pthread_mutex_unlock(&fs->prefetch_lock);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (!is_stopping(fs))
			log_helper_end(fs, st);
	}
	plist_free(&l);
	pthread_mutex_lock(&fs->prefetch_lock);
	fs->prefetch_done = true;
	pthread_cond_broadcast(&fs->prefetch_ended);
	pthread_mutex_unlock(&fs->prefetch_lock);
	return NULL;
}

void ckfs_prefetch_init(struct ckfs *fs)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&fs->prefetch_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&fs->prefetch_ended, &ca);
	pthread_condattr_destroy(&ca);
	fs->prefetch_running = false;
	fs->prefetch_done = false;
	fs->prefetch_pid = 0;
	atomic_init(&fs->prefetch_stop, false);
	atomic_init(&fs->busy, 0);
}

int ckfs_prefetch_start(struct ckfs *fs)
{
	int rc;

	pthread_mutex_lock(&fs->prefetch_lock);
	rc = pthread_create(&fs->prefetch_thread, NULL, prefetch_main, fs);
	fs->prefetch_running = rc == 0;
	pthread_mutex_unlock(&fs->prefetch_lock);
	return -rc;
}

int ckfs_prefetch_stop_wait(struct ckfs *fs, const struct timespec *deadline)
{
	int rc = 0;

	atomic_store_explicit(&fs->prefetch_stop, true, memory_order_release);
	pthread_mutex_lock(&fs->prefetch_lock);
	if (fs->prefetch_pid > 0)
		kill(fs->prefetch_pid, SIGKILL);
	/* Wait for its last act, then join (at once): a timed join is not
	 * one that ThreadSanitizer sees. */
	while (fs->prefetch_running && !fs->prefetch_done && rc == 0)
		rc = deadline ? pthread_cond_timedwait(&fs->prefetch_ended,
						       &fs->prefetch_lock,
						       deadline) :
				pthread_cond_wait(&fs->prefetch_ended,
						  &fs->prefetch_lock);
	if (fs->prefetch_running && fs->prefetch_done) {
		pthread_join(fs->prefetch_thread, NULL);
		fs->prefetch_running = false;
		rc = 0;
	}
	pthread_mutex_unlock(&fs->prefetch_lock);
	return rc ? -ETIMEDOUT : 0;
}

void ckfs_prefetch_destroy(struct ckfs *fs)
{
	pthread_cond_destroy(&fs->prefetch_ended);
	pthread_mutex_destroy(&fs->prefetch_lock);
}
