/* SPDX-License-Identifier: MIT */
/*
 * `ckptfs info|ls|plan|cat|extract`: inspect a checkpoint and its views
 * without mounting, through the same core/ engine as the mount.
 */
#include "cli_tools.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/convert.h"
#include "../core/datafiles.h"
#include "../core/errbuf.h"
#include "../core/meta.h"
#include "../core/npy.h"
#include "../core/plan.h"
#include "../core/reshard.h"
#include "../core/verify.h"
#include "../core/view.h"
#include "mount_opts.h"

#define BUF_SIZE ((size_t)1 << 20)

struct tool_args {
	const char *pos[16];
	int npos;
	uint32_t world, rank;
	bool has_world, has_rank, help, npy;
	const char *prefix;
	const char *out;	/* -o FILE (index) */
	uint32_t jobs;
};

struct tool {
	const char *name;
	int npos_min, npos_max;
	bool needs_rank;	/* --world and --rank required */
	const char *usage;
	int (*run)(const struct tool_args *a);
};

static int parse_num(const char *what, const char *s, uint32_t *out)
{
	if (mount_parse_u32(s, out)) {
		fprintf(stderr, "ckptfs: %s must be a whole number, got '%s'\n",
			what, s ? s : "");
		return -1;
	}
	return 0;
}

static int parse_args(const struct tool *t, int argc, char **argv,
		      struct tool_args *a)
{
	const char *v;
	int i;

	memset(a, 0, sizeof(*a));
	a->world = 1;
	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			a->help = true;
			return 0;
		} else if ((v = mount_long_value(argc, argv, &i, "--world"))) {
			if (parse_num("--world", v, &a->world))
				return -1;
			a->has_world = true;
		} else if ((v = mount_long_value(argc, argv, &i, "--rank"))) {
			if (parse_num("--rank", v, &a->rank))
				return -1;
			a->has_rank = true;
		} else if ((v = mount_long_value(argc, argv, &i, "--prefix"))) {
			a->prefix = v;
		} else if ((v = mount_long_value(argc, argv, &i, "--jobs"))) {
			if (parse_num("--jobs", v, &a->jobs))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--format"))) {
			if (strcmp(v, "raw") && strcmp(v, "npy")) {
				fprintf(stderr, "ckptfs: --format must be raw or npy, got '%s'\n", v);
				return -1;
			}
			a->npy = !strcmp(v, "npy");
		} else if (!strcmp(argv[i], "-o") && !strcmp(t->name, "index")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "ckptfs index: -o needs a file name\n");
				return -1;
			}
			a->out = argv[++i];
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "ckptfs %s: unknown option '%s'\n%s",
				t->name, argv[i], t->usage);
			return -1;
		} else if (a->npos < 16) {
			a->pos[a->npos++] = argv[i];
		} else {
			fprintf(stderr, "ckptfs %s: unexpected argument '%s'\n",
				t->name, argv[i]);
			return -1;
		}
	}
	if (a->npos < t->npos_min || a->npos > t->npos_max) {
		fprintf(stderr, "%s", t->usage);
		return -1;
	}
	if ((t->needs_rank || a->has_rank) && (!a->has_world || !a->has_rank)) {
		fprintf(stderr, "ckptfs %s: --world and --rank are required\n",
			t->name);
		return -1;
	}
	if (a->world < 1 || a->rank >= a->world) {
		fprintf(stderr, "ckptfs: rank %u is out of range: need 0 <= rank < world (%u)\n",
			a->rank, a->world);
		return -1;
	}
	return 0;
}

/* Open, validate and build the view; prints the error itself. */
static int open_view(const struct tool_args *a, bool files,
		     struct ckpt_meta **m, struct ckpt_view **v)
{
	struct ckpt_view_opts o = { 0 };
	char err[1024];

