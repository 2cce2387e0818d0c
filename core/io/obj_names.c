/* SPDX-License-Identifier: MIT */
/* The names an object store knows: see obj_names.h. */
#include "io/obj_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void name_key(const void *ctx, uint32_t idx, uint64_t *seed,
		     const char **s, size_t *len)
{
	const struct ckpt_obj_names *t = ctx;

	*seed = 0;
	*s = t->v[idx].name;
	*len = strlen(*s);
}

struct ckpt_obj_name *ckpt_obj_names_find(struct ckpt_obj_names *t,
					  const char *name)
{
	uint32_t k;

	if (!t->tab.slots)
		return NULL;
	k = ckpt_strtab_find(&t->tab, 0, name, strlen(name));
	return k == UINT32_MAX ? NULL : &t->v[k];
}

struct ckpt_obj_name *ckpt_obj_names_add(struct ckpt_obj_names *t,
					 const char *name, uint64_t size,
					 const char *etag, int64_t mtime)
{
	struct ckpt_obj_name *e;
	size_t i;

	if (t->n == t->cap) {
		size_t nc = t->cap ? t->cap * 2 : 64;
		struct ckpt_obj_name *nv = realloc(t->v, nc * sizeof(*nv));

		if (!nv)
			return NULL;
		t->v = nv;
		t->cap = nc;
	}
	if (t->n + 1 > t->tab_items) {
		struct ckpt_strtab nt;
		size_t items = t->tab_items ? t->tab_items * 2 : 64;

		if (ckpt_strtab_init(&nt, items, name_key, t))
			return NULL;
		for (i = 0; i < t->n; i++)
			ckpt_strtab_insert(&nt, (uint32_t)i);
		ckpt_strtab_destroy(&t->tab);
		t->tab = nt;
		t->tab_items = items;
	}
	e = &t->v[t->n];
	e->name = strdup(name);
	if (!e->name)
		return NULL;
	e->size = size;
	snprintf(e->etag, sizeof(e->etag), "%s", etag);
	e->mtime = mtime;
	e->id = UINT32_MAX;
	e->listed = false;
	e->missing = false;
	e->listed_size = 0;
	ckpt_strtab_insert(&t->tab, (uint32_t)t->n);
	t->n++;
	return e;
}

void ckpt_obj_names_free(struct ckpt_obj_names *t)
{
	size_t k;

	for (k = 0; k < t->n; k++)
		free(t->v[k].name);
	free(t->v);
	ckpt_strtab_destroy(&t->tab);
	memset(t, 0, sizeof(*t));
}
