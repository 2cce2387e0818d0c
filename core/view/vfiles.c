/* SPDX-License-Identifier: MIT */
/*
 * The .ckptfs/ directory of a view: view.json (what is mounted),
 * manifest.tsv (the `ckptfs ls --world --rank` table) and view.safetensors
 * (every tensor of the view in one safetensors file, computed on read).
 * Each slot's files are built on first use, with open_memstream(3), and
 * published only when whole: a failed build leaves nothing behind and the
 * next use tries again.
 */
#include "view/vfiles.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "view/data_read.h"
#include "view/geom.h"

#define PATH_BUF 65536	/* longest view path shown */

struct ckpt_vfiles {
	bool built;		/* atomic; set once the rest is in place */
	char *json, *tsv, *st_head;
	size_t json_len, tsv_len, st_head_len;
	uint32_t st_n;
	uint32_t *st_node;	/* tensors in the safetensors data, in order */
	uint64_t *st_start;	/* their data offsets (from the header end) */
	uint64_t st_size;	/* whole file */
};

/* A JSON string literal, always valid JSON: a byte that is not part of
 * valid UTF-8 (a path may hold any byte) becomes U+FFFD; see put_hex(). */
static void put_json(FILE *f, const char *s)
{
	size_t left = strlen(s), n;

	fputc('"', f);
	for (; *s; s += n, left -= n) {
		unsigned char c = (unsigned char)*s;

		n = ckpt_utf8_seq(s, left);
		if (!n) {
			fputs("\\ufffd", f);
			n = 1;
		} else if (c == '"' || c == '\\') {
			fprintf(f, "\\%c", c);
		} else if (c < 0x20 || c == 0x7F) {
			fprintf(f, "\\u%04x", c);
		} else {
			fwrite(s, 1, n, f);
		}
	}
	fputc('"', f);
}

/* ,\n  "name": "HEX" with s's bytes in hex, when s is not valid UTF-8:
 * its exact bytes (bytes.fromhex()), which put_json() could not keep. */
static void put_hex(FILE *f, const char *name, const char *s)
{
	if (ckpt_utf8_is_valid(s, strlen(s)))
		return;
	fprintf(f, ",\n  \"%s\": \"", name);
	for (; *s; s++)
		fprintf(f, "%02x", (unsigned char)*s);
	fputc('"', f);
}