	*v = NULL;
	if (ckpt_meta_open(a->pos[0], m, err, sizeof(err)))
		goto out_err;
	if (files && ckpt_files_open(*m, 0, 0, err, sizeof(err)))
		goto out_meta;
	o.world = a->world;
	o.rank = a->rank;
	o.prefix = a->prefix;
	o.dtype = CKPT_DTYPE_COUNT;
	if (ckpt_view_new(*m, &o, v, err, sizeof(err)))
		goto out_meta;
	return 0;
out_meta:
	ckpt_meta_free(*m);
	*m = NULL;
out_err:
	fprintf(stderr, "ckptfs: %s\n", err);
	return -1;
}

static void print_dims(FILE *f, const uint64_t *d, unsigned n)
{
	unsigned i;

	if (n == 0) {
		fputs("-", f);
		return;
	}
	for (i = 0; i < n; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", d[i]);
}

/* ---------------------------------------------------------------- info */
static int tool_info(const struct tool_args *a)
{
	uint32_t ndt[CKPT_DTYPE_COUNT] = { 0 }, i, d, j;
	uint64_t tbytes = 0, bbytes = 0, nbytes_keys = 0;
	struct { uint32_t mask, count; } tilings[64];
	uint32_t ntilings = 0, ntensors = 0;
	struct ckpt_meta *m;
	struct ckpt_view *v;

	if (open_view(a, true, &m, &v))
		return 1;
	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];
		const uint64_t *shape = ckpt_entry_shape(m, e);
		uint32_t mask = 0;

		if (e->kind == CKPT_KIND_BYTES) {
			nbytes_keys++;
			bbytes += e->nbytes;
			continue;
		}
		ntensors++;
		ndt[e->dtype]++;
		tbytes += e->nbytes;
		for (j = 0; j < e->nchunks; j++) {
			const struct ckpt_chunk *c = &m->chunks[e->chunk_first + j];
			const uint64_t *sz = ckpt_chunk_sizes(m, e, c);

			for (d = 0; d < e->ndim && d < 31; d++)
				if (sz[d] != shape[d])
					mask |= 1u << d;
		}
		for (j = 0; j < ntilings && tilings[j].mask != mask; j++)
			;
		if (j == ntilings && ntilings < 64) {
			tilings[ntilings].mask = mask;
			tilings[ntilings++].count = 0;
		}
		if (j < 64)
			tilings[j].count++;
	}
	printf("checkpoint\t%s\nformat\t%s\nversion\t%" PRIu64 "\n", m->dir,
	       m->origin == CKPT_ORIGIN_NATIVE ? CKPT_FORMAT_NAME :
	       m->origin == CKPT_ORIGIN_TORCH ?
	       "torch-dcp (PyTorch distributed checkpoint, indexed now)" :
	       "torch-dcp (PyTorch distributed checkpoint, via its " CKPT_INDEX_NAME ")",
	       m->version);
	printf("keys\t%" PRIu32 " (%" PRIu32 " tensors, %" PRIu64 " bytes entries)\n",
	       m->nentries, ntensors, nbytes_keys);
	printf("dtypes\t");
	for (i = 0, j = 0; i < CKPT_DTYPE_COUNT; i++)
		if (ndt[i])
			printf("%s%s x%" PRIu32, j++ ? ", " : "",
			       ckpt_dtype_name((enum ckpt_dtype)i), ndt[i]);
	printf("\ntotal bytes\t%" PRIu64 " (tensors %" PRIu64 ", bytes entries %" PRIu64 ")\n",
	       tbytes + bbytes, tbytes, bbytes);
	printf("chunks\t%" PRIu32 "\n", m->nchunks);
	printf("tiling\t");
	for (j = 0; j < ntilings; j++) {
		printf("%s", j ? ", " : "");
		if (!tilings[j].mask) {
			printf("whole");
		} else {
			printf("split along dim");
			for (d = 0, i = 0; d < 31; d++)
				if (tilings[j].mask & (1u << d))
					printf("%s%u", i++ ? "+" : " ", d);
		}
		printf(" x%" PRIu32, tilings[j].count);
	}
	printf("\ndata files\t%" PRIu32 "\n", m->nfiles);
	for (i = 0; i < m->nfiles; i++)
		printf("\t%s\t%" PRIu64 " bytes\n", m->strings + m->files[i].path,
		       m->files[i].size);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return 0;
}

