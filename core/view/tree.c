/* SPDX-License-Identifier: MIT */
/*
 * Building the view tree: each shown key's path (its planner_data entry,
 * or its FQN split on '.') becomes directories and a file.  Also inode
 * numbers, paths and name lookups.
 */
#include "view/tree.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/escape.h"

size_t ckpt_view_encode_name(const char *s, size_t len, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	bool special = len == 0 || (len == 1 && s[0] == '.') ||
		       (len == 2 && s[0] == '.' && s[1] == '.') ||
		       memchr(s, '/', len) || memchr(s, '\0', len);
	size_t i, o = 0;

	if (!special) {
		memcpy(out, s, len);
		out[len] = '\0';
		return len;
	}
	if (len == 0) {
		strcpy(out, "%");
		return 1;
	}
	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '/' || ch == '\0' || ch == '%' || ch == '.') {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		} else {
			out[o++] = (char)ch;
		}
	}
	out[o] = '\0';
	return o;
}

/* One raw path component of an entry. */
struct comp {
	const char *s;
	size_t len;
};

struct builder {
	struct ckpt_view *v;
	size_t cap_nodes, cap_names;
	char *err;
	size_t errlen;
};

static void node_key(const void *ctx, uint32_t idx, uint64_t *seed,
		     const char **s, size_t *len)
{
	const struct ckpt_view *v = ctx;

	*seed = v->nodes[idx].parent;
	*s = v->names + v->nodes[idx].name;
	*len = v->nodes[idx].name_len;
}

/* Iterate an entry's raw components: planner_data, else FQN on '.'. */
static size_t entry_comps(const struct ckpt_meta *m,
			  const struct ckpt_entry *e, struct comp *out,
			  size_t max)
{
	const char *fqn = ckpt_entry_fqn(m, e);
	size_t n = 0, i, start = 0;

	if (e->ncomps) {
		for (i = 0; i < e->ncomps && n < max; i++, n++) {
			out[n].s = m->strings + m->comps[e->comp_first + i].str;
			out[n].len = m->comps[e->comp_first + i].len;
		}
		return e->ncomps;
	}
	for (i = 0; i <= e->fqn_len; i++) {
		if (i == e->fqn_len || fqn[i] == '.') {
			if (n < max) {
				out[n].s = fqn + start;
				out[n].len = i - start;
			}
			n++;
			start = i + 1;
		}
	}
	return n;
}

static size_t entry_ncomps(const struct ckpt_meta *m,
			   const struct ckpt_entry *e)
{
	return entry_comps(m, e, NULL, 0);
}

static int add_node(struct builder *b, uint32_t parent, const char *name,
		    size_t len, uint32_t entry, uint32_t owner,
		    uint32_t *out)
{
	struct ckpt_view *v = b->v;
	struct ckpt_node *n;
	void *p;

	if (v->nnodes == UINT32_MAX - 1 || v->names_len + len + 1 > UINT32_MAX)
		return -EFBIG;
	if (v->nnodes == b->cap_nodes) {
		b->cap_nodes = b->cap_nodes ? b->cap_nodes * 2 : 64;
		p = realloc(v->nodes, b->cap_nodes * sizeof(*v->nodes));
		if (!p)
			return -ENOMEM;
		v->nodes = p;
	}
	while (v->names_len + len + 1 > b->cap_names) {
		b->cap_names = b->cap_names ? b->cap_names * 2 : 4096;
		p = realloc(v->names, b->cap_names);
		if (!p)
			return -ENOMEM;
		v->names = p;
	}
	n = &v->nodes[v->nnodes];
	memset(n, 0, sizeof(*n));
	n->parent = parent;
	n->name = (uint32_t)v->names_len;
	n->name_len = (uint32_t)len;
	n->entry = entry;
	n->file = CKPT_NONE;
	n->owner = owner;
	memcpy(v->names + v->names_len, name, len);
	v->names[v->names_len + len] = '\0';
	v->names_len += len + 1;
	*out = v->nnodes++;
	if (v->nnodes > 1)
		ckpt_strtab_insert(&v->by_name, *out);
	return 0;
}

