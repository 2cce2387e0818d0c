/* SPDX-License-Identifier: MIT */
/*
 * "Open this directory as a checkpoint": reads .metadata, picks the format
 * reader (native msgpack, or a PyTorch DCP pickle indexed by core/torch/),
 * and hands the image to the native parser and validator (model/).
 */
#include "model/meta.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "records/record_cache.h"
#include "safetensors/st_index.h"
#include "torch/torch_index.h"

/* Read the whole regular file at path, at most max bytes. */
static int read_capped(const char *path, size_t max, uint8_t **out,
		       size_t *outlen, struct timespec *mtime, char *err,
		       size_t errlen)
{
	struct stat st;
	uint8_t *buf = NULL;
	size_t got = 0;
	ssize_t n;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return ckpt_errf(err, errlen, -errno, "%s: cannot open: %s",
				 path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = ckpt_errf(err, errlen, -errno, "%s: cannot stat: %s",
			       path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: not a regular file",
			       path);
		goto out_close;
	}
	if ((uint64_t)st.st_size > max) {
		rc = ckpt_errf(err, errlen, -EFBIG,
			       "%s: %" PRIu64 " bytes, more than the %zu-byte metadata limit",
			       path, (uint64_t)st.st_size, max);
		goto out_close;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
		goto out_close;
	}
	while (got < (size_t)st.st_size) {
		n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = ckpt_errf(err, errlen, -EIO, "%s: short read: %s",
				       path, n < 0 ? strerror(errno) : "file shrank");
			free(buf);
			goto out_close;
		}
		got += (size_t)n;
	}
	*out = buf;
	*outlen = got;
	*mtime = st.st_mtim;
	rc = 0;
out_close:
	close(fd);
	return rc;
}

/* dir/.metadata, whole: *path (caller frees) names it, also on error. */
static int read_dot_metadata(const char *dir, char **path, uint8_t **buf,
			     size_t *len, struct timespec *mtime, char *err,
			     size_t errlen)
{
	if (asprintf(path, "%s/.metadata", dir) < 0) {
		*path = NULL;
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	return read_capped(*path, CKPT_META_MAX_BYTES, buf, len, mtime, err,
			   errlen);
}

/* Index the torch checkpoint in dir from its pickle: see torch_index.h. */
static int index_now(const char *dir, bool follow, const char *meta_path,
		     const uint8_t *pkl, size_t len, uint8_t **img,
		     size_t *imglen, char *err, size_t errlen)
{
	int dirfd, rc;

	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return ckpt_errf(err, errlen, -errno, "%s: cannot open: %s",
				 dir, strerror(errno));
	rc = ckpt_torch_index(dir, dirfd, follow, meta_path, pkl, len, img,
			      imglen, err, errlen);
	close(dirfd);
	return rc;
}

#define RANK_LOCAL_MAX 65536	/* __R.metadata files merged at most */

static int cmp_rank(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;

	return x < y ? -1 : x > y;
}

/* "__R.metadata" with R decimal: 0 and *rank, or -1. */
static int rank_local_name(const char *s, unsigned long *rank)
{
	char *end;

	if (strncmp(s, "__", 2) || s[2] < '0' || s[2] > '9')
		return -1;
	errno = 0;
	*rank = strtoul(s + 2, &end, 10);
	return errno || strcmp(end, ".metadata") ? -1 : 0;
}

/*
 * A checkpoint saved with torch's dcp.save(..., use_collectives=False):
 * no .metadata, but one pickled __R.metadata per rank, each listing that
 * rank's chunks.  Each is indexed like a .metadata and parsed as a part;
 * the parts are merged into one native image (model/merge.c), which the
 * caller parses and tiles as usual.  -ENOENT when there are no such
 * files.
 */
static int rank_local_image(const char *dir, const struct ckpt_open_opts *o,
			    uint8_t **img, size_t *imglen,
			    struct timespec *mtime, char *err, size_t errlen)
{
	struct ckpt_meta **parts = NULL;
	unsigned long *ranks = NULL, r;
	char **names = NULL;
	size_t n = 0, cap = 0, i;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	d = opendir(dir);
	if (!d)
		return -ENOENT;
	while ((de = readdir(d))) {
		if (rank_local_name(de->d_name, &r))
			continue;
		if (n == RANK_LOCAL_MAX) {
			closedir(d);
			free(ranks);
			return ckpt_errf(err, errlen, -E2BIG,
					 "%s: more than %d __R.metadata files",
					 dir, RANK_LOCAL_MAX);
		}
		if (ckpt_grow((void **)&ranks, &cap, n + 1, sizeof(*ranks))) {
			closedir(d);
			free(ranks);
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		}
		ranks[n++] = r;
	}
	closedir(d);
	if (!n) {
		free(ranks);
		return -ENOENT;
	}
	qsort(ranks, n, sizeof(*ranks), cmp_rank);
	parts = calloc(n, sizeof(*parts));
	names = calloc(n, sizeof(*names));
	if (!parts || !names) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	for (i = 0; i < n; i++) {
		uint8_t *pkl = NULL, *part = NULL;
		size_t len = 0, plen = 0;
		struct timespec mt;

		if (i && ranks[i] == ranks[i - 1]) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: two metadata files for rank %lu",
				       dir, ranks[i]);
			goto out_free;
		}
		if (asprintf(&names[i], "%s/__%lu.metadata", dir, ranks[i]) < 0) {
			names[i] = NULL;
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_free;
		}
		rc = read_capped(names[i], CKPT_META_MAX_BYTES, &pkl, &len, &mt,
				 err, errlen);
		if (rc)
			goto out_free;
		if (i == 0 || mt.tv_sec > mtime->tv_sec ||
		    (mt.tv_sec == mtime->tv_sec && mt.tv_nsec > mtime->tv_nsec))
			*mtime = mt;
		if (!ckpt_torch_is_pickle(pkl, len)) {
			free(pkl);
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: not a PyTorch rank-local metadata pickle",
				       names[i]);
			goto out_free;
		}
		rc = index_now(dir, o && o->follow_symlinks, names[i], pkl, len,
			       &part, &plen, err, errlen);
		free(pkl);
		if (rc)
			goto out_free;
		rc = ckpt_meta_parse_part(part, plen, names[i], &parts[i], err,
					  errlen);
		free(part);
		if (rc)
			goto out_free;
	}
	rc = ckpt_meta_merge(parts, (const char *const *)names, n, img, imglen,
			     err, errlen);
