/* SPDX-License-Identifier: MIT */
/*
 * The storage interface's front: picks the implementation a root names,
 * checks names before any implementation sees them, and builds the
 * generic calls (one range, a whole file) on the implementation's
 * operations.  See store.h for the contract.
 */
#include "io/store_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bigbuf.h"
#include "common/errbuf.h"
#include "common/relpath.h"
#include "io/az_config.h"

#define CKPT_STORE_LIST_PAGE 1000	/* names a listing page holds */

static bool is_s3(const char *root)
{
	return !strncmp(root, "s3://", 5);
}

bool ckpt_store_root_is_remote(const char *root)
{
	return is_s3(root) || ckpt_az_root_is(root);
}

const char *ckpt_store_root_shown(const char *root, char *buf, size_t cap)
{
	const char *q = ckpt_az_root_is(root) ? strchr(root, '?') : NULL;
	size_t n = q ? (size_t)(q - root) : strlen(root);

	if (cap)
		snprintf(buf, cap, "%.*s", (int)(n < INT32_MAX ? n : INT32_MAX),
			 root);
	return buf;
}

int ckpt_store_new(const char *root, const struct ckpt_store_opts *o,
		   struct ckpt_store **out, char *err, size_t errlen)
{
	static const struct ckpt_store_opts none;

	*out = NULL;
	if (!o)
		o = &none;
	if (is_s3(root))
		return ckpt_store_s3_new(root, o, out, err, errlen);
	if (ckpt_az_root_is(root))
		return ckpt_store_azure_new(root, o, out, err, errlen);
	return ckpt_store_local_new(root, o, out, err, errlen);
}

void ckpt_store_free(struct ckpt_store *s)
{
	if (s)
		s->ops->destroy(s);
}

int ckpt_store_set_opts(struct ckpt_store *s, const struct ckpt_store_opts *o,
			char *err, size_t errlen)
{
	return s->ops->set_opts ? s->ops->set_opts(s, o, err, errlen) : 0;
}

const char *ckpt_store_root(const struct ckpt_store *s)
{
	return s->root;
}

const char *ckpt_store_identity(const struct ckpt_store *s)
{
	return s->identity;
}

const char *ckpt_store_credentials(const struct ckpt_store *s)
{
	return s->credentials;
}

const char *ckpt_store_warning(const struct ckpt_store *s)
{
	return s->warning;
}

unsigned ckpt_store_parallelism(const struct ckpt_store *s)
{
	return s->parallelism;
}

int ckpt_store_list(struct ckpt_store *s,
		    int (*fn)(void *ctx, const char *name, uint64_t size),
		    void *ctx, char *err, size_t errlen)
{
	return s->ops->list(s, fn, ctx, err, errlen);
}

/* Names a listing of the root has given so far, and when to stop. */
struct list_ahead {
	uint64_t seen, most;
};

static int count_listed(void *ctx, const char *name, uint64_t size)
{
	struct list_ahead *la = ctx;

	(void)name;
	(void)size;
	return ++la->seen >= la->most;	/* 1: enough pages */
}

void ckpt_store_list_ahead(struct ckpt_store *s, uint32_t nopen)
{
	struct list_ahead la = { 0, 0 };
	char why[512];

	if (!s || !s->parallelism || nopen < 2)
		return;
	la.most = (uint64_t)CKPT_STORE_LIST_PAGE * (nopen / 2);
	(void)ckpt_store_list(s, count_listed, &la, why, sizeof(why));
}

int ckpt_store_open(struct ckpt_store *s, const char *name, uint32_t *id,
		    struct ckpt_store_file_info *info, char *err,
		    size_t errlen)
{
	size_t len = strlen(name);

	if (len > UINT32_MAX || !ckpt_relpath_is_safe(name, (uint32_t)len))
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s/%.200s: not a name beneath the checkpoint (relative, without '..')",
				 s->root, name);
	return s->ops->open(s, name, id, info, err, errlen);
}

const char *ckpt_store_name(const struct ckpt_store *s, uint32_t id)
{
	return s->ops->name(s, id);
}

