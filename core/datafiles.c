/* SPDX-License-Identifier: MIT */
/* Opening and reading the data files: see datafiles.h. */
#include "datafiles.h"

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

#include "errbuf.h"

/* openat2 with RESOLVE_BENEATH: a path (or a symlink in it) that leads
 * outside dirfd fails with EXDEV. */
static int open_beneath(int dirfd, const char *path)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd;

	fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS)	/* kernels before 5.6 */
		fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK |
			    O_NOCTTY | O_NOFOLLOW);
	return (int)fd;
}

/* Let a checkpoint with many data files keep them all open. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int ckpt_files_open(struct ckpt_meta *m, char *err, size_t errlen)
{
	struct stat st;
	uint32_t i;
	int fd, flags;

	raise_fd_limit();
	m->dirfd = open(m->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (m->dirfd < 0)
		return ckpt_errf(err, errlen, -errno, "%s: cannot open: %s",
				 m->dir, strerror(errno));
	for (i = 0; i < m->nfiles; i++) {
		struct ckpt_file *f = &m->files[i];
		const char *rel = m->strings + f->path;
		const char *key = ckpt_entry_fqn(m, &m->entries[f->need_entry]);

		fd = open_beneath(m->dirfd, rel);
		if (fd < 0) {
			if (errno == EXDEV || errno == ELOOP)
				return ckpt_errf(err, errlen, -EXDEV,
						 "%s/%s: key '%s': data file leads outside the checkpoint directory",
						 m->dir, rel, key);
			return ckpt_errf(err, errlen, -errno,
					 "%s/%s: key '%s': cannot open data file: %s",
					 m->dir, rel, key, strerror(errno));
		}
		f->fd = fd;
		if (fstat(fd, &st) < 0)
			return ckpt_errf(err, errlen, -errno,
					 "%s/%s: cannot stat: %s", m->dir, rel,
					 strerror(errno));
		if (!S_ISREG(st.st_mode))
			return ckpt_errf(err, errlen, -EINVAL,
					 "%s/%s: key '%s': data file is not a regular file",
					 m->dir, rel, key);
		flags = fcntl(fd, F_GETFL);
		if (flags >= 0)
			fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
		f->size = (uint64_t)st.st_size;
		if (f->size < f->need)
			return ckpt_errf(err, errlen, -EINVAL,
					 "%s/%s: key '%s': data file has %" PRIu64
					 " bytes, its record ends at %" PRIu64,
					 m->dir, rel, key, f->size, f->need);
	}
	return 0;
}

int ckpt_files_pread(const struct ckpt_meta *m, uint32_t fi, void *buf,
		     size_t len, uint64_t off)
{
	int fd = m->files[fi].fd;
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}
