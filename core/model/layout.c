/* SPDX-License-Identifier: MIT */
/* Layout files: parsing and binding to a checkpoint (see layout.h). */
#include "model/layout.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"

#define LAYOUT_MAX_BYTES ((size_t)64 << 20)

static void box_key(const void *ctx, uint32_t idx, uint64_t *seed,
		    const char **s, size_t *len)
{
	const struct ckpt_layout *l = ctx;

	*seed = 0;
	*s = l->boxes[idx].param;
	*len = strlen(*s);
}

/* "a,b,c" into dims; returns the count or -1. */
static int parse_dims(const char *s, uint64_t *out)
{
	int n = 0;
	char *end;

	if (!*s)
		return -1;
	for (;;) {
		if (!isdigit((unsigned char)*s) || n == CKPT_MAX_DIMS)
			return -1;
		errno = 0;
		out[n++] = strtoull(s, &end, 10);
		if (errno)
			return -1;
		if (*end == '\0')
			return n;
		if (*end != ',')
			return -1;
		s = end + 1;
	}
}

int ckpt_layout_parse(const char *text, size_t len, const char *name,
		      struct ckpt_layout **out, char *err, size_t errlen)
{
	struct ckpt_layout *l;
	size_t cap = 0, at = 0;
	unsigned lineno = 0;
	char *copy = NULL;
	int rc;

	*out = NULL;
	l = calloc(1, sizeof(*l));
	copy = malloc(len + 1);
	if (!l || !copy) {
		free(l);
		free(copy);
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", name);
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	l->path = strdup(name);
	if (!l->path)
		goto out_oom;
	while (at < len) {
		char *line = copy + at, *nl = memchr(line, '\n', len - at);
		char *hash, *tok[4], *save = NULL;
		struct ckpt_layout_box *b;
		int ntok = 0, n1, n2;

		if (nl)
			*nl = '\0';
		at += strlen(line) + 1;
		lineno++;
		if (strlen(line) != (size_t)((nl ? nl : copy + len) - line)) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s:%u: NUL byte in the line", name,
				       lineno);
			goto out_free;
		}
		hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		for (char *t = strtok_r(line, " \t\r", &save); t && ntok < 4;
		     t = strtok_r(NULL, " \t\r", &save))
			tok[ntok++] = t;
		if (ntok == 0)
			continue;
		if (ntok != 3) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s:%u: expected 'PARAM OFFSETS SIZES' (e.g. 'layers.0.attn.weight 0,512 1024,512')",
				       name, lineno);
			goto out_free;
		}
		if (l->nboxes == cap) {
			void *p;

			cap = cap ? cap * 2 : 16;
			p = realloc(l->boxes, cap * sizeof(*l->boxes));
			if (!p)
				goto out_oom;
			l->boxes = p;
		}
		b = &l->boxes[l->nboxes];
		memset(b, 0, sizeof(*b));
		b->line = lineno;
		n1 = parse_dims(tok[1], b->off);
		n2 = parse_dims(tok[2], b->size);
		if (n1 < 0 || n2 < 0) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s:%u: %s '%s' is not a comma-separated list of whole numbers",
				       name, lineno, n1 < 0 ? "OFFSETS" : "SIZES",
				       n1 < 0 ? tok[1] : tok[2]);
			goto out_free;
		}
		if (n1 != n2) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s:%u: OFFSETS has %d dims, SIZES has %d",
				       name, lineno, n1, n2);
			goto out_free;
		}
		b->ndim = (unsigned)n1;
		b->param = strdup(tok[0]);
		if (!b->param)
			goto out_oom;
		l->nboxes++;
	}
	if (ckpt_strtab_init(&l->by_param, l->nboxes, box_key, l))
		goto out_oom;
	for (uint32_t i = 0; i < l->nboxes; i++) {
		uint32_t dup = ckpt_strtab_insert(&l->by_param, i);

		if (dup != UINT32_MAX) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s:%u: parameter '%s' is already given on line %u",
				       name, l->boxes[i].line, l->boxes[i].param,
				       l->boxes[dup].line);
			goto out_free;
		}
	}
	free(copy);
	*out = l;
	return 0;
out_oom:
	rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", name);
out_free:
	free(copy);
	ckpt_layout_free(l);
	return rc;
}

int ckpt_layout_load(const char *path, struct ckpt_layout **out, char *err,
		     size_t errlen)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	FILE *f;
	int rc;

	ckpt_clear_last_error();
	*out = NULL;
	f = fopen(path, "re");
	if (!f)
		return ckpt_errf(err, errlen, -errno, "%s: cannot open: %s",
				 path, strerror(errno));
	for (;;) {
		size_t n;

		if (len == cap) {
			char *p;

			cap = cap ? cap * 2 : 4096;
			if (cap > LAYOUT_MAX_BYTES) {
				fclose(f);
				free(buf);
				return ckpt_errf(err, errlen, -EFBIG,
						 "%s: larger than %zu bytes",
						 path, LAYOUT_MAX_BYTES);
			}
			p = realloc(buf, cap);
			if (!p) {
				fclose(f);
				free(buf);
				return ckpt_errf(err, errlen, -ENOMEM,
						 "%s: out of memory", path);
			}
			buf = p;
		}
		n = fread(buf + len, 1, cap - len, f);
		if (n == 0)
			break;
		len += n;
	}
	rc = ferror(f) ? -EIO : 0;
	fclose(f);
	if (rc) {
		free(buf);
		return ckpt_errf(err, errlen, rc, "%s: read error", path);
	}
	rc = ckpt_layout_parse(buf ? buf : "", len, path, out, err, errlen);
	free(buf);
	return rc;
}