static void put_dims(FILE *f, const uint64_t *d, unsigned n, const char *sep,
		     const char *empty)
{
	unsigned i;

	if (!n)
		fputs(empty, f);
	for (i = 0; i < n; i++)
		fprintf(f, "%s%" PRIu64, i ? sep : "", d[i]);
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

static void vfiles_clear(struct ckpt_vfiles *f)
{
	free(f->json);
	free(f->tsv);
	free(f->st_head);
	free(f->st_node);
	free(f->st_start);
	memset(f, 0, sizeof(*f));
}

/* Close a memstream; its buffer goes to *out (NULL on failure). */
static int close_stream(FILE *f, char **buf)
{
	bool bad = ferror(f);

	if (fclose(f) != 0 || bad) {
		free(*buf);
		*buf = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void write_json(const struct ckpt_view *v, uint32_t slot, FILE *js,
		       uint32_t nfiles, uint64_t total)
{
	fputs("{\n  \"source\": ", js);
	put_json(js, v->source ? v->source : "");
	put_hex(js, "source_bytes", v->source ? v->source : "");
	fprintf(js, ",\n  \"world\": %" PRIu32 ",\n  \"rank\": %" PRIu32
		",\n  \"prefix\": ", v->world, v->slot_rank[slot]);
	if (v->prefix)
		put_json(js, v->prefix);
	else
		fputs("null", js);
	fprintf(js, ",\n  \"format_version\": %" PRIu64 ",\n  \"files\": %" PRIu32
		",\n  \"total_bytes\": %" PRIu64 ",\n  \"layout\": ",
		v->meta->version, nfiles, total);
	if (v->layout_path)
		put_json(js, v->layout_path);
	else
		fputs("null", js);
	if (v->layout_path)
		put_hex(js, "layout_bytes", v->layout_path);
	fputs(",\n  \"dtype\": ", js);
	if (v->dtype < CKPT_DTYPE_COUNT)
		put_json(js, ckpt_dtype_name(v->dtype));
	else
		fputs("null", js);
	fprintf(js, ",\n  \"format\": \"%s\"\n}\n", v->npy ? "npy" : "raw");
}

/* Build slot's files into f (zeroed).  On failure f is left zeroed. */
static int build(const struct ckpt_view *v, uint32_t slot,
		 struct ckpt_vfiles *f)
{
	const struct ckpt_meta *m = v->meta;
	char *js_buf = NULL, *tsv_buf = NULL, *sh_buf = NULL, *path = NULL;
	size_t js_len = 0, tsv_len = 0, sh_len = 0;
	FILE *js = NULL, *tsv = NULL, *sh = NULL;
	uint64_t total = 0, data = 0;
	uint32_t i, nfiles = 0;
	int rc = -ENOMEM;

	f->st_node = malloc((v->nfiles ? v->nfiles : 1) * sizeof(uint32_t));
	f->st_start = malloc((v->nfiles ? v->nfiles : 1) * sizeof(uint64_t));
	path = malloc(PATH_BUF);
	js = open_memstream(&js_buf, &js_len);
	tsv = open_memstream(&tsv_buf, &tsv_len);
	sh = open_memstream(&sh_buf, &sh_len);
	if (!f->st_node || !f->st_start || !path || !js || !tsv || !sh)
		goto out_streams;
	fputs("path\tdtype\tglobal_shape\tchunks\tlocal_shape\tlocal_offset\tbytes\n", tsv);
	fprintf(sh, "{\"__metadata__\":{\"world\":\"%" PRIu32 "\",\"rank\":\"%" PRIu32 "\",\"source\":",
		v->world, v->slot_rank[slot]);
	put_json(sh, v->source ? v->source : "");
	fputc('}', sh);
	for (i = 0; i < v->nfiles; i++) {
		uint32_t node = v->file_node[i];
		const struct ckpt_entry *e = &m->entries[v->nodes[node].entry];
		const struct ckpt_geom *g = ckpt_view_geom(v, slot, node);
		struct ckpt_box box;

		nfiles++;
		total += g->size;
		ckpt_view_path(v, node, path, PATH_BUF / 2);
		ckpt_tsv_escape(path, path + PATH_BUF / 2, PATH_BUF / 2);
		fprintf(tsv, "%s\t%s\t", path + PATH_BUF / 2,
			e->kind == CKPT_KIND_BYTES ? "bytes" :
			ckpt_dtype_name(g->dtype));
		if (e->kind == CKPT_KIND_BYTES) {
			fprintf(tsv, "-\t1\t-\t-\t%" PRIu64 "\n", g->size);
			continue;
		}
		ckpt_geom_box(v, g, &box);
		put_dims(tsv, ckpt_entry_shape(m, e), e->ndim, ",", "-");
		fprintf(tsv, "\t%" PRIu32 "\t", e->nchunks);
		put_dims(tsv, box.size, box.ndim, ",", "-");
		fputc('\t', tsv);
		put_dims(tsv, box.off, box.ndim, ",", "-");
		fprintf(tsv, "\t%" PRIu64 "\n", g->size);
		/* safetensors: the raw view bytes, back to back. */
		fputc(',', sh);
		put_json(sh, ckpt_entry_fqn(m, e));
		fprintf(sh, ":{\"dtype\":\"%s\",\"shape\":[",
			st_dtype((enum ckpt_dtype)g->dtype));
		put_dims(sh, box.size, box.ndim, ",", "");
		fprintf(sh, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
			data, data + g->data_size);
		f->st_node[f->st_n] = node;
		f->st_start[f->st_n++] = data;
		data += g->data_size;
	}
	fputc('}', sh);
	write_json(v, slot, js, nfiles, total);
	/* Pad with spaces so the data starts 8-byte aligned. */
	if (fflush(sh) == 0)
		while ((8 + sh_len) % 8 && fputc(' ', sh) != EOF && fflush(sh) == 0)
			;
	rc = close_stream(js, &js_buf);
	js = NULL;
	rc |= close_stream(tsv, &tsv_buf);
	tsv = NULL;
	rc |= close_stream(sh, &sh_buf);
	sh = NULL;
	if (rc) {
		rc = -ENOMEM;
		goto out_streams;
	}
	/* 8-byte little-endian header size, then the header. */
	f->st_head = malloc(8 + sh_len);
	if (!f->st_head) {
		rc = -ENOMEM;
		goto out_streams;
	}
	for (i = 0; i < 8; i++)
		f->st_head[i] = (char)((uint64_t)sh_len >> (8 * i));
	memcpy(f->st_head + 8, sh_buf, sh_len);
	f->st_head_len = 8 + sh_len;
	f->st_size = f->st_head_len + data;
	f->json = js_buf;
	f->json_len = js_len;
	f->tsv = tsv_buf;
	f->tsv_len = tsv_len;
	js_buf = tsv_buf = NULL;
	rc = 0;
out_streams:
	if (js)
		fclose(js);
	if (tsv)
		fclose(tsv);
	if (sh)
		fclose(sh);
	free(js_buf);
	free(tsv_buf);
	free(sh_buf);
	free(path);
	if (rc)
		vfiles_clear(f);
	return rc;
}

/* The slot's files, built on first use: 0 and *out, or -ENOMEM (nothing
 * is kept, so the next call tries again). */
static int get(const struct ckpt_view *v, uint32_t slot,
	       const struct ckpt_vfiles **out)
{
	/* vfiles and vfiles_lock are the view's only mutable parts. */
	struct ckpt_view *mv = (struct ckpt_view *)v;
	struct ckpt_vfiles *f = &mv->vfiles[slot];
	int rc = 0;

	if (!__atomic_load_n(&f->built, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&mv->vfiles_lock);
		if (!__atomic_load_n(&f->built, __ATOMIC_RELAXED)) {
			rc = build(v, slot, f);
			if (!rc)
				__atomic_store_n(&f->built, true,
						 __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&mv->vfiles_lock);
	}
	*out = rc ? NULL : f;
	return rc;
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
	for (s = 0; s < v->nslots; s++)
		vfiles_clear(&v->vfiles[s]);
	free(v->vfiles);
	v->vfiles = NULL;
}

int ckpt_vfile_size(const struct ckpt_view *v, uint32_t slot, uint32_t kind,
		    uint64_t *size)
{
	const struct ckpt_vfiles *f;
	int rc = get(v, slot, &f);

	*size = 0;
	if (rc)
		return rc;
	*size = kind == CKPT_VIRT_JSON ? f->json_len :
		kind == CKPT_VIRT_TSV ? f->tsv_len : f->st_size;
	return 0;
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
		    struct ckpt_scratch *s)
{
	const struct ckpt_vfiles *f;
	size_t done = 0, n;
	int rc;

	*got = 0;
	rc = get(v, slot, &f);
	if (rc)
		return rc;
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
		rc = ckpt_data_read_raw(v, slot, node, d - f->st_start[lo],
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
