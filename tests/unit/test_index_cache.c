/* SPDX-License-Identifier: MIT */
/* Unit tests of io/index_cache.c: the key, the directory's trust checks,
 * reading only the user's own regular files, atomic writes, the lock and
 * the bound on cached images. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckptfs.h"
#include "io/index_cache.h"
#include "testhelp.h"

static char base[] = "/tmp/ckptfs-icache-XXXXXX";

static void sub(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", base, name);
}

static void test_key(void)
{
	char a[CKPT_INDEX_CACHE_KEY_HEX], b[CKPT_INDEX_CACHE_KEY_HEX];
	char c[CKPT_INDEX_CACHE_KEY_HEX];

	ckpt_index_cache_key("/ckpt", "100@1.0", a);
	ckpt_index_cache_key("/ckpt", "100@1.0", b);
	CHECK(strlen(a) == 32 && !strcmp(a, b));
	ckpt_index_cache_key("/ckpt", "100@1.1", c);
	CHECK(strcmp(a, c));
	/* The two parts are kept apart: "ab"+"c" is not "a"+"bc". */
	ckpt_index_cache_key("/ckpta", "100@1.0", b);
	ckpt_index_cache_key("/ckpt", "a100@1.0", c);
	CHECK(strcmp(b, c) && strcmp(a, b));
}

static void test_dir_trust(void)
{
	struct ckpt_index_cache c;
	char d[256], err[512];

	sub(d, sizeof(d), "new/deeper");
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	ckpt_index_cache_close(&c);
	{
		struct stat st;

		CHECK(stat(d, &st) == 0 && (st.st_mode & 0777) == 0700);
	}
	CHECK(chmod(d, 0770) == 0);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == -EPERM);
	CHECK(strstr(err, "writable by group or others") != NULL);
	CHECK(strstr(err, d) != NULL);
	CHECK(chmod(d, 0700) == 0);
	if (geteuid() == 0) {
		CHECK(chown(d, 65534, 65534) == 0);
		CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) ==
		      -EPERM);
		CHECK(strstr(err, "not owned by this user") != NULL);
		CHECK(chown(d, 0, 0) == 0);
	}
	/* A symlink to a good directory is not followed. */
	sub(d, sizeof(d), "link");
	CHECK(symlink("new/deeper", d) == 0);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == -ELOOP);
	CHECK(strstr(err, "symlink") != NULL);
}

/* A symlink in the middle of the path (planted by whoever may write to a
 * parent, e.g. a shared directory) is refused too, naming it, and
 * nothing is made or opened where it leads. */
static void test_symlink_in_the_middle(void)
{
	struct ckpt_index_cache c;
	char real[256], mid[256], d[600], p[600], err[512];
	struct stat st;

	sub(real, sizeof(real), "victim");
	CHECK(mkdir(real, 0700) == 0);
	snprintf(p, sizeof(p), "%s/cache", real);
	CHECK(mkdir(p, 0700) == 0);
	sub(mid, sizeof(mid), "shared");
	CHECK(symlink(real, mid) == 0);
	/* an existing directory behind the link */
	snprintf(d, sizeof(d), "%s/cache", mid);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == -ELOOP);
	CHECK(strstr(err, "symlink") != NULL && strstr(err, mid) != NULL);
	/* a missing one is not made there */
	snprintf(d, sizeof(d), "%s/new/cache", mid);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == -ELOOP);
	snprintf(p, sizeof(p), "%s/new", real);
	CHECK(stat(p, &st) == -1 && errno == ENOENT);
	/* nor a link earlier still, nor '..' */
	snprintf(d, sizeof(d), "%s/a/b/c", mid);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == -ELOOP);
	snprintf(d, sizeof(d), "%s/victim/../victim/cache", base);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == -EINVAL);
	/* the same path without the link is fine */
	snprintf(d, sizeof(d), "%s//./cache/", real);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	ckpt_index_cache_close(&c);
}

