/* SPDX-License-Identifier: MIT */
/*
 * What the public-API fuzz targets share: a private checkpoint directory
 * the inputs are written into (removed at exit), and the common ending:
 * open the data files of an opened checkpoint, build the view (world,
 * rank) and read every file of it whole, 4 KiB at a time.  Reads may
 * fail; nothing may crash.
 */
#ifndef CKPT_FUZZ_COMMON_H
#define CKPT_FUZZ_COMMON_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"

static char fuzz_dir_path[64];

static void fuzz_dir_remove(void)
{
	char path[384];
	struct dirent *de;
	DIR *d = opendir(fuzz_dir_path);

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.' && (!de->d_name[1] ||
		    (de->d_name[1] == '.' && !de->d_name[2])))
			continue;
		snprintf(path, sizeof(path), "%s/%s", fuzz_dir_path, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(fuzz_dir_path);
}

/* The target's private directory, /tmp/ckptfs-fuzz-TAG.PID, made on first
 * use; everything in it is removed at exit. */
static inline const char *fuzz_dir(const char *tag)
{
	if (!fuzz_dir_path[0]) {
		snprintf(fuzz_dir_path, sizeof(fuzz_dir_path),
			 "/tmp/ckptfs-fuzz-%s.%d", tag, (int)getpid());
		mkdir(fuzz_dir_path, 0700);
		atexit(fuzz_dir_remove);
	}
	return fuzz_dir_path;
}

/* Write len bytes as file name of the private directory: 0 or -1. */
static inline int fuzz_put(const char *name, const void *buf, size_t len)
{
	char path[384];
	FILE *f;
	size_t w;

	snprintf(path, sizeof(path), "%s/%s", fuzz_dir_path, name);
	f = fopen(path, "wb");
	if (!f)
		return -1;
	w = fwrite(buf, 1, len, f);
	return fclose(f) == 0 && w == len ? 0 : -1;
}

static inline void fuzz_read_view(struct ckpt_meta *m, uint32_t world,
				  uint32_t rank)
{
	struct ckpt_view_opts o = { .world = world, .rank = rank,
				    .dtype = CKPT_DTYPE_COUNT };
	struct ckpt_scratch *s = ckpt_scratch_new();
	struct ckpt_view *v = NULL;
	struct ckpt_view_info vi;
	char err[1024], buf[4096];
	uint32_t i;

	if (s && !ckpt_files_open(m, 0, 0, err, sizeof(err)) &&
	    !ckpt_view_new(m, &o, &v, err, sizeof(err))) {
		ckpt_view_info(v, &vi);
		for (i = 0; i < vi.nnodes; i++) {
			uint64_t off = 0, size = 0;
			size_t got;

			if (ckpt_view_size(v, 0, i, &size))
				continue;
			while (off < size &&
			       !ckpt_view_read(v, 0, i, off, sizeof(buf), buf,
					       &got, s) && got)
				off += got;
		}
	}
	ckpt_view_free(v);
	ckpt_scratch_free(s);
}

#endif