static int conflict(struct builder *b, const struct ckpt_meta *m,
		    uint32_t ei, const struct ckpt_node *n, bool want_dir)
{
	const char *a = ckpt_entry_fqn(m, &m->entries[ei]);
	const char *o;

	if (n->owner == CKPT_NONE)
		return ckpt_errf_key(b->err, b->errlen, -EINVAL, a, SIZE_MAX,
				     "%s: key '%s' needs '%s', which is reserved for the view's own files",
				     m->meta_path ? m->meta_path : ".metadata", a,
				     b->v->names + n->name);
	o = ckpt_entry_fqn(m, &m->entries[n->owner]);

	if (!want_dir && !ckpt_node_is_dir(n))
		return ckpt_errf_key(b->err, b->errlen, -EINVAL, o, SIZE_MAX,
				     "%s: keys '%s' and '%s' both need the file '%s'",
				     m->meta_path ? m->meta_path : ".metadata", o,
				     a, b->v->names + n->name);
	return ckpt_errf_key(b->err, b->errlen, -EINVAL, a, SIZE_MAX,
			     "%s: key '%s' needs '%s' as a %s, but key '%s' needs it as a %s",
			     m->meta_path ? m->meta_path : ".metadata", a,
			     b->v->names + n->name, want_dir ? "directory" : "file",
			     o, want_dir ? "file" : "directory");
}

/* Place entry ei's file in the tree. */
static int place(struct builder *b, uint32_t ei, const struct comp *comps,
		 size_t ncomps, char *scratch)
{
	struct ckpt_view *v = b->v;
	const struct ckpt_meta *m = v->meta;
	uint32_t cur = 0, found, made;
	size_t i, len;
	int rc;

	for (i = 0; i < ncomps; i++) {
		bool last = i + 1 == ncomps;

		len = ckpt_view_encode_name(comps[i].s, comps[i].len, scratch);
		if (last && v->npy && m->entries[ei].kind == CKPT_KIND_TENSOR) {
			memcpy(scratch + len, ".npy", 5);
			len += 4;
		}
		if (len > CKPT_NAME_MAX)
			return ckpt_errf_key(b->err, b->errlen, -ENAMETOOLONG,
					     ckpt_entry_fqn(m, &m->entries[ei]), SIZE_MAX,
					     "%s: key '%s': path component '%.40s...' is %zu bytes, longer than the %d a file name may have",
					     m->meta_path ? m->meta_path : ".metadata",
					     ckpt_entry_fqn(m, &m->entries[ei]),
					     scratch, len, CKPT_NAME_MAX);
		found = ckpt_strtab_find(&v->by_name, cur, scratch, len);
		if (found != UINT32_MAX) {
			if (last || !ckpt_node_is_dir(&v->nodes[found]) ||
			    v->nodes[found].owner == CKPT_NONE)
				return conflict(b, m, ei, &v->nodes[found],
						!last);
			cur = found;
			continue;
		}
		rc = add_node(b, cur, scratch, len, last ? ei : CKPT_NONE, ei,
			      &made);
		if (rc)
			return ckpt_errf(b->err, b->errlen, rc,
					 "%s: out of memory building the view",
					 m->meta_path ? m->meta_path : ".metadata");
		if (last)
			v->nodes[made].file = v->nfiles++;
		cur = made;
	}
	return 0;
}

static int cmp_child_r(const void *a, const void *b, void *ctx)
{
	const struct ckpt_view *v = ctx;

	return strcmp(v->names + v->nodes[*(const uint32_t *)a].name,
		      v->names + v->nodes[*(const uint32_t *)b].name);
}

/* Fill each directory's sorted child list. */
static int link_children(struct ckpt_view *v)
{
	uint32_t i, *fill;

	v->children = malloc((v->nnodes ? v->nnodes : 1) * sizeof(uint32_t));
	fill = calloc(v->nnodes, sizeof(uint32_t));
	if (!v->children || !fill) {
		free(fill);
		return -ENOMEM;
	}
	for (i = 1; i < v->nnodes; i++) {
		struct ckpt_node *p = &v->nodes[v->nodes[i].parent];

		p->nchildren++;
		if (ckpt_node_is_dir(&v->nodes[i]))
			p->nsubdirs++;
	}
	for (i = 0, fill[0] = 0; i < v->nnodes; i++) {
		v->nodes[i].child_first = i ? v->nodes[i - 1].child_first +
					      v->nodes[i - 1].nchildren : 0;
		fill[i] = v->nodes[i].child_first;
	}
	for (i = 1; i < v->nnodes; i++)
		v->children[fill[v->nodes[i].parent]++] = i;
	free(fill);
	for (i = 0; i < v->nnodes; i++) {
		if (v->nodes[i].nchildren > 1)
			qsort_r(v->children + v->nodes[i].child_first,
				v->nodes[i].nchildren, sizeof(uint32_t),
				cmp_child_r, v);
	}
	return 0;
}