static void test_read_write_lock(void)
{
	static const uint8_t img[] = "an image";
	struct ckpt_index_cache c;
	char d[256], p[512], err[512], hex[CKPT_INDEX_CACHE_KEY_HEX];
	uint8_t *buf;
	size_t len;
	int fd;

	sub(d, sizeof(d), "rw");
	ckpt_index_cache_key("/x", "1", hex);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	CHECK(ckpt_index_cache_read(&c, hex, 1 << 20, &buf, &len, err,
				    sizeof(err)) == -ENOENT);
	CHECK(ckpt_index_cache_lock(&c, hex, err, sizeof(err)) == 0);
	/* Held: another open file description cannot take it. */
	snprintf(p, sizeof(p), "%s/%s.lock", d, hex);
	fd = open(p, O_RDWR);
	CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == -1 &&
	      errno == EWOULDBLOCK);
	CHECK(ckpt_index_cache_write(&c, hex, img, sizeof(img), err,
				     sizeof(err)) == 0);
	ckpt_index_cache_close(&c);
	CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0);	/* released */
	close(fd);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	CHECK(ckpt_index_cache_read(&c, hex, 1 << 20, &buf, &len, err,
				    sizeof(err)) == 0);
	CHECK(len == sizeof(img) && !memcmp(buf, img, len));
	free(buf);
	/* Over the size cap. */
	CHECK(ckpt_index_cache_read(&c, hex, 4, &buf, &len, err,
				    sizeof(err)) == -EFBIG);
	/* Not trusted: group-writable, then a symlink, then a FIFO. */
	snprintf(p, sizeof(p), "%s/%s.ckptfs-index", d, hex);
	CHECK(chmod(p, 0620) == 0);
	CHECK(ckpt_index_cache_read(&c, hex, 1 << 20, &buf, &len, err,
				    sizeof(err)) == -EPERM);
	CHECK(strstr(err, p) != NULL);
	CHECK(unlink(p) == 0 && symlink("/etc/passwd", p) == 0);
	CHECK(ckpt_index_cache_read(&c, hex, 1 << 20, &buf, &len, err,
				    sizeof(err)) == -ELOOP);
	CHECK(unlink(p) == 0 && mkfifo(p, 0600) == 0);
	CHECK(ckpt_index_cache_read(&c, hex, 1 << 20, &buf, &len, err,
				    sizeof(err)) == -EPERM);
	CHECK(strstr(err, "not a regular file") != NULL);
	/* A write replaces whatever is there (rename), the FIFO too. */
	CHECK(ckpt_index_cache_write(&c, hex, img, sizeof(img), err,
				     sizeof(err)) == 0);
	CHECK(ckpt_index_cache_read(&c, hex, 1 << 20, &buf, &len, err,
				    sizeof(err)) == 0);
	free(buf);
	ckpt_index_cache_close(&c);
}

/* A parsed form: written whole from pieces, mapped privately (a write
 * to the mapping stays the process's), trusted as an image is; one whose
 * image is gone is removed with the next prune. */
static void test_parsed_form_files(void)
{
	static char a[] = "parsed ", b[] = "form";
	struct iovec iov[2] = { { a, 7 }, { b, 4 } };
	struct ckpt_index_cache c;
	char d[256], p[512], err[512], hex[CKPT_INDEX_CACHE_KEY_HEX];
	char other[CKPT_INDEX_CACHE_KEY_HEX];
	uint8_t *map, *buf;
	struct stat st;
	size_t len;

	sub(d, sizeof(d), "parsed");
	ckpt_index_cache_key("/p", "1", hex);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	CHECK(ckpt_index_cache_map_parsed(&c, hex, 1 << 20, &map, &len, err,
					  sizeof(err)) == -ENOENT);
	CHECK(ckpt_index_cache_write_parsed(&c, hex, iov, 2, err,
					    sizeof(err)) == 0);
	CHECK(ckpt_index_cache_map_parsed(&c, hex, 1 << 20, &map, &len, err,
					  sizeof(err)) == 0);
	CHECK(len == 11 && !memcmp(map, "parsed form", 11));
	map[0] = 'P';
	munmap(map, len);
	CHECK(ckpt_index_cache_map_parsed(&c, hex, 1 << 20, &map, &len, err,
					  sizeof(err)) == 0);
	CHECK(len == 11 && map[0] == 'p');
	munmap(map, len);
	CHECK(ckpt_index_cache_map_parsed(&c, hex, 4, &map, &len, err,
					  sizeof(err)) == -EFBIG);
	snprintf(p, sizeof(p), "%s/%s.ckptfs-parsed", d, hex);
	CHECK(chmod(p, 0620) == 0);
	CHECK(ckpt_index_cache_map_parsed(&c, hex, 1 << 20, &map, &len, err,
					  sizeof(err)) == -EPERM);
	CHECK(strstr(err, p) != NULL);
	CHECK(unlink(p) == 0 && symlink("/etc/passwd", p) == 0);
	CHECK(ckpt_index_cache_map_parsed(&c, hex, 1 << 20, &map, &len, err,
					  sizeof(err)) == -ELOOP);
	CHECK(unlink(p) == 0);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	CHECK(ckpt_index_cache_map_parsed(&c, hex, 1 << 20, &map, &len, err,
					  sizeof(err)) == -EINVAL);
	/* hex has no image: its form goes when another image is written */
	ckpt_index_cache_key("/p", "2", other);
	CHECK(ckpt_index_cache_write(&c, other, (const uint8_t *)"i", 1, err,
				     sizeof(err)) == 0);
	CHECK(stat(p, &st) == -1 && errno == ENOENT);
	CHECK(ckpt_index_cache_read(&c, other, 64, &buf, &len, err,
				    sizeof(err)) == 0);
	free(buf);
	ckpt_index_cache_close(&c);
}

