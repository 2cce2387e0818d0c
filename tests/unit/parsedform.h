/* SPDX-License-Identifier: MIT */
/*
 * Test helpers for parsed forms (model/meta_parsed.h): a meta's form as
 * the private mapping ckpt_meta_parsed_load() takes, and whether two
 * metas hold the same arrays.
 */
#ifndef CKPT_TEST_PARSEDFORM_H
#define CKPT_TEST_PARSEDFORM_H

#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

#include "model/meta_parsed.h"

/* m's form tagged tag, copied into a new private mapping *buf of *len
 * bytes (the loader's to unmap); false when m has none or no memory. */
static inline bool pf_map(const struct ckpt_meta *m, uint64_t tag,
			  uint8_t **buf, size_t *len)
{
	struct ckpt_parsed_iov pv;
	size_t at = 0;
	void *p;
	int i;

	if (ckpt_meta_parsed_pack(m, tag, &pv))
		return false;
	p = mmap(NULL, pv.len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return false;
	for (i = 0; i < pv.n; i++) {
		memcpy((uint8_t *)p + at, pv.iov[i].iov_base,
		       pv.iov[i].iov_len);
		at += pv.iov[i].iov_len;
	}
	*buf = p;
	*len = pv.len;
	return true;
}

static inline bool pf_same_array(const void *a, const void *b, size_t n)
{
	return !n || (a && b && !memcmp(a, b, n));
}

/* Whether a and b hold the same model: counts, arrays byte for byte
 * (padding included: a form is a copy), lazy states and FQN lookups. */
static inline bool pf_same(const struct ckpt_meta *a,
			   const struct ckpt_meta *b)
{
	uint32_t i;

	if (a->version != b->version || a->nentries != b->nentries ||
	    a->nchunks != b->nchunks || a->ndims != b->ndims ||
	    a->ncomps != b->ncomps || a->nfiles != b->nfiles ||
	    a->nzrecs != b->nzrecs || a->nguards != b->nguards ||
	    a->strings_len != b->strings_len || a->nlazy != b->nlazy ||
	    !a->lazy != !b->lazy || strcmp(a->format, b->format))
		return false;
	if (!pf_same_array(a->entries, b->entries,
			   a->nentries * sizeof(*a->entries)) ||
	    !pf_same_array(a->chunks, b->chunks,
			   a->nchunks * sizeof(*a->chunks)) ||
	    !pf_same_array(a->dims, b->dims, a->ndims * sizeof(*a->dims)) ||
	    !pf_same_array(a->comps, b->comps,
			   a->ncomps * sizeof(*a->comps)) ||
	    !pf_same_array(a->files, b->files,
			   a->nfiles * sizeof(*a->files)) ||
	    !pf_same_array(a->zrecs, b->zrecs,
			   a->nzrecs * sizeof(*a->zrecs)) ||
	    !pf_same_array(a->guards, b->guards,
			   a->nguards * sizeof(*a->guards)) ||
	    !pf_same_array(a->strings, b->strings, a->strings_len))
		return false;
	if (a->lazy && (!pf_same_array(a->lazy, b->lazy,
				       a->nchunks * sizeof(*a->lazy)) ||
			!pf_same_array((const void *)a->located,
				       (const void *)b->located, a->nchunks)))
		return false;
	for (i = 0; i < a->nentries; i++) {
		const struct ckpt_entry *e = &a->entries[i];

		if (ckpt_meta_find(b, a->strings + e->fqn, e->fqn_len) !=
		    &b->entries[i])
			return false;
	}
	return true;
}

#endif
