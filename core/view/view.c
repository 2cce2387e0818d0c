/* SPDX-License-Identifier: MIT */
/*
 * The view's public entry points (ckptfs.h): building and freeing a view,
 * what each file shows, and reads, dispatched to the key files
 * (data_read.c) or the .ckptfs/ files (vfiles.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "common/errbuf.h"
#include "plan/plan.h"
#include "view/convert.h"
#include "view/data_read.h"
#include "view/geom.h"
#include "view/tree.h"
#include "view/vfiles.h"
#include "view/view_types.h"

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* world >= 1; the rank, or each of the ranks, below it; no rank twice. */
static int check_ranks(const struct ckpt_view_opts *o, char *err,
		       size_t errlen)
{
	uint32_t *sorted, i;
	int rc = 0;

	if (o->world == 0)
		return ckpt_errf(err, errlen, -EINVAL,
				 "world must be at least 1, got 0");
	if (o->nranks == 0) {
		if (o->rank >= o->world)
			return ckpt_errf(err, errlen, -EINVAL,
					 "rank %" PRIu32 " is out of range: need 0 <= rank < world (%" PRIu32 ")",
					 o->rank, o->world);
		return 0;
	}
	if (!o->ranks)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%" PRIu32 " ranks but no list of them",
				 o->nranks);
	for (i = 0; i < o->nranks; i++) {
		if (o->ranks[i] >= o->world)
			return ckpt_errf(err, errlen, -EINVAL,
					 "rank %" PRIu32 " is out of range: need 0 <= rank < world (%" PRIu32 ")",
					 o->ranks[i], o->world);
	}
	sorted = malloc(o->nranks * sizeof(*sorted));
	if (!sorted)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	memcpy(sorted, o->ranks, o->nranks * sizeof(*sorted));
	qsort(sorted, o->nranks, sizeof(*sorted), cmp_u32);
	for (i = 1; i < o->nranks; i++) {
		if (sorted[i] == sorted[i - 1]) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "rank %" PRIu32 " is given twice",
				       sorted[i]);
			break;
		}
	}
	free(sorted);
	return rc;
}

int ckpt_view_new(struct ckpt_meta *m, const struct ckpt_view_opts *o,
		  struct ckpt_view **out, char *err, size_t errlen)
{
	struct ckpt_view *v;
	int rc;

	*out = NULL;
	ckpt_clear_last_error();
	rc = check_ranks(o, err, errlen);
	if (rc)
		return rc;
	v = calloc(1, sizeof(*v));
	if (!v)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	v->meta = m;
	v->world = o->world;
	v->layout = o->layout;
	v->dtype = ckpt_convert_is_target(o->dtype) ? o->dtype :
						      CKPT_DTYPE_COUNT;
	v->multi = o->nranks > 0;
	v->verify = o->verify;
	v->report = o->report;
	v->report_ctx = o->report_ctx;
	v->npy = o->npy;
	pthread_mutex_init(&v->vfiles_lock, NULL);
	pthread_mutex_init(&v->vlock, NULL);
	pthread_cond_init(&v->vdone, NULL);
	if ((o->source && !(v->source = strdup(o->source))) ||
	    (o->layout_path && !(v->layout_path = strdup(o->layout_path))) ||
	    (o->prefix && !(v->prefix = strdup(o->prefix))))
		goto out_oom;
	if (v->verify) {
		v->vstate = calloc(m->nchunks ? m->nchunks : 1, 1);
		if (!v->vstate)
			goto out_oom;
	}
	v->nslots = v->multi ? o->nranks : 1;
	v->slot_rank = malloc(v->nslots * sizeof(uint32_t));
	if (!v->slot_rank)
		goto out_oom;
	if (v->multi)
		memcpy(v->slot_rank, o->ranks, v->nslots * sizeof(uint32_t));
	else
		v->slot_rank[0] = o->rank;
	if (o->meta_dir && ckpt_vfiles_new(v))
		goto out_oom;
	rc = ckpt_tree_build(v, o->meta_dir, err, errlen);
	if (!rc)
		rc = ckpt_geom_build(v, err, errlen);
	if (rc)
		goto out_free;
	*out = v;
	return 0;
out_oom:
	rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory building the view");
out_free:
	ckpt_view_free(v);
	return rc;
}

void ckpt_view_free(struct ckpt_view *v)
{
	if (!v)
		return;
	ckpt_tree_destroy(v);
	ckpt_geom_destroy(v);
	ckpt_vfiles_free(v);
	pthread_mutex_destroy(&v->vfiles_lock);
	pthread_mutex_destroy(&v->vlock);
	pthread_cond_destroy(&v->vdone);
	free(v->source);
	free(v->layout_path);
	free(v->slot_rank);
	free(v->vstate);
	free(v->prefix);
	free(v);
}