/* An image staged from pieces is mapped read-only from its temp file,
 * which holds them one after another; the mapping outlives the commit
 * (and an unstage), and the committed image is those bytes. */
static void test_staged_map(void)
{
	static char a[] = "staged ", b[] = "in ", e[] = "pieces";
	struct iovec iov[3] = { { a, 7 }, { b, 3 }, { e, 6 } };
	struct ckpt_index_staged sg;
	struct ckpt_index_cache c;
	char d[256], err[512], hex[CKPT_INDEX_CACHE_KEY_HEX];
	const uint8_t *map, *map2;
	uint8_t *buf;
	size_t len;

	sub(d, sizeof(d), "staged");
	ckpt_index_cache_key("/s", "1", hex);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	CHECK(ckpt_index_cache_lock(&c, hex, err, sizeof(err)) == 0);
	CHECK(ckpt_index_cache_stage(&c, hex, iov, 3, &sg, err,
				     sizeof(err)) == 0);
	CHECK(ckpt_index_cache_map_staged(&c, &sg, 16, &map, err,
					  sizeof(err)) == 0);
	CHECK(!memcmp(map, "staged in pieces", 16));
	CHECK(ckpt_index_cache_map_staged(&c, &sg, 16, &map2, err,
					  sizeof(err)) == 0);
	CHECK(ckpt_index_cache_commit(&c, &sg, err, sizeof(err)) == 0);
	CHECK(!memcmp(map, "staged in pieces", 16));
	CHECK(ckpt_index_cache_map_staged(&c, &sg, 16, &map, err,
					  sizeof(err)) == -EINVAL);
	CHECK(map == NULL && strstr(err, "nothing staged") != NULL);
	CHECK(ckpt_index_cache_read(&c, hex, 64, &buf, &len, err,
				    sizeof(err)) == 0);
	CHECK(len == 16 && !memcmp(buf, "staged in pieces", 16));
	free(buf);
	munmap((void *)map2, 16);
	/* unstaged: the mapping still reads the bytes staged */
	CHECK(ckpt_index_cache_stage(&c, hex, iov + 1, 2, &sg, err,
				     sizeof(err)) == 0);
	CHECK(ckpt_index_cache_map_staged(&c, &sg, 9, &map, err,
					  sizeof(err)) == 0);
	ckpt_index_cache_unstage(&c, &sg);
	CHECK(!memcmp(map, "in pieces", 9));
	munmap((void *)map, 9);
	ckpt_index_cache_unlock(&c);
	ckpt_index_cache_close(&c);
}

/* Everything a write makes is in the directory opened, never where its
 * path leads now: here the directory was renamed and its name taken by a
 * symlink to a place of another user's choosing (as a user may do in a
 * parent directory of theirs).  The image still lands in the directory
 * opened; a temp file made by path went there (a write failed while the
 * symlink led nowhere, moved it across directories when it led to one). */
static void test_write_stays_in_the_opened_dir(void)
{
	static const uint8_t img[] = "an image";
	struct ckpt_index_cache c;
	char d[256], moved[256], other[256], p[512], err[512];
	char hex[CKPT_INDEX_CACHE_KEY_HEX];
	struct stat st;

	sub(d, sizeof(d), "swapped");
	sub(moved, sizeof(moved), "swapped.moved");
	sub(other, sizeof(other), "elsewhere");
	ckpt_index_cache_key("/y", "1", hex);
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	CHECK(rename(d, moved) == 0 && symlink(other, d) == 0);
	CHECK(ckpt_index_cache_write(&c, hex, img, sizeof(img), err,
				     sizeof(err)) == 0);
	ckpt_index_cache_close(&c);
	snprintf(p, sizeof(p), "%s/%s.ckptfs-index", moved, hex);
	CHECK(stat(p, &st) == 0 && st.st_size == (off_t)sizeof(img));
	CHECK(lstat(other, &st) == -1 && errno == ENOENT);
}

