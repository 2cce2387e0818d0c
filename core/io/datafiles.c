/* SPDX-License-Identifier: MIT */
/* Opening and reading the data files of an open checkpoint: see
 * datafiles.h. */
#include "io/datafiles.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/relpath.h"

#define KEY_SHOWN 120

int ckpt_files_open_one(struct ckpt_store *s, const char *name,
			const char *key, size_t keylen, uint32_t *id,
			struct ckpt_store_file_info *info, char *err,
			size_t errlen)
{
	char why[1024], k[KEY_SHOWN + 16] = "";
	const char *root = s ? ckpt_store_root(s) : ".";
	int rc;

	if (key)
		snprintf(k, sizeof(k), "key '%.*s': ",
			 (int)(keylen > KEY_SHOWN ? KEY_SHOWN : keylen), key);
	if (!s)
		return ckpt_errf_key(err, errlen, -EBADF, key, keylen,
				     "%s: %sparsed from memory, no directory to open data files in",
				     name, k);
	rc = ckpt_store_open(s, name, id, info, why, sizeof(why));
	switch (rc) {
	case 0:
		return 0;
	case -EXDEV:
		return ckpt_errf_key(err, errlen, rc, key, keylen,
				     "%s/%s: %sdata file " CKPT_STORE_OUTSIDE,
				     root, name, k);
	case -EINVAL:
		if (!ckpt_relpath_is_safe(name, (uint32_t)strnlen(name, 4096)))
			return ckpt_errf(err, errlen, rc, "%s", why);
		return ckpt_errf_key(err, errlen, rc, key, keylen,
				     "%s/%s: %sdata file is not a regular file",
				     root, name, k);
	case -ENOENT:
	case -EACCES:
	case -EPERM:
	case -ENOTDIR:
	case -ELOOP:
		return ckpt_errf_key(err, errlen, rc, key, keylen,
				     "%s/%s: %scannot open data file: %s", root,
				     name, k, strerror(-rc));
	default:	/* the store's own reason (S3: the server's answer) */
		return ckpt_errf_key(err, errlen, rc, key, keylen, "%s%s", k,
				     why);
	}
}

static int files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		      char *err, size_t errlen)
{
	struct ckpt_store_opts so = { 0 };
	struct ckpt_store_file_info info;
	struct ckpt_file_open *opened;
	uint32_t i;
	int rc;

	if (!m->store)
		return ckpt_errf(err, errlen, -EBADF,
				 "%s: parsed from memory, no directory to open data files in",
				 m->meta_path ? m->meta_path : "checkpoint");
	if (m->opened)
		return ckpt_errf(err, errlen, -EALREADY,
				 "%s: data files are open already", m->dir);
	if (flags & ~(unsigned)CKPT_FILES_KNOWN)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: unknown data file flags 0x%x", m->dir,
				 flags & ~(unsigned)CKPT_FILES_KNOWN);
	so.follow_symlinks = m->follow_symlinks ||
			     (flags & CKPT_FILES_FOLLOW_SYMLINKS);
	so.raise_nofile = flags & CKPT_FILES_RAISE_NOFILE;
	so.max_open = max_open;
	so.direct_io = flags & CKPT_FILES_DIRECT_IO;
	rc = ckpt_store_set_opts(m->store, &so, err, errlen);
	if (rc)
		return rc;
	opened = calloc(m->nfiles ? m->nfiles : 1, sizeof(*opened));
	if (!opened)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	for (i = 0; i < m->nfiles; i++) {
		const struct ckpt_file *f = &m->files[i];
		const char *rel = m->strings + f->path;
		const struct ckpt_entry *e = &m->entries[f->need_entry];
		const char *key = ckpt_entry_fqn(m, e);

		/* What a failure below concerns. */
		ckpt_last_error_file(m->dir, rel, CKPT_NO_OFFSET);
		ckpt_last_error_key(key);
		rc = ckpt_files_open_one(m->store, rel, key, e->fqn_len,
					 &opened[i].id, &info, err, errlen);
		if (rc)
			goto out_free;
		if (info.size < f->need) {
			rc = ckpt_errf_key(err, errlen, -EINVAL, key, SIZE_MAX,
					   "%s/%s: key '%s': data file has %" PRIu64
					   " bytes, its record ends at %" PRIu64,
					   m->dir, rel, key, info.size, f->need);
			goto out_free;
		}
		opened[i].size = info.size;
	}
	m->opened = opened;
	m->huge_pages = flags & CKPT_FILES_HUGE_PAGES;
	return 0;
out_free:
	free(opened);
	return rc;
}

int ckpt_files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		    char *err, size_t errlen)
{
	int rc;

	ckpt_clear_last_error();
	rc = files_open(m, flags, max_open, err, errlen);
	rc = ckpt_cancel_result(rc, m->dir, err, errlen);
	if (rc)
		return ckpt_last_error_finish(rc, m->dir);
	ckpt_clear_last_error();
	return 0;
}

bool ckpt_files_are_open(const struct ckpt_meta *m)
{
	return m->opened != NULL;
}

int ckpt_files_pread(struct ckpt_meta *m, uint32_t fi, void *buf, size_t len,
		     uint64_t off)
{
	if (!m->opened || fi >= m->nfiles)
		return -EIO;	/* a decoded record: records/record_cache.h */
	return ckpt_store_pread(m->store, m->opened[fi].id, buf, len, off);
}

int ckpt_files_read(struct ckpt_meta *m, struct ckpt_store_range *r,
		    size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!m->opened || r[i].id >= m->nfiles)
			return -EIO;
		r[i].id = m->opened[r[i].id].id;
	}
	return ckpt_store_read(m->store, r, n);
}

void ckpt_files_willneed(struct ckpt_meta *m, uint32_t fi, uint64_t off,
			 uint64_t len)
{
	if (!m->opened || fi >= m->nfiles)
		return;		/* a decoded record: nothing to hint */
	ckpt_store_willneed(m->store, m->opened[fi].id, off, len);
}

void ckpt_files_close(struct ckpt_meta *m)
{
	free(m->opened);
	m->opened = NULL;
	ckpt_store_free(m->store);
	m->store = NULL;
}

int ckpt_meta_file(const struct ckpt_meta *m, uint32_t fi, const char **path,
		   uint64_t *size)
{
	if (fi >= m->nfiles)
		return -ENOENT;
	*path = m->strings + m->files[fi].path;
	*size = m->opened ? m->opened[fi].size : 0;
	return 0;
}