void ckpt_view_info(const struct ckpt_view *v, struct ckpt_view_info *out)
{
	memset(out, 0, sizeof(*out));
	out->world = v->world;
	out->nslots = v->nslots;
	out->multi = v->multi;
	out->nnodes = v->nnodes;
	out->nfiles = v->nfiles;
	out->total_bytes = v->total_bytes;
	out->npy = v->npy;
	out->dtype = v->dtype;
}

uint32_t ckpt_view_slot_rank(const struct ckpt_view *v, uint32_t slot)
{
	return slot < v->nslots ? v->slot_rank[slot] : CKPT_NONE;
}

struct ckpt_meta *ckpt_view_meta(const struct ckpt_view *v)
{
	return v->meta;
}

int ckpt_view_entry(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		    struct ckpt_entry_info *out)
{
	const struct ckpt_node *n;
	const struct ckpt_entry *e;
	const struct ckpt_geom *g;
	struct ckpt_box box;

	memset(out, 0, sizeof(*out));
	out->key = CKPT_NONE;
	if (node >= v->nnodes || slot >= v->nslots)
		return -ENOENT;
	n = &v->nodes[node];
	if (ckpt_node_is_dir(n))
		return -EISDIR;
	out->dtype = out->saved_dtype = CKPT_DTYPE_COUNT;
	if (ckpt_node_is_virtual(n)) {
		out->kind = CKPT_KIND_BYTES;
		return ckpt_vfile_size(v, slot, n->entry, &out->size);
	}
	e = &v->meta->entries[n->entry];
	g = ckpt_view_geom(v, slot, node);
	out->key = n->entry;
	out->fqn = ckpt_entry_fqn(v->meta, e);
	out->kind = e->kind;
	out->size = g->size;
	out->header = g->npy_len;
	out->nchunks = g->nchunks;
	if (e->kind != CKPT_KIND_TENSOR)
		return 0;
	out->dtype = g->dtype;
	out->saved_dtype = e->dtype;
	ckpt_geom_box(v, g, &box);
	out->ndim = box.ndim;
	memcpy(out->shape, box.size, box.ndim * sizeof(uint64_t));
	memcpy(out->offsets, box.off, box.ndim * sizeof(uint64_t));
	if (e->ndim)
		memcpy(out->global_shape, ckpt_entry_shape(v->meta, e),
		       e->ndim * sizeof(uint64_t));
	return 0;
}

int ckpt_view_size(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t *size)
{
	const struct ckpt_node *n;

	*size = 0;
	if (node >= v->nnodes || slot >= v->nslots)
		return -ENOENT;
	n = &v->nodes[node];
	if (ckpt_node_is_dir(n))
		return 0;
	if (ckpt_node_is_virtual(n))
		return ckpt_vfile_size(v, slot, n->entry, size);
	*size = ckpt_view_geom(v, slot, node)->size;
	return 0;
}

uint32_t ckpt_view_chunks(const struct ckpt_view *v, uint32_t slot,
			  uint32_t node, const uint32_t **chunks)
{
	const struct ckpt_geom *g;

	*chunks = NULL;
	if (node >= v->nnodes || slot >= v->nslots ||
	    !ckpt_node_is_key(&v->nodes[node]))
		return 0;
	g = ckpt_view_geom(v, slot, node);
	*chunks = v->gchunks ? v->gchunks + g->chunk_at : NULL;
	return g->nchunks;
}

int ckpt_view_read(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, size_t len, void *buf, size_t *got,
		   struct ckpt_scratch *s)
{
	const struct ckpt_node *n;
	int rc;

	*got = 0;
	if (node >= v->nnodes || slot >= v->nslots)
		return -EISDIR;
	n = &v->nodes[node];
	if (ckpt_node_is_dir(n))
		return -EISDIR;
	if (!ckpt_node_is_virtual(n))
		ckpt_data_locate_ahead(v, slot, node);
	ckpt_clear_last_error();
	if (ckpt_node_is_virtual(n)) {
		rc = ckpt_vfile_read(v, slot, n->entry, off, len, buf, got, s);
	} else {
		rc = ckpt_data_read(v, slot, node, off, len, buf, got, s);
		if (rc)
			ckpt_last_error_add_key(ckpt_entry_fqn(v->meta,
					&v->meta->entries[n->entry]));
	}
	if (rc)
		ckpt_last_error_finish(rc, NULL);
	return rc;
}