out_free:
	for (i = 0; parts && i < n; i++)
		ckpt_meta_free(parts[i]);
	for (i = 0; names && i < n; i++)
		free(names[i]);
	free(parts);
	free(names);
	free(ranks);
	return rc;
}

/* A directory of safetensors files: see safetensors/st_index.h. */
static int safetensors_image(const char *dir, const struct ckpt_open_opts *o,
			     uint8_t **img, size_t *imglen,
			     struct timespec *mtime, bool *sharded, char *err,
			     size_t errlen)
{
	struct stat st;
	int dirfd, rc;

	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -ENOENT;
	rc = ckpt_safetensors_index(dir, dirfd, o && o->follow_symlinks, img,
				    imglen, sharded, err, errlen);
	if (!rc && fstat(dirfd, &st) == 0)
		*mtime = st.st_mtim;
	close(dirfd);
	return rc;
}

/* A torch checkpoint's native image: the given or default index when it
 * was built from this very pickle, else built now. */
static int torch_image(const char *dir, const char *meta_path,
		       const struct ckpt_open_opts *o, const uint8_t *pkl,
		       size_t len, uint8_t **img, size_t *imglen,
		       uint8_t *origin, char *err, size_t errlen)
{
	struct timespec ignored;
	char *ipath = NULL;
	int rc;

	if (o && o->index) {
		rc = read_capped(o->index, CKPT_META_MAX_BYTES, img, imglen,
				 &ignored, err, errlen);
		if (rc)
			return rc;
		if (!ckpt_torch_index_matches(*img, *imglen, pkl, len)) {
			free(*img);
			*img = NULL;
			return ckpt_errf(err, errlen, -ESTALE,
					 "%s: index was not built from %s as it is now; run 'ckptfs index %s' again",
					 o->index, meta_path, dir);
		}
		*origin = CKPT_ORIGIN_TORCH_INDEX;
		return 0;
	}
	if (asprintf(&ipath, "%s/%s", dir, CKPT_INDEX_NAME) < 0)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (read_capped(ipath, CKPT_META_MAX_BYTES, img, imglen, &ignored,
			err, errlen) == 0) {
		if (ckpt_torch_index_matches(*img, *imglen, pkl, len)) {
			free(ipath);
			*origin = CKPT_ORIGIN_TORCH_INDEX;
			return 0;
		}
		free(*img);	/* stale: a cache, rebuilt below */
		*img = NULL;
	}
	free(ipath);
	*origin = CKPT_ORIGIN_TORCH;
	return index_now(dir, o && o->follow_symlinks, meta_path, pkl, len, img,
			 imglen, err, errlen);
}

