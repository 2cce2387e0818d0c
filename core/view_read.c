/* SPDX-License-Identifier: MIT */
/*
 * Serving a read of a view file.  The byte range is planned into runs and
 * runs that continue each other in the same data file are merged.  When
 * that leaves a few runs (dim-0 tilings: usually one), each is pread
 * straight into the caller's buffer.  When it leaves many short runs
 * (dim-1 tilings: one per row per chunk), runs of the same chunk, which
 * come in ascending storage order and are usually adjacent there, are
 * merged into a few extents, pread into a staging buffer, and copied into
 * place: a handful of syscalls instead of thousands, and still only the
 * bytes needed.
 */
#include "view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "datafiles.h"
#include "plan.h"
#include "reshard.h"
#include "verify.h"
#include "npy.h"
#include "view_meta.h"

#define BATCH_RUNS 4096		/* runs gathered per staged batch */
#define DIRECT_MAX 8		/* at most this many runs: pread directly */
#define OPEN_EXTENTS 64		/* chunks tracked at once while merging */
#define STRIDED_LOAD_MAX ((uint64_t)256 << 20)	/* strided record read whole */
#define STRIDED_KEEP_MAX ((size_t)8 << 20)	/* ... and kept between reads */

struct pending {
	uint32_t file;
	uint32_t chunk;		/* the chunk the run ends in */
	uint64_t foff, len;
	uint64_t dst;		/* offset in the caller's buffer */
	uint64_t at;		/* offset inside its extent */
};

struct extent {
	uint32_t file;
	uint64_t foff, len;
	uint64_t stage;		/* offset in the staging buffer */
};

/* Forget the strided record the scratch holds. */
static void drop_record(struct ckpt_read_scratch *s)
{
	free(s->rec);
	s->rec = NULL;
	s->cap_rec = 0;
	s->rec_meta = NULL;
}

void ckpt_read_scratch_destroy(struct ckpt_read_scratch *s)
{
	if (!s)
		return;
	free(s->runs);
	free(s->stage);
	free(s->conv);
	drop_record(s);
	s->runs = NULL;
	s->stage = NULL;
	s->conv = NULL;
	s->cap_stage = 0;
	s->cap_conv = 0;
}

/* Read n runs into buf: directly when few, else through extents. */
static int flush(struct ckpt_meta *m, struct pending *r, uint32_t n,
		 char *buf, struct ckpt_read_scratch *s)
{
	uint32_t open_chunk[OPEN_EXTENTS], open_ext[OPEN_EXTENTS];
	uint32_t nopen = 0, next = 0, i, k;
	struct extent *ext;
	uint64_t total = 0;
	int rc;

	if (n <= DIRECT_MAX || !s) {
		for (i = 0; i < n; i++) {
			rc = ckpt_files_pread(m, r[i].file, buf + r[i].dst,
					      r[i].len, r[i].foff);
			if (rc)
				return rc;
		}
		return 0;
	}
	ext = s->extents;
	for (i = 0; i < n; i++) {
		for (k = 0; k < nopen && open_chunk[k] != r[i].chunk; k++)
			;
		if (k < nopen && ext[open_ext[k]].file == r[i].file &&
		    ext[open_ext[k]].foff + ext[open_ext[k]].len == r[i].foff) {
			s->order[i] = open_ext[k];
			r[i].at = ext[open_ext[k]].len;
			ext[open_ext[k]].len += r[i].len;
			continue;
		}
		ext[next].file = r[i].file;
		ext[next].foff = r[i].foff;
		ext[next].len = r[i].len;
		s->order[i] = next;
		r[i].at = 0;
		if (k == nopen && nopen < OPEN_EXTENTS)
			nopen++;
		if (k < OPEN_EXTENTS) {
			open_chunk[k] = r[i].chunk;
			open_ext[k] = next;
		}
		next++;
	}
	for (k = 0; k < next; k++) {
		ext[k].stage = total;
		total += ext[k].len;
	}
	if (s->cap_stage < total) {
		free(s->stage);
		s->stage = malloc(total);
		s->cap_stage = s->stage ? total : 0;
		if (!s->stage)
			return -ENOMEM;
	}
	for (k = 0; k < next; k++) {
		rc = ckpt_files_pread(m, ext[k].file, s->stage + ext[k].stage,
				      ext[k].len, ext[k].foff);
		if (rc)
			return rc;
	}
	for (i = 0; i < n; i++)
		memcpy(buf + r[i].dst,
		       s->stage + ext[s->order[i]].stage + r[i].at, r[i].len);
	return 0;
}

enum { UNCHECKED, GOOD, CORRUPT };

