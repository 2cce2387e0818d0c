/* SPDX-License-Identifier: MIT */
/*
 * Test-side helpers: a checkpoint directory in a temp dir (a .metadata
 * image from metabuild.h and data files), removed afterwards.
 */
#ifndef CKPT_CKPTDIR_H
#define CKPT_CKPTDIR_H

#include <dirent.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metabuild.h"

/* A new empty directory (caller frees the name and calls cd_remove). */
static inline char *cd_new(void)
{
	char *d = strdup("/tmp/ckptfs-unit.XXXXXX");

	if (d && !mkdtemp(d)) {
		free(d);
		return NULL;
	}
	return d;
}

static inline int cd_put(const char *dir, const char *name, const void *buf,
			 size_t len)
{
	char path[4096];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f)
		return -1;
	n = fwrite(buf, 1, len, f);
	return fclose(f) == 0 && n == len ? 0 : -1;
}

/* How many fds this process has open now (-1 without /proc). */
static inline int cd_count_fds(void)
{
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* d's own */
}

static inline void cd_remove(char *dir)
{
	char cmd[4200];

	if (!dir)
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	free(dir);
}

/*
 * float32 keys names[0..n), each 1-D of `elems` elements in one chunk,
 * stored back to back in "data" (key k's element i = k * 1000 + i), or
 * with own_files, each at the start of a file named like the key.  With
 * off and len, key k's record is len[k] bytes at off[k] of "data"; with
 * transform, each record is stored with it (e.g. "stream.zstd/1"); with
 * xxh3, key k's record has checksum xxh3[k].
 */
static inline void mb_keys_meta_sums(msgpack_sbuffer *sb,
				     const char *const *names, unsigned n,
				     uint64_t elems, int own_files,
				     const uint64_t *off, const uint64_t *len,
				     const char *transform,
				     const uint64_t *xxh3)
{
	msgpack_packer pk;
	uint64_t zero = 0;
	unsigned k;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	mb_header(&pk, n);
	for (k = 0; k < n; k++) {
		mb_str(&pk, names[k]);
		msgpack_pack_map(&pk, 4);
		mb_str(&pk, "type");
		mb_str(&pk, "tensor");
		mb_str(&pk, "dtype");
		mb_str(&pk, "float32");
		mb_str(&pk, "size");
		mb_dims(&pk, &elems, 1);
		mb_str(&pk, "chunks");
		msgpack_pack_array(&pk, 1);
		msgpack_pack_map(&pk, 2);
		mb_str(&pk, "offsets");
		mb_dims(&pk, &zero, 1);
		mb_str(&pk, "sizes");
		mb_dims(&pk, &elems, 1);
	}
	mb_str(&pk, "storage_data");
	msgpack_pack_array(&pk, n);
	for (k = 0; k < n; k++) {
		msgpack_pack_map(&pk, 5 + (transform != NULL) +
				 (xxh3 != NULL));
		mb_str(&pk, "fqn");
		mb_str(&pk, names[k]);
		mb_str(&pk, "offsets");
		mb_dims(&pk, &zero, 1);
		mb_str(&pk, "relative_path");
		mb_str(&pk, own_files ? names[k] : "data");
		mb_str(&pk, "offset");
		msgpack_pack_uint64(&pk, off ? off[k] : own_files ? 0 :
					 (uint64_t)k * elems * 4);
		mb_str(&pk, "length");
		msgpack_pack_uint64(&pk, len ? len[k] : elems * 4);
		if (transform) {
			mb_str(&pk, "transforms");
			msgpack_pack_array(&pk, 1);
			mb_str(&pk, transform);
		}
		if (xxh3) {
			mb_str(&pk, "xxh3");
			msgpack_pack_uint64(&pk, xxh3[k]);
		}
	}
}

static inline void mb_keys_meta_recs(msgpack_sbuffer *sb,
				     const char *const *names, unsigned n,
				     uint64_t elems, int own_files,
				     const uint64_t *off, const uint64_t *len,
				     const char *transform)
{
	mb_keys_meta_sums(sb, names, n, elems, own_files, off, len, transform,
			  NULL);
}

static inline void mb_keys_meta_files(msgpack_sbuffer *sb,
				      const char *const *names, unsigned n,
				      uint64_t elems, int own_files)
{
	mb_keys_meta_recs(sb, names, n, elems, own_files, NULL, NULL, NULL);
}

static inline void mb_keys_meta(msgpack_sbuffer *sb, const char *const *names,
				unsigned n, uint64_t elems)
{
	mb_keys_meta_files(sb, names, n, elems, 0);
}

/* Data for mb_keys_meta: n keys of elems float32 each (caller frees). */
static inline float *mb_keys_data(unsigned n, uint64_t elems)
{
	float *d = malloc(n * elems * sizeof(float) + 1);
	uint64_t i;
	unsigned k;

	for (k = 0; d && k < n; k++)
		for (i = 0; i < elems; i++)
			d[k * elems + i] = (float)(k * 1000 + i);
	return d;
}

/*
 * One float32 tensor "t" of shape [rows, cols] saved as one chunk whose
 * record is column-major: element (i, j) at storage index i + j * rows
 * (strides [1, rows]), as torch saves a transposed tensor.
 */
static inline void mb_transposed_meta(msgpack_sbuffer *sb, uint64_t rows,
				      uint64_t cols)
{
	uint64_t shape[2] = { rows, cols }, strides[2] = { 1, rows };
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	mb_one_record(&pk, shape, 2, "data", 0, rows * cols * 4, 1);
	mb_str(&pk, "strides");
	mb_dims(&pk, strides, 2);
}

/* Write dir/.metadata from sb and dir/data from data. */
static inline int cd_ckpt(const char *dir, const msgpack_sbuffer *sb,
			  const void *data, size_t len)
{
	return cd_put(dir, ".metadata", sb->data, sb->size) ||
	       cd_put(dir, "data", data, len) ? -1 : 0;
}

#endif