int ckpt_view_plan(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, uint64_t len,
		   int (*fn)(void *ctx, const struct ckpt_read_run *run),
		   void *ctx)
{
	const struct ckpt_entry *e;
	struct ckpt_planner p;
	struct ckpt_read_run out;
	struct ckpt_run r;
	struct ckpt_box box;
	int rc;

	if (node >= v->nnodes || slot >= v->nslots ||
	    !ckpt_node_is_key(&v->nodes[node]))
		return -EISDIR;
	e = &v->meta->entries[v->nodes[node].entry];
	ckpt_geom_box(v, ckpt_view_geom(v, slot, node), &box);
	rc = ckpt_data_locate_box(v->meta, e, &box);
	if (rc)
		return rc;
	ckpt_planner_init(&p, v->meta, e, &box, off, len);
	while ((rc = ckpt_planner_next(&p, &r)) > 0) {
		out.chunk = r.chunk;
		out.file = r.file;
		out.foff = r.foff;
		out.len = r.len;
		out.decoded = ckpt_is_zrec(r.file);
		if (out.decoded)
			out.file = v->meta->zrecs[r.file & ~CKPT_ZREC].file;
		rc = fn(ctx, &out);
		if (rc)
			return rc;
	}
	return rc;
}

static const char *const xattr_names[] = {
	"user.ckptfs.fqn", "user.ckptfs.kind", "user.ckptfs.dtype",
	"user.ckptfs.shape", "user.ckptfs.global_shape",
	"user.ckptfs.offsets",
};
#define XATTR_TENSOR_ONLY 2	/* names from this index on */

/* Dims as "a,b,c" (empty for 0-d) into buf; returns the full length. */
static int fmt_csv(char *buf, size_t cap, const uint64_t *d, unsigned n)
{
	char tmp[CKPT_MAX_DIMS * 21 + 1];
	size_t at = 0;
	unsigned i;

	tmp[0] = '\0';
	for (i = 0; i < n; i++)
		at += (size_t)snprintf(tmp + at, sizeof(tmp) - at, "%s%llu",
				       i ? "," : "", (unsigned long long)d[i]);
	memcpy(buf, tmp, at < cap ? at : cap);
	return (int)at;
}

static int put(char *buf, size_t cap, const char *s)
{
	size_t n = strlen(s);

	memcpy(buf, s, n < cap ? n : cap);
	return (int)n;
}

int ckpt_view_xattr(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		    const char *name, char *buf, size_t cap)
{
	const struct ckpt_meta *m = v->meta;
	const struct ckpt_entry *e;
	const struct ckpt_geom *g;
	struct ckpt_box box;
	unsigned i;

	if (node >= v->nnodes || !ckpt_node_is_key(&v->nodes[node]) ||
	    slot >= v->nslots)
		return -ENODATA;
	e = &m->entries[v->nodes[node].entry];
	g = ckpt_view_geom(v, slot, node);
	for (i = 0; i < sizeof(xattr_names) / sizeof(xattr_names[0]); i++) {
		if (strcmp(name, xattr_names[i]) == 0)
			break;
	}
	if (i == sizeof(xattr_names) / sizeof(xattr_names[0]) ||
	    (i >= XATTR_TENSOR_ONLY && e->kind != CKPT_KIND_TENSOR))
		return -ENODATA;
	switch (i) {
	case 0:
		return put(buf, cap, ckpt_entry_fqn(m, e));
	case 1:
		return put(buf, cap,
			   e->kind == CKPT_KIND_TENSOR ? "tensor" : "bytes");
	case 2:
		return put(buf, cap, ckpt_dtype_name((enum ckpt_dtype)g->dtype));
	case 4:
		return fmt_csv(buf, cap, ckpt_entry_shape(m, e), e->ndim);
	default:
		ckpt_geom_box(v, g, &box);
		return fmt_csv(buf, cap, i == 3 ? box.size : box.off, box.ndim);
	}
}

int ckpt_view_xattr_list(const struct ckpt_view *v, uint32_t node, char *buf,
			 size_t cap)
{
	const struct ckpt_entry *e;
	size_t at = 0, n;
	unsigned i, count;

	if (node >= v->nnodes || !ckpt_node_is_key(&v->nodes[node]))
		return 0;
	e = &v->meta->entries[v->nodes[node].entry];
	count = e->kind == CKPT_KIND_TENSOR ?
		sizeof(xattr_names) / sizeof(xattr_names[0]) :
		XATTR_TENSOR_ONLY;
	for (i = 0; i < count; i++) {
		n = strlen(xattr_names[i]) + 1;
		if (at + n <= cap)
			memcpy(buf + at, xattr_names[i], n);
		at += n;
	}
	return (int)at;
}

