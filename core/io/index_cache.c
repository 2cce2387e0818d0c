/* SPDX-License-Identifier: MIT */
/*
 * The node-local index cache's files (index_cache.h): a directory of the
 * user's own, image files read without following symlinks, one lock file
 * per key, atomic writes, and a bound on how many images it keeps.
 */
#include "io/index_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckptfs.h"
#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/grow.h"

#define IMG_SUFFIX ".ckptfs-index"
#define PARSED_SUFFIX ".ckptfs-parsed"
#define LOCK_SUFFIX ".lock"
#define TMP_PREFIX ".tmp-"
#define TMP_MAX_AGE 3600	/* s: a temp file older is a crash's leftover */
#define WAIT_CAP 10		/* wait limits a heartbeat extends, at most */
#define SCAN_MAX 65536		/* directory entries looked at when pruning */

void ckpt_index_cache_key(const char *root, const char *version,
			  char hex[CKPT_INDEX_CACHE_KEY_HEX])
{
	XXH3_state_t *st = XXH3_createState();
	XXH128_hash_t h;

	if (st) {
		XXH3_128bits_reset(st);
		XXH3_128bits_update(st, root, strlen(root) + 1);
		XXH3_128bits_update(st, version, strlen(version) + 1);
		h = XXH3_128bits_digest(st);
		XXH3_freeState(st);
	} else {	/* no memory for a state: hash one string instead */
		char buf[4096];
		int n = snprintf(buf, sizeof(buf), "%s%c%s", root, 0, version);

		h = XXH3_128bits(buf, n < 0 ? 0 : (size_t)n >= sizeof(buf) ?
				 sizeof(buf) - 1 : (size_t)n);
	}
	snprintf(hex, CKPT_INDEX_CACHE_KEY_HEX, "%016llx%016llx",
		 (unsigned long long)h.high64, (unsigned long long)h.low64);
}

/* Why st (of what) may not be trusted, or NULL: not the euid's own, or
 * writable by group or others. */
static const char *untrusted(const struct stat *st)
{
	if (st->st_uid != geteuid())
		return "not owned by this user";
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return "writable by group or others";
	return NULL;
}

/*
 * Open directory path component by component, from / (or the working
 * directory for a relative path), each with O_NOFOLLOW|O_DIRECTORY
 * through its parent's fd, making the missing ones (0700): a symlink
 * anywhere in the path (planted by whoever may write to a parent) is
 * refused, never followed, and no name is resolved twice.  Returns the
 * fd, or -errno with err naming the component.
 */
static int open_dir_nofollow(const char *path, char *err, size_t errlen)
{
	char *p = strdup(path), *comp, *next;
	struct stat st;
	int fd, sub, rc;

	if (!p)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	fd = open(path[0] == '/' ? "/" : ".",
		  O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		free(p);
		return ckpt_errf(err, errlen, rc, "index cache %s: %s", path,
				 strerror(-rc));
	}
	for (comp = p; comp; comp = next) {
		next = strchr(comp, '/');
		if (next)
			*next++ = '\0';
		if (!comp[0] || !strcmp(comp, "."))
			continue;
		if (!strcmp(comp, "..")) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "index cache %s: not used: '..' in the path",
				       path);
			goto out_close;
		}
		sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			     O_CLOEXEC);
		if (sub < 0 && errno == ENOENT &&
		    (!mkdirat(fd, comp, 0700) || errno == EEXIST))
			sub = openat(fd, comp, O_RDONLY | O_DIRECTORY |
				     O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			rc = -errno;
			/* O_DIRECTORY|O_NOFOLLOW says ENOTDIR for a symlink */
			if ((rc == -ENOTDIR || rc == -ELOOP) &&
			    !fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) &&
			    S_ISLNK(st.st_mode))
				rc = ckpt_errf(err, errlen, -ELOOP,
					       "index cache %s: not used: %.*s is a symlink (no component of the path is followed)",
					       path, (int)(comp - p + strlen(comp)),
					       path);
			else
				rc = ckpt_errf(err, errlen, rc,
					       "index cache %s: cannot open %.*s: %s",
					       path, (int)(comp - p + strlen(comp)),
					       path, strerror(-rc));
			goto out_close;
		}
		close(fd);
		fd = sub;
	}
	free(p);
	return fd;
