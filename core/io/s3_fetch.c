/* SPDX-License-Identifier: MIT */
/* Batch reads from S3: see s3_fetch.h. */
#include "io/s3_fetch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/escape.h"

#define RUN_WINDOW 1024	/* requests handed to the engine at once */

/* One range asked for, in file terms. */
struct seg {
	uint32_t id;
	uint64_t off;
	uint64_t end;
	char *dst;
	uint32_t join;		/* see ckpt_s3_fetch() */
};

/* One GET: bytes [off, off + len) of o; its span's segments are
 * segs[seg0, seg1), of which those before cursor lie wholly before next,
 * the body position the sink expects next (a retry that starts over
 * starts the cursor over too). */
struct part {
	const struct ckpt_s3_object *o;
	uint64_t off;
	uint64_t len;
	const struct seg *segs;
	size_t seg0;
	size_t cursor;
	size_t seg1;
	uint64_t next;
};

static int cmp_seg(const void *a, const void *b)
{
	const struct seg *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return (x->end > y->end) - (x->end < y->end);
}

/* Copy body bytes [pos, pos + n) of the part into every segment they
 * cover; bytes in no segment (gaps) are dropped. */
static int part_sink(void *ctx, uint64_t pos, const char *p, size_t n)
{
	struct part *pt = ctx;
	uint64_t a = pt->off + pos, b = a + n;
	size_t j;

	if (pos < pt->next)
		pt->cursor = pt->seg0;
	pt->next = pos + n;
	while (pt->cursor < pt->seg1 && pt->segs[pt->cursor].end <= a)
		pt->cursor++;
	for (j = pt->cursor; j < pt->seg1 && pt->segs[j].off < b; j++) {
		const struct seg *s = &pt->segs[j];
		uint64_t lo = s->off > a ? s->off : a;
		uint64_t hi = s->end < b ? s->end : b;

		if (lo < hi)
			memcpy(s->dst + (lo - s->off), p + (lo - a),
			       (size_t)(hi - lo));
	}
	return 0;
}

/* The end of the span starting at segs[i], merging what may be merged:
 * sets *j to the first segment after it. */
static uint64_t span_end(const struct seg *segs, size_t m, size_t i,
			 uint64_t merge_gap, size_t *j)
{
	uint64_t end = segs[i].end, useful = end - segs[i].off, gap = 0;
	uint32_t join = segs[i].join;	/* of the segment ending at end */
	size_t k;

	for (k = i + 1; k < m && segs[k].id == segs[i].id; k++) {
		const struct seg *s = &segs[k];

		if (s->off <= end) {		/* overlaps or touches */
			if (s->end > end) {
				useful += s->end - end;
				end = s->end;
				join = s->join;
			} else if (s->end == end && s->join > join) {
				join = s->join;
			}
			continue;
		}
		/* asked to come with what precedes it (a header before its
		 * data): the gap counts as neither waste nor bytes asked */
		if (s->off - end <= join) {
			useful += s->end - s->off;
			end = s->end;
			join = s->join;
			continue;
		}
		if (s->off - end > merge_gap ||
		    (gap + (s->off - end)) * CKPT_S3_MERGE_WASTE_DIV >
		    useful + (s->end - s->off))
			break;
		gap += s->off - end;
		useful += s->end - s->off;
		end = s->end;
		join = s->join;
	}
	*j = k;
	return end;
}

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/* Say why part p failed, in the words a user needs. */
static void fetch_error(const struct part *p, const struct ckpt_s3_req *q)
{
	char shown[CKPT_S3_NAME_SHOWN];
	const char *what = "";

	if (q->status == 412)
		what = "replaced since it was opened: ";
	else if (q->status == 404)
		what = "deleted since it was opened: ";
	ckpt_set_last_error("%s: bytes %" PRIu64 "-%" PRIu64 " (%" PRIu64
			    " bytes): %s%s", ckpt_escape_mid(p->o->uri,
			    strlen(p->o->uri), shown, sizeof(shown)), p->off,
			    p->off + p->len - 1, p->len, what, q->reason);
}

