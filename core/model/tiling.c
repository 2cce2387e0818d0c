/* SPDX-License-Identifier: MIT */
/*
 * Exact-tiling check.  With every chunk inside the shape, the chunks tile
 * it exactly iff no two overlap and their volumes add up to the shape's.
 * Overlaps are found with a sweep along dim 0 over the chunks sorted by
 * offsets: two boxes overlap only if both are "active" (span the same dim-0
 * coordinate) when the later one starts, so each chunk is compared only with
 * those still active.  Dim-0 tilings cost O(n), dim-1 tilings O(n * k) for
 * k chunks per row band.
 */
#include "model/tiling.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "common/errbuf.h"

#define MAX_PAIR_CHECKS ((uint64_t)1 << 27)

static uint64_t volume(const uint64_t *sz, unsigned ndim)
{
	uint64_t v = 1;
	unsigned d;

	for (d = 0; d < ndim; d++)
		v *= sz[d];	/* bounded by the checked shape volume */
	return v;
}

static int overlap_error(const struct ckpt_meta *m, const struct ckpt_entry *e,
			 const struct ckpt_chunk *x, const struct ckpt_chunk *y,
			 const char *name, char *err, size_t errlen)
{
	char a[128], b[128], c[128], d[128];

	return ckpt_errf_key(err, errlen, -EINVAL,
			     ckpt_entry_fqn(m, e), SIZE_MAX,
			     "%s: key '%s': chunk %s+%s overlaps chunk %s+%s", name,
			     ckpt_entry_fqn(m, e),
			     ckpt_fmt_dims(a, sizeof(a), ckpt_chunk_offsets(m, y), e->ndim),
			     ckpt_fmt_dims(b, sizeof(b), ckpt_chunk_sizes(m, e, y), e->ndim),
			     ckpt_fmt_dims(c, sizeof(c), ckpt_chunk_offsets(m, x), e->ndim),
			     ckpt_fmt_dims(d, sizeof(d), ckpt_chunk_sizes(m, e, x), e->ndim));
}

/* Do x and y overlap in dims 1..ndim-1? */
static int overlap_rest(const uint64_t *xo, const uint64_t *xs,
			const uint64_t *yo, const uint64_t *ys, unsigned ndim)
{
	unsigned d;

	for (d = 1; d < ndim; d++) {
		if (xo[d] + xs[d] <= yo[d] || yo[d] + ys[d] <= xo[d])
			return 0;
	}
	return 1;
}

int ckpt_tiling_check(const struct ckpt_meta *m, const struct ckpt_entry *e,
		      const char *name, char *err, size_t errlen)
{
	const struct ckpt_chunk *ch = m->chunks + e->chunk_first;
	uint64_t covered = 0, checks = 0;
	uint32_t *active, nactive = 0, i, j, keep;
	int rc = 0;

	active = malloc((e->nchunks ? e->nchunks : 1) * sizeof(*active));
	if (!active)
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 name);
	for (i = 0; i < e->nchunks; i++) {
		const uint64_t *xo = ckpt_chunk_offsets(m, &ch[i]);
		const uint64_t *xs = ckpt_chunk_sizes(m, e, &ch[i]);
		uint64_t v = volume(xs, e->ndim);

		if (v == 0)
			continue;
		if (__builtin_add_overflow(covered, v, &covered) ||
		    covered > e->numel) {
			/* More volume than the shape: some pair overlaps and
			 * the sweep below will name it. */
			covered = e->numel + 1;
		}
		if (e->ndim == 0) {
			active[nactive++] = i;
			continue;
		}
		keep = 0;
		for (j = 0; j < nactive; j++) {
			const uint64_t *ao = ckpt_chunk_offsets(m, &ch[active[j]]);
			const uint64_t *as = ckpt_chunk_sizes(m, e, &ch[active[j]]);

			if (ao[0] + as[0] > xo[0])
				active[keep++] = active[j];
		}
		nactive = keep;
		checks += nactive;
		if (checks > MAX_PAIR_CHECKS) {
			rc = ckpt_errf_key(err, errlen, -E2BIG,
					   ckpt_entry_fqn(m, e), SIZE_MAX,
					   "%s: key '%s': %" PRIu32
					   " chunks share dim-0 rows; too many to check the tiling",
					   name, ckpt_entry_fqn(m, e), e->nchunks);
			goto out_free;
		}
		for (j = 0; j < nactive; j++) {
			const struct ckpt_chunk *a = &ch[active[j]];

			if (overlap_rest(ckpt_chunk_offsets(m, a),
					 ckpt_chunk_sizes(m, e, a), xo, xs,
					 e->ndim)) {
				rc = overlap_error(m, e, a, &ch[i], name, err,
						   errlen);
				goto out_free;
			}
		}
		active[nactive++] = i;
	}
	if (covered != e->numel) {
		char s[256];

		rc = ckpt_errf_key(err, errlen, -EINVAL,
				   ckpt_entry_fqn(m, e), SIZE_MAX,
				   "%s: key '%s': chunks cover %" PRIu64 " of the %" PRIu64
				   " elements of shape %s: the tiling has a gap",
				   name, ckpt_entry_fqn(m, e), covered, e->numel,
				   ckpt_fmt_dims(s, sizeof(s), ckpt_entry_shape(m, e),
						 e->ndim));
	}
out_free:
	free(active);
	return rc;
}