static void test_bound(void)
{
	struct ckpt_index_cache c;
	char d[256], err[512], hex[CKPT_INDEX_CACHE_KEY_HEX], first[64];
	char v[32], p[512], leftover[512], foreign[5][512];
	int i, n = 0;
	uint8_t *buf;
	size_t len;
	struct stat st;

	sub(d, sizeof(d), "bound");
	CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	/* A crashed writer's temp file, two hours old, goes too; files
	 * whose names are not the cache's own, or whose owner is another
	 * user, stay, however old. */
	ckpt_index_cache_key("/x", "tmp", hex);
	snprintf(leftover, sizeof(leftover), "%s/.tmp-%s.abc0z", d, hex);
	ckpt_index_cache_key("/x", "foreign", hex);
	snprintf(foreign[0], sizeof(foreign[0]), "%s/.tmp-x.abcdef", d);
	snprintf(foreign[1], sizeof(foreign[1]), "%s/notes.ckptfs-index", d);
	snprintf(foreign[2], sizeof(foreign[2]), "%s/%s.ckptfs-index.bak", d,
		 hex);
	snprintf(foreign[3], sizeof(foreign[3]), "%s/%s.ckptfs-index", d,
		 hex);
	snprintf(foreign[4], sizeof(foreign[4]), "%s/%s.lock", d, hex);
	for (i = -1; i < 5; i++) {
		const char *f = i < 0 ? leftover : foreign[i];
		struct timespec old[2] = { { 100, 0 }, { 100, 0 } };

		close(open(f, O_CREAT | O_WRONLY, 0600));
		CHECK(utimensat(AT_FDCWD, f, old, 0) == 0);
		/* root only: another user's image and lock */
		if (i >= 3 && geteuid() == 0)
			CHECK(chown(f, 65534, 65534) == 0);
	}
	for (i = 0; i <= CKPT_INDEX_CACHE_MAX; i++) {
		snprintf(v, sizeof(v), "%d", i);
		ckpt_index_cache_key("/x", v, hex);
		if (i == 0)
			snprintf(first, sizeof(first), "%s", hex);
		CHECK(ckpt_index_cache_lock(&c, hex, err, sizeof(err)) == 0);
		CHECK(ckpt_index_cache_write(&c, hex, (const uint8_t *)v,
					     strlen(v), err,
					     sizeof(err)) == 0);
		if (i == 0 || i == CKPT_INDEX_CACHE_MAX) {
			struct iovec iov = { v, strlen(v) };

			CHECK(ckpt_index_cache_write_parsed(&c, hex, &iov, 1,
							    err,
							    sizeof(err)) == 0);
		}
		/* Older than every later one, whatever the clock's grain. */
		snprintf(p, sizeof(p), "%s/%s.ckptfs-index", d, hex);
		{
			struct timespec t[2] = { { 1000 + i, 0 },
						 { 1000 + i, 0 } };

			CHECK(utimensat(AT_FDCWD, p, t, 0) == 0);
		}
		ckpt_index_cache_close(&c);
		CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
	}
	CHECK(ckpt_index_cache_read(&c, first, 64, &buf, &len, err,
				    sizeof(err)) == -ENOENT);
	snprintf(p, sizeof(p), "%s/%s.lock", d, first);
	CHECK(stat(p, &st) == -1 && errno == ENOENT);
	/* its parsed form went with it; the newest's stays */
	snprintf(p, sizeof(p), "%s/%s.ckptfs-parsed", d, first);
	CHECK(stat(p, &st) == -1 && errno == ENOENT);
	snprintf(p, sizeof(p), "%s/%s.ckptfs-parsed", d, hex);
	CHECK(stat(p, &st) == 0);
	CHECK(stat(leftover, &st) == -1 && errno == ENOENT);
	for (i = 0; i < (geteuid() == 0 ? 5 : 3); i++)
		CHECK(stat(foreign[i], &st) == 0);
	for (i = 1; i <= CKPT_INDEX_CACHE_MAX; i++) {
		snprintf(v, sizeof(v), "%d", i);
		ckpt_index_cache_key("/x", v, hex);
		if (ckpt_index_cache_read(&c, hex, 64, &buf, &len, err,
					  sizeof(err)) == 0) {
			n += len == strlen(v) && !memcmp(buf, v, len);
			free(buf);
		}
	}
	CHECK(n == CKPT_INDEX_CACHE_MAX);
	ckpt_index_cache_close(&c);
}

/* A child forked while the lock is held (by another thread, in real
 * use) does not keep it: when the holder dies without unlocking (killed
 * mid-indexing), others can take it although the child still lives. */
