/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the data files (io/datafiles.c): every refusal at open
 * names the file and the key, a bounded fd cache serves many files with
 * few descriptors, a read of a file cut short or replaced after the
 * checks fails with a reason, and the host process's fd limit and memory
 * advice are left alone unless the caller asks.
 */
// wrap: madvise
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "common/errbuf.h"
#include "io/datafiles.h"
#include "model/meta.h"
#include "testhelp.h"

static _Atomic unsigned hugepage_calls;

int __real_madvise(void *addr, size_t len, int advice);
int __wrap_madvise(void *addr, size_t len, int advice);

int __wrap_madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_HUGEPAGE)
		hugepage_calls++;
	return __real_madvise(addr, len, advice);
}

/* n keys of 4 float32, key k in its own file "fK". */
static char *many_files(unsigned n)
{
	char *dir = cd_new(), *names[64];
	msgpack_sbuffer sb;
	unsigned k;

	if (!dir || n > 64)
		return NULL;
	for (k = 0; k < n; k++) {
		float d[4] = { (float)k, (float)k + 0.5f, 2, 3 };
		char name[32];

		snprintf(name, sizeof(name), "f%u", k);
		names[k] = strdup(name);
		cd_put(dir, name, d, sizeof(d));
	}
	msgpack_sbuffer_init(&sb);
	mb_keys_meta_files(&sb, (const char *const *)names, n, 4, 1);
	cd_put(dir, ".metadata", sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	for (k = 0; k < n; k++)
		free(names[k]);
	return dir;
}

static void test_refusals(void)
{
	char *dir = many_files(3), path[4200], err[1024];
	struct ckpt_meta *m;

	/* A flag this library does not know (a binding newer than it). */
	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, 1u << 30, 0, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "unknown data file flags 0x40000000"));
	ckpt_meta_free(m);
	/* Missing. */
	snprintf(path, sizeof(path), "%s/f1", dir);
	CHECK(unlink(path) == 0);
	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, 0, 0, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "/f1: key 'f1': cannot open data file"));
	ckpt_meta_free(m);
	/* Short. */
	CHECK(cd_put(dir, "f1", "abc", 3) == 0);
	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, 0, 0, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "/f1: key 'f1': data file has 3 bytes, its record ends at 16"));
	ckpt_meta_free(m);
	/* A directory. */
	CHECK(unlink(path) == 0 && mkdir(path, 0755) == 0);
	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, 0, 0, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "/f1: key 'f1': data file is not a regular file"));
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* 40 files through a cache of 3 descriptors, read in a scattered order:
 * every byte right, never more than 3 open at once (and the directory). */
static void test_fd_cache(void)
{
	char *dir = many_files(40), err[1024];
	int base = cd_count_fds();
	struct ckpt_meta *m;
	unsigned k, round;

	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, 0, 3, err, sizeof(err)) == 0);
	CHECK(cd_count_fds() - base <= 3 + 1);
	for (round = 0; round < 3; round++) {
		for (k = 0; k < 40; k++) {
			unsigned f = (k * 17 + round) % 40;
			const struct ckpt_entry *e;
			char fqn[16];
			float x[2];

			snprintf(fqn, sizeof(fqn), "f%u", f);
			e = ckpt_meta_find(m, fqn, strlen(fqn));
			CHECK(e != NULL);
			if (!e)
				continue;
			CHECK(ckpt_files_pread(m, m->chunks[e->chunk_first].file,
					       x, 8, 0) == 0);
			CHECK(x[0] == (float)f && x[1] == (float)f + 0.5f);
			CHECK(cd_count_fds() - base <= 3 + 1);
		}
	}
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* Cut short, then replaced by another file: EIO, with the reason. */
static void test_changed_after_open(void)
{
	char *dir = many_files(2), path[4200], err[1024];
	struct ckpt_meta *m;
	char buf[16];

	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, 0, 1, err, sizeof(err)) == 0);
	/* f0 is the one open file now: cut short under its open fd */
	CHECK(ckpt_files_pread(m, 0, buf, 16, 0) == 0);
	snprintf(path, sizeof(path), "%s/f0", dir);
	CHECK(truncate(path, 4) == 0);
	ckpt_clear_last_error();
	CHECK(ckpt_files_pread(m, 0, buf, 16, 0) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/f0: offset 0: file ends 4 bytes into a 16-byte read"));
	/* f1 evicts f0; f0 replaced (even when the new file reuses the
	 * inode number) cannot be reopened. */
	CHECK(ckpt_files_pread(m, 1, buf, 16, 0) == 0);
	CHECK(unlink(path) == 0 && cd_put(dir, "f0", "0123456789abcdef", 16) == 0);
	CHECK(ckpt_files_pread(m, 0, buf, 16, 0) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/f0: cannot open: replaced since it was validated"));
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* A library call never changes RLIMIT_NOFILE nor madvises the caller's
 * memory, unless asked (CKPT_FILES_RAISE_NOFILE, CKPT_FILES_HUGE_PAGES). */
static void test_host_untouched(void)
{
	const uint64_t n = 1 << 20;	/* one key of 4 MiB */
	const char *name = "big";
	char *dir = cd_new(), err[1024];
	struct rlimit before, low, now;
	struct ckpt_box_req req = { 0 };
	struct ckpt_meta *m;
	msgpack_sbuffer sb;
	float *data = malloc(n * 4);
	uint64_t i;

	CHECK(data && getrlimit(RLIMIT_NOFILE, &before) == 0);
	if (!data || before.rlim_max <= 64) {
		free(data);
		cd_remove(dir);
		return;
	}
	for (i = 0; i < n; i++)
		data[i] = (float)i;
	CHECK(cd_put(dir, name, data, n * 4) == 0);
	msgpack_sbuffer_init(&sb);
	mb_keys_meta_files(&sb, &name, 1, n, 1);
	cd_put(dir, ".metadata", sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	low = before;
	low.rlim_cur = 64;
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
	req.size[0] = n;
	req.dst = aligned_alloc(2 << 20, n * 4);
	CHECK(req.dst != NULL);

	hugepage_calls = 0;
	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, 0, 0, err, sizeof(err)) == 0);
	CHECK(getrlimit(RLIMIT_NOFILE, &now) == 0 && now.rlim_cur == 64);
	CHECK(ckpt_meta_read_boxes(m, &req, 1, 2, err, sizeof(err)) == 0);
	CHECK(!memcmp(req.dst, data, n * 4));
	CHECK(hugepage_calls == 0);
	ckpt_meta_free(m);

	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_files_open(m, CKPT_FILES_RAISE_NOFILE | CKPT_FILES_HUGE_PAGES,
			      0, err, sizeof(err)) == 0);
	CHECK(getrlimit(RLIMIT_NOFILE, &now) == 0 &&
	      now.rlim_cur == before.rlim_max);
	CHECK(ckpt_meta_read_boxes(m, &req, 1, 2, err, sizeof(err)) == 0);
	CHECK(hugepage_calls > 0);
	ckpt_meta_free(m);

	setrlimit(RLIMIT_NOFILE, &before);
	free(req.dst);
	free(data);
	cd_remove(dir);
}

int main(void)
{
	TEST(test_refusals);
	TEST(test_fd_cache);
	TEST(test_changed_after_open);
	TEST(test_host_untouched);
	return TEST_REPORT();
}
