/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the storage interface and its local implementation
 * (io/store.c, io/store_local.c): listing, opening (regular files only,
 * nothing non-regular ever opened for reading, nothing outside the root
 * without follow_symlinks), identity kept across reopens, short files,
 * batches of ranges in any order, the fd cap, the counters,
 * direct_io (O_DIRECT for large ranges with nothing cached), and
 * ckpt_object_read().
 */
// wrap: syscall open64
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ckptdir.h"
#include "common/errbuf.h"
#include "io/store.h"
#include "testhelp.h"

/* Every open for reading the store makes (not O_PATH), by what it opened:
 * the name given to openat2, or the target of a /proc/self/fd reopen. */
static _Atomic unsigned read_opens;
static _Atomic unsigned direct_opens;	/* of them, with O_DIRECT */
static char last_read_open[4096];

long __real_syscall(long n, ...);
long __wrap_syscall(long n, ...);
int __real_open64(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);

long __wrap_syscall(long n, ...)
{
	long a[6];
	va_list ap;
	int i;

	va_start(ap, n);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (n == SYS_openat2 &&
	    !(((const struct open_how *)a[2])->flags & O_PATH)) {
		read_opens++;
		snprintf(last_read_open, sizeof(last_read_open), "%s",
			 (const char *)a[1]);
	}
	return __real_syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int __wrap_open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	ssize_t n;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (!strncmp(path, "/proc/self/fd/", 14) && !(flags & O_PATH)) {
		read_opens++;
		if (flags & O_DIRECT)
			direct_opens++;
		n = readlink(path, last_read_open, sizeof(last_read_open) - 1);
		last_read_open[n > 0 ? n : 0] = '\0';
	}
	return __real_open64(path, flags, mode);
}

/* byte i of file "fK": a pattern that differs between files */
static uint8_t pat(unsigned k, uint64_t i)
{
	return (uint8_t)(i * 131 + (i >> 8) * 7 + k * 29 + 1);
}

static int put_pattern(const char *dir, const char *name, unsigned k,
		       size_t len)
{
	uint8_t *b = malloc(len ? len : 1);
	size_t i;
	int rc;

	if (!b)
		return -1;
	for (i = 0; i < len; i++)
		b[i] = pat(k, i);
	rc = cd_put(dir, name, b, len);
	free(b);
	return rc;
}

static struct ckpt_store *store(const char *dir, bool follow,
				uint32_t max_open)
{
	struct ckpt_store_opts o = { .follow_symlinks = follow,
				     .max_open = max_open };
	struct ckpt_store *s = NULL;
	char err[1024];

	if (ckpt_store_new(dir, &o, &s, err, sizeof(err)))
		fprintf(stderr, "  %s\n", err);
	return s;
}

struct seen {
	char names[8][64];
	uint64_t sizes[8];
	unsigned n;
};

static int see(void *ctx, const char *name, uint64_t size)
{
	struct seen *sn = ctx;

	if (sn->n == 8)
		return -E2BIG;
	snprintf(sn->names[sn->n], sizeof(sn->names[0]), "%s", name);
	sn->sizes[sn->n++] = size;
	return 0;
}

static uint64_t seen_size(const struct seen *sn, const char *name)
{
	unsigned i;

	for (i = 0; i < sn->n; i++)
		if (!strcmp(sn->names[i], name))
			return sn->sizes[i];
	return UINT64_MAX;
}