static int cmp_comp(const void *a, const void *b)
{
	const struct comp *x = a, *y = b;
	int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

#define PREFIXES_SHOWN 20	/* first components a message lists */

/*
 * v->prefix matched no key: a typo must not give an empty view (a job
 * would resume from nothing).  The error lists the first path components
 * that exist, sorted, at most PREFIXES_SHOWN of them.
 */
static int no_such_prefix(const struct ckpt_view *v, char *err,
			  size_t errlen)
{
	const struct ckpt_meta *m = v->meta;
	const char *name = m->meta_path ? m->meta_path : ".metadata";
	struct comp *firsts, c[1];
	char list[2048], one[128];
	size_t n = 0, i, shown = 0, at = 0;
	uint32_t e;

	firsts = malloc((m->nentries ? m->nentries : 1) * sizeof(*firsts));
	if (!firsts)
		return ckpt_errf(err, errlen, -ENOMEM,
				 "out of memory building the view");
	for (e = 0; e < m->nentries; e++) {
		entry_comps(m, &m->entries[e], c, 1);
		firsts[n++] = c[0];
	}
	qsort(firsts, n, sizeof(*firsts), cmp_comp);
	list[0] = '\0';
	for (i = 0; i < n && at < sizeof(list); i++) {
		if (i && !cmp_comp(&firsts[i - 1], &firsts[i]))
			continue;
		if (shown++ == PREFIXES_SHOWN) {
			snprintf(list + at, sizeof(list) - at, ", ...");
			break;
		}
		at += (size_t)snprintf(list + at, sizeof(list) - at,
				       "%s'%s'", shown > 1 ? ", " : "",
				       ckpt_escape_msg(firsts[i].s,
						       firsts[i].len, false,
						       one, sizeof(one)));
	}
	free(firsts);
	ckpt_escape_msg(v->prefix, strlen(v->prefix), false, one,
			sizeof(one));
	if (!shown)
		return ckpt_errf(err, errlen, -ENOENT,
				 "%s: prefix '%s' matches no key: the checkpoint has no keys",
				 name, one);
	return ckpt_errf(err, errlen, -ENOENT,
			 "%s: prefix '%s' matches no key; the prefixes (first path components) are: %s",
			 name, one, list);
}

int ckpt_tree_build(struct ckpt_view *v, bool meta_dir, char *err,
		    size_t errlen)
{
	const struct ckpt_meta *m = v->meta;
	struct builder b = { .v = v, .err = err, .errlen = errlen };
	struct comp *comps = NULL;
	size_t total = 1, maxc = 1, maxlen = 1, n;
	char *scratch = NULL;
	uint32_t i, root;
	int rc;

	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];
		size_t j;

		n = entry_ncomps(m, e);
		total += n;
		if (n > maxc)
			maxc = n;
		if (e->fqn_len > maxlen)
			maxlen = e->fqn_len;
		for (j = 0; j < e->ncomps; j++) {
			if (m->comps[e->comp_first + j].len > maxlen)
				maxlen = m->comps[e->comp_first + j].len;
		}
	}
	comps = malloc(maxc * sizeof(*comps));
	scratch = malloc(3 * maxlen + 8);
	if (!comps || !scratch ||
	    ckpt_strtab_init(&v->by_name, total, node_key, v))
		goto out_oom;
	if (add_node(&b, 0, "", 0, CKPT_NONE, 0, &root))
		goto out_oom;
	if (meta_dir) {
		static const char *const vnames[] = {
			"view.json", "manifest.tsv", "view.safetensors",
		};
		uint32_t dir, made, k;

		if (add_node(&b, 0, ".ckptfs", 7, CKPT_NONE, CKPT_NONE, &dir))
			goto out_oom;
		for (k = 0; k < 3; k++)
			if (add_node(&b, dir, vnames[k], strlen(vnames[k]),
				     CKPT_VIRT_JSON + k, CKPT_NONE, &made))
				goto out_oom;
	}
	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];

		n = entry_comps(m, e, comps, maxc);
		if (v->prefix && (comps[0].len != strlen(v->prefix) ||
				  memcmp(comps[0].s, v->prefix,
					 comps[0].len) != 0))
			continue;
		rc = place(&b, i, comps, n, scratch);
		if (rc)
			goto out_free;
	}
	if (v->prefix && !v->nfiles) {
		rc = no_such_prefix(v, err, errlen);
		goto out_free;
	}
	if (link_children(v))
		goto out_oom;
	v->file_node = malloc((v->nfiles ? v->nfiles : 1) * sizeof(uint32_t));
	if (!v->file_node)
		goto out_oom;
	for (i = 1; i < v->nnodes; i++)
		if (ckpt_node_is_key(&v->nodes[i]))
			v->file_node[v->nodes[i].file] = i;
	free(comps);
	free(scratch);
	return 0;