/* ---------------------------------------------------------------- ls */
static int tool_ls(const struct tool_args *a)
{
	struct ckpt_meta *m;
	struct ckpt_view *v;
	char path[4096];
	uint32_t i;

	if (open_view(a, false, &m, &v))
		return 1;
	printf("path\tdtype\tglobal_shape\tchunks%s\n",
	       a->has_rank ? "\tlocal_shape\tlocal_offset\tbytes" : "");
	for (i = 1; i < v->nnodes; i++) {
		const struct ckpt_entry *e;
		struct ckpt_box box;

		if (ckpt_node_is_dir(&v->nodes[i]))
			continue;
		e = &m->entries[v->nodes[i].entry];
		ckpt_view_path(v, i, path, sizeof(path));
		printf("%s\t%s\t", path, e->kind == CKPT_KIND_BYTES ? "bytes" :
		       ckpt_dtype_name((enum ckpt_dtype)e->dtype));
		print_dims(stdout, ckpt_entry_shape(m, e), e->ndim);
		printf("\t%" PRIu32, e->nchunks);
		if (a->has_rank) {
			putchar('\t');
			if (e->kind == CKPT_KIND_TENSOR) {
				ckpt_view_box(v, 0, e, &box);
				print_dims(stdout, box.size, box.ndim);
				putchar('\t');
				print_dims(stdout, box.off, box.ndim);
			} else {
				printf("-\t-");
			}
			printf("\t%" PRIu64, ckpt_view_size(v, 0, i));
		}
		putchar('\n');
	}
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return 0;
}

/* The file node of KEY (an FQN or a view path), or CKPT_NONE. */
static uint32_t find_key(const struct ckpt_view *v, const char *key)
{
	char path[4096];
	uint32_t i;

	for (i = 1; i < v->nnodes; i++) {
		if (ckpt_node_is_dir(&v->nodes[i]))
			continue;
		if (!strcmp(ckpt_entry_fqn(v->meta,
					   &v->meta->entries[v->nodes[i].entry]),
			    key))
			return i;
	}
	for (i = 1; i < v->nnodes; i++) {
		if (ckpt_node_is_dir(&v->nodes[i]))
			continue;
		ckpt_view_path(v, i, path, sizeof(path));
		if (!strcmp(path, key))
			return i;
	}
	return CKPT_NONE;
}

/* ---------------------------------------------------------------- plan */
static void plan_one(const struct ckpt_view *v, uint32_t node)
{
	const struct ckpt_meta *m = v->meta;
	const struct ckpt_entry *e = &m->entries[v->nodes[node].entry];
	struct ckpt_run r, cur = { 0 };
	struct ckpt_box box = { 0 };
	struct ckpt_planner p;
	uint64_t runs = 0, merged = 0;
	uint32_t *used, nused = 0, k;
	char a[256], b[256];

	if (e->kind == CKPT_KIND_TENSOR)
		ckpt_view_box(v, 0, e, &box);
	printf("%s\t%" PRIu64 " bytes", ckpt_entry_fqn(m, e),
	       ckpt_view_size(v, 0, node));
	if (e->kind == CKPT_KIND_TENSOR) {
		printf("\tbox ");
		print_dims(stdout, box.off, box.ndim);
		printf("+");
		print_dims(stdout, box.size, box.ndim);
	}
	putchar('\n');
	used = calloc(e->nchunks, sizeof(*used));
	ckpt_planner_init(&p, m, e, &box, 0, UINT64_MAX);
	while (used && ckpt_planner_next(&p, &r) > 0) {
		runs++;
		for (k = 0; k < nused && used[k] != r.chunk; k++)
			;
		if (k == nused)
			used[nused++] = r.chunk;
		if (cur.len && r.file == cur.file && cur.foff + cur.len == r.foff) {
			cur.len += r.len;
			continue;
		}
		if (cur.len) {
			printf("\tread\t%s\t%" PRIu64 "\t%" PRIu64 "\n",
			       m->strings + m->files[cur.file].path, cur.foff,
			       cur.len);
			merged++;
		}
		cur = r;
	}
	if (cur.len) {
		printf("\tread\t%s\t%" PRIu64 "\t%" PRIu64 "\n",
		       m->strings + m->files[cur.file].path, cur.foff, cur.len);
		merged++;
	}
	for (k = 0; k < nused && e->kind == CKPT_KIND_TENSOR; k++) {
		const struct ckpt_chunk *c = &m->chunks[used[k]];

		printf("\tchunk\t%s+%s\t%s\t%" PRIu64 "\t%" PRIu64 "\n",
		       ckpt_fmt_dims(a, sizeof(a), ckpt_chunk_offsets(m, c), e->ndim),
		       ckpt_fmt_dims(b, sizeof(b), ckpt_chunk_sizes(m, e, c), e->ndim),
		       m->strings + m->files[c->file].path, c->foff, c->len);
	}
	printf("\t%" PRIu32 " chunks, %" PRIu64 " runs, %" PRIu64 " reads after merging\n",
	       nused, runs, merged);
	free(used);
}

