/* SPDX-License-Identifier: MIT */
/* Writing files beneath a directory: see out_beneath.h. */
#include "out_beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* One component: not empty, ".", ".." (nor holding '/', by construction). */
static bool is_plain_name(const char *s, size_t len)
{
	return len && !(len == 1 && s[0] == '.') &&
	       !(len == 2 && s[0] == '.' && s[1] == '.');
}

int out_dir_open(int dirfd, const char *rel, bool create, size_t *bad)
{
	const char *p = rel;
	char name[256];
	int fd, next;

	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);

		if (!is_plain_name(p, len) || len >= sizeof(name)) {
			next = -EINVAL;
			goto out_fail;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		if (create && mkdirat(fd, name, 0755) && errno != EEXIST) {
			next = -errno;
			goto out_fail;
		}
		/* O_NOFOLLOW | O_DIRECTORY: a symlink here is never followed,
		 * whatever it points at; nor is anything but a directory
		 * opened.  Both give ENOTDIR: tell a symlink (ELOOP) apart. */
		next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			      O_CLOEXEC);
		if (next < 0) {
			struct stat st;

			next = -errno;
			if (next == -ENOTDIR &&
			    fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode))
				next = -ELOOP;
			goto out_fail;
		}
		close(fd);
		fd = next;
		p += len;
		if (*p == '/')
			p++;
	}
	return fd;
out_fail:
	close(fd);
	if (bad)
		*bad = (size_t)(p - rel) + strcspn(p, "/");
	return next;
}

/* A name no one else uses yet: ".ckptfs-tmp-" and 16 random hex digits. */
static void tmp_name(char *buf, size_t cap)
{
	uint64_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)buf;
	snprintf(buf, cap, ".ckptfs-tmp-%016llx", (unsigned long long)r);
}

int out_tmp_create(int dirfd, struct out_tmp *t)
{
	int tries;

	t->named = false;
	t->tmp[0] = '\0';
	t->fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
	if (t->fd >= 0)
		return 0;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	/* No O_TMPFILE here: a fresh name, created exclusively. */
	for (tries = 0; tries < 100; tries++) {
		tmp_name(t->tmp, sizeof(t->tmp));
		t->fd = openat(dirfd, t->tmp, O_RDWR | O_CREAT | O_EXCL |
			       O_NOFOLLOW | O_CLOEXEC, 0644);
		if (t->fd >= 0) {
			t->named = true;
			return 0;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* Link the O_TMPFILE t->fd as name in dirfd: fails with EEXIST when name
 * exists.  AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc does not. */
static int link_unnamed(int fd, int dirfd, const char *name)
{
	char proc[64];

	if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != EPERM && errno != ENOENT)
		return -errno;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) ? -errno :
									0;
}

/* Give the O_TMPFILE t a temporary name in dirfd (into t->tmp). */
static int name_unnamed(int dirfd, struct out_tmp *t)
{
	int tries, rc = -EEXIST;

	for (tries = 0; tries < 100 && rc == -EEXIST; tries++) {
		tmp_name(t->tmp, sizeof(t->tmp));
		rc = link_unnamed(t->fd, dirfd, t->tmp);
	}
	if (!rc)
		t->named = true;
	return rc;
}

int out_tmp_publish(int dirfd, struct out_tmp *t, const char *name,
		    bool replace)
{
	int rc = 0;

	if (!t->named && !replace) {
		rc = link_unnamed(t->fd, dirfd, name);
		goto out;
	}
	if (!t->named && (rc = name_unnamed(dirfd, t)))
		goto out;
	if (replace)
		rc = renameat(dirfd, t->tmp, dirfd, name) ? -errno : 0;
	else if (renameat2(dirfd, t->tmp, dirfd, name, RENAME_NOREPLACE))
		rc = -errno;
	if (rc == -EINVAL && !replace) {
		/* No RENAME_NOREPLACE on this filesystem: link(2) never
		 * replaces either. */
		rc = linkat(dirfd, t->tmp, dirfd, name, 0) ? -errno : 0;
		if (!rc)
			unlinkat(dirfd, t->tmp, 0);
	}
	if (!rc)
		t->named = false;	/* the temporary name is gone */
out:
	out_tmp_discard(dirfd, t);
	return rc;
}

void out_tmp_discard(int dirfd, struct out_tmp *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	if (t->named)
		unlinkat(dirfd, t->tmp, 0);
	t->named = false;
}