int ckpt_s3_fetch(struct ckpt_s3_http *h, uint64_t merge_gap,
		  uint64_t part_bytes,
		  const struct ckpt_s3_object *(*obj)(void *ctx, uint32_t id),
		  void *ctx, const struct ckpt_store_range *r, size_t n,
		  size_t first_join, uint32_t join, uint64_t *delivered)
{
	struct ckpt_s3_req *q = NULL;
	struct part *parts = NULL;
	struct seg *segs;
	size_t m = 0, np = 0, i, j, failed;
	uint64_t total = 0;
	int rc = 0;

	segs = malloc((n ? n : 1) * sizeof(*segs));
	if (!segs) {
		ckpt_set_last_error("S3 read of %zu ranges: out of memory", n);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		const struct ckpt_s3_object *o = obj(ctx, r[i].id);
		uint64_t end;

		if (!o) {
			ckpt_set_last_error("S3 read: no open file has id %"
					    PRIu32, r[i].id);
			rc = -EIO;
			goto out_free;
		}
		if (__builtin_add_overflow(r[i].off, r[i].len, &end) ||
		    end > o->size) {
			ckpt_set_last_error("%s: bytes %" PRIu64 "+%" PRIu64
					    " asked, but it has %" PRIu64
					    " bytes", o->uri, r[i].off,
					    r[i].len, o->size);
			rc = -EIO;
			goto out_free;
		}
		if (r[i].len == 0)
			continue;
		segs[m++] = (struct seg){ r[i].id, r[i].off, end, r[i].dst,
					  i >= first_join ? join : 0 };
		total += r[i].len;
	}
	qsort(segs, m, sizeof(*segs), cmp_seg);

	/* Count the parts, then make them. */
	for (i = 0; i < m; i = j) {
		uint64_t end = span_end(segs, m, i, merge_gap, &j);

		np += div_up(end - segs[i].off, part_bytes);
	}
	parts = calloc(np ? np : 1, sizeof(*parts));
	q = calloc(np < RUN_WINDOW ? (np ? np : 1) : RUN_WINDOW, sizeof(*q));
	if (!parts || !q) {
		ckpt_set_last_error("S3 read of %zu ranges: out of memory", n);
		rc = -ENOMEM;
		goto out_free;
	}
	np = 0;
	for (i = 0; i < m; i = j) {
		const struct ckpt_s3_object *o = obj(ctx, segs[i].id);
		uint64_t start = segs[i].off;
		uint64_t end = span_end(segs, m, i, merge_gap, &j);
		uint64_t k = div_up(end - start, part_bytes);
		uint64_t size = div_up(end - start, k), off;

		for (off = start; off < end; off += size) {
			struct part *p = &parts[np];

			*p = (struct part){
				.o = o, .off = off,
				.len = end - off < size ? end - off : size,
				.segs = segs, .seg0 = i, .cursor = i,
				.seg1 = j,
			};
			np++;
		}
	}
	/* Requests are made RUN_WINDOW at a time: their records are big
	 * (messages, headers), parts are not. */
	for (i = 0; i < np && rc == 0; i += RUN_WINDOW) {
		size_t w = np - i < RUN_WINDOW ? np - i : RUN_WINDOW, k;

		for (k = 0; k < w; k++) {
			const struct part *p = &parts[i + k];

			q[k] = (struct ckpt_s3_req){
				.url = p->o->url, .ranged = true,
				.off = p->off, .len = p->len,
				.if_match = p->o->etag[0] ? p->o->etag : NULL,
				.obj_size = p->o->size,
				.sink = part_sink, .ctx = &parts[i + k],
			};
		}
		rc = ckpt_s3_http_run(h, q, w, &failed);
		if (rc)
			fetch_error(&parts[i + failed], &q[failed]);
		for (k = 0; k < w; k++)
			ckpt_s3_req_destroy(&q[k]);
	}
	if (rc == 0)
		*delivered += total;
out_free:
	free(q);
	free(parts);
	free(segs);
	return rc;
}