out_oom:
	rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory building the view");
out_free:
	free(comps);
	free(scratch);
	return rc;
}


void ckpt_tree_destroy(struct ckpt_view *v)
{
	ckpt_strtab_destroy(&v->by_name);
	free(v->nodes);
	free(v->children);
	free(v->names);
	free(v->file_node);
}

uint64_t ckpt_view_ino(const struct ckpt_view *v, uint32_t slot,
		       uint32_t node)
{
	if (!v->multi)
		return (uint64_t)node + 1;
	if (node == 0)
		return 2 + (uint64_t)slot;
	return 2 + (uint64_t)v->nslots + (uint64_t)slot * (v->nnodes - 1) +
	       (node - 1);
}

int ckpt_view_ino_decode(const struct ckpt_view *v, uint64_t ino,
			 uint32_t *slot, uint32_t *node)
{
	uint64_t rel;

	if (!v->multi) {
		if (ino < 1 || ino > v->nnodes)
			return -ENOENT;
		*slot = 0;
		*node = (uint32_t)(ino - 1);
		return 0;
	}
	if (ino == 1)
		return 1;
	if (ino < 2)
		return -ENOENT;
	if (ino < 2 + (uint64_t)v->nslots) {
		*slot = (uint32_t)(ino - 2);
		*node = 0;
		return 0;
	}
	rel = ino - 2 - v->nslots;
	if (v->nnodes < 2 || rel / (v->nnodes - 1) >= v->nslots)
		return -ENOENT;
	*slot = (uint32_t)(rel / (v->nnodes - 1));
	*node = (uint32_t)(rel % (v->nnodes - 1)) + 1;
	return 0;
}

void ckpt_view_path(const struct ckpt_view *v, uint32_t i, char *out,
		    size_t cap)
{
	uint32_t stack[256], n = 0;
	size_t at = 0;

	if (cap)
		out[0] = '\0';
	while (i != 0 && n < 256) {
		stack[n++] = i;
		i = v->nodes[i].parent;
	}
	while (n-- > 0 && at < cap)
		at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? "/" : "",
				       v->names + v->nodes[stack[n]].name);
}

uint32_t ckpt_view_lookup(const struct ckpt_view *v, uint32_t dir,
			  const char *name)
{
	uint32_t i = ckpt_strtab_find(&v->by_name, dir, name, strlen(name));

	return i == UINT32_MAX ? CKPT_NONE : i;
}

int ckpt_view_node(const struct ckpt_view *v, uint32_t i,
		   struct ckpt_node_info *out)
{
	const struct ckpt_node *n;

	if (i >= v->nnodes)
		return -ENOENT;
	n = &v->nodes[i];
	out->type = ckpt_node_is_dir(n) ? CKPT_NODE_DIR :
		    ckpt_node_is_virtual(n) ? CKPT_NODE_META : CKPT_NODE_KEY;
	out->parent = n->parent;
	out->name = v->names + n->name;
	out->name_len = n->name_len;
	out->key = out->type == CKPT_NODE_KEY ? n->entry : CKPT_NONE;
	out->nchildren = n->nchildren;
	out->nsubdirs = n->nsubdirs;
	return 0;
}

uint32_t ckpt_view_child(const struct ckpt_view *v, uint32_t dir, uint32_t k)
{
	if (dir >= v->nnodes || !ckpt_node_is_dir(&v->nodes[dir]) ||
	    k >= v->nodes[dir].nchildren)
		return CKPT_NONE;
	return v->children[v->nodes[dir].child_first + k];
}
