/* SPDX-License-Identifier: MIT */
/*
 * The .ckptfs/ directory of a view: view.json (what is mounted),
 * manifest.tsv (the `ckptfs ls --world --rank` table) and view.safetensors
 * (every tensor of the view in one safetensors file, computed on read).
 * Each slot's files are built on first use and kept.
 */
#include "view.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "reshard.h"
#include "view_meta.h"

struct ckpt_vfiles {
	bool built;
	char *json, *tsv, *st_head;
	size_t json_len, tsv_len, st_head_len;
	uint32_t st_n;
	uint32_t *st_node;	/* tensors in the safetensors data, in order */
	uint64_t *st_start;	/* their data offsets (from the header end) */
	uint64_t st_size;	/* whole file */
};

/* A growing string. */
struct sbuf {
	char *s;
	size_t len, cap;
	bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->s, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static void sb_printf(struct sbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string literal. */
static void sb_json(struct sbuf *b, const char *s)
{
	sb_add(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };

			sb_add(b, e, 2);
		} else if (c < 0x20) {
			sb_printf(b, "\\u%04x", c);
		} else {
			sb_add(b, (const char *)&c, 1);
		}
	}
	sb_add(b, "\"", 1);
}

static void sb_dims(struct sbuf *b, const uint64_t *d, unsigned n,
		    const char *sep, const char *empty)
{
	unsigned i;

	if (!n)
		sb_add(b, empty, strlen(empty));
	for (i = 0; i < n; i++)
		sb_printf(b, "%s%" PRIu64, i ? sep : "", d[i]);
}

static const char *st_dtype(enum ckpt_dtype dt)
{
	static const char *const names[CKPT_DTYPE_COUNT] = {
		[CKPT_F64] = "F64", [CKPT_F32] = "F32", [CKPT_F16] = "F16",
		[CKPT_BF16] = "BF16", [CKPT_F8E4M3] = "F8_E4M3",
		[CKPT_F8E5M2] = "F8_E5M2", [CKPT_I64] = "I64",
		[CKPT_I32] = "I32", [CKPT_I16] = "I16", [CKPT_I8] = "I8",
		[CKPT_U8] = "U8", [CKPT_BOOL] = "BOOL",
	};

	return names[dt];
}

static int build(const struct ckpt_view *v, uint32_t slot,
		 struct ckpt_vfiles *f)
{
	const struct ckpt_meta *m = v->meta;
	struct sbuf js = { 0 }, tsv = { 0 }, sh = { 0 };
	uint64_t total = 0, data = 0;
	char path[4096];
	uint32_t i, nfiles = 0;