static void test_fork_does_not_keep_the_lock(void)
{
	char d[256], p[512], err[512], hex[CKPT_INDEX_CACHE_KEY_HEX];
	int fd, go[2], ready[2], status;
	pid_t holder;
	char b;

	sub(d, sizeof(d), "fork");
	ckpt_index_cache_key("/fork", "1", hex);
	CHECK(pipe(go) == 0 && pipe(ready) == 0);
	holder = fork();
	if (holder == 0) {
		struct ckpt_index_cache c;

		close(go[1]);
		close(ready[0]);
		if (ckpt_index_cache_open(d, &c, err, sizeof(err)) ||
		    ckpt_index_cache_lock(&c, hex, err, sizeof(err)))
			_exit(2);
		if (fork() == 0) {	/* lives until the test says */
			if (write(ready[1], "r", 1) != 1)
				_exit(1);
			close(ready[1]);
			_exit(read(go[0], &b, 1) < 0);
		}
		/* dies holding it, killed mid-indexing (an _exit with the
		 * heartbeat thread running is a leak report under valgrind) */
		kill(getpid(), SIGKILL);
		_exit(3);
	}
	CHECK(holder > 0);
	close(go[0]);
	close(ready[1]);
	CHECK(read(ready[0], &b, 1) == 1);	/* the grandchild runs */
	CHECK(waitpid(holder, &status, 0) == holder && WIFSIGNALED(status) &&
	      WTERMSIG(status) == SIGKILL);
	snprintf(p, sizeof(p), "%s/%s.lock", d, hex);
	fd = open(p, O_RDWR);
	CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
	close(fd);
	close(go[1]);		/* the grandchild ends (reaped by init) */
	close(ready[0]);
}

static unsigned scale(void)
{
	const char *e = getenv("CKPTFS_TIME_SCALE");
	int s = e ? atoi(e) : 1;

	return s > 0 ? (unsigned)s : 1;
}

/* A holder that lives (its heartbeat) keeps a waiter waiting past the
 * wait limit; a stopped one (no heartbeat) is given up on after it. */
static void test_heartbeat(void)
{
	char d[256], err[512], hex[CKPT_INDEX_CACHE_KEY_HEX], lim[32];
	unsigned limit = 400 * scale();
	struct ckpt_index_cache c;
	int ready[2], status, rc;
	pid_t holder;
	char b;

	snprintf(lim, sizeof(lim), "%u", limit);
	CHECK(setenv("CKPTFS_INDEX_CACHE_WAIT_MS", lim, 1) == 0);
	sub(d, sizeof(d), "beat");
	ckpt_index_cache_key("/beat", "1", hex);
	for (int stopped = 0; stopped < 2; stopped++) {
		CHECK(pipe(ready) == 0);
		holder = fork();
		if (holder == 0) {
			close(ready[0]);
			if (ckpt_index_cache_open(d, &c, err, sizeof(err)) ||
			    ckpt_index_cache_lock(&c, hex, err, sizeof(err)))
				_exit(2);
			if (write(ready[1], "r", 1) != 1)
				_exit(1);
			/* indexing, for 4 wait limits */
			usleep(4 * limit * 1000);
			ckpt_index_cache_close(&c);
			_exit(0);
		}
		close(ready[1]);
		CHECK(read(ready[0], &b, 1) == 1);
		close(ready[0]);
		if (stopped)
			CHECK(kill(holder, SIGSTOP) == 0);
		CHECK(ckpt_index_cache_open(d, &c, err, sizeof(err)) == 0);
		rc = ckpt_index_cache_lock(&c, hex, err, sizeof(err));
		if (!stopped) {
			CHECK(rc == 0);	/* after the holder ended */
		} else {
			CHECK(rc == -ETIMEDOUT);
			CHECK(strstr(err, "no heartbeat") != NULL);
			CHECK(kill(holder, SIGKILL) == 0);
		}
		ckpt_index_cache_close(&c);
		CHECK(waitpid(holder, &status, 0) == holder);
		CHECK(stopped ? WIFSIGNALED(status) :
		      WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK(unsetenv("CKPTFS_INDEX_CACHE_WAIT_MS") == 0);
}

int main(void)
{
	char cmd[128];
	int rc;

	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	TEST(test_key);
	TEST(test_dir_trust);
	TEST(test_symlink_in_the_middle);
	TEST(test_read_write_lock);
	TEST(test_parsed_form_files);
	TEST(test_staged_map);
	TEST(test_fork_does_not_keep_the_lock);
	TEST(test_write_stays_in_the_opened_dir);
	TEST(test_bound);
	TEST(test_heartbeat);
	rc = TEST_REPORT();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", base);
	return rc;
}