static int tool_plan(const struct tool_args *a)
{
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint32_t i;

	if (open_view(a, false, &m, &v))
		return 1;
	if (a->npos == 2) {
		i = find_key(v, a->pos[1]);
		if (i == CKPT_NONE) {
			fprintf(stderr, "ckptfs: %s: no key '%s'\n", m->meta_path,
				a->pos[1]);
			ckpt_view_free(v);
			ckpt_meta_free(m);
			return 1;
		}
		plan_one(v, i);
	} else {
		for (i = 1; i < v->nnodes; i++)
			if (!ckpt_node_is_dir(&v->nodes[i]))
				plan_one(v, i);
	}
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return 0;
}

/* Write node's view (with an .npy header when npy) to fd. */
static int write_view(const struct ckpt_view *v, uint32_t node, int fd,
		      bool npy, struct ckpt_read_scratch *s, char *buf)
{
	const struct ckpt_entry *e = &v->meta->entries[v->nodes[node].entry];
	uint64_t off = 0, size = ckpt_view_size(v, 0, node);
	size_t got, done;
	ssize_t n;

	if (npy && e->kind == CKPT_KIND_TENSOR) {
		struct ckpt_box box;
		size_t h;

		ckpt_view_box(v, 0, e, &box);
		h = ckpt_npy_header(ckpt_view_dtype(v, e), box.size, box.ndim,
				    buf, BUF_SIZE);
		if (!h || write(fd, buf, h) != (ssize_t)h)
			return -EIO;
	}
	while (off < size) {
		int rc = ckpt_view_read(v, 0, node, off, BUF_SIZE, buf, &got, s);

		if (rc)
			return rc;
		if (!got)
			return -EIO;
		for (done = 0; done < got; done += (size_t)n) {
			n = write(fd, buf + done, got - done);
			if (n <= 0)
				return -errno;
		}
		off += got;
	}
	return 0;
}