int ckpt_store_read(struct ckpt_store *s, const struct ckpt_store_range *r,
		    size_t n)
{
	return n ? s->ops->read(s, r, n) : 0;
}

int ckpt_store_read_joined(struct ckpt_store *s,
			   const struct ckpt_store_range *r, size_t n,
			   size_t first_join, uint32_t join)
{
	if (!n)
		return 0;
	if (!s->ops->read_joined || first_join >= n || !join)
		return s->ops->read(s, r, n);
	return s->ops->read_joined(s, r, n, first_join, join);
}

int ckpt_store_pread(struct ckpt_store *s, uint32_t id, void *dst,
		     size_t len, uint64_t off)
{
	struct ckpt_store_range r = { id, off, len, dst };

	return ckpt_store_read(s, &r, 1);
}

void ckpt_store_willneed(struct ckpt_store *s, uint32_t id, uint64_t off,
			 uint64_t len)
{
	if (s->ops->willneed && len)
		s->ops->willneed(s, id, off, len);
}

int ckpt_store_read_file(struct ckpt_store *s, const char *name, size_t max,
			 uint8_t **buf, size_t *len,
			 struct ckpt_store_file_info *info, char *err,
			 size_t errlen)
{
	struct ckpt_store_file_info fi;
	uint8_t *b;
	uint32_t id;
	int rc;

	*buf = NULL;
	*len = 0;
	rc = ckpt_store_open(s, name, &id, &fi, err, errlen);
	if (rc)
		return rc;
	if (fi.size > max)
		return ckpt_errf(err, errlen, -EFBIG,
				 "%s/%s: %" PRIu64 " bytes, more than the %zu-byte metadata limit",
				 s->root, name, fi.size, max);
	b = ckpt_malloc_huge((size_t)fi.size);
	if (!b)
		return ckpt_errf(err, errlen, -ENOMEM, "%s/%s: out of memory",
				 s->root, name);
	ckpt_clear_last_error();
	rc = ckpt_store_pread(s, id, b, (size_t)fi.size, 0);
	if (rc) {
		free(b);
		return ckpt_errf(err, errlen, rc, "%s", ckpt_last_error()[0] ?
				 ckpt_last_error() : strerror(-rc));
	}
	*buf = b;
	*len = (size_t)fi.size;
	if (info)
		*info = fi;
	return 0;
}

int ckpt_store_read_local(const char *path, size_t max, uint8_t **buf,
			  size_t *len, struct ckpt_store_file_info *info,
			  char *err, size_t errlen)
{
	struct ckpt_store_opts o = { .follow_symlinks = true };
	const char *slash = strrchr(path, '/');
	struct ckpt_store *s;
	char *dir;
	int rc;

	*buf = NULL;
	*len = 0;
	if (slash && !slash[1])
		return ckpt_errf(err, errlen, -EISDIR, "%s: not a file", path);
	dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) :
		      strdup(".");
	if (!dir)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	rc = ckpt_store_local_new(dir, &o, &s, err, errlen);
	free(dir);
	if (rc)
		return rc;
	/* Messages name the path as the user gave it. */
	free(s->root);
	s->root = NULL;
	if (slash && slash != path)
		s->root = strndup(path, (size_t)(slash - path));
	else
		s->root = strdup(slash ? "" : ".");
	if (!s->root)
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	else
		rc = ckpt_store_read_file(s, slash ? slash + 1 : path, max, buf,
					  len, info, err, errlen);
	ckpt_store_free(s);
	return rc;
}

void ckpt_store_cancel(struct ckpt_store *s)
{
	if (s && s->ops->cancel)
		s->ops->cancel(s);
}

void ckpt_store_stats(const struct ckpt_store *s,
		      struct ckpt_store_stats *out)
{
	out->bytes_fetched = atomic_load(&s->bytes_fetched);
	out->bytes_delivered = atomic_load(&s->bytes_delivered);
	out->requests = atomic_load(&s->requests);
	out->retries = atomic_load(&s->retries);
	out->connects = atomic_load(&s->connects);
	out->gets = atomic_load(&s->gets);
	out->heads = atomic_load(&s->heads);
	out->lists = atomic_load(&s->lists);
}