static void test_list(void)
{
	char *dir = cd_new(), path[4200], err[1024];
	struct seen sn = { 0 };
	struct ckpt_store *s;

	CHECK(put_pattern(dir, "a", 0, 10) == 0);
	CHECK(put_pattern(dir, "b.safetensors", 1, 3000) == 0);
	snprintf(path, sizeof(path), "%s/sub", dir);
	CHECK(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/fifo", dir);
	CHECK(mkfifo(path, 0644) == 0);
	snprintf(path, sizeof(path), "%s/link", dir);
	CHECK(symlink("a", path) == 0);
	snprintf(path, sizeof(path), "%s/dirlink", dir);
	CHECK(symlink("sub", path) == 0);
	s = store(dir, false, 0);
	CHECK(s && ckpt_store_list(s, see, &sn, err, sizeof(err)) == 0);
	/* a, b, link (a's size) and the FIFO; no directory, no link to one */
	CHECK(sn.n == 4);
	CHECK(seen_size(&sn, "a") == 10);
	CHECK(seen_size(&sn, "b.safetensors") == 3000);
	CHECK(seen_size(&sn, "link") == 10);
	CHECK(seen_size(&sn, "fifo") == 0);
	/* fn's value stops the walk and is returned */
	memset(&sn, 0, sizeof(sn));
	sn.n = 8;
	CHECK(ckpt_store_list(s, see, &sn, err, sizeof(err)) == -E2BIG);
	ckpt_store_free(s);
	cd_remove(dir);
}

/* Regular files open, with their identity; the same name gives the same
 * id; names that are not beneath the root never reach the directory. */
static void test_open_regular(void)
{
	char *dir = cd_new(), err[1024];
	struct ckpt_store_file_info a, b;
	struct ckpt_store *s;
	uint32_t id1 = 0, id2 = 1, id3 = 0;
	uint8_t buf[8];

	CHECK(put_pattern(dir, "x", 3, 100) == 0);
	CHECK(put_pattern(dir, "y", 4, 7) == 0);
	s = store(dir, false, 0);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK(!strcmp(ckpt_store_root(s), dir));
	CHECK(ckpt_store_identity(s)[0] != '\0');
	CHECK(ckpt_store_parallelism(s) == 0);
	CHECK(ckpt_store_open(s, "x", &id1, &a, err, sizeof(err)) == 0);
	CHECK(a.size == 100 && a.version[0] && a.mtime_sec > 0);
	CHECK(ckpt_store_open(s, "y", &id3, &b, err, sizeof(err)) == 0);
	CHECK(id3 != id1 && b.size == 7 && strcmp(a.version, b.version));
	CHECK(ckpt_store_open(s, "x", &id2, &b, err, sizeof(err)) == 0);
	CHECK(id2 == id1 && b.size == 100 && !strcmp(a.version, b.version));
	CHECK(!strcmp(ckpt_store_name(s, id1), "x"));
	CHECK(ckpt_store_pread(s, id1, buf, 8, 90) == 0);
	CHECK(buf[0] == pat(3, 90) && buf[7] == pat(3, 97));
	CHECK(ckpt_store_open(s, "nope", &id2, &b, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "/nope: cannot open: No such file or directory"));
	CHECK(ckpt_store_open(s, "../x", &id2, &b, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "not a name beneath the checkpoint"));
	CHECK(ckpt_store_open(s, "/etc/passwd", &id2, &b, err, sizeof(err)) == -EINVAL);
	CHECK(ckpt_store_open(s, "", &id2, &b, err, sizeof(err)) == -EINVAL);
	ckpt_store_free(s);
	cd_remove(dir);
}

/* A directory, a FIFO and a symlink to a device are refused, and never
 * opened for reading (the FIFO would hang, the device has side effects). */
static void test_open_not_regular(void)
{
	char *dir = cd_new(), path[4200], err[1024];
	struct ckpt_store_file_info fi;
	struct ckpt_store *s, *sf;
	unsigned before;
	uint32_t id = 0;

	snprintf(path, sizeof(path), "%s/d", dir);
	CHECK(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/fifo", dir);
	CHECK(mkfifo(path, 0644) == 0);
	snprintf(path, sizeof(path), "%s/null", dir);
	CHECK(symlink("/dev/null", path) == 0);
	CHECK(put_pattern(dir, "ok", 0, 4) == 0);
	s = store(dir, false, 0);
	sf = store(dir, true, 0);
	CHECK(s && sf);
	if (!s || !sf)
		return;
	before = read_opens;
	CHECK(ckpt_store_open(s, "d", &id, &fi, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "/d: not a regular file"));
	CHECK(ckpt_store_open(s, "fifo", &id, &fi, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "/fifo: not a regular file"));
	/* beneath: /dev/null is outside; followed: not a regular file */
	CHECK(ckpt_store_open(s, "null", &id, &fi, err, sizeof(err)) == -EXDEV);
	CHECK(strstr(err, "/null: " CKPT_STORE_OUTSIDE));
	CHECK(ckpt_store_open(sf, "null", &id, &fi, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "/null: not a regular file"));
	CHECK(ckpt_store_open(sf, "fifo", &id, &fi, err, sizeof(err)) == -EINVAL);
	CHECK(read_opens == before);
	/* the check can see a real open */
	CHECK(ckpt_store_open(s, "ok", &id, &fi, err, sizeof(err)) == 0);
	CHECK(read_opens > before && strstr(last_read_open, "ok"));
	ckpt_store_free(s);
	ckpt_store_free(sf);
	cd_remove(dir);
}

/* A symlink leading outside the root: refused with the message every
 * reader gives, read through it with follow_symlinks.  One inside is
 * followed either way. */
static void test_open_outside(void)
{
	char *dir = cd_new(), *other = cd_new(), path[4200], target[4200];
	char err[1024];
	struct ckpt_store_file_info fi;
	struct ckpt_store *s;
	uint32_t id = 0;
	uint8_t b[4];

	CHECK(put_pattern(other, "t", 5, 64) == 0);
	CHECK(put_pattern(dir, "in", 6, 64) == 0);
	snprintf(target, sizeof(target), "%s/t", other);
	snprintf(path, sizeof(path), "%s/abs", dir);
	CHECK(symlink(target, path) == 0);
	snprintf(path, sizeof(path), "%s/rel", dir);
	snprintf(target, sizeof(target), "../%s/t", strrchr(other, '/') + 1);
	CHECK(symlink(target, path) == 0);
	snprintf(path, sizeof(path), "%s/inside", dir);
	CHECK(symlink("./in", path) == 0);
	s = store(dir, false, 0);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK(ckpt_store_open(s, "abs", &id, &fi, err, sizeof(err)) == -EXDEV);
	CHECK(strstr(err, "/abs: leads outside the checkpoint directory (a symlink?); -o follow_symlinks allows that"));
	CHECK(ckpt_store_open(s, "rel", &id, &fi, err, sizeof(err)) == -EXDEV);
	CHECK(ckpt_store_open(s, "inside", &id, &fi, err, sizeof(err)) == 0);
	CHECK(ckpt_store_pread(s, id, b, 4, 10) == 0 && b[0] == pat(6, 10));
	ckpt_store_free(s);
	s = store(dir, true, 0);
	CHECK(s && ckpt_store_open(s, "abs", &id, &fi, err, sizeof(err)) == 0);
	CHECK(s && ckpt_store_pread(s, id, b, 4, 60) == 0 && b[3] == pat(5, 63));
	CHECK(s && ckpt_store_open(s, "rel", &id, &fi, err, sizeof(err)) == 0);
	ckpt_store_free(s);
	cd_remove(dir);
	cd_remove(other);
}

/* Cut short under an open fd: EIO naming the file, the offset and the
 * reason; the bytes that are there still read. */
static void test_short_file(void)
{
	char *dir = cd_new(), path[4200], err[1024];
	struct ckpt_store_file_info fi;
	struct ckpt_store *s;
	uint32_t id = 0;
	uint8_t b[64];

	CHECK(put_pattern(dir, "f", 0, 100) == 0);
	s = store(dir, false, 0);
	CHECK(s && ckpt_store_open(s, "f", &id, &fi, err, sizeof(err)) == 0);
	if (!s)
		return;
	snprintf(path, sizeof(path), "%s/f", dir);
	CHECK(truncate(path, 50) == 0);
	ckpt_clear_last_error();
	CHECK(ckpt_store_pread(s, id, b, 64, 20) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/f: offset 20: file ends 30 bytes into a 64-byte read (truncated?)"));
	CHECK(ckpt_store_pread(s, id, b, 30, 20) == 0 && b[29] == pat(0, 49));
	/* a whole-file read of a file too long for its limit */
	CHECK(put_pattern(dir, "big", 0, 100) == 0);
	{
		uint8_t *buf;
		size_t len;

		CHECK(ckpt_store_read_file(s, "big", 99, &buf, &len, NULL, err,
					   sizeof(err)) == -EFBIG);
		CHECK(strstr(err, "/big: 100 bytes, more than the 99-byte metadata limit"));
		CHECK(ckpt_store_read_file(s, "big", 100, &buf, &len, &fi, err,
					   sizeof(err)) == 0);
		CHECK(len == 100 && fi.size == 100 && buf[99] == pat(0, 99));
		free(buf);
	}
	ckpt_store_free(s);
	cd_remove(dir);
}

/* A whole-file read of a large file (a .metadata of some MB): every byte
 * as in the file, into a buffer aligned for huge pages that free()
 * takes; an empty file reads as a buffer of its own too. */
static void test_read_file_large(void)
{
	char *dir = cd_new(), err[1024];
	const size_t n = ((size_t)5 << 20) + 3;
	struct ckpt_store *s;
	uint8_t *buf = NULL;
	size_t len = 0, i, bad = 0;

	CHECK(put_pattern(dir, "meta", 0, n) == 0);
	CHECK(put_pattern(dir, "empty", 0, 0) == 0);
	s = store(dir, false, 0);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK(ckpt_store_read_file(s, "meta", n, &buf, &len, NULL, err,
				   sizeof(err)) == 0);
	CHECK(len == n && buf && ((uintptr_t)buf & (((size_t)2 << 20) - 1)) == 0);
	for (i = 0; buf && i < len; i++)
		bad += buf[i] != pat(0, i);
	CHECK(bad == 0);
	free(buf);
	buf = NULL;
	CHECK(ckpt_store_read_file(s, "empty", 10, &buf, &len, NULL, err,
				   sizeof(err)) == 0);
	CHECK(len == 0 && buf != NULL);
	free(buf);
	ckpt_store_free(s);
	cd_remove(dir);
}

/* A file replaced (deleted and created again, perhaps on the same inode
 * number) after it was opened: while its fd is open, its old bytes; once
 * the cache had to close it, EIO naming it; never the new bytes. */
static void test_identity(void)
{
	char *dir = cd_new(), path[4200], tmp[4200], err[1024];
	struct ckpt_store_file_info fi;
	struct ckpt_store *s;
	uint32_t a = 0, b = 0, c = 0;
	uint8_t buf[32];

	CHECK(put_pattern(dir, "a", 1, 32) == 0);
	CHECK(put_pattern(dir, "b", 2, 32) == 0);
	s = store(dir, false, 1);
	CHECK(s && ckpt_store_open(s, "a", &a, &fi, err, sizeof(err)) == 0);
	if (!s)
		return;
	/* replaced by rename while open: the open fd keeps the old file */
	CHECK(put_pattern(dir, "a.new", 9, 32) == 0);
	snprintf(path, sizeof(path), "%s/a", dir);
	snprintf(tmp, sizeof(tmp), "%s/a.new", dir);
	CHECK(rename(tmp, path) == 0);
	CHECK(ckpt_store_pread(s, a, buf, 32, 0) == 0 && buf[5] == pat(1, 5));
	/* b takes the only fd; a must be reopened and is another file */
	CHECK(ckpt_store_open(s, "b", &b, &fi, err, sizeof(err)) == 0);
	CHECK(ckpt_store_pread(s, b, buf, 32, 0) == 0 && buf[5] == pat(2, 5));
	ckpt_clear_last_error();
	memset(buf, 0, sizeof(buf));
	CHECK(ckpt_store_pread(s, a, buf, 32, 0) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/a: cannot open: replaced since it was validated"));
	CHECK(buf[5] != pat(9, 5));
	/* deleted, and once its fd is closed (c takes it), a new file,
	 * maybe on the freed inode number */
	CHECK(put_pattern(dir, "c", 3, 32) == 0);
	CHECK(ckpt_store_open(s, "c", &c, &fi, err, sizeof(err)) == 0);
	CHECK(ckpt_store_pread(s, b, buf, 32, 0) == 0);
	snprintf(path, sizeof(path), "%s/b", dir);
	CHECK(unlink(path) == 0);
	CHECK(ckpt_store_pread(s, c, buf, 32, 0) == 0 && buf[0] == pat(3, 0));
	CHECK(put_pattern(dir, "b", 4, 32) == 0);
	ckpt_clear_last_error();
	CHECK(ckpt_store_pread(s, b, buf, 32, 0) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/b: cannot open: replaced since it was validated"));
	CHECK(unlink(path) == 0);
	CHECK(ckpt_store_pread(s, b, buf, 32, 0) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/b: cannot open: No such file or directory"));
	ckpt_store_free(s);
	cd_remove(dir);
}

#define NFILES 50
#define FSIZE 5000

/* Ranges of many files, in any order, overlapping in the files, in one
 * batch: every byte right; and the counters add up. */
static void test_batch_and_stats(void)
{
	char *dir = cd_new(), name[16], err[1024];
	struct ckpt_store_range r[2000];
	struct ckpt_store_file_info fi;
	struct ckpt_store_stats st;
	uint32_t id[NFILES];
	uint64_t want = 0;
	struct ckpt_store *s;
	uint8_t *dst;
	size_t i, at = 0;
	unsigned k;
	int bad = 0;

	for (k = 0; k < NFILES; k++) {
		snprintf(name, sizeof(name), "f%u", k);
		CHECK(put_pattern(dir, name, k, FSIZE) == 0);
	}
	s = store(dir, false, 4);
	dst = malloc(2000 * 600);
	CHECK(s && dst);
	if (!s || !dst)
		return;
	for (k = 0; k < NFILES; k++) {
		snprintf(name, sizeof(name), "f%u", k);
		CHECK(ckpt_store_open(s, name, &id[k], &fi, err, sizeof(err)) == 0);
	}
	ckpt_store_stats(s, &st);
	CHECK(st.bytes_delivered == 0 && st.retries == 0);
	srand(7);
	for (i = 0; i < 2000; i++) {
		uint64_t off = (uint64_t)rand() % FSIZE;
		uint64_t len = (uint64_t)rand() % 600;

		if (len > FSIZE - off)
			len = FSIZE - off;
		r[i] = (struct ckpt_store_range){ id[rand() % NFILES], off, len,
						 dst + at };
		at += len;
		want += len;
	}
	CHECK(ckpt_store_read(s, r, 2000) == 0);
	for (i = 0; i < 2000; i++) {
		const uint8_t *d = r[i].dst;
		uint64_t j;

		for (k = 0; k < NFILES && id[k] != r[i].id; k++)
			;
		for (j = 0; j < r[i].len; j++)
			bad += d[j] != pat(k, r[i].off + j);
	}
	CHECK(bad == 0);
	ckpt_store_stats(s, &st);
	CHECK(st.bytes_delivered == want);
	/* local: at most the bytes (a run of overlapping ranges of one file
	 * is read once: below) */
	CHECK(st.bytes_fetched <= want);
	CHECK(st.requests >= 1 && st.requests <= 2000);
	CHECK(st.retries == 0);
	{
		/* A lazy open's joined reads: each range a window into its
		 * neighbours'; one pread of their union, each range right. */
		struct ckpt_store_stats b4;
		uint64_t ulen = 0;

		ckpt_store_stats(s, &b4);
		for (i = 0; i < 4; i++) {
			r[i] = (struct ckpt_store_range){ id[1], 100 + 300 * i,
							 400, dst + 400 * i };
			ulen = 300 * i + 400;
		}
		CHECK(ckpt_store_read(s, r, 4) == 0);
		for (i = 0, bad = 0; i < 4; i++) {
			uint64_t j;

			for (j = 0; j < 400; j++)
				bad += ((uint8_t *)r[i].dst)[j] !=
				       pat(1, r[i].off + j);
		}
		CHECK(bad == 0);
		ckpt_store_stats(s, &st);
		CHECK(st.bytes_fetched - b4.bytes_fetched == ulen);
		CHECK(st.bytes_delivered - b4.bytes_delivered == 4 * 400);
		CHECK(st.requests - b4.requests == 1);
	}
	{
		/* A joined read: a record's head window, its bytes (into the
		 * caller's tensor) and its tail window follow one another
		 * exactly; one preadv into their own buffers, none shared
		 * (an empty one among them too). */
		static const uint64_t len[5] = { 100, 0, 1700, 1, 2199 };
		struct ckpt_store_stats b4;
		uint64_t off = 1000;

		ckpt_store_stats(s, &b4);
		memset(dst, 0xee, 4100);
		for (i = 0, at = 0; i < 5; i++) {
			r[i] = (struct ckpt_store_range){ id[2], off, len[i],
							 dst + at + i };
			off += len[i];
			at += len[i];
		}
		CHECK(ckpt_store_read(s, r, 5) == 0);
		for (i = 0, bad = 0; i < 5; i++) {
			uint64_t j;

			for (j = 0; j < r[i].len; j++)
				bad += ((uint8_t *)r[i].dst)[j] !=
				       pat(2, r[i].off + j);
			/* the byte between two buffers is nobody's */
			bad += ((uint8_t *)r[i].dst)[r[i].len] != 0xee;
		}
		CHECK(bad == 0);
		ckpt_store_stats(s, &st);
		CHECK(st.requests - b4.requests == 1);
		CHECK(st.bytes_fetched - b4.bytes_fetched == 4000);
		CHECK(st.bytes_delivered - b4.bytes_delivered == 4000);
		/* the same run going past the file's end fails, naming it */
		r[4].len = FSIZE;
		ckpt_clear_last_error();
		CHECK(ckpt_store_read(s, r, 5) == -EIO);
		CHECK(strstr(ckpt_last_error(), "/f2: offset 1000: file ends 4000 bytes into a "));
	}
	/* a range past the end fails the batch, naming the file */
	r[0] = (struct ckpt_store_range){ id[3], FSIZE - 10, 20, dst };
	ckpt_clear_last_error();
	CHECK(ckpt_store_read(s, r, 1) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/f3: offset 4990: file ends 10 bytes into a 20-byte read"));
	free(dst);
	ckpt_store_free(s);
	cd_remove(dir);
}

/* A joined read of a large record: its head window, 18 MiB of its bytes
 * (straight into the caller's tensor) and its tail window, one run of
 * its file: one request into the three buffers (one read of their union
 * through a buffer of its own would be a copy of 18 MiB more; it did
 * not merge runs past 16 MiB, and read them one by one). */
static void test_adjacent_large(void)
{
	const uint64_t big = (uint64_t)18 << 20, size = (uint64_t)20 << 20;
	char *dir = cd_new(), err[1024];
	struct ckpt_store_range r[3];
	struct ckpt_store_file_info fi;
	struct ckpt_store_stats st;
	struct ckpt_store *s;
	uint8_t *mid = malloc(big), head[2048], tail[2048];
	uint32_t id = 0;
	uint64_t j;
	int bad = 0;

	CHECK(mid && put_pattern(dir, "rec", 5, size) == 0);
	s = store(dir, false, 0);
	CHECK(s && ckpt_store_open(s, "rec", &id, &fi, err, sizeof(err)) == 0);
	if (!s || !mid)
		goto out;
	r[0] = (struct ckpt_store_range){ id, 1000, sizeof(head), head };
	r[1] = (struct ckpt_store_range){ id, 1000 + sizeof(head), big, mid };
	r[2] = (struct ckpt_store_range){ id, 1000 + sizeof(head) + big,
					 sizeof(tail), tail };
	CHECK(ckpt_store_read(s, r, 3) == 0);
	for (j = 0; j < sizeof(head); j++)
		bad += head[j] != pat(5, 1000 + j) ||
		       tail[j] != pat(5, 1000 + sizeof(head) + big + j);
	for (j = 0; j < big; j += 4093)
		bad += mid[j] != pat(5, 1000 + sizeof(head) + j);
	bad += mid[big - 1] != pat(5, 1000 + sizeof(head) + big - 1);
	CHECK(bad == 0);
	ckpt_store_stats(s, &st);
	CHECK(st.requests == 1);
	CHECK(st.bytes_fetched == big + 4096);
out:
	ckpt_store_free(s);
	free(mid);
	cd_remove(dir);
}

struct reader {
	struct ckpt_store *s;
	const uint32_t *id;
	unsigned seed;
	int bad;
};

static void *read_many(void *arg)
{
	struct reader *rd = arg;
	uint8_t b[64];
	unsigned i, k;

	for (i = 0; i < 2000; i++) {
		uint64_t off;

		k = (unsigned)rand_r(&rd->seed) % NFILES;
		off = (uint64_t)rand_r(&rd->seed) % (FSIZE - 64);
		if (ckpt_store_pread(rd->s, rd->id[k], b, 64, off) ||
		    b[0] != pat(k, off) || b[63] != pat(k, off + 63))
			rd->bad++;
	}
	return NULL;
}

/* 50 files through 4 fds, from 8 threads at once: every byte right, and
 * at most 4 data fds (and the directory's) open after. */
static void test_fd_cap(void)
{
	char *dir = cd_new(), name[16], err[1024];
	struct ckpt_store_file_info fi;
	struct reader rd[8];
	pthread_t th[8];
	uint32_t id[NFILES];
	struct ckpt_store *s;
	int base = cd_count_fds();
	unsigned k;

	for (k = 0; k < NFILES; k++) {
		snprintf(name, sizeof(name), "f%u", k);
		CHECK(put_pattern(dir, name, k, FSIZE) == 0);
	}
	s = store(dir, false, 4);
	CHECK(s != NULL);
	if (!s)
		return;
	for (k = 0; k < NFILES; k++) {
		snprintf(name, sizeof(name), "f%u", k);
		CHECK(ckpt_store_open(s, name, &id[k], &fi, err, sizeof(err)) == 0);
		CHECK(cd_count_fds() - base <= 4 + 1);
	}
	for (k = 0; k < 8; k++) {
		rd[k] = (struct reader){ s, id, k + 1, 0 };
		CHECK(pthread_create(&th[k], NULL, read_many, &rd[k]) == 0);
	}
	for (k = 0; k < 8; k++) {
		pthread_join(th[k], NULL);
		CHECK(rd[k].bad == 0);
	}
	CHECK(cd_count_fds() - base <= 4 + 1);
	/* a lower cap closes the unused files at once */
	{
		struct ckpt_store_opts o = { .max_open = 2 };

		CHECK(ckpt_store_set_opts(s, &o, err, sizeof(err)) == 0);
		CHECK(cd_count_fds() - base <= 2 + 1);
	}
	ckpt_store_free(s);
	CHECK(cd_count_fds() == base);
	cd_remove(dir);
}

/* A file the user names (-o index=FILE) is read wherever it is. */
static void test_read_local(void)
{
	char *dir = cd_new(), path[4200], err[1024];
	uint8_t *buf = NULL;
	size_t len = 0;

	CHECK(put_pattern(dir, "idx", 8, 300) == 0);
	snprintf(path, sizeof(path), "%s/idx", dir);
	CHECK(ckpt_store_read_local(path, 1000, &buf, &len, NULL, err,
				    sizeof(err)) == 0);
	CHECK(len == 300 && buf && buf[299] == pat(8, 299));
	free(buf);
	snprintf(path, sizeof(path), "%s/none", dir);
	CHECK(ckpt_store_read_local(path, 1000, &buf, &len, NULL, err,
				    sizeof(err)) == -ENOENT);
	CHECK(!strncmp(err, path, strlen(path)));
	cd_remove(dir);
}

#ifndef SYS_cachestat
#define SYS_cachestat 451
#endif

/* Pages of file path in the page cache after dropping them: 0 where the
 * file system drops them (not tmpfs), -1 when cachestat(2) is missing. */
static long drop_pages(const char *path)
{
	struct {
		uint64_t off, len;
	} r = { 0, 0 };
	uint64_t cs[5];
	int fd = open(path, O_RDONLY);
	long n;

	if (fd < 0)
		return -1;
	fsync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	n = syscall(SYS_cachestat, fd, &r, cs, 0) == 0 ? (long)cs[0] : -1;
	close(fd);
	return n;
}

/* Whether buf holds bytes [off, off + len) of pattern k. */
static bool is_pattern(const uint8_t *buf, unsigned k, uint64_t off,
		       size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (buf[i] != pat(k, off + i))
			return false;
	return true;
}

/*
 * direct_io: a range of 256 KiB or more with no page cached is read with
 * O_DIRECT (the file reopened so once), whatever its alignment, up to the
 * file's unaligned end; a small range, and a range of a cached file, are
 * read through the page cache.  The bytes are right either way.
 */
static void test_direct_io(void)
{
	const size_t big = (3u << 20) + 12345, small = 100000;
	struct ckpt_store_opts o = { .direct_io = true };
	struct ckpt_store *s = NULL;
	char *dir = cd_new(), path[4200], err[1024];
	uint8_t *buf = malloc(big);
	uint32_t cold, warm, tiny;
	unsigned before;

	CHECK(dir && buf);
	CHECK(put_pattern(dir, "cold", 1, big) == 0);
	CHECK(put_pattern(dir, "warm", 2, big) == 0);
	CHECK(put_pattern(dir, "tiny", 3, small) == 0);
	snprintf(path, sizeof(path), "%s/cold", dir);
	if (drop_pages(path) != 0) {
		printf("  (skipped: %s keeps its pages or has no cachestat)\n",
		       dir);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/tiny", dir);
	CHECK(drop_pages(path) == 0);
	CHECK(ckpt_store_new(dir, &o, &s, err, sizeof(err)) == 0);
	CHECK(ckpt_store_open(s, "cold", &cold, NULL, err, sizeof(err)) == 0);
	CHECK(ckpt_store_open(s, "warm", &warm, NULL, err, sizeof(err)) == 0);
	CHECK(ckpt_store_open(s, "tiny", &tiny, NULL, err, sizeof(err)) == 0);

	before = direct_opens;
	CHECK(ckpt_store_pread(s, cold, buf, (1u << 20) + 3000, 777) == 0);
	CHECK(is_pattern(buf, 1, 777, (1u << 20) + 3000));
	CHECK(direct_opens == before + 1);
	/* the unaligned tail: the last O_DIRECT read comes back short */
	CHECK(ckpt_store_pread(s, cold, buf, 300001, big - 300001) == 0);
	CHECK(is_pattern(buf, 1, big - 300001, 300001));
	CHECK(direct_opens == before + 1);	/* reopened once */

	CHECK(ckpt_store_pread(s, warm, buf, big, 0) == 0);	/* cached */
	CHECK(is_pattern(buf, 2, 0, big));
	CHECK(ckpt_store_pread(s, tiny, buf, small - 5, 5) == 0);
	CHECK(is_pattern(buf, 3, 5, small - 5));
	CHECK(direct_opens == before + 1);
out:
	ckpt_store_free(s);
	free(buf);
	cd_remove(dir);
}

/*
 * ckpt_object_read() (the public call over the store): one object's bytes
 * under a root, without opening a checkpoint; -ENOENT naming a missing
 * object or root, -EINVAL for a name outside the root's names.
 */
static void test_object_read(void)
{
	char *dir = cd_new(), path[4200], err[1024];
	struct ckpt_open_opts o = { 0 };
	struct ckpt_error e;
	uint8_t *buf = NULL;
	size_t len = 1;

	CHECK(put_pattern(dir, ".metadata", 5, 700) == 0);
	CHECK(put_pattern(dir, "x.distcp", 6, 10) == 0);
	CHECK(ckpt_object_read(dir, ".metadata", NULL, &buf, &len, err,
			       sizeof(err)) == 0);
	CHECK(len == 700 && buf && is_pattern(buf, 5, 0, 700));
	ckpt_object_free(buf);
	buf = NULL;
	CHECK(ckpt_object_read(dir, "x.distcp", &o, &buf, &len, err,
			       sizeof(err)) == 0);
	CHECK(len == 10 && buf && is_pattern(buf, 6, 0, 10));
	ckpt_object_free(buf);
	ckpt_object_free(NULL);
	buf = (uint8_t *)1;
	CHECK(ckpt_object_read(dir, "none", NULL, &buf, &len, err,
			       sizeof(err)) == -ENOENT);
	CHECK(!buf && !len);
	snprintf(path, sizeof(path), "%s/none", dir);
	CHECK(strstr(err, path) != NULL);
	ckpt_last_error_get(&e);
	CHECK(e.code == ENOENT && strstr(e.message, path) != NULL);
	CHECK(ckpt_object_read(dir, "../x", NULL, &buf, &len, err,
			       sizeof(err)) == -EINVAL);
	snprintf(path, sizeof(path), "%s/nodir", dir);
	CHECK(ckpt_object_read(path, ".metadata", NULL, &buf, &len, err,
			       sizeof(err)) == -ENOENT);
	CHECK(strstr(err, path) != NULL);
	cd_remove(dir);
}

int main(void)
{
	TEST(test_list);
	TEST(test_open_regular);
	TEST(test_open_not_regular);
	TEST(test_open_outside);
	TEST(test_short_file);
	TEST(test_read_file_large);
	TEST(test_identity);
	TEST(test_batch_and_stats);
	TEST(test_adjacent_large);
	TEST(test_fd_cap);
	TEST(test_read_local);
	TEST(test_direct_io);
	TEST(test_object_read);
	return TEST_REPORT();
}