/* ---------------------------------------------------------------- cat */
static int tool_cat(const struct tool_args *a)
{
	struct ckpt_read_scratch s = { 0 };
	struct ckpt_meta *m;
	struct ckpt_view *v;
	char *buf;
	uint32_t i;
	int rc;

	if (open_view(a, true, &m, &v))
		return 1;
	i = find_key(v, a->pos[1]);
	buf = malloc(BUF_SIZE);
	if (i == CKPT_NONE || !buf) {
		fprintf(stderr, "ckptfs: %s: %s '%s'\n", m->meta_path,
			buf ? "no key" : "out of memory at", a->pos[1]);
		rc = 1;
	} else {
		rc = write_view(v, i, STDOUT_FILENO, false, &s, buf);
		if (rc)
			fprintf(stderr, "ckptfs: %s: key '%s': %s\n", m->dir,
				a->pos[1], strerror(-rc));
		rc = rc ? 1 : 0;
	}
	free(buf);
	ckpt_read_scratch_destroy(&s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return rc;
}

/* ---------------------------------------------------------------- extract */
static int mkdirs(char *path)
{
	char *p;

	for (p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

static int tool_extract(const struct tool_args *a)
{
	struct ckpt_read_scratch s = { 0 };
	char path[8192], rel[4096];
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint32_t i, files = 0;
	char *buf;
	int rc = 0, fd;

	if (open_view(a, true, &m, &v))
		return 1;
	buf = malloc(BUF_SIZE);
	for (i = 1; buf && i < v->nnodes && !rc; i++) {
		const struct ckpt_entry *e;
		bool npy;

		if (ckpt_node_is_dir(&v->nodes[i]))
			continue;
		e = &m->entries[v->nodes[i].entry];
		npy = a->npy && e->kind == CKPT_KIND_TENSOR;
		ckpt_view_path(v, i, rel, sizeof(rel));
		snprintf(path, sizeof(path), "%s/%s%s", a->pos[1], rel,
			 npy ? ".npy" : "");
		rc = mkdirs(path);
		if (!rc) {
			fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			rc = fd < 0 ? -errno : write_view(v, i, fd, npy, &s, buf);
			if (fd >= 0 && close(fd) && !rc)
				rc = -errno;
		}
		if (rc)
			fprintf(stderr, "ckptfs: %s: key '%s': %s\n", path,
				ckpt_entry_fqn(m, e), strerror(-rc));
		files++;
	}
	if (!buf)
		fprintf(stderr, "ckptfs: out of memory\n");
	free(buf);
	ckpt_read_scratch_destroy(&s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return rc || !buf ? 1 : 0;
}

/* ---------------------------------------------------------------- stats */
static void print_num(double x)
{
	if (isnan(x))
		printf("\tnan");
	else
		printf("\t%.17g", x);
}

static int stats_one(const struct ckpt_view *v, uint32_t node, char *buf,
		     double *vals, struct ckpt_read_scratch *s)
{
	const struct ckpt_entry *e = &v->meta->entries[v->nodes[node].entry];
	enum ckpt_dtype dt = ckpt_view_dtype(v, e);
	unsigned isz = ckpt_dtype_size(dt);
	uint64_t size = ckpt_view_size(v, 0, node), off = 0, n = 0;
	uint64_t nans = 0, infs = 0, zeros = 0, counted = 0, pinf = 0, ninf = 0;
	double mn = INFINITY, mx = -INFINITY, amax = 0, sum = 0, comp = 0;
	char path[4096];
	struct ckpt_box box;
	size_t got, k;
	int rc;

	if (e->kind != CKPT_KIND_TENSOR)
		return 0;
	while (off < size) {
		rc = ckpt_view_read(v, 0, node, off, BUF_SIZE / isz * isz, buf,
				    &got, s);
		if (rc || !got)
			return rc ? rc : -EIO;
		ckpt_convert_to_double(dt, buf, vals, got / isz);
		for (k = 0; k < got / isz; k++) {
			double x = vals[k], y, t;

			n++;
			if (isnan(x)) {
				nans++;
				continue;
			}
			if (x == 0)
				zeros++;
			counted++;
			mn = x < mn ? x : mn;
			mx = x > mx ? x : mx;
			amax = fabs(x) > amax ? fabs(x) : amax;
			if (isinf(x)) {	/* kept out of the compensated sum */
				infs++;
				*(x > 0 ? &pinf : &ninf) += 1;
				continue;
			}
			y = x - comp;	/* Kahan */
			t = sum + y;
			comp = (t - sum) - y;
			sum = t;
		}
		off += got;
	}
	ckpt_view_path(v, node, path, sizeof(path));
	ckpt_view_box(v, 0, e, &box);
	printf("%s\t%s\t", path, ckpt_dtype_name(dt));
	print_dims(stdout, box.size, box.ndim);
	if (counted) {
		print_num(mn);
		print_num(mx);
		print_num(pinf && ninf ? NAN : pinf ? INFINITY :
			  ninf ? -INFINITY : sum / (double)counted);
		print_num(amax);
	} else {
		printf("\t-\t-\t-\t-");
	}
	printf("\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n", nans, infs, zeros);
	return 0;
}

static int tool_stats(const struct tool_args *a)
{
	struct ckpt_read_scratch s = { 0 };
	struct ckpt_meta *m;
	struct ckpt_view *v;
	double *vals = malloc(BUF_SIZE * sizeof(double));
	char *buf = malloc(BUF_SIZE);
	int rc = 0, k;
	uint32_t i;

	if (!vals || !buf || open_view(a, true, &m, &v)) {
		free(vals);
		free(buf);
		return 1;
	}
	printf("path\tdtype\tshape\tmin\tmax\tmean\tabsmax\tnan\tinf\tzeros\n");
	if (a->npos > 1) {
		for (k = 1; k < a->npos && !rc; k++) {
			i = find_key(v, a->pos[k]);
			if (i == CKPT_NONE) {
				fprintf(stderr, "ckptfs: %s: no key '%s'\n",
					m->meta_path, a->pos[k]);
				rc = 1;
				break;
			}
			rc = stats_one(v, i, buf, vals, &s);
		}
	} else {
		for (i = 1; i < v->nnodes && !rc; i++)
			if (!ckpt_node_is_dir(&v->nodes[i]))
				rc = stats_one(v, i, buf, vals, &s);
	}
	if (rc > 0)
		rc = 1;
	else if (rc < 0) {
		fprintf(stderr, "ckptfs: %s: %s\n", m->dir, strerror(-rc));
		rc = 1;
	}
	free(vals);
	free(buf);
	ckpt_read_scratch_destroy(&s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return rc;
}

/* ---------------------------------------------------------------- verify */
struct verify_job {
	struct ckpt_meta *m;
	uint32_t *order;	/* chunks with records, by (file, offset) */
	uint32_t n;
	uint32_t next;		/* atomic */
	uint64_t done_bytes;	/* atomic */
	uint32_t bad, unreadable, unchecked;	/* atomic */
	bool tty;
	pthread_mutex_t out;	/* serializes messages */
};

static int cmp_record(const void *a, const void *b, void *ctx)
{
	const struct ckpt_meta *m = ctx;
	const struct ckpt_chunk *x = &m->chunks[*(const uint32_t *)a];
	const struct ckpt_chunk *y = &m->chunks[*(const uint32_t *)b];

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->foff < y->foff ? -1 : x->foff > y->foff;
}

static void *verify_worker(void *arg)
{
	struct verify_job *j = arg;
	char *buf = malloc(BUF_SIZE);
	char a[256];
	uint32_t i;

	while (buf && (i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n) {
		uint32_t ci = j->order[i];
		const struct ckpt_chunk *c = &j->m->chunks[ci];
		const struct ckpt_entry *e = ckpt_meta_chunk_entry(j->m, ci);
		uint64_t got = 0;
		int rc = ckpt_verify_chunk(j->m, ci, buf, BUF_SIZE, &got);

		if (rc == 1)
			__atomic_fetch_add(&j->unchecked, 1, __ATOMIC_RELAXED);
		if (rc < 0) {
			pthread_mutex_lock(&j->out);
			if (j->tty)
				fprintf(stderr, "\r\033[K");
			printf("%s/%s: offset %" PRIu64 ": key '%s'%s%s: %s",
			       j->m->dir, j->m->strings + j->m->files[c->file].path,
			       c->foff, ckpt_entry_fqn(j->m, e),
			       e->kind == CKPT_KIND_TENSOR ? ": chunk at " : "",
			       e->kind == CKPT_KIND_TENSOR ?
			       ckpt_fmt_dims(a, sizeof(a), ckpt_chunk_offsets(j->m, c), e->ndim) : "",
			       rc == -EBADMSG ? (c->has_xxh3 ? "xxh3 mismatch" : "crc32 mismatch") :
			       "cannot read the record");
			if (rc == -EBADMSG && c->has_xxh3)
				printf(" (stored %016" PRIx64 ", computed %016" PRIx64 ")",
				       c->xxh3, got);
			else if (rc == -EBADMSG)
				printf(" (stored %08" PRIx32 ", computed %08" PRIx64 ")",
				       c->crc32, got);
			putchar('\n');
			pthread_mutex_unlock(&j->out);
			__atomic_fetch_add(rc == -EBADMSG ? &j->bad : &j->unreadable,
					   1, __ATOMIC_RELAXED);
		}
		__atomic_fetch_add(&j->done_bytes, c->len, __ATOMIC_RELAXED);
	}
	free(buf);
	return NULL;
}

static int tool_verify(const struct tool_args *a)
{
	struct verify_job j = { 0 };
	pthread_t th[64];
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint64_t total = 0;
	uint32_t i, n = 0, jobs = a->jobs;
	bool tty = isatty(STDERR_FILENO);
	struct timespec t0, t1;
	double secs;

	if (open_view(a, true, &m, &v))
		return 1;
	j.m = m;
	j.tty = tty;
	j.order = malloc((m->nchunks ? m->nchunks : 1) * sizeof(uint32_t));
	if (!j.order) {
		fprintf(stderr, "ckptfs: out of memory\n");
		return 1;
	}
	for (i = 0; i < m->nchunks; i++) {
		if (m->chunks[i].file == CKPT_NONE)
			continue;
		j.order[n++] = i;
		total += m->chunks[i].len;
	}
	qsort_r(j.order, n, sizeof(uint32_t), cmp_record, m);
	j.n = n;
	pthread_mutex_init(&j.out, NULL);
	if (!jobs)
		jobs = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	if (jobs < 1)
		jobs = 1;
	if (jobs > 64)
		jobs = 64;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < jobs; i++)
		if (pthread_create(&th[i], NULL, verify_worker, &j))
			break;
	jobs = i;
	while (tty && __atomic_load_n(&j.next, __ATOMIC_RELAXED) < n) {
		uint64_t d = __atomic_load_n(&j.done_bytes, __ATOMIC_RELAXED);
		int w = total ? (int)(40 * d / total) : 40;

		pthread_mutex_lock(&j.out);
		fprintf(stderr, "\r[%.*s%*s] %5.1f%% of %.2f GB", w,
			"########################################", 40 - w, "",
			total ? 100.0 * (double)d / (double)total : 100.0,
			(double)total / 1e9);
		pthread_mutex_unlock(&j.out);
		usleep(100000);
	}
	for (i = 0; i < jobs; i++)
		pthread_join(th[i], NULL);
	if (!jobs)
		verify_worker(&j);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (tty)
		fprintf(stderr, "\r\033[K");
	printf("%" PRIu32 " records, %.3f GB in %.2f s (%.2f GB/s): %" PRIu32
	       " checked, %" PRIu32 " without a checksum, %" PRIu32
	       " mismatched, %" PRIu32 " unreadable\n",
	       n, (double)total / 1e9, secs, secs > 0 ? (double)total / 1e9 / secs : 0,
	       n - j.unchecked, j.unchecked, j.bad, j.unreadable);
	pthread_mutex_destroy(&j.out);
	free(j.order);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return j.bad || j.unreadable ? 1 : 0;
}

/* Write len bytes to path through a temporary file and a rename, so a
 * reader never sees half an index. */
static int write_atomic(const char *path, const uint8_t *buf, size_t len)
{
	char *tmp = NULL;
	size_t done = 0;
	int fd, rc = -1;

	if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0)
		return -1;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		goto out_tmp;
	while (done < len) {
		ssize_t n = write(fd, buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	if (done == len && fsync(fd) == 0 && close(fd) == 0) {
		fd = -1;
		rc = rename(tmp, path);
	}
	if (fd >= 0)
		close(fd);
	if (rc)
		unlink(tmp);
out_tmp:
	free(tmp);
	return rc;
}

static int tool_index(const struct tool_args *a)
{
	char err[1024], *def = NULL;
	const char *out = a->out;
	struct ckpt_meta *m;
	uint8_t *img;
	size_t len;
	int rc = 1;

	if (ckpt_meta_build_index(a->pos[0], false, &img, &len, &m, err,
				  sizeof(err))) {
		fprintf(stderr, "ckptfs: %s\n", err);
		return 1;
	}
	if (!out) {
		if (asprintf(&def, "%s/%s", a->pos[0], CKPT_INDEX_NAME) < 0)
			goto out_meta;
		out = def;
	}
	if (!strcmp(out, "-")) {
		if (fwrite(img, 1, len, stdout) != len || fflush(stdout)) {
			fprintf(stderr, "ckptfs: writing stdout: %s\n",
				strerror(errno));
			goto out_def;
		}
	} else if (write_atomic(out, img, len)) {
		fprintf(stderr, "ckptfs: cannot write %s: %s\n", out,
			strerror(errno));
		goto out_def;
	}
	fprintf(strcmp(out, "-") ? stdout : stderr,
		"%s: %" PRIu32 " keys, %" PRIu32 " chunks, %" PRIu32
		" data files, %zu bytes\n", out, m->nentries, m->nchunks,
		m->nfiles, len);
	rc = 0;
out_def:
	free(def);
out_meta:
	ckpt_meta_free(m);
	free(img);
	return rc;
}

static const struct tool tools[] = {
	{ "info", 1, 1, false,
	  "usage: ckptfs info CKPT\n"
	  "  format, version, keys, dtypes, total bytes, data files and the saved tiling\n",
	  tool_info },
	{ "ls", 1, 1, false,
	  "usage: ckptfs ls CKPT [--world W --rank R] [--prefix P]\n"
	  "  one tab-separated line per key, after a header: path, dtype, global shape,\n"
	  "  chunks; with W and R also the local shape, offset and byte size ('-' for\n"
	  "  0-d shapes and for bytes entries)\n",
	  tool_ls },
	{ "plan", 1, 2, true,
	  "usage: ckptfs plan CKPT --world W --rank R [--prefix P] [KEY]\n"
	  "  per key: the saved chunks and the byte ranges of data files that serve the\n"
	  "  view, and how many separate reads it takes\n",
	  tool_plan },
	{ "cat", 2, 2, true,
	  "usage: ckptfs cat CKPT KEY --world W --rank R\n"
	  "  the view's bytes on stdout, identical to the mounted file (KEY: FQN or path)\n",
	  tool_cat },
	{ "extract", 2, 2, true,
	  "usage: ckptfs extract CKPT OUTDIR --world W --rank R [--prefix P] [--format raw|npy]\n"
	  "  write the whole view as real files, the same tree as the mount; with npy,\n"
	  "  tensors become NAME.npy (bfloat16/float8 as same-size unsigned types)\n",
	  tool_extract },
	{ "stats", 1, 16, false,
	  "usage: ckptfs stats CKPT [--world W --rank R] [--prefix P] [KEY...]\n"
	  "  per tensor (all, or the KEYs given): dtype, shape, min, max, mean, absmax\n"
	  "  (over the non-NaN values), and counts of NaN, Inf and zeros; every dtype,\n"
	  "  bfloat16, float16 and float8 included\n",
	  tool_stats },
	{ "index", 1, 1, false,
	  "usage: ckptfs index CKPT [-o FILE]\n"
	  "  for a PyTorch distributed checkpoint (pickled .metadata, .distcp files):\n"
	  "  locate every record's raw bytes inside the .distcp files and write the\n"
	  "  result in the native format (default FILE: CKPT/" CKPT_INDEX_NAME ", which\n"
	  "  mounts then use while it matches .metadata; '-' for stdout).  Optional:\n"
	  "  mounts index by themselves when there is none\n",
	  tool_index },
	{ "verify", 1, 1, false,
	  "usage: ckptfs verify CKPT [--jobs N]\n"
	  "  check every record's xxh3 (or, for PyTorch checkpoints, the zip's CRC-32); one line per mismatch (file, offset, key), a\n"
	  "  count of records without a checksum; exit 1 on any mismatch.  A progress\n"
	  "  bar goes to stderr when it is a terminal.  N threads (default: CPUs)\n",
	  tool_verify },
};

int cli_tool_run(const char *name, int argc, char **argv)
{
	struct tool_args a;
	size_t i;

	for (i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
		if (strcmp(tools[i].name, name))
			continue;
		if (parse_args(&tools[i], argc, argv, &a))
			return 2;
		if (a.help) {
			fputs(tools[i].usage, stdout);
			return 0;
		}
		return tools[i].run(&a);
	}
	return -1;
}