	f->st_node = malloc((v->nnodes ? v->nnodes : 1) * sizeof(uint32_t));
	f->st_start = malloc((v->nnodes ? v->nnodes : 1) * sizeof(uint64_t));
	if (!f->st_node || !f->st_start)
		return -ENOMEM;
	sb_printf(&tsv, "path\tdtype\tglobal_shape\tchunks\tlocal_shape\tlocal_offset\tbytes\n");
	sb_printf(&sh, "{\"__metadata__\":{\"world\":\"%" PRIu32 "\",\"rank\":\"%" PRIu32 "\",\"source\":",
		  v->world, v->slot_rank[slot]);
	sb_json(&sh, v->source ? v->source : "");
	sb_add(&sh, "}", 1);
	for (i = 1; i < v->nnodes; i++) {
		const struct ckpt_node *n = &v->nodes[i];
		const struct ckpt_entry *e;
		struct ckpt_box box;
		uint64_t size;
		enum ckpt_dtype dt;

		if (ckpt_node_is_dir(n) || ckpt_node_is_virtual(n))
			continue;
		e = &m->entries[n->entry];
		size = ckpt_view_size(v, slot, i);
		nfiles++;
		total += size;
		ckpt_view_path(v, i, path, sizeof(path));
		sb_printf(&tsv, "%s\t%s\t", path, e->kind == CKPT_KIND_BYTES ?
			  "bytes" : ckpt_dtype_name(ckpt_view_dtype(v, e)));
		if (e->kind == CKPT_KIND_BYTES) {
			sb_printf(&tsv, "-\t1\t-\t-\t%" PRIu64 "\n", size);
			continue;
		}
		ckpt_view_box(v, slot, e, &box);
		sb_dims(&tsv, ckpt_entry_shape(m, e), e->ndim, ",", "-");
		sb_printf(&tsv, "\t%" PRIu32 "\t", e->nchunks);
		sb_dims(&tsv, box.size, box.ndim, ",", "-");
		sb_add(&tsv, "\t", 1);
		sb_dims(&tsv, box.off, box.ndim, ",", "-");
		sb_printf(&tsv, "\t%" PRIu64 "\n", size);
		/* safetensors: the raw view bytes, back to back. */
		dt = ckpt_view_dtype(v, e);
		size = ckpt_box_numel(&box) * ckpt_dtype_size(dt);
		sb_add(&sh, ",", 1);
		sb_json(&sh, ckpt_entry_fqn(m, e));
		sb_printf(&sh, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype(dt));
		sb_dims(&sh, box.size, box.ndim, ",", "");
		sb_printf(&sh, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
			  data, data + size);
		f->st_node[f->st_n] = i;
		f->st_start[f->st_n++] = data;
		data += size;
	}
	sb_add(&sh, "}", 1);
	/* Pad with spaces so the data starts 8-byte aligned. */
	while ((8 + sh.len) % 8)
		sb_add(&sh, " ", 1);
	sb_printf(&js, "{\n  \"source\": ");
	sb_json(&js, v->source ? v->source : "");
	sb_printf(&js, ",\n  \"world\": %" PRIu32 ",\n  \"rank\": %" PRIu32
		  ",\n  \"prefix\": ", v->world, v->slot_rank[slot]);
	if (v->prefix)
		sb_json(&js, v->prefix);
	else
		sb_add(&js, "null", 4);
	sb_printf(&js, ",\n  \"format_version\": %" PRIu64 ",\n  \"files\": %" PRIu32
		  ",\n  \"total_bytes\": %" PRIu64 ",\n  \"layout\": ",
		  m->version, nfiles, total);
	if (v->layout_path)
		sb_json(&js, v->layout_path);
	else
		sb_add(&js, "null", 4);
	sb_printf(&js, ",\n  \"dtype\": ");
	if (v->dtype < CKPT_DTYPE_COUNT)
		sb_json(&js, ckpt_dtype_name(v->dtype));
	else
		sb_add(&js, "null", 4);
	sb_printf(&js, ",\n  \"format\": \"%s\"\n}\n", v->npy ? "npy" : "raw");
	if (js.oom || tsv.oom || sh.oom) {
		free(js.s);
		free(tsv.s);
		free(sh.s);
		return -ENOMEM;
	}
	f->json = js.s;
	f->json_len = js.len;
	f->tsv = tsv.s;
	f->tsv_len = tsv.len;
	/* 8-byte little-endian header size, then the header. */
	f->st_head = malloc(8 + sh.len);
	if (!f->st_head) {
		free(sh.s);
		return -ENOMEM;
	}
	for (i = 0; i < 8; i++)
		f->st_head[i] = (char)((uint64_t)sh.len >> (8 * i));
	memcpy(f->st_head + 8, sh.s, sh.len);
	free(sh.s);
	f->st_head_len = 8 + sh.len;
	f->st_size = f->st_head_len + data;
	f->built = true;
	return 0;
}