out_close:
	close(fd);
	free(p);
	return rc;
}

int ckpt_index_cache_open(const char *dir, struct ckpt_index_cache *c,
			  char *err, size_t errlen)
{
	const char *why;
	struct stat st;
	int fd, rc;

	c->dir = dir;
	c->dfd = -1;
	c->lock_fd = -1;
	c->beat = NULL;
	if (!dir || !dir[0])
		return ckpt_errf(err, errlen, -EINVAL,
				 "index cache: no directory given");
	fd = open_dir_nofollow(dir, err, errlen);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st)) {
		rc = -errno;
		close(fd);
		return ckpt_errf(err, errlen, rc, "index cache %s: %s", dir,
				 strerror(-rc));
	}
	why = untrusted(&st);
	if (why) {
		close(fd);
		return ckpt_errf(err, errlen, -EPERM,
				 "index cache %s: not used: the directory is %s",
				 dir, why);
	}
	c->dfd = fd;
	return 0;
}

/*
 * The lock fds held in this process.  flock() locks belong to the open
 * file, which fork() shares: a child forked by another thread while one
 * is held (a DataLoader worker, say) would hold it for its whole life,
 * and every other process of the node would wait for it.  So a child
 * closes its copies at once (pthread_atfork).
 */
#define HELD_MAX 64
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static int held[HELD_MAX];
static unsigned nheld;
static pthread_once_t held_once = PTHREAD_ONCE_INIT;

static void held_prepare(void)
{
	pthread_mutex_lock(&held_mu);
}

static void held_parent(void)
{
	pthread_mutex_unlock(&held_mu);
}

static void held_child(void)
{
	unsigned i;

	for (i = 0; i < nheld; i++)
		close(held[i]);
	nheld = 0;
	pthread_mutex_unlock(&held_mu);
}

static void held_init(void)
{
	(void)pthread_atfork(held_prepare, held_parent, held_child);
}

/* Track fd (add) or stop tracking it; false when the table is full. */
static bool held_track(int fd, bool add)
{
	unsigned i;
	bool ok = true;

	pthread_once(&held_once, held_init);
	pthread_mutex_lock(&held_mu);
	if (add) {
		if (nheld < HELD_MAX)
			held[nheld++] = fd;
		else
			ok = false;
	} else {
		for (i = 0; i < nheld; i++)
			if (held[i] == fd) {
				held[i] = held[--nheld];
				break;
			}
	}
	pthread_mutex_unlock(&held_mu);
	return ok;
}

/* The holder's heartbeat: the lock file's mtime, set every period. */
struct ckpt_index_beat {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;		/* guarded by mu */
	int fd;
	unsigned period_ms;
};