/* -o verify: check chunk ci's record the first time any of it is read. */
static int check_record(const struct ckpt_view *v, uint32_t ci)
{
	struct ckpt_meta *m = v->meta;
	uint8_t st = __atomic_load_n(&v->vstate[ci], __ATOMIC_ACQUIRE);
	uint8_t want = UNCHECKED;
	uint64_t got = 0;
	char *buf;
	int rc;

	if (st == GOOD)
		return 0;
	if (st == CORRUPT)
		return -EIO;
	buf = malloc(1 << 20);
	if (!buf)
		return -ENOMEM;
	rc = ckpt_verify_chunk(m, ci, buf, 1 << 20, &got);
	free(buf);
	if (rc == -EIO || rc == -ENOMEM)
		return rc;	/* not a verdict: try again next time */
	st = rc == -EBADMSG ? CORRUPT : GOOD;
	if (__atomic_compare_exchange_n(&v->vstate[ci], &want, st, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
	    st == CORRUPT && v->report) {
		const struct ckpt_chunk *c = &m->chunks[ci];
		char line[1024];

		snprintf(line, sizeof(line),
			 "%s/%s: offset %llu: key '%s': %s mismatch, reads of it fail with EIO",
			 m->dir, m->strings + m->files[c->file].path,
			 (unsigned long long)c->foff,
			 ckpt_entry_fqn(m, ckpt_meta_chunk_entry(m, ci)),
			 ckpt_verify_kind(c));
		v->report(line);
	}
	return st == CORRUPT ? -EIO : 0;
}

/* A run of a strided chunk (elements scattered over its record): served
 * from the whole record, read once into the scratch, or when that is too
 * large or there is no scratch, read directly. */
static int read_strided(struct ckpt_meta *m, const struct ckpt_run *run,
			char *dst, struct ckpt_read_scratch *s)
{
	const struct ckpt_chunk *c = &m->chunks[run->chunk];
	int rc;

	if (!s || c->len > STRIDED_LOAD_MAX)
		return ckpt_files_pread(m, run->file, dst, run->len, run->foff);
	if (s->rec_meta != m || s->rec_chunk != run->chunk) {
		if (s->cap_rec < c->len) {
			free(s->rec);
			s->rec = malloc(c->len);
			s->cap_rec = s->rec ? c->len : 0;
			if (!s->rec)
				return -ENOMEM;
		}
		s->rec_meta = NULL;
		rc = ckpt_files_pread(m, c->file, s->rec, c->len, c->foff);
		if (rc)
			return rc;
		s->rec_meta = m;
		s->rec_chunk = run->chunk;
	}
	memcpy(dst, s->rec + (run->foff - c->foff), run->len);
	return 0;
}

/* Bytes [off, off+len) of entry e's box as stored, into buf. */
static int read_raw(const struct ckpt_view *v, const struct ckpt_entry *e,
		    const struct ckpt_box *box, uint64_t off, size_t len,
		    char *buf, size_t *got, struct ckpt_read_scratch *s)
{
	struct ckpt_meta *m = v->meta;
	struct pending local[DIRECT_MAX + 1], *r = local;
	uint32_t cap = DIRECT_MAX + 1, n = 0;
	struct ckpt_planner p;
	struct ckpt_run run;
	uint64_t dst = 0;
	int rc;

	*got = 0;
	if (s && !s->runs) {
		s->runs = malloc(BATCH_RUNS * (sizeof(struct pending) +
					       sizeof(struct extent) +
					       sizeof(uint32_t)));
		if (!s->runs)
			return -ENOMEM;
		s->extents = (struct pending *)s->runs + BATCH_RUNS;
		s->order = (uint32_t *)((struct extent *)s->extents +
					BATCH_RUNS);
	}
	if (s) {
		r = s->runs;
		cap = BATCH_RUNS;
	}
	ckpt_planner_init(&p, m, e, box, off, len);
	while ((rc = ckpt_planner_next(&p, &run)) > 0) {
		if (v->verify) {
			rc = check_record(v, run.chunk);
			if (rc)
				return rc;
		}
		if (m->chunks[run.chunk].strides_at != CKPT_NONE) {
			rc = read_strided(m, &run, buf + dst, s);
			if (rc)
				break;
			dst += run.len;
			continue;
		}
		if (n && run.file == r[n - 1].file &&
		    r[n - 1].foff + r[n - 1].len == run.foff) {
			r[n - 1].len += run.len;
			r[n - 1].chunk = run.chunk;
		} else {
			if (n == cap) {
				rc = flush(m, r, n, buf, s);
				if (rc)
					return rc;
				n = 0;
			}
			r[n].file = run.file;
			r[n].chunk = run.chunk;
			r[n].foff = run.foff;
			r[n].len = run.len;
			r[n].dst = dst;
			n++;
		}
		dst += run.len;
	}
	if (s && s->cap_rec > STRIDED_KEEP_MAX)
		drop_record(s);
	if (rc < 0)
		return rc;
	rc = flush(m, r, n, buf, s);
	if (rc)
		return rc;
	*got = dst;
	return 0;
}

/* A dtype view: read whole source elements covering the range, convert,
 * and copy out the bytes asked for. */
static int read_converted(const struct ckpt_view *v,
			  const struct ckpt_entry *e,
			  const struct ckpt_box *box, enum ckpt_dtype to,
			  uint64_t off, size_t len, char *buf, size_t *got,
			  struct ckpt_read_scratch *s)
{
	unsigned ssz = ckpt_dtype_size((enum ckpt_dtype)e->dtype);
	unsigned tsz = ckpt_dtype_size(to);
	uint64_t size = ckpt_box_numel(box) * tsz, e0, e1, n;
	size_t need, raw;
	int rc;

	*got = 0;
	if (off >= size || len == 0)
		return 0;
	if (len > size - off)
		len = (size_t)(size - off);
	e0 = off / tsz;
	e1 = (off + len + tsz - 1) / tsz;
	n = e1 - e0;
	need = (size_t)(n * ssz + n * tsz);
	if (!s)
		return -ENOMEM;
	if (s->cap_conv < need) {
		free(s->conv);
		s->conv = malloc(need);
		s->cap_conv = s->conv ? need : 0;
		if (!s->conv)
			return -ENOMEM;
	}
	rc = read_raw(v, e, box, e0 * ssz, (size_t)(n * ssz), s->conv, &raw, s);
	if (rc)
		return rc;
	if (raw != n * ssz)
		return -EIO;
	ckpt_convert((enum ckpt_dtype)e->dtype, to, s->conv,
		     s->conv + n * ssz, (size_t)n);
	memcpy(buf, s->conv + n * ssz + (off - e0 * tsz), len);
	*got = len;
	return 0;
}

int ckpt_view_read_data(const struct ckpt_view *v, uint32_t slot,
			uint32_t node, uint64_t off, size_t len, void *buf,
			size_t *got, struct ckpt_read_scratch *s)
{
	struct ckpt_meta *m = v->meta;
	const struct ckpt_entry *e;
	struct ckpt_box box = { 0 };
	enum ckpt_dtype to;

	*got = 0;
	if (node >= v->nnodes || ckpt_node_is_dir(&v->nodes[node]) ||
	    slot >= v->nslots)
		return -EISDIR;
	e = &m->entries[v->nodes[node].entry];
	if (e->kind == CKPT_KIND_TENSOR)
		ckpt_view_box(v, slot, e, &box);
	to = e->kind == CKPT_KIND_TENSOR ? ckpt_view_dtype(v, e) :
					   CKPT_DTYPE_COUNT;
	if (e->kind == CKPT_KIND_TENSOR && to != (enum ckpt_dtype)e->dtype)
		return read_converted(v, e, &box, to, off, len, buf, got, s);
	return read_raw(v, e, &box, off, len, buf, got, s);
}

size_t ckpt_view_npy_header(const struct ckpt_view *v, uint32_t slot,
			    uint32_t node, char *buf, size_t cap)
{
	const struct ckpt_entry *e = &v->meta->entries[v->nodes[node].entry];
	struct ckpt_box box;

	ckpt_view_box(v, slot, e, &box);
	return ckpt_npy_header(ckpt_view_dtype(v, e), box.size, box.ndim, buf,
			       cap);
}

int ckpt_view_read(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, size_t len, void *buf, size_t *got,
		   struct ckpt_read_scratch *s)
{
	const struct ckpt_node *n;
	char head[CKPT_NPY_MAX_HEADER];
	size_t h, done = 0, more;
	int rc;

	*got = 0;
	if (node >= v->nnodes || slot >= v->nslots)
		return -EISDIR;
	n = &v->nodes[node];
	if (ckpt_node_is_virtual(n))
		return ckpt_vfile_read(v, slot, n->entry, off, len, buf, got, s);
	if (!v->npy || ckpt_node_is_dir(n) ||
	    v->meta->entries[n->entry].kind != CKPT_KIND_TENSOR)
		return ckpt_view_read_data(v, slot, node, off, len, buf, got, s);
	/* --format npy: the header, then the data. */
	h = ckpt_view_npy_header(v, slot, node, head, sizeof(head));
	if (!h)
		return -EIO;
	if (off < h) {
		done = h - (size_t)off < len ? h - (size_t)off : len;
		memcpy(buf, head + off, done);
	}
	if (done < len) {
		rc = ckpt_view_read_data(v, slot, node, off + done - h, len - done,
					 (char *)buf + done, &more, s);
		if (rc)
			return rc;
		done += more;
	}
	*got = done;
	return 0;
}
