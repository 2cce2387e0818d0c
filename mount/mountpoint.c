/* SPDX-License-Identifier: MIT */
/* Checking a mount point before mounting, and whether a directory is a
 * mount point: see mountpoint.h. */
#include "mountpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mountinfo's octal escapes (\040 for a space, \011, \012, \134) undone
 * in place. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/*
 * The last mount on path (absolute, resolved) in /proc/self/mountinfo:
 * its type ("fuse.ckptfs") and source ("ckptfs:/data/ckpt") into the
 * caller's buffers.  Returns true when path is a mount point.
 */
static bool find_mount(const char *path, char *type, size_t tlen,
		       char *source, size_t slen)
{
	char *line = NULL, *sep, *point, *save = NULL, *t, *s;
	size_t cap = 0;
	bool found = false;
	FILE *f;

	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return false;
	while (getline(&line, &cap, f) > 0) {
		/* id parent maj:min root POINT opts [optional...] - TYPE SRC */
		sep = strstr(line, " - ");
		if (!sep)
			continue;
		*sep = '\0';
		strtok_r(line, " ", &save);		/* id */
		strtok_r(NULL, " ", &save);		/* parent */
		strtok_r(NULL, " ", &save);		/* maj:min */
		strtok_r(NULL, " ", &save);		/* root */
		point = strtok_r(NULL, " ", &save);
		if (!point)
			continue;
		unescape(point);
		if (strcmp(point, path))
			continue;
		t = strtok_r(sep + 3, " \n", &save);
		s = strtok_r(NULL, " \n", &save);
		if (!t || !s)
			continue;
		unescape(s);
		snprintf(type, tlen, "%s", t);
		snprintf(source, slen, "%s", s);
		found = true;	/* the last one is on top */
	}
	free(line);
	fclose(f);
	return found;
}

bool mountpoint_is_mounted(const char *path)
{
	char abs[PATH_MAX], type[64], source[PATH_MAX + 16];

	if (!realpath(path, abs))
		return errno == ENOTCONN;	/* a mount whose daemon died */
	return find_mount(abs, type, sizeof(type), source, sizeof(source));
}

/* The number after "key": in a view.json text, or -1. */
static long long json_number(const char *js, const char *key)
{
	const char *p = strstr(js, key);

	if (!p)
		return -1;
	p += strlen(key);
	while (*p == ' ' || *p == ':')
		p++;
	if (*p < '0' || *p > '9')
		return -1;
	return strtoll(p, NULL, 10);
}

/* ", world W, rank R" of the ckptfs mount at mnt, from its
 * .ckptfs/view.json, into buf; "" when it has none (a --ranks mount). */
static void describe_view(const char *mnt, char *buf, size_t len)
{
	char path[PATH_MAX + 32], js[4096];
	long long w, r;
	ssize_t n;
	int fd;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "%s/.ckptfs/view.json", mnt);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, js, sizeof(js) - 1);
	close(fd);
	if (n <= 0)
		return;
	js[n] = '\0';
	w = json_number(js, "\"world\"");
	r = json_number(js, "\"rank\"");
	if (w >= 0 && r >= 0)
		snprintf(buf, len, ", world %lld, rank %lld", w, r);
}

int mountpoint_check(const char *mnt, bool nonempty, char *err,
		     size_t errlen)
{
	char abs[PATH_MAX], type[64], source[PATH_MAX + 16], view[96];
	struct dirent *d;
	struct stat st;
	DIR *dir;
	int rc = 0;

	if (!realpath(mnt, abs)) {
		rc = -errno;
		if (rc == -ENOTCONN)
			snprintf(err, errlen,
				 "cannot mount on %s: a mount whose daemon is gone is there (ckptfs umount %s)",
				 mnt, mnt);
		else
			snprintf(err, errlen, "cannot mount on %s: %s", mnt,
				 strerror(-rc));
		return rc;
	}
	if (stat(abs, &st)) {
		rc = -errno;
		snprintf(err, errlen, "cannot mount on %s: %s", mnt,
			 strerror(-rc));
		return rc;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen,
			 "cannot mount on %s: not a directory (a mount point is an existing directory)",
			 mnt);
		return -ENOTDIR;
	}
	if (find_mount(abs, type, sizeof(type), source, sizeof(source)) &&
	    !strcmp(type, "fuse.ckptfs")) {
		describe_view(abs, view, sizeof(view));
		snprintf(err, errlen,
			 "cannot mount on %s: it already holds a ckptfs mount of %s%s (ckptfs umount %s first)",
			 mnt, strncmp(source, "ckptfs:", 7) ? source :
			 source + 7, view, mnt);
		return -EBUSY;
	}
	if (nonempty)
		return 0;
	dir = opendir(abs);
	if (!dir) {
		rc = -errno;
		snprintf(err, errlen, "cannot mount on %s: %s", mnt,
			 strerror(-rc));
		return rc;
	}
	while ((d = readdir(dir))) {
		if (strcmp(d->d_name, ".") && strcmp(d->d_name, "..")) {
			snprintf(err, errlen,
				 "cannot mount on %s: not empty (it holds '%s'; -o nonempty mounts over it)",
				 mnt, d->d_name);
			rc = -ENOTEMPTY;
			break;
		}
	}
	closedir(dir);
	return rc;
}