/* The slot's files, built on first use.  Returns NULL on out-of-memory. */
static const struct ckpt_vfiles *get(const struct ckpt_view *v, uint32_t slot)
{
	/* vfiles and vfiles_lock are the view's only mutable parts. */
	struct ckpt_view *mv = (struct ckpt_view *)v;
	struct ckpt_vfiles *f = &mv->vfiles[slot];

	if (__atomic_load_n(&f->built, __ATOMIC_ACQUIRE))
		return f;
	pthread_mutex_lock(&mv->vfiles_lock);
	if (!f->built && build(v, slot, f)) {
		pthread_mutex_unlock(&mv->vfiles_lock);
		return NULL;
	}
	pthread_mutex_unlock(&mv->vfiles_lock);
	return f;
}

int ckpt_vfiles_new(struct ckpt_view *v)
{
	v->vfiles = calloc(v->nslots, sizeof(*v->vfiles));
	return v->vfiles ? 0 : -ENOMEM;
}

void ckpt_vfiles_free(struct ckpt_view *v)
{
	uint32_t s;

	if (!v->vfiles)
		return;
	for (s = 0; s < v->nslots; s++) {
		free(v->vfiles[s].json);
		free(v->vfiles[s].tsv);
		free(v->vfiles[s].st_head);
		free(v->vfiles[s].st_node);
		free(v->vfiles[s].st_start);
	}
	free(v->vfiles);
	v->vfiles = NULL;
}

uint64_t ckpt_vfile_size(const struct ckpt_view *v, uint32_t slot,
			 uint32_t kind)
{
	const struct ckpt_vfiles *f = get(v, slot);

	if (!f)
		return 0;
	return kind == CKPT_VIRT_JSON ? f->json_len :
	       kind == CKPT_VIRT_TSV ? f->tsv_len : f->st_size;
}

static size_t copy_out(const char *src, size_t srclen, uint64_t off,
		       size_t len, char *buf)
{
	size_t n;

	if (off >= srclen)
		return 0;
	n = srclen - (size_t)off < len ? srclen - (size_t)off : len;
	memcpy(buf, src + off, n);
	return n;
}

int ckpt_vfile_read(const struct ckpt_view *v, uint32_t slot, uint32_t kind,
		    uint64_t off, size_t len, char *buf, size_t *got,
		    struct ckpt_read_scratch *s)
{
	const struct ckpt_vfiles *f = get(v, slot);
	size_t done = 0, n;
	int rc;

	*got = 0;
	if (!f)
		return -ENOMEM;
	if (kind == CKPT_VIRT_JSON) {
		*got = copy_out(f->json, f->json_len, off, len, buf);
		return 0;
	}
	if (kind == CKPT_VIRT_TSV) {
		*got = copy_out(f->tsv, f->tsv_len, off, len, buf);
		return 0;
	}
	if (off >= f->st_size)
		return 0;
	if (len > f->st_size - off)
		len = (size_t)(f->st_size - off);
	if (off < f->st_head_len) {
		done = copy_out(f->st_head, f->st_head_len, off, len, buf);
		off += done;
	}
	while (done < len) {
		uint64_t d = off - f->st_head_len;
		uint32_t lo = 0, hi = f->st_n, node;
		uint64_t tsize;

		while (hi - lo > 1) {	/* the last tensor starting <= d */
			uint32_t mid = lo + (hi - lo) / 2;

			if (f->st_start[mid] <= d)
				lo = mid;
			else
				hi = mid;
		}
		node = f->st_node[lo];
		tsize = (lo + 1 < f->st_n ? f->st_start[lo + 1] :
			 f->st_size - f->st_head_len) - f->st_start[lo];
		/* The last tensor starting at or before d is never empty:
		 * empty ones share their start with the next. */
		if (d - f->st_start[lo] >= tsize)
			return -EIO;
		rc = ckpt_view_read_data(v, slot, node, d - f->st_start[lo],
					 len - done, buf + done, &n, s);
		if (rc)
			return rc;
		if (n == 0)
			return -EIO;
		done += n;
		off += n;
	}
	*got = done;
	return 0;
}
