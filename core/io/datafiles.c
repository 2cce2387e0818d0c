/* SPDX-License-Identifier: MIT */
/* Opening, caching and reading the data files: see datafiles.h. */
#include "io/datafiles.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/errbuf.h"

#define FD_CAP_MAX 4096
#define FD_RESERVED 32	/* for /dev/fuse, stdio, the metadata, ... */

/*
 * Every read of a data file asks for exactly the bytes a view needs, in
 * runs of up to a few MiB: the kernel's readahead would only add bytes
 * nobody asked for (2x on a cold cache for a rank's rows), so it is off.
 */
static void no_readahead(int fd)
{
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
}

/* openat2 with RESOLVE_BENEATH: a path (or a symlink in it) that leads
 * outside dirfd fails with EXDEV.  O_NONBLOCK so a FIFO cannot hang us. */
int ckpt_open_beneath(int dirfd, const char *path, bool follow)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
		.resolve = follow ? RESOLVE_NO_MAGICLINKS :
			   RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd;

	fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS)	/* kernels before 5.6 */
		fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK |
			    O_NOCTTY | (follow ? 0 : O_NOFOLLOW));
	if (fd >= 0)
		no_readahead((int)fd);
	return (int)fd;
}

int ckpt_pread_exact(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got,
				  (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}

/* How many data files may stay open: the soft limit (raised to the hard
 * one) less a reserve. */
static uint32_t choose_cap(void)
{
	struct rlimit rl;
	rlim_t n;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 64;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	n = rl.rlim_cur;
	if (n > FD_CAP_MAX + FD_RESERVED)
		return FD_CAP_MAX;
	return n > FD_RESERVED + 4 ? (uint32_t)(n - FD_RESERVED) : 4;
}

/* LRU list of open files, guarded by m->fds.lock. */
static void lru_unlink(struct ckpt_meta *m, uint32_t fi)
{
	ckpt_lru_unlink(&m->fds.lru, &m->files[0].lru, sizeof(*m->files), fi);
}

static void lru_push_front(struct ckpt_meta *m, uint32_t fi)
{
	ckpt_lru_push(&m->fds.lru, &m->files[0].lru, sizeof(*m->files), fi);
}

/* Close least recently used files nobody is reading until below the cap. */
static void evict(struct ckpt_meta *m)
{
	uint32_t fi = m->fds.lru.tail;

	while (m->fds.nopen >= m->fds.cap && fi != CKPT_NONE) {
		uint32_t prev = m->files[fi].lru.prev;

		if (m->files[fi].refs == 0) {
			lru_unlink(m, fi);
			close(m->files[fi].fd);
			m->files[fi].fd = -1;
			m->fds.nopen--;
		}
		fi = prev;
	}
}

/* Open file fi and check it is the file validated at mount. */
static int reopen(struct ckpt_meta *m, uint32_t fi)
{
	struct ckpt_file *f = &m->files[fi];
	struct stat st;
	int fd, flags;

	fd = ckpt_open_beneath(m->dirfd, m->strings + f->path, m->fds.follow_symlinks);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != f->dev ||
	    (uint64_t)st.st_ino != f->ino ||
	    st.st_ctim.tv_sec != f->ctime_sec ||
	    st.st_ctim.tv_nsec != f->ctime_nsec) {
		close(fd);
		return -ESTALE;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	return fd;
}

static int acquire(struct ckpt_meta *m, uint32_t fi)
{
	struct ckpt_file *f = &m->files[fi];
	int fd;

	if (m->fds.pinned)
		return f->fd;
	pthread_mutex_lock(&m->fds.lock);
	if (f->fd < 0) {
		evict(m);
		fd = reopen(m, fi);
		if (fd < 0) {
			pthread_mutex_unlock(&m->fds.lock);
			return fd;
		}
		f->fd = fd;
		m->fds.nopen++;
		lru_push_front(m, fi);
	} else if (m->fds.lru.head != fi) {
		lru_unlink(m, fi);
		lru_push_front(m, fi);
	}
	f->refs++;
	fd = f->fd;
	pthread_mutex_unlock(&m->fds.lock);
	return fd;
}

static void release(struct ckpt_meta *m, uint32_t fi)
{
	if (m->fds.pinned)
		return;
	pthread_mutex_lock(&m->fds.lock);
	m->files[fi].refs--;
	pthread_mutex_unlock(&m->fds.lock);
}

int ckpt_files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		    char *err, size_t errlen)
{
	bool follow = flags & CKPT_FILES_FOLLOW_SYMLINKS;
	struct stat st;
	uint32_t i;
	int fd, fl;

	m->dirfd = open(m->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (m->dirfd < 0)
		return ckpt_errf(err, errlen, -errno, "%s: cannot open: %s",
				 m->dir, strerror(errno));
	pthread_mutex_init(&m->fds.lock, NULL);
	m->fds.follow_symlinks = follow;
	m->fds.cap = max_open ? max_open : choose_cap();
	m->fds.pinned = m->nfiles <= m->fds.cap;
	ckpt_lru_init(&m->fds.lru);
	for (i = 0; i < m->nfiles; i++) {
		struct ckpt_file *f = &m->files[i];
		const char *rel = m->strings + f->path;
		const char *key = ckpt_entry_fqn(m, &m->entries[f->need_entry]);

		ckpt_lru_link_init(&f->lru);
		fd = ckpt_open_beneath(m->dirfd, rel, follow);
		if (fd < 0) {
			if (errno == EXDEV || (errno == ELOOP && !follow))
				return ckpt_errf(err, errlen, -EXDEV,
						 "%s/%s: key '%s': data file leads outside the checkpoint directory (a symlink?); -o follow_symlinks allows that",
						 m->dir, rel, key);
			return ckpt_errf(err, errlen, -errno,
					 "%s/%s: key '%s': cannot open data file: %s",
					 m->dir, rel, key, strerror(errno));
		}
		if (fstat(fd, &st) < 0) {
			close(fd);
			return ckpt_errf(err, errlen, -errno,
					 "%s/%s: cannot stat: %s", m->dir, rel,
					 strerror(errno));
		}
		if (!S_ISREG(st.st_mode)) {
			close(fd);
			return ckpt_errf(err, errlen, -EINVAL,
					 "%s/%s: key '%s': data file is not a regular file",
					 m->dir, rel, key);
		}
		f->size = (uint64_t)st.st_size;
		f->dev = (uint64_t)st.st_dev;
		f->ino = (uint64_t)st.st_ino;
		f->ctime_sec = st.st_ctim.tv_sec;
		f->ctime_nsec = st.st_ctim.tv_nsec;
		if (f->size < f->need) {
			close(fd);
			return ckpt_errf(err, errlen, -EINVAL,
					 "%s/%s: key '%s': data file has %" PRIu64
					 " bytes, its record ends at %" PRIu64,
					 m->dir, rel, key, f->size, f->need);
		}
		if (m->fds.nopen >= m->fds.cap) {
			close(fd);
			continue;
		}
		fl = fcntl(fd, F_GETFL);
		if (fl >= 0)
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		f->fd = fd;
		m->fds.nopen++;
		if (!m->fds.pinned)
			lru_push_front(m, i);
	}
	return 0;
}

int ckpt_files_pread(struct ckpt_meta *m, uint32_t fi, void *buf, size_t len,
		     uint64_t off)
{
	size_t got = 0;
	ssize_t n;
	int fd, rc = 0;

	if (fi >= m->nfiles)
		return -EIO;	/* a decoded record: records/record_cache.h */
	fd = acquire(m, fi);
	if (fd < 0) {
		ckpt_set_last_error("%s/%s: cannot open: %s", m->dir,
				    m->strings + m->files[fi].path,
				    fd == -ESTALE ? "replaced since it was validated" :
						    strerror(-fd));
		return -EIO;
	}
	while (got < len) {
		n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0)
				ckpt_set_last_error("%s/%s: offset %" PRIu64 ": read error: %s",
						    m->dir, m->strings + m->files[fi].path,
						    off + got, strerror(errno));
			else
				ckpt_set_last_error("%s/%s: offset %" PRIu64 ": file ends %zu bytes into a %zu-byte read (truncated?)",
						    m->dir, m->strings + m->files[fi].path,
						    off, got, len);
			rc = -EIO;
			break;
		}
		got += (size_t)n;
	}
	release(m, fi);
	return rc;
}

void ckpt_files_willneed(struct ckpt_meta *m, uint32_t fi, uint64_t off,
			 uint64_t len)
{
	int fd;

	if (fi >= m->nfiles)
		return;		/* a decoded record: nothing to hint */
	fd = acquire(m, fi);
	if (fd < 0)
		return;
	posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
	release(m, fi);
}