static void *beat_main(void *arg)
{
	struct ckpt_index_beat *b = arg;
	struct timespec t;

	pthread_mutex_lock(&b->mu);
	while (!b->stop) {
		(void)futimens(b->fd, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_sec += b->period_ms / 1000;
		t.tv_nsec += (long)(b->period_ms % 1000) * 1000000L;
		if (t.tv_nsec >= 1000000000L) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000L;
		}
		while (!b->stop &&
		       pthread_cond_timedwait(&b->cv, &b->mu, &t) == 0)
			;
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* Start beating on fd; NULL (no heartbeat: waiters may give up sooner)
 * when no thread can be made. */
static struct ckpt_index_beat *beat_start(int fd, unsigned limit_ms)
{
	struct ckpt_index_beat *b = calloc(1, sizeof(*b));
	pthread_condattr_t ca;

	if (!b)
		return NULL;
	b->fd = fd;
	b->period_ms = limit_ms / 4 < 10 ? 10 : limit_ms / 4 > 1000 ? 1000 :
		       limit_ms / 4;
	pthread_mutex_init(&b->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&b->thread, NULL, beat_main, b)) {
		pthread_cond_destroy(&b->cv);
		pthread_mutex_destroy(&b->mu);
		free(b);
		return NULL;
	}
	return b;
}

static void beat_stop(struct ckpt_index_beat *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	b->stop = true;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
	pthread_join(b->thread, NULL);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

void ckpt_index_cache_unlock(struct ckpt_index_cache *c)
{
	beat_stop(c->beat);
	c->beat = NULL;
	if (c->lock_fd >= 0) {
		(void)flock(c->lock_fd, LOCK_UN);
		held_track(c->lock_fd, false);
		close(c->lock_fd);
	}
	c->lock_fd = -1;
}

void ckpt_index_cache_close(struct ckpt_index_cache *c)
{
	ckpt_index_cache_unlock(c);
	if (c->dfd >= 0)
		close(c->dfd);
	c->dfd = -1;
}

void ckpt_index_cache_drop_lock(const struct ckpt_index_cache *c,
				const char *hex)
{
	char name[CKPT_INDEX_CACHE_KEY_HEX + sizeof(LOCK_SUFFIX)];

	if (c->lock_fd < 0)
		return;
	snprintf(name, sizeof(name), "%s%s", hex, LOCK_SUFFIX);
	(void)unlinkat(c->dfd, name, 0);
}

void ckpt_index_cache_touch(const struct ckpt_index_cache *c,
			    const char *hex)
{
	char name[CKPT_INDEX_CACHE_KEY_HEX + sizeof(IMG_SUFFIX)];

	snprintf(name, sizeof(name), "%s%s", hex, IMG_SUFFIX);
	(void)utimensat(c->dfd, name, NULL, AT_SYMLINK_NOFOLLOW);
}

/* Open c's file <hex><suffix> as ckpt_index_cache_read() says, and
 * check it: *fd (caller closes) and *size, at most max (with head: its
 * first max bytes at most), or -errno with err (-ENOENT: none). */
static int open_own(const struct ckpt_index_cache *c, const char *hex,
		    const char *suffix, size_t max, bool head, int *fd,
		    size_t *size, char *name, size_t namelen, char *err,
		    size_t errlen)
{
	const char *why;
	struct stat st;
	int rc;

	snprintf(name, namelen, "%s%s", hex, suffix);
	/* O_NONBLOCK: a FIFO put there must not block the open. */
	*fd = openat(c->dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
		     O_NONBLOCK);
	if (*fd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			return rc;
		return ckpt_errf(err, errlen, rc, "%s/%s: cannot open: %s",
				 c->dir, name, rc == -ELOOP ?
				 "a symlink (not followed)" : strerror(-rc));
	}
	if (fstat(*fd, &st)) {
		rc = ckpt_errf(err, errlen, -errno, "%s/%s: %s", c->dir, name,
			       strerror(errno));
		goto out_close;
	}
	why = S_ISREG(st.st_mode) ? untrusted(&st) : "not a regular file";
	if (why) {
		rc = ckpt_errf(err, errlen, -EPERM, "%s/%s: not used: %s",
			       c->dir, name, why);
		goto out_close;
	}
	if (head && (uint64_t)st.st_size > max)
		st.st_size = (off_t)max;
	if ((uint64_t)st.st_size > max) {
		rc = ckpt_errf(err, errlen, -EFBIG,
			       "%s/%s: %lld bytes, more than the %zu-byte metadata limit",
			       c->dir, name, (long long)st.st_size, max);
		goto out_close;
	}
	*size = (size_t)st.st_size;
	return 0;
out_close:
	close(*fd);
	*fd = -1;
	return rc;
}

/* Read c's file <hex><suffix> as ckpt_index_cache_read() says; with
 * head, only its first max bytes at most. */
static int read_own(const struct ckpt_index_cache *c, const char *hex,
		    const char *suffix, size_t max, bool head,
		    uint8_t **buf, size_t *len, char *err, size_t errlen)
{
	char name[CKPT_INDEX_CACHE_KEY_HEX + 32];
	size_t size = 0, got = 0;
	uint8_t *b;
	int fd, rc;

	*buf = NULL;
	*len = 0;
	rc = open_own(c, hex, suffix, max, head, &fd, &size, name,
		      sizeof(name), err, errlen);
	if (rc)
		return rc;
	b = malloc(size ? size : 1);
	if (!b) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_close;
	}
	while (got < size) {
		ssize_t n = pread(fd, b + got, size - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = ckpt_errf(err, errlen, n < 0 ? -errno : -EIO,
				       "%s/%s: %s", c->dir, name, n < 0 ?
				       strerror(errno) : "shorter than it was");
			free(b);
			goto out_close;
		}
		got += (size_t)n;
	}
	*buf = b;
	*len = got;
out_close:
	close(fd);
	return rc;
}

bool ckpt_index_cache_has_image(const struct ckpt_index_cache *c,
				const char *hex)
{
	char name[CKPT_INDEX_CACHE_KEY_HEX + sizeof(IMG_SUFFIX)];
	struct stat st;

	snprintf(name, sizeof(name), "%s%s", hex, IMG_SUFFIX);
	return !fstatat(c->dfd, name, &st, AT_SYMLINK_NOFOLLOW);
}

int ckpt_index_cache_read(const struct ckpt_index_cache *c, const char *hex,
			  size_t max, uint8_t **buf, size_t *len, char *err,
			  size_t errlen)
{
	return read_own(c, hex, IMG_SUFFIX, max, false, buf, len, err, errlen);
}

int ckpt_index_cache_read_head(const struct ckpt_index_cache *c,
			       const char *hex, size_t max, uint8_t **buf,
			       size_t *len, char *err, size_t errlen)
{
	return read_own(c, hex, IMG_SUFFIX, max, true, buf, len, err, errlen);
}

int ckpt_index_cache_map_parsed(const struct ckpt_index_cache *c,
				const char *hex, size_t max, uint8_t **map,
				size_t *len, char *err, size_t errlen)
{
	char name[CKPT_INDEX_CACHE_KEY_HEX + 32];
	size_t size = 0;
	void *p;
	int fd, rc;

	*map = NULL;
	*len = 0;
	rc = open_own(c, hex, PARSED_SUFFIX, max, false, &fd, &size, name,
		      sizeof(name), err, errlen);
	if (rc)
		return rc;
	if (!size) {
		close(fd);
		return ckpt_errf(err, errlen, -EINVAL, "%s/%s: empty", c->dir,
				 name);
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	rc = p == MAP_FAILED ? -errno : 0;
	close(fd);
	if (rc)
		return ckpt_errf(err, errlen, rc, "%s/%s: cannot map: %s",
				 c->dir, name, strerror(-rc));
	*map = p;
	*len = size;
	return 0;
}

static uint64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static unsigned wait_limit(void)
{
	const char *e = getenv("CKPTFS_INDEX_CACHE_WAIT_MS");
	char *end;
	unsigned long v;

	if (!e || !*e)
		return CKPT_INDEX_CACHE_WAIT_MS;
	errno = 0;
	v = strtoul(e, &end, 10);
	if (errno || *end || v > 3600000ul)
		return CKPT_INDEX_CACHE_WAIT_MS;
	return (unsigned)v;
}

int ckpt_index_cache_lock(struct ckpt_index_cache *c, const char *hex,
			  char *err, size_t errlen)
{
	return ckpt_index_cache_lock_for(c, hex, 0, err, errlen);
}

int ckpt_index_cache_lock_for(struct ckpt_index_cache *c, const char *hex,
			      unsigned max_ms, char *err, size_t errlen)
{
	char name[CKPT_INDEX_CACHE_KEY_HEX + sizeof(LOCK_SUFFIX)];
	unsigned nap, limit = wait_limit();
	uint64_t now, last_beat, start;
	struct timespec seen = { 0 };
	struct stat st;
	int fd, rc;

	snprintf(name, sizeof(name), "%s%s", hex, LOCK_SUFFIX);
	fd = openat(c->dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC |
		    O_NONBLOCK, 0600);
	if (fd < 0) {
		rc = -errno;
		return ckpt_errf(err, errlen, rc, "%s/%s: cannot open: %s",
				 c->dir, name, strerror(-rc));
	}
	/* tracked before it is locked: a fork in between is covered too */
	if (!held_track(fd, true)) {
		close(fd);
		return ckpt_errf(err, errlen, -EMFILE,
				 "%s/%s: this process holds %u cache locks already",
				 c->dir, name, HELD_MAX);
	}
	/* Polled, not blocking: a holder that is stopped or hung (no
	 * heartbeat) must not hold up every other process of the node for
	 * good, and a dead one has released its flock by the next poll.  One
	 * loop, one sleep: the place for a cancellation check. */
	start = last_beat = now = mono_ms();
	for (nap = 1; flock(fd, LOCK_EX | LOCK_NB); ) {
		rc = -errno;
		if (rc != -EWOULDBLOCK && rc != -EINTR) {
			held_track(fd, false);
			close(fd);
			return ckpt_errf(err, errlen, rc,
					 "%s/%s: cannot lock: %s", c->dir,
					 name, strerror(-rc));
		}
		if (ckpt_is_cancelled()) {	/* the caller's Ctrl-C */
			held_track(fd, false);
			close(fd);
			return ckpt_errf(err, errlen, -ECANCELED,
					 "%s/%s: cancelled while waiting",
					 c->dir, name);
		}
		now = mono_ms();
		if (!fstat(fd, &st) && (st.st_mtim.tv_sec != seen.tv_sec ||
					st.st_mtim.tv_nsec != seen.tv_nsec)) {
			if (seen.tv_sec || seen.tv_nsec)
				last_beat = now;	/* the holder lives */
			seen = st.st_mtim;
		}
		if (now - last_beat >= limit) {
			held_track(fd, false);
			close(fd);
			return ckpt_errf(err, errlen, -ETIMEDOUT,
					 "%s/%s: held by another process, with no heartbeat for %u ms (waited %" PRIu64 " ms)",
					 c->dir, name, limit, now - start);
		}
		/* A heartbeat shows the holder's process lives, not that its
		 * indexing moves (a thread stuck on a hung file system beats
		 * on): past WAIT_CAP limits, index without the cache. */
		if (now - start >= (uint64_t)limit * WAIT_CAP) {
			held_track(fd, false);
			close(fd);
			return ckpt_errf(err, errlen, -ETIMEDOUT,
					 "%s/%s: held by another process for %" PRIu64 " ms, %u times the wait limit, heartbeat or not",
					 c->dir, name, now - start, WAIT_CAP);
		}
		if (max_ms && now - start >= max_ms) {
			held_track(fd, false);
			close(fd);
			return ckpt_errf(err, errlen, -ETIMEDOUT,
					 "%s/%s: held by another process (waited %" PRIu64 " ms, at most %u)",
					 c->dir, name, now - start, max_ms);
		}
		nanosleep(&(struct timespec){ 0, (long)nap * 1000000L }, NULL);
		if (nap < CKPT_INDEX_CACHE_POLL_MS)
			nap = nap * 2 > CKPT_INDEX_CACHE_POLL_MS ?
			      CKPT_INDEX_CACHE_POLL_MS : nap * 2;
	}
	c->lock_fd = fd;
	c->beat = beat_start(fd, limit);
	return 0;
}

struct entry {
	int64_t sec, nsec;
	char *name;
};

static int cmp_age(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->sec != y->sec)
		return x->sec < y->sec ? -1 : 1;
	return x->nsec < y->nsec ? -1 : x->nsec > y->nsec;
}

/* Whether s starts with 32 lowercase hex digits (a key) followed by
 * suffix exactly. */
static bool is_key_name(const char *s, const char *suffix)
{
	unsigned i;

	for (i = 0; i < CKPT_INDEX_CACHE_KEY_HEX - 1; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return !strcmp(s + i, suffix);
}

/* A temp file's name: TMP_PREFIX, a key, '.', base-36 digits. */
static bool is_tmp_name(const char *s)
{
	size_t i = sizeof(TMP_PREFIX) - 1, k = i + CKPT_INDEX_CACHE_KEY_HEX - 1;

	if (strncmp(s, TMP_PREFIX, i) || strlen(s) < k + 2 || s[k] != '.')
		return false;
	for (; i < k; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	for (i = k + 1; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'z')))
			return false;
	return true;
}

/* Remove name from c's directory when it is a regular file of the euid's
 * own (what the cache made); anything else there is left alone. */
static void remove_own(const struct ckpt_index_cache *c, const char *name)
{
	struct stat st;

	if (!fstatat(c->dfd, name, &st, AT_SYMLINK_NOFOLLOW) &&
	    S_ISREG(st.st_mode) && st.st_uid == geteuid())
		(void)unlinkat(c->dfd, name, 0);
}

/* Remove parsed form name (<hex>.ckptfs-parsed) when hex has no image. */
static void remove_orphan(const struct ckpt_index_cache *c, const char *name)
{
	char img[CKPT_INDEX_CACHE_KEY_HEX + sizeof(IMG_SUFFIX)];
	struct stat st;

	snprintf(img, sizeof(img), "%.*s%s", CKPT_INDEX_CACHE_KEY_HEX - 1,
		 name, IMG_SUFFIX);
	if (fstatat(c->dfd, img, &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT)
		remove_own(c, name);
}

/* Remove the oldest images beyond CKPT_INDEX_CACHE_MAX (and their lock
 * files), and temp files a crashed writer left: only regular files of
 * the euid's own whose names are the cache's own (<32 hex>.ckptfs-index,
 * <32 hex>.ckptfs-parsed, <32 hex>.lock, .tmp-<32 hex>.<base 36>), and
 * parsed forms whose image is gone.  Best effort. */
static void prune(const struct ckpt_index_cache *c)
{
	struct entry *e = NULL;
	size_t n = 0, cap = 0, i, seen = 0;
	struct dirent *d;
	DIR *dir;
	int fd;

	fd = openat(c->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return;
	}
	while ((d = readdir(dir)) && seen++ < SCAN_MAX) {
		bool img = is_key_name(d->d_name, IMG_SUFFIX);
		bool tmp = !img && is_tmp_name(d->d_name);
		struct stat st;

		if (!img && !tmp && is_key_name(d->d_name, PARSED_SUFFIX)) {
			remove_orphan(c, d->d_name);
			continue;
		}
		if ((!img && !tmp) ||
		    fstatat(c->dfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode) || st.st_uid != geteuid())
			continue;
		if (tmp) {
			if (st.st_mtim.tv_sec + TMP_MAX_AGE < time(NULL))
				remove_own(c, d->d_name);
			continue;
		}
		if (ckpt_grow((void **)&e, &cap, n + 1, sizeof(*e)))
			break;
		e[n].name = strdup(d->d_name);
		if (!e[n].name)
			break;
		e[n].sec = st.st_mtim.tv_sec;
		e[n].nsec = st.st_mtim.tv_nsec;
		n++;
	}
	closedir(dir);
	if (n > CKPT_INDEX_CACHE_MAX) {
		qsort(e, n, sizeof(*e), cmp_age);
		for (i = 0; i < n - CKPT_INDEX_CACHE_MAX; i++) {
			size_t k = strlen(e[i].name) - (sizeof(IMG_SUFFIX) - 1);
			char lock[NAME_MAX + 1];

			remove_own(c, e[i].name);
			if (k + sizeof(PARSED_SUFFIX) <= sizeof(lock)) {
				memcpy(lock, e[i].name, k);
				memcpy(lock + k, PARSED_SUFFIX,
				       sizeof(PARSED_SUFFIX));
				remove_own(c, lock);
				memcpy(lock + k, LOCK_SUFFIX,
				       sizeof(LOCK_SUFFIX));
				remove_own(c, lock);
			}
		}
	}
	for (i = 0; i < n; i++)
		free(e[i].name);
	free(e);
}

/* A new file TMP_PREFIX<hex>.<random base-36 digits> made in the opened
 * directory itself (openat on its fd: mkostemp() takes a path, which
 * resolves again, perhaps elsewhere once a parent directory was renamed
 * or replaced); its name into tmp.  Returns the fd, or -1 with errno. */
static int make_temp(const struct ckpt_index_cache *c, const char *hex,
		     char *tmp, size_t tmplen)
{
	static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	unsigned tries, i;
	uint64_t r;
	int fd;

	for (tries = 0; tries < 100; tries++) {
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
			r = (uint64_t)time(NULL) * 1000003u ^
			    (uint64_t)getpid() << 20 ^ tries;
		snprintf(tmp, tmplen, TMP_PREFIX "%s.", hex);
		for (i = (unsigned)strlen(tmp); i + 1 < tmplen && r; r /= 36)
			tmp[i++] = digits[r % 36];
		tmp[i] = '\0';
		fd = openat(c->dfd, tmp, O_RDWR | O_CREAT | O_EXCL |
			    O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1;
}

_Static_assert(sizeof(((struct ckpt_index_staged *)0)->tmp) >=
	       sizeof(TMP_PREFIX) + CKPT_INDEX_CACHE_KEY_HEX + 8 &&
	       sizeof(((struct ckpt_index_staged *)0)->name) >=
	       CKPT_INDEX_CACHE_KEY_HEX + sizeof(IMG_SUFFIX) &&
	       sizeof(((struct ckpt_index_staged *)0)->name) >=
	       CKPT_INDEX_CACHE_KEY_HEX + sizeof(PARSED_SUFFIX),
	       "a staged file's names fit");

/* Write iov[0..n) (n at most 32) whole to fd, c's temp file tmp.
 * Returns 0 or -errno with err. */
static int write_temp(const struct ckpt_index_cache *c, int fd,
		      const char *tmp, const struct iovec *iov, int n,
		      char *err, size_t errlen)
{
	struct iovec v[32];
	int i = 0;

	if (n > 32)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s/%s: %d pieces to write, more than 32",
				 c->dir, tmp, n);
	memcpy(v, iov, (size_t)n * sizeof(*v));
	while (i < n) {
		ssize_t got = writev(fd, v + i, n - i);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return ckpt_errf(err, errlen, got < 0 ? -errno : -EIO,
					 "%s/%s: cannot write: %s", c->dir,
					 tmp, got < 0 ? strerror(errno) :
					 "no progress");
		while (i < n && (size_t)got >= v[i].iov_len)
			got -= (ssize_t)v[i++].iov_len;
		if (i < n) {
			v[i].iov_base = (uint8_t *)v[i].iov_base + got;
			v[i].iov_len -= (size_t)got;
		}
	}
	return 0;
}

/* iov[0..n) written to a new temp file of c, to be <hex><suffix>, not
 * fsynced (a cache file torn by a crash fails its own checks at the next
 * open, which says so and writes it again): 0 and *sg, or -errno with
 * err and nothing left. */
static int stage_iov(const struct ckpt_index_cache *c, const char *hex,
		     const char *suffix, const struct iovec *iov, int n,
		     struct ckpt_index_staged *sg, char *err, size_t errlen)
{
	int rc;

	snprintf(sg->name, sizeof(sg->name), "%s%s", hex, suffix);
	sg->fd = make_temp(c, hex, sg->tmp, sizeof(sg->tmp));
	if (sg->fd < 0)
		return ckpt_errf(err, errlen, -errno,
				 "index cache %s: cannot create a file: %s",
				 c->dir, strerror(errno));
	rc = write_temp(c, sg->fd, sg->tmp, iov, n, err, errlen);
	if (rc)
		ckpt_index_cache_unstage(c, sg);
	return rc;
}

/* Rename sg's temp file into place (on failure -errno with err, and the
 * temp file removed); sg is ended either way. */
static int rename_staged(const struct ckpt_index_cache *c,
			 struct ckpt_index_staged *sg, char *err,
			 size_t errlen)
{
	int rc;

	if (renameat(c->dfd, sg->tmp, c->dfd, sg->name)) {
		rc = ckpt_errf(err, errlen, -errno,
			       "%s/%s: cannot rename to %s: %s", c->dir,
			       sg->tmp, sg->name, strerror(errno));
		ckpt_index_cache_unstage(c, sg);
		return rc;
	}
	close(sg->fd);
	sg->fd = -1;
	return 0;
}

int ckpt_index_cache_stage(const struct ckpt_index_cache *c,
			   const char *hex, const struct iovec *iov, int n,
			   struct ckpt_index_staged *sg, char *err,
			   size_t errlen)
{
	return stage_iov(c, hex, IMG_SUFFIX, iov, n, sg, err, errlen);
}

int ckpt_index_cache_map_staged(const struct ckpt_index_cache *c,
				const struct ckpt_index_staged *sg, size_t len,
				const uint8_t **map, char *err, size_t errlen)
{
	void *p;

	*map = NULL;
	if (sg->fd < 0 || !len)
		return ckpt_errf(err, errlen, -EINVAL,
				 "index cache %s: nothing staged to map",
				 c->dir);
	p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, sg->fd, 0);
	if (p == MAP_FAILED)
		return ckpt_errf(err, errlen, -errno,
				 "%s/%s: cannot map: %s", c->dir, sg->tmp,
				 strerror(errno));
	*map = p;
	return 0;
}

int ckpt_index_cache_commit(const struct ckpt_index_cache *c,
			    struct ckpt_index_staged *sg, char *err,
			    size_t errlen)
{
	int rc = rename_staged(c, sg, err, errlen);

	if (!rc)
		prune(c);
	return rc;
}

void ckpt_index_cache_unstage(const struct ckpt_index_cache *c,
			      struct ckpt_index_staged *sg)
{
	if (sg->fd < 0)
		return;
	close(sg->fd);
	sg->fd = -1;
	(void)unlinkat(c->dfd, sg->tmp, 0);
}

int ckpt_index_cache_write(const struct ckpt_index_cache *c, const char *hex,
			   const uint8_t *img, size_t len, char *err,
			   size_t errlen)
{
	struct iovec iov = { (void *)img, len };
	struct ckpt_index_staged sg;
	int rc;

	rc = ckpt_index_cache_stage(c, hex, &iov, 1, &sg, err, errlen);
	return rc ? rc : ckpt_index_cache_commit(c, &sg, err, errlen);
}

int ckpt_index_cache_write_parsed(const struct ckpt_index_cache *c,
				  const char *hex, const struct iovec *iov,
				  int n, char *err, size_t errlen)
{
	struct ckpt_index_staged sg;
	int rc;

	rc = stage_iov(c, hex, PARSED_SUFFIX, iov, n, &sg, err, errlen);
	return rc ? rc : rename_staged(c, &sg, err, errlen);
}