int ckpt_meta_open_opts(const char *dir, const struct ckpt_open_opts *o,
			struct ckpt_meta **out, char *err, size_t errlen)
{
	struct timespec mtime;
	struct ckpt_meta *m;
	char *path = NULL;
	uint8_t *buf = NULL, *img = NULL, origin = CKPT_ORIGIN_NATIVE;
	uint8_t variants = 0;
	bool sharded = false;
	size_t len = 0, imglen = 0;
	int rc;

	*out = NULL;
	rc = read_dot_metadata(dir, &path, &buf, &len, &mtime, err, errlen);
	if (rc == -ENOENT) {
		char why[1024];

		/* No .metadata: the ranks' own __R.metadata files? */
		snprintf(why, sizeof(why), "%s", err ? err : "");
		rc = rank_local_image(dir, o, &buf, &len, &mtime, err, errlen);
		origin = CKPT_ORIGIN_TORCH_LOCAL;
		if (rc == -ENOENT) {	/* ... or safetensors files? */
			rc = safetensors_image(dir, o, &buf, &len, &mtime,
					       &sharded, err, errlen);
			origin = sharded ? CKPT_ORIGIN_SAFETENSORS_SHARDED :
					   CKPT_ORIGIN_SAFETENSORS;
		}
		if (rc == -ENOENT) {
			rc = ckpt_errf(err, errlen, -ENOENT, "%s", why);
			goto out_path;
		}
		if (rc)
			goto out_path;
		free(path);
		if (asprintf(&path, origin != CKPT_ORIGIN_TORCH_LOCAL ?
			     "%s/*.safetensors" : "%s/__*.metadata", dir) < 0) {
			path = NULL;
			free(buf);
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_path;
		}
	} else if (rc) {
		goto out_path;
	} else if (ckpt_torch_is_pickle(buf, len)) {
		rc = torch_image(dir, path, o, buf, len, &img, &imglen,
				 &origin, err, errlen);
		free(buf);
		if (rc)
			goto out_path;
		variants = ckpt_torch_index_variants(img, imglen);
		buf = img;
		len = imglen;
	}
	rc = ckpt_meta_parse(buf, len, path, &m, err, errlen);
	free(buf);
	if (rc)
		goto out_path;
	ckpt_meta_set_origin(m, origin, variants);
	if (o && o->cache_bytes)
		ckpt_record_cache_set(m, o->cache_bytes);
	m->dir = strdup(dir);
	if (!m->dir) {
		ckpt_meta_free(m);
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_path;
	}
	m->meta_path = path;
	m->mtime = mtime;
	*out = m;
	return 0;
out_path:
	free(path);
	return rc;
}

int ckpt_meta_open(const char *dir, struct ckpt_meta **out, char *err,
		   size_t errlen)
{
	return ckpt_meta_open_opts(dir, NULL, out, err, errlen);
}

int ckpt_meta_build_index(const char *dir, bool follow, uint8_t **img,
			  size_t *imglen, struct ckpt_meta **parsed, char *err,
			  size_t errlen)
{
	struct timespec mtime;
	char *path = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	*img = NULL;
	*parsed = NULL;
	rc = read_dot_metadata(dir, &path, &buf, &len, &mtime, err, errlen);
	if (rc)
		goto out_path;
	if (!ckpt_torch_is_pickle(buf, len)) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: not a PyTorch checkpoint (already in the native format): nothing to index",
			       path);
		goto out_buf;
	}
	rc = index_now(dir, follow, path, buf, len, img, imglen, err, errlen);
	if (rc)
		goto out_buf;
	/* Validate it as a mount would. */
	rc = ckpt_meta_parse(*img, *imglen, path, parsed, err, errlen);
	if (rc) {
		free(*img);
		*img = NULL;
	}
out_buf:
	free(buf);
out_path:
	free(path);
	return rc;
}