void ckpt_layout_free(struct ckpt_layout *l)
{
	uint32_t i;

	if (!l)
		return;
	for (i = 0; i < l->nboxes; i++)
		free(l->boxes[i].param);
	ckpt_strtab_destroy(&l->by_param);
	free(l->boxes);
	free(l->entry_box);
	free(l->path);
	free(l);
}

int ckpt_layout_param_of(const struct ckpt_meta *m, const struct ckpt_entry *e,
			 char *out, size_t outlen)
{
	const char *fqn = ckpt_entry_fqn(m, e);
	const char *first_dot, *second_dot, *last_dot;
	size_t n;

	if (e->ncomps) {
		const struct ckpt_comp *c = &m->comps[e->comp_first];

		if (e->ncomps != 4 || c[1].len != 5 ||
		    memcmp(m->strings + c[1].str, "state", 5) != 0 ||
		    c[2].len + 1 > outlen)
			return -1;
		memcpy(out, m->strings + c[2].str, c[2].len + 1);
		return (int)c[2].len;
	}
	first_dot = strchr(fqn, '.');
	if (!first_dot || strncmp(first_dot + 1, "state.", 6) != 0)
		return -1;
	second_dot = first_dot + 6;
	last_dot = strrchr(fqn, '.');
	if (last_dot <= second_dot + 1)
		return -1;
	n = (size_t)(last_dot - (second_dot + 1));
	if (n + 1 > outlen)
		return -1;
	memcpy(out, second_dot + 1, n);
	out[n] = '\0';
	return (int)n;
}

static bool is_glob(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

/*
 * The line that binds key e: the line naming its FQN exactly, else the
 * line naming its PARAM, else the first glob line (shell pattern, as
 * fnmatch(3)) that matches its FQN; UINT32_MAX when none does.
 */
static uint32_t match(const struct ckpt_layout *l, const struct ckpt_meta *m,
		      const struct ckpt_entry *e, char *param, size_t cap)
{
	const char *fqn = ckpt_entry_fqn(m, e);
	uint32_t bi, g;
	int n;

	bi = ckpt_strtab_find(&l->by_param, 0, fqn, e->fqn_len);
	if (bi != UINT32_MAX)
		return bi;
	n = ckpt_layout_param_of(m, e, param, cap);
	if (n >= 0) {
		bi = ckpt_strtab_find(&l->by_param, 0, param, (size_t)n);
		if (bi != UINT32_MAX)
			return bi;
	}
	for (g = 0; g < l->nboxes; g++) {
		if (is_glob(l->boxes[g].param) &&
		    fnmatch(l->boxes[g].param, fqn, 0) == 0)
			return g;
	}
	return UINT32_MAX;
}

int ckpt_layout_bind(struct ckpt_layout *l, const struct ckpt_meta *m,
		     char *err, size_t errlen)
{
	char param[4096], a[256], b[256], c[256];
	uint32_t i, bi;
	unsigned d;

	ckpt_clear_last_error();

	free(l->entry_box);
	l->entry_box = malloc((m->nentries ? m->nentries : 1) * sizeof(uint32_t));
	if (!l->entry_box)
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 l->path);
	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];
		const uint64_t *shape = ckpt_entry_shape(m, e);
		struct ckpt_layout_box *bx;

		l->entry_box[i] = CKPT_NONE;
		if (e->kind != CKPT_KIND_TENSOR)
			continue;
		bi = match(l, m, e, param, sizeof(param));
		if (bi == UINT32_MAX)
			continue;
		bx = &l->boxes[bi];
		bx->matched++;
		if (e->numel == 1)
			continue;	/* one-element tensors stay whole */
		if (bx->ndim != e->ndim)
			return ckpt_errf_key(err, errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s:%u: parameter '%s': box has %u dims, key '%s' has %u",
					     l->path, bx->line, bx->param, bx->ndim,
					     ckpt_entry_fqn(m, e), e->ndim);
		for (d = 0; d < e->ndim; d++) {
			uint64_t end;

			if (__builtin_add_overflow(bx->off[d], bx->size[d], &end) ||
			    end > shape[d])
				return ckpt_errf_key(err, errlen, -EINVAL,
						     ckpt_entry_fqn(m, e), SIZE_MAX,
						     "%s:%u: parameter '%s': box %s+%s lies outside key '%s' of shape %s",
						     l->path, bx->line, bx->param,
						     ckpt_fmt_dims(a, sizeof(a), bx->off, bx->ndim),
						     ckpt_fmt_dims(b, sizeof(b), bx->size, bx->ndim),
						     ckpt_entry_fqn(m, e),
						     ckpt_fmt_dims(c, sizeof(c), shape, e->ndim));
		}
		l->entry_box[i] = bi;
	}
	return 0;
}

void ckpt_layout_unmatched(const struct ckpt_layout *l,
			   void (*fn)(void *ctx, const char *msg), void *ctx)
{
	char msg[1024];
	uint32_t i;

	for (i = 0; l && i < l->nboxes; i++) {
		if (l->boxes[i].matched)
			continue;
		snprintf(msg, sizeof(msg),
			 "%s:%u: parameter '%s' matches no key", l->path,
			 l->boxes[i].line, l->boxes[i].param);
		fn(ctx, msg);
	}
}
