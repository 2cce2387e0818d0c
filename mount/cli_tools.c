/* SPDX-License-Identifier: MIT */
/*
 * `ckptfs info|ls|plan|cat|extract`: inspect a checkpoint and its views
 * without mounting, through libckptfs's public API, as the mount does.
 */
#include "cli_tools.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptfs.h"
#include "mount_opts.h"
#include "s3_opts.h"
#include "out_beneath.h"

#define BUF_SIZE ((size_t)1 << 20)

struct tool_args {
	const char *pos[16];
	int npos;
	uint32_t world, rank;
	bool has_world, has_rank, help, npy;
	bool force;		/* --force (extract) */
	const char *prefix;
	const char *out;	/* -o FILE, --index FILE (index) */
	uint32_t jobs;
	uint32_t max_open;	/* data files kept open (0: as many as
				 * RLIMIT_NOFILE allows) */
	struct s3_cli s3;	/* --s3-NAME V; owned */
	struct ckpt_s3_opts s3o;	/* from s3 */
	struct ckpt_open_opts mo;	/* .s3 = &s3o */
};

/* Options only some subcommands take. */
#define TOOL_O_FILE	1u	/* -o FILE, --index FILE */
#define TOOL_FORCE	2u	/* --force */

struct tool {
	const char *name;
	int npos_min, npos_max;
	bool needs_rank;	/* --world and --rank required */
	unsigned extra;		/* TOOL_* */
	const char *usage;
	int (*run)(const struct tool_args *a);
};

static int parse_num(const char *tool, const char *what, const char *s,
		     uint32_t *out)
{
	char err[256];

	if (mount_num_arg(what, s, out, err, sizeof(err))) {
		fprintf(stderr, "ckptfs %s: %s\n", tool, err);
		return -1;
	}
	return 0;
}

enum {
	OPT_WORLD = 256, OPT_RANK, OPT_PREFIX, OPT_JOBS, OPT_FORMAT, OPT_FORCE,
	OPT_INDEX, OPT_INDEX_CACHE,
};

static const struct option tool_options[] = {
	{ "help", no_argument, NULL, 'h' },
	{ "world", required_argument, NULL, OPT_WORLD },
	{ "rank", required_argument, NULL, OPT_RANK },
	{ "prefix", required_argument, NULL, OPT_PREFIX },
	{ "jobs", required_argument, NULL, OPT_JOBS },
	{ "format", required_argument, NULL, OPT_FORMAT },
	{ "force", no_argument, NULL, OPT_FORCE },
	{ "index", required_argument, NULL, OPT_INDEX },
	{ "index-cache", required_argument, NULL, OPT_INDEX_CACHE },
	S3_CLI_LONG_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

/* One option of argv (getopt_long's c); 0, or -1 after a message. */
static int take_option(const struct tool *t, int c, char **argv,
		       struct tool_args *a)
{
	char err[512];
	int s3 = s3_cli_take_opt(&a->s3, c, optarg, err, sizeof(err));

	if (s3 < 0)
		fprintf(stderr, "ckptfs %s: %s\n", t->name, err);
	if (s3)
		return s3 < 0 ? -1 : 0;
	switch (c) {
	case 'h':
		a->help = true;
		return 0;
	case OPT_WORLD:
		a->has_world = true;
		return parse_num(t->name, "world", optarg, &a->world);
	case OPT_RANK:
		a->has_rank = true;
		return parse_num(t->name, "rank", optarg, &a->rank);
	case OPT_PREFIX:
		a->prefix = optarg;
		return 0;
	case OPT_JOBS:
		return parse_num(t->name, "--jobs", optarg, &a->jobs);
	case OPT_FORMAT:
		if (strcmp(optarg, "raw") && strcmp(optarg, "npy")) {
			fprintf(stderr, "ckptfs %s: format must be raw or npy, got '%s'\n",
				t->name, optarg);
			return -1;
		}
		a->npy = !strcmp(optarg, "npy");
		return 0;
	case OPT_INDEX_CACHE:
		if (!*optarg) {
			fprintf(stderr, "ckptfs %s: index_cache needs a value\n",
				t->name);
			return -1;
		}
		a->mo.index_cache = optarg;
		return 0;
	case 'o':
	case OPT_INDEX:
		if (t->extra & TOOL_O_FILE) {
			a->out = optarg;
			return 0;
		}
		break;
	case OPT_FORCE:
		if (t->extra & TOOL_FORCE) {
			a->force = true;
			return 0;
		}
		break;
	case ':':
		fprintf(stderr, "ckptfs %s: %s needs a value\n", t->name,
			argv[optind - 1]);
		return -1;
	default:
		break;
	}
	if (c == '?' && optopt && optopt < 256)
		fprintf(stderr, "ckptfs %s: unknown option '-%c'\n%s", t->name,
			optopt, t->usage);
	else
		fprintf(stderr, "ckptfs %s: unknown option '%s'\n%s", t->name,
			argv[optind - 1], t->usage);
	return -1;
}

/* argv[0] is the subcommand's name; options (getopt_long: anywhere, "--"
 * ends them) and positional arguments follow. */
static int parse_args(const struct tool *t, int argc, char **argv,
		      struct tool_args *a)
{
	int c;

	memset(a, 0, sizeof(*a));
	a->world = 1;
	optind = 0;	/* a fresh scan */
	opterr = 0;	/* our messages */
	while ((c = getopt_long(argc, argv, ":ho:", tool_options, NULL)) != -1) {
		if (take_option(t, c, argv, a))
			return -1;
		if (a->help)
			return 0;
	}
	for (; optind < argc; optind++) {
		if (a->npos == 16) {
			fprintf(stderr, "ckptfs %s: unexpected argument '%s'\n",
				t->name, argv[optind]);
			return -1;
		}
		a->pos[a->npos++] = argv[optind];
	}
	if (a->npos < t->npos_min || a->npos > t->npos_max) {
		fprintf(stderr, "%s", t->usage);
		return -1;
	}
	if (t->needs_rank && !a->has_world && !a->has_rank) {
		fprintf(stderr, "ckptfs %s: --world and --rank are required\n",
			t->name);
		return -1;
	}
	if (a->has_world && a->world < 1) {
		fprintf(stderr, "ckptfs %s: world must be at least 1, got 0\n",
			t->name);
		return -1;
	}
	if (a->has_world && !a->has_rank && a->world == 1) {
		a->has_rank = true;	/* rank 0, the only one (as mount) */
		a->rank = 0;
	}
	if (a->has_world != a->has_rank) {
		fprintf(stderr, "ckptfs %s: %s is required with %s\n",
			t->name, a->has_world ? "rank" : "world",
			a->has_world ? "world" : "rank");
		return -1;
	}
	if (a->prefix && !*a->prefix) {
		fprintf(stderr, "ckptfs %s: prefix must not be empty\n",
			t->name);
		return -1;
	}
	if (s3_cli_first(&a->s3) && !ckpt_root_is_remote(a->pos[0])) {
		fprintf(stderr, "ckptfs %s: %s is only for s3:// checkpoints, not '%s'\n",
			t->name, s3_cli_first(&a->s3), a->pos[0]);
		return -1;
	}
	if (a->rank >= a->world) {
		fprintf(stderr, "ckptfs %s: rank %u is out of range: need 0 <= rank < world (%u)\n",
			t->name, a->rank, a->world);
		return -1;
	}
	s3_cli_fill(&a->s3, &a->s3o);
	a->mo.s3 = &a->s3o;
	return 0;
}

/* open_view()'s data files: none, every format's, or only a PyTorch
 * checkpoint's (whose records a lazy open locates through them). */
enum view_files { FILES_NONE, FILES_ALL, FILES_TORCH };

/* Open, validate and build the view; prints the error itself. */
static int open_view(const struct tool_args *a, enum view_files files,
		     struct ckpt_meta **m, struct ckpt_view **v)
{
	struct ckpt_view_opts o = { 0 };
	struct ckpt_meta_info mi;
	char err[1024];

	*v = NULL;
	if (ckpt_meta_open_opts(a->pos[0], &a->mo, m, err, sizeof(err)))
		goto out_err;
	if (ckpt_meta_warning(*m))
		fprintf(stderr, "ckptfs: warning: %s\n", ckpt_meta_warning(*m));
	if (files == FILES_TORCH) {
		ckpt_meta_info(*m, &mi);
		files = mi.origin == CKPT_ORIGIN_TORCH ||
			mi.origin == CKPT_ORIGIN_TORCH_INDEX ||
			mi.origin == CKPT_ORIGIN_TORCH_LOCAL ||
			mi.origin == CKPT_ORIGIN_TORCH_INDEX_CACHE ?
			FILES_ALL : FILES_NONE;
	}
	/* A command of its own: every fd it can get, and huge pages for
	 * extract's fresh buffers. */
	if (files == FILES_ALL && ckpt_files_open(*m, CKPT_FILES_RAISE_NOFILE |
				     CKPT_FILES_HUGE_PAGES, a->max_open, err,
				     sizeof(err)))
		goto out_meta;
	o.world = a->world;
	o.rank = a->rank;
	o.prefix = a->prefix;
	o.npy = a->npy;
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

/* The key file node i of v (not a directory): 0 and *e, or -1. */
static int key_node(const struct ckpt_view *v, uint32_t i,
		    struct ckpt_entry_info *e)
{
	struct ckpt_node_info ni;

	if (ckpt_view_node(v, i, &ni) || ni.type != CKPT_NODE_KEY)
		return -1;
	return ckpt_view_entry(v, 0, i, e) ? -1 : 0;
}

static uint32_t nnodes(const struct ckpt_view *v)
{
	struct ckpt_view_info vi;

	ckpt_view_info(v, &vi);
	return vi.nnodes;
}

/* Dims as "[a,b]" into buf. */
static char *fmt_dims(char *buf, size_t cap, const uint64_t *d, unsigned n)
{
	size_t at = 0;
	unsigned i;

	at += (size_t)snprintf(buf, cap, "[");
	for (i = 0; i < n && at < cap; i++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%" PRIu64,
				       i ? "," : "", d[i]);
	if (at < cap)
		snprintf(buf + at, cap - at, "]");
	return buf;
}

static const char *meta_path(const struct ckpt_meta *m)
{
	struct ckpt_meta_info mi;

	ckpt_meta_info(m, &mi);
	return mi.meta_path;
}

/* Bytes of a name in a message or a table line: escaped and shortened in
 * the middle (ckpt_name_for_msg()), so no control byte from a checkpoint
 * reaches a terminal and the reason after a long name shows. */
#define NAME_SHOWN 512

/* A failed read: the library's reason (file, offset, key) when it has
 * one. */
static void report_read_error(const struct ckpt_meta *m, const char *key,
			      int rc)
{
	struct ckpt_meta_info mi;
	char kshown[NAME_SHOWN];

	ckpt_meta_info(m, &mi);
	if (rc == -EIO && ckpt_last_error()[0])
		fprintf(stderr, "ckptfs: %s\n", ckpt_last_error());
	else if (key)
		fprintf(stderr, "ckptfs: %s: key '%s': %s\n", mi.dir,
			ckpt_name_for_msg(key, kshown, sizeof(kshown)),
			strerror(-rc));
	else
		fprintf(stderr, "ckptfs: %s: %s\n", mi.dir, strerror(-rc));
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

/* s as one TSV field on stdout (ckpt_tsv_escape(): \t \n \r \\
 * escaped). */
static void put_tsv(const char *s)
{
	size_t n = ckpt_tsv_escape(s, NULL, 0);
	char *buf = malloc(n + 1);

	if (!buf) {	/* no memory: a character at a time */
		char one[2] = { 0 }, esc[3];

		for (; *s; s++) {
			one[0] = *s;
			ckpt_tsv_escape(one, esc, sizeof(esc));
			fputs(esc, stdout);
		}
		return;
	}
	ckpt_tsv_escape(s, buf, n + 1);
	fputs(buf, stdout);
	free(buf);
}

/* ---------------------------------------------------------------- info */
static int tool_info(const struct tool_args *a)
{
	char shown[NAME_SHOWN];
	uint32_t ndt[CKPT_DTYPE_COUNT] = { 0 }, i, d, j;
	uint64_t tbytes = 0, bbytes = 0, nbytes_keys = 0;
	struct { uint32_t mask, count; } tilings[64];
	uint32_t ntilings = 0, ntensors = 0;
	struct ckpt_meta_info mi;
	struct ckpt_key_info e;
	struct ckpt_chunk_info c;
	struct ckpt_meta *m;
	struct ckpt_view *v;
	const char *fpath;
	uint64_t fsize;

	if (open_view(a, FILES_ALL, &m, &v))
		return 1;
	ckpt_meta_info(m, &mi);
	for (i = 0; ckpt_meta_key(m, i, &e) == 0; i++) {
		uint32_t mask = 0;

		if (e.kind == CKPT_KIND_BYTES) {
			nbytes_keys++;
			bbytes += e.nbytes;
			continue;
		}
		ntensors++;
		ndt[e.dtype]++;
		tbytes += e.nbytes;
		for (j = 0; j < e.nchunks; j++) {
			ckpt_meta_chunk(m, e.chunk_first + j, &c);
			for (d = 0; d < e.ndim && d < 31; d++)
				if (c.sizes[d] != e.shape[d])
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
	printf("checkpoint\t%s\n", mi.dir);
	if (ckpt_meta_credentials(m))
		printf("credentials\t%s\n", ckpt_meta_credentials(m));
	printf("format\t%s\nversion\t%" PRIu64 "\n", mi.format, mi.version);
	printf("keys\t%" PRIu32 " (%" PRIu32 " tensors, %" PRIu64 " bytes entries)\n",
	       mi.nkeys, ntensors, nbytes_keys);
	printf("dtypes\t");
	for (i = 0, j = 0; i < CKPT_DTYPE_COUNT; i++)
		if (ndt[i])
			printf("%s%s x%" PRIu32, j++ ? ", " : "",
			       ckpt_dtype_name((enum ckpt_dtype)i), ndt[i]);
	printf("\ntotal bytes\t%" PRIu64 " (tensors %" PRIu64 ", bytes entries %" PRIu64 ")\n",
	       tbytes + bbytes, tbytes, bbytes);
	printf("chunks\t%" PRIu32 "\n", mi.nchunks);
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
	printf("\ndata files\t%" PRIu32 "\n", mi.nfiles);
	for (i = 0; ckpt_meta_file(m, i, &fpath, &fsize) == 0; i++)
		printf("\t%s\t%" PRIu64 " bytes\n",
		       ckpt_name_for_msg(fpath, shown, sizeof(shown)), fsize);
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

	if (open_view(a, FILES_NONE, &m, &v))
		return 1;
	printf("path\tdtype\tglobal_shape\tchunks%s\n",
	       a->has_rank ? "\tlocal_shape\tlocal_offset\tbytes" : "");
	for (i = 1; i < nnodes(v); i++) {
		struct ckpt_entry_info e;
		struct ckpt_key_info k;

		if (key_node(v, i, &e) || ckpt_meta_key(m, e.key, &k))
			continue;
		ckpt_view_path(v, i, path, sizeof(path));
		put_tsv(path);
		printf("\t%s\t", e.kind == CKPT_KIND_BYTES ? "bytes" :
		       ckpt_dtype_name((enum ckpt_dtype)e.saved_dtype));
		print_dims(stdout, e.global_shape, e.ndim);
		printf("\t%" PRIu32, k.nchunks);
		if (a->has_rank) {
			putchar('\t');
			if (e.kind == CKPT_KIND_TENSOR) {
				print_dims(stdout, e.shape, e.ndim);
				putchar('\t');
				print_dims(stdout, e.offsets, e.ndim);
			} else {
				printf("-\t-");
			}
			printf("\t%" PRIu64, e.size);
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
	struct ckpt_entry_info e;
	char path[4096];
	uint32_t i, n = nnodes(v);

	for (i = 1; i < n; i++) {
		if (!key_node(v, i, &e) && !strcmp(e.fqn, key))
			return i;
	}
	for (i = 1; i < n; i++) {
		if (key_node(v, i, &e))
			continue;
		ckpt_view_path(v, i, path, sizeof(path));
		if (!strcmp(path, key))
			return i;
	}
	return CKPT_NONE;
}

/* ---------------------------------------------------------------- plan */
struct plan_out {
	const struct ckpt_meta *m;
	struct ckpt_read_run cur;
	uint64_t runs, merged;
};

static void print_read(const struct plan_out *p)
{
	struct ckpt_chunk_info c;
	char shown[NAME_SHOWN];

	ckpt_meta_chunk(p->m, p->cur.chunk, &c);
	if (p->cur.decoded)
		printf("\tdecoded\t%s\t%" PRIu64 "\t%" PRIu64 "\t(bytes of the %s record at %" PRIu64 "+%" PRIu64 ")\n",
		       ckpt_name_for_msg(c.path, shown, sizeof(shown)),
		       p->cur.foff, p->cur.len, c.transforms, c.foff, c.len);
	else
		printf("\tread\t%s\t%" PRIu64 "\t%" PRIu64 "\n",
		       ckpt_name_for_msg(c.path, shown, sizeof(shown)),
		       p->cur.foff, p->cur.len);
}

static int plan_run(void *ctx, const struct ckpt_read_run *r)
{
	struct plan_out *p = ctx;

	p->runs++;
	if (p->cur.len && r->file == p->cur.file &&
	    r->decoded == p->cur.decoded &&
	    (!r->decoded || r->chunk == p->cur.chunk) &&
	    p->cur.foff + p->cur.len == r->foff) {
		p->cur.len += r->len;
		return 0;
	}
	if (p->cur.len) {
		print_read(p);
		p->merged++;
	}
	p->cur = *r;
	return 0;
}

/* Whether node i of v is a key's file (not a directory, not .ckptfs/). */
static bool key_is_file(const struct ckpt_view *v, uint32_t i)
{
	struct ckpt_node_info ni;

	return !ckpt_view_node(v, i, &ni) && ni.type == CKPT_NODE_KEY;
}

/* Print node's plan; 0, or -1 when its records cannot be located (a
 * lazily opened PyTorch checkpoint: the plan locates them as a read
 * would), said on stderr. */
static int plan_one(const struct ckpt_view *v, uint32_t node)
{
	char shown[NAME_SHOWN];
	struct plan_out p = { .m = ckpt_view_meta(v) };
	const uint32_t *used;
	struct ckpt_entry_info e;
	struct ckpt_chunk_info c;
	uint32_t nused, k;
	char a[256], b[256];
	int rc;

	if (key_node(v, node, &e))
		return 0;
	put_tsv(e.fqn);
	printf("\t%" PRIu64 " bytes", e.size - e.header);
	if (e.kind == CKPT_KIND_TENSOR) {
		printf("\tbox ");
		print_dims(stdout, e.offsets, e.ndim);
		printf("+");
		print_dims(stdout, e.shape, e.ndim);
	}
	putchar('\n');
	rc = ckpt_view_plan(v, 0, node, 0, UINT64_MAX, plan_run, &p);
	if (rc) {
		fflush(stdout);
		/* -EIO: a record not located, the reason (file, key) just
		 * set; anything else (-ENOMEM) may set none */
		if (rc == -EIO && *ckpt_last_error())
			fprintf(stderr, "ckptfs: cannot plan: %s\n",
				ckpt_last_error());
		else
			fprintf(stderr, "ckptfs: %s: key '%s': cannot plan: %s\n",
				meta_path(p.m),
				ckpt_name_for_msg(e.fqn, shown, sizeof(shown)),
				strerror(-rc));
		return -1;
	}
	if (p.cur.len) {
		print_read(&p);
		p.merged++;
	}
	nused = ckpt_view_chunks(v, 0, node, &used);
	for (k = 0; k < nused && e.kind == CKPT_KIND_TENSOR; k++) {
		ckpt_meta_chunk(p.m, used[k], &c);
		printf("\tchunk\t%s+%s\t%s\t%" PRIu64 "\t%" PRIu64 "\n",
		       fmt_dims(a, sizeof(a), c.offsets, c.ndim),
		       fmt_dims(b, sizeof(b), c.sizes, c.ndim),
		       ckpt_name_for_msg(c.path, shown, sizeof(shown)),
		       c.foff, c.len);
	}
	printf("\t%" PRIu32 " chunks, %" PRIu64 " runs, %" PRIu64 " reads after merging\n",
	       nused, p.runs, p.merged);
	return 0;
}

static int tool_plan(const struct tool_args *a)
{
	char shown[NAME_SHOWN];
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint32_t i;
	int bad = 0;

	/* A PyTorch checkpoint's data files too: opened lazily, its records
	 * are located by the plan, as a read would (the rank's only).
	 * Other formats are planned from their metadata alone. */
	if (open_view(a, FILES_TORCH, &m, &v))
		return 1;
	if (a->npos == 2) {
		i = find_key(v, a->pos[1]);
		if (i == CKPT_NONE) {
			fprintf(stderr, "ckptfs: %s: no key '%s'\n",
				meta_path(m), ckpt_name_for_msg(a->pos[1],
						shown, sizeof(shown)));
			ckpt_view_free(v);
			ckpt_meta_free(m);
			return 1;
		}
		bad = plan_one(v, i);
	} else {
		uint64_t total = 0, size;

		for (i = 1; i < nnodes(v); i++) {
			if (plan_one(v, i))
				bad = -1;
			if (!key_is_file(v, i) || ckpt_view_size(v, 0, i, &size))
				continue;
			total += size;
		}
		/* What du -sb of the mount would say of the keys' files,
		 * without .ckptfs/ (whose view.safetensors repeats them). */
		printf("view bytes: %" PRIu64 "\n", total);
	}
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return bad ? 1 : 0;
}

/* Write node's file (an .npy header included in an npy view) to fd. */
static int write_view(const struct ckpt_view *v, uint32_t node, int fd,
		      struct ckpt_scratch *s, char *buf)
{
	uint64_t off = 0, size;
	size_t got, done;
	ssize_t n;

	if (ckpt_view_size(v, 0, node, &size))
		return -ENOMEM;
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
	char shown[NAME_SHOWN];
	struct ckpt_scratch *s = ckpt_scratch_new();
	struct ckpt_meta *m;
	struct ckpt_view *v;
	char *buf;
	uint32_t i;
	int rc;

	if (open_view(a, FILES_ALL, &m, &v)) {
		ckpt_scratch_free(s);
		return 1;
	}
	i = find_key(v, a->pos[1]);
	buf = malloc(BUF_SIZE);
	if (i == CKPT_NONE || !buf || !s) {
		fprintf(stderr, "ckptfs: %s: %s '%s'\n", meta_path(m),
			i == CKPT_NONE ? "no key" : "out of memory at",
			ckpt_name_for_msg(a->pos[1], shown, sizeof(shown)));
		rc = 1;
	} else {
		rc = write_view(v, i, STDOUT_FILENO, s, buf);
		if (rc)
			report_read_error(m, a->pos[1], rc);
		rc = rc ? 1 : 0;
	}
	free(buf);
	ckpt_scratch_free(s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return rc;
}

/* ---------------------------------------------------------------- extract */
/* mkdir -p of the output directory the user named (its own path may hold
 * symlinks: the user chose it); nothing beneath it is created this way. */
static int mkdirs(const char *dir)
{
	char *path = strdup(dir), *p;
	int rc = 0;

	if (!path)
		return -ENOMEM;
	for (p = path + 1; *p && !rc; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) && errno != EEXIST)
			rc = -errno;
		*p = '/';
	}
	if (!rc && mkdir(path, 0755) && errno != EEXIST)
		rc = -errno;
	free(path);
	return rc;
}

/* Files mapped at once by extract, and their bytes. */
#define EXTRACT_FILES 256
#define EXTRACT_BYTES ((uint64_t)1 << 30)

/* A file being extracted: written to a temporary file (tmp) in its
 * directory, mapped, and given its name only once all of it is read. */
struct out_file {
	void *map;
	uint64_t size;
	char *rel;		/* owned: its path beneath OUT */
	const char *fqn;	/* borrowed from the view */
	struct out_tmp tmp;
};

struct extract {
	const struct tool_args *a;
	const struct ckpt_view *v;
	int outfd;		/* OUT */
	struct ckpt_read_req reqs[EXTRACT_FILES];
	struct out_file outs[EXTRACT_FILES];
	size_t n;
	uint64_t pending;	/* bytes of outs[0, n) */
};

/* The one-line reason for a failure on x->a->pos[1]/rel. */
static void extract_error(const struct extract *x, const char *rel,
			  size_t rel_len, const char *fqn, int rc)
{
	const char *why = rc == -ELOOP ?
		"is a symlink; extract never writes through one" :
		rc == -EEXIST ? "exists; --force replaces it" :
		rc == -ENOTDIR ? "is not a directory" : strerror(-rc);
	char *path = NULL, shown[NAME_SHOWN], kshown[NAME_SHOWN];

	if (asprintf(&path, "%s/%.*s", x->a->pos[1], (int)rel_len, rel) < 0)
		path = NULL;
	fprintf(stderr, "ckptfs: %s: key '%s': %s\n",
		ckpt_name_for_msg(path ? path : rel, shown, sizeof(shown)),
		ckpt_name_for_msg(fqn, kshown, sizeof(kshown)), why);
	free(path);
}

/* Split rel into its directory (the result, owned) and *base (in rel). */
static char *dir_part(const char *rel, const char **base)
{
	const char *slash = strrchr(rel, '/');

	*base = slash ? slash + 1 : rel;
	return strndup(rel, slash ? (size_t)(slash - rel) : 0);
}

/* Name or drop (ok false) every pending file, unmapping each; 0, or the
 * first error (already printed). */
static int extract_finish(struct extract *x, bool ok)
{
	int rc = 0;
	size_t k;

	for (k = 0; k < x->n; k++) {
		struct out_file *o = &x->outs[k];
		const char *base;
		char *dir = dir_part(o->rel, &base);
		size_t bad = 0;
		int dfd = dir ? out_dir_open(x->outfd, dir, false, &bad) :
				-ENOMEM;
		int err = 0;

		if (o->map && munmap(o->map, o->size))
			err = -errno;
		o->map = NULL;
		if (dfd < 0)
			err = dfd;
		else if (ok && !err && !rc)
			err = out_tmp_publish(dfd, &o->tmp, base,
					      x->a->force);
		if (dfd >= 0)
			out_tmp_discard(dfd, &o->tmp);
		else if (o->tmp.fd >= 0)
			close(o->tmp.fd);
		if (err && ok && !rc) {
			if (dfd < 0)
				extract_error(x, o->rel, bad, o->fqn, err);
			else
				extract_error(x, o->rel, strlen(o->rel),
					      o->fqn, err);
			rc = err;
		}
		if (dfd >= 0)
			close(dfd);
		free(dir);
		free(o->rel);
		o->rel = NULL;
	}
	x->n = 0;
	x->pending = 0;
	return rc;
}

/* Read the pending files' bytes straight into their mappings with the
 * parallel engine, then name them. */
static int extract_flush(struct extract *x)
{
	char err[1024];
	int rc;

	rc = ckpt_view_read_batch(x->v, x->reqs, x->n, x->a->jobs, err,
				  sizeof(err));
	if (rc)
		fprintf(stderr, "ckptfs: %s\n", err);
	return extract_finish(x, !rc) ? -1 : rc;
}

/*
 * Start node's file: its directories beneath OUT (never through a
 * symlink), a temporary file of its size in the last one (its blocks
 * allocated, so a full disk is an error here and not a SIGBUS later), and
 * a mapping to fill.  An existing file of that name is refused now unless
 * --force (and again, atomically, when it is named).
 */
static int extract_start(struct extract *x, uint32_t node,
			 const struct ckpt_entry_info *e)
{
	struct out_file *o = &x->outs[x->n];
	char rel[4096];
	const char *base;
	char *dir = NULL;
	struct stat st;
	size_t bad = 0;
	int dfd, rc;

	ckpt_view_path(x->v, node, rel, sizeof(rel));
	memset(o, 0, sizeof(*o));
	o->tmp.fd = -1;
	o->size = e->size;
	o->fqn = e->fqn;
	o->rel = strdup(rel);
	dir = o->rel ? dir_part(rel, &base) : NULL;
	if (!dir) {
		free(o->rel);
		fprintf(stderr, "ckptfs: out of memory\n");
		return -ENOMEM;
	}
	dfd = out_dir_open(x->outfd, dir, true, &bad);
	if (dfd < 0) {
		extract_error(x, rel, bad, e->fqn, dfd);
		free(dir);
		free(o->rel);
		return dfd;
	}
	rc = 0;
	if (!x->a->force && fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0)
		rc = -EEXIST;
	if (!rc)
		rc = out_tmp_create(dfd, &o->tmp);
	if (!rc && e->size &&
	    (rc = -posix_fallocate(o->tmp.fd, 0, (off_t)e->size)) == 0) {
		o->map = mmap(NULL, e->size, PROT_READ | PROT_WRITE,
			      MAP_SHARED, o->tmp.fd, 0);
		if (o->map == MAP_FAILED) {
			o->map = NULL;
			rc = -errno;
		}
	}
	x->n++;		/* extract_finish() now owns it */
	if (rc)
		extract_error(x, rel, strlen(rel), e->fqn, rc);
	close(dfd);
	free(dir);
	x->reqs[x->n - 1] = (struct ckpt_read_req){
		.slot = 0, .node = node, .off = 0, .len = e->size,
		.dst = o->map,
	};
	x->pending += e->size;
	return rc;
}

/*
 * The whole view as files beneath OUT: each is created as a temporary
 * file at its size, mapped, filled by the parallel engine (--jobs
 * threads) straight from the data files, a group of files at a time, and
 * named only when whole.  A failure leaves no partial file under a final
 * name; files of groups already named stay.
 */
static int tool_extract(const struct tool_args *given)
{
	struct extract *x = calloc(1, sizeof(*x));
	struct tool_args args = *given, *a = &args;
	struct ckpt_meta *m;
	struct ckpt_view *v;
	struct rlimit rl;
	uint32_t i, nn;
	int rc = 0;

	if (!x) {
		fprintf(stderr, "ckptfs: out of memory\n");
		return 1;
	}
	/* Room for a group's temporary files beside the data files. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
		a->max_open = rl.rlim_cur > 4096 + 2 * EXTRACT_FILES ? 4096 :
			      rl.rlim_cur > 64 + 2 * EXTRACT_FILES ?
			      (uint32_t)rl.rlim_cur - 2 * EXTRACT_FILES : 16;
	}
	if (open_view(a, FILES_ALL, &m, &v)) {
		free(x);
		return 1;
	}
	x->a = a;
	x->v = v;
	rc = mkdirs(a->pos[1]);
	if (!rc) {
		x->outfd = open(a->pos[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = x->outfd < 0 ? -errno : 0;
	}
	if (rc) {
		fprintf(stderr, "ckptfs: %s: %s\n", a->pos[1], strerror(-rc));
		goto out_view;
	}
	nn = nnodes(v);
	for (i = 1; i < nn && !rc; i++) {
		struct ckpt_entry_info e;

		if (key_node(v, i, &e))
			continue;
		rc = extract_start(x, i, &e);
		if (!rc && (x->n == EXTRACT_FILES || x->pending >= EXTRACT_BYTES))
			rc = extract_flush(x);
	}
	if (rc)
		extract_finish(x, false);
	else if (x->n)
		rc = extract_flush(x);
	close(x->outfd);
out_view:
	free(x);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return rc ? 1 : 0;
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
		     double *vals, struct ckpt_scratch *s)
{
	struct ckpt_entry_info e;
	enum ckpt_dtype dt;
	unsigned isz;
	uint64_t size, off = 0, n = 0;
	uint64_t nans = 0, infs = 0, zeros = 0, counted = 0, pinf = 0, ninf = 0;
	double mn = INFINITY, mx = -INFINITY, amax = 0, sum = 0, comp = 0;
	char path[4096];
	size_t got, k;
	int rc;

	if (key_node(v, node, &e) || e.kind != CKPT_KIND_TENSOR)
		return 0;
	dt = (enum ckpt_dtype)e.dtype;
	isz = ckpt_dtype_size(dt);
	size = e.size;
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
	put_tsv(path);
	printf("\t%s\t", ckpt_dtype_name(dt));
	print_dims(stdout, e.shape, e.ndim);
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
	char shown[NAME_SHOWN];
	struct ckpt_scratch *s = ckpt_scratch_new();
	struct ckpt_meta *m;
	struct ckpt_view *v;
	double *vals = malloc(BUF_SIZE * sizeof(double));
	char *buf = malloc(BUF_SIZE);
	int rc = 0, k;
	uint32_t i;

	if (!vals || !buf || !s || open_view(a, FILES_ALL, &m, &v)) {
		free(vals);
		free(buf);
		ckpt_scratch_free(s);
		return 1;
	}
	printf("path\tdtype\tshape\tmin\tmax\tmean\tabsmax\tnan\tinf\tzeros\n");
	if (a->npos > 1) {
		for (k = 1; k < a->npos && !rc; k++) {
			i = find_key(v, a->pos[k]);
			if (i == CKPT_NONE) {
				fprintf(stderr, "ckptfs: %s: no key '%s'\n",
					meta_path(m), ckpt_name_for_msg(
						a->pos[k], shown,
						sizeof(shown)));
				rc = 1;
				break;
			}
			rc = stats_one(v, i, buf, vals, s);
		}
	} else {
		for (i = 1; i < nnodes(v) && !rc; i++)
			rc = stats_one(v, i, buf, vals, s);
	}
	if (rc > 0)
		rc = 1;
	else if (rc < 0) {
		report_read_error(m, NULL, rc);
		rc = 1;
	}
	free(vals);
	free(buf);
	ckpt_scratch_free(s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return rc;
}

/* ---------------------------------------------------------------- verify */
struct verify_job {
	struct ckpt_meta *m;
	const char *dir;
	struct record *order;	/* chunks with records, by (file, offset) */
	uint32_t n;
	uint32_t next;		/* atomic */
	uint64_t done_bytes;	/* atomic */
	uint32_t bad, unreadable, unchecked;	/* atomic */
	bool tty;
	pthread_mutex_t out;	/* serializes messages */
};

struct record {
	uint32_t chunk, file;
	uint64_t foff, len;
};

static int cmp_record(const void *a, const void *b)
{
	const struct record *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->foff < y->foff ? -1 : x->foff > y->foff;
}

static void *verify_worker(void *arg)
{
	char shown[NAME_SHOWN], kshown[NAME_SHOWN];
	struct verify_job *j = arg;
	char *buf = malloc(BUF_SIZE);
	char a[256];
	uint32_t i;

	while (buf && (i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n) {
		uint32_t ci = j->order[i].chunk;
		struct ckpt_chunk_info c;
		struct ckpt_key_info e;
		uint64_t got = 0;
		int rc = ckpt_verify_chunk(j->m, ci, buf, BUF_SIZE, &got);

		ckpt_meta_chunk(j->m, ci, &c);
		ckpt_meta_key(j->m, c.key, &e);
		if (rc == 1)
			__atomic_fetch_add(&j->unchecked, 1, __ATOMIC_RELAXED);
		if (rc < 0) {
			bool xxh3 = c.checksum && !strcmp(c.checksum, "xxh3");

			pthread_mutex_lock(&j->out);
			if (j->tty)
				fprintf(stderr, "\r\033[K");
			printf("%s/%s: offset %" PRIu64 ": key '%s'%s%s: %s",
			       j->dir, ckpt_name_for_msg(c.path, shown,
							 sizeof(shown)),
			       c.foff, ckpt_name_for_msg(e.fqn, kshown,
							 sizeof(kshown)),
			       e.kind == CKPT_KIND_TENSOR ? ": chunk at " : "",
			       e.kind == CKPT_KIND_TENSOR ?
			       fmt_dims(a, sizeof(a), c.offsets, c.ndim) : "",
			       rc == -EBADMSG ? (xxh3 ? "xxh3 mismatch" : "crc32 mismatch") :
			       "cannot read the record");
			if (rc == -EBADMSG && xxh3)
				printf(" (stored %016" PRIx64 ", computed %016" PRIx64 ")",
				       c.stored_checksum, got);
			else if (rc == -EBADMSG)
				printf(" (stored %08" PRIx64 ", computed %08" PRIx64 ")",
				       c.stored_checksum, got);
			putchar('\n');
			pthread_mutex_unlock(&j->out);
			__atomic_fetch_add(rc == -EBADMSG ? &j->bad : &j->unreadable,
					   1, __ATOMIC_RELAXED);
		}
		__atomic_fetch_add(&j->done_bytes, c.len, __ATOMIC_RELAXED);
	}
	free(buf);
	return NULL;
}

static bool same_record(const struct ckpt_chunk_info *x,
			const struct ckpt_chunk_info *y)
{
	return x->has_record == y->has_record &&
	       (!x->has_record ||
		(!strcmp(x->path, y->path) && x->foff == y->foff &&
		 x->len == y->len && x->strided == y->strided &&
		 !x->checksum == !y->checksum &&
		 (!x->checksum || (!strcmp(x->checksum, y->checksum) &&
				   x->stored_checksum == y->stored_checksum)) &&
		 !x->transforms == !y->transforms &&
		 (!x->transforms || !strcmp(x->transforms, y->transforms))));
}

/* The chunk of key fqn in m whose offsets are c's, into *out. */
static int find_chunk(const struct ckpt_meta *m, const char *fqn,
		      const struct ckpt_chunk_info *c,
		      struct ckpt_chunk_info *out)
{
	struct ckpt_key_info k;
	uint32_t ki, j;

	if (ckpt_meta_find_key(m, fqn, &ki) || ckpt_meta_key(m, ki, &k))
		return -ENOENT;
	for (j = 0; j < k.nchunks; j++) {
		if (!ckpt_meta_chunk(m, k.chunk_first + j, out) &&
		    out->ndim == c->ndim &&
		    !memcmp(out->offsets, c->offsets,
			    c->ndim * sizeof(uint64_t)))
			return 0;
	}
	return -ENOENT;
}

static void print_record(const struct ckpt_chunk_info *c)
{
	char shown[NAME_SHOWN];

	if (!c->has_record) {
		printf("no record");
		return;
	}
	printf("%s offset %" PRIu64 " length %" PRIu64,
	       ckpt_name_for_msg(c->path, shown, sizeof(shown)), c->foff,
	       c->len);
	if (c->checksum)
		printf(" %s %0*" PRIx64, c->checksum,
		       strcmp(c->checksum, "crc32") ? 16 : 8,
		       c->stored_checksum);
}

/*
 * A torch checkpoint read through an index: every record of the index
 * against the one the checkpoint itself gives, found again from
 * .metadata and each archive's central directory and local headers
 * (what `ckptfs index` reads), so an index whose records were swapped or
 * edited is caught even when its own checksums agree with it.  Prints
 * one line per record that differs; returns how many did (-1: the
 * checkpoint could not be indexed, said).
 */
static long verify_index(const struct ckpt_meta *m, const char *dir,
			 const struct ckpt_open_opts *mo)
{
	struct ckpt_chunk_info c, f;
	struct ckpt_meta_info mi, fi;
	struct ckpt_key_info k;
	struct ckpt_meta *fresh;
	uint8_t *img;
	size_t len;
	char err[1024], a[256], kshown[NAME_SHOWN];
	long bad = 0;
	uint32_t i;

	if (ckpt_meta_build_index_opts(dir, mo, &img, &len, &fresh, err,
				       sizeof(err))) {
		fprintf(stderr, "ckptfs: %s\n", err);
		return -1;
	}
	free(img);
	ckpt_meta_info(m, &mi);
	ckpt_meta_info(fresh, &fi);
	for (i = 0; ckpt_meta_chunk(m, i, &c) == 0; i++) {
		ckpt_meta_key(m, c.key, &k);
		if (!find_chunk(fresh, k.fqn, &c, &f) && same_record(&c, &f))
			continue;
		printf("%s/.ckptfs-index: key '%s'%s%s: the index says ", dir,
		       ckpt_name_for_msg(k.fqn, kshown, sizeof(kshown)), k.kind == CKPT_KIND_TENSOR ? ": chunk at " : "",
		       k.kind == CKPT_KIND_TENSOR ?
		       fmt_dims(a, sizeof(a), c.offsets, c.ndim) : "");
		print_record(&c);
		printf(", the checkpoint's own archives say ");
		if (find_chunk(fresh, k.fqn, &c, &f))
			printf("there is no such chunk");
		else
			print_record(&f);
		putchar('\n');
		bad++;
	}
	if (mi.nchunks != fi.nchunks && !bad) {
		printf("%s/.ckptfs-index: %" PRIu32 " chunks, but the checkpoint has %" PRIu32 "\n",
		       dir, mi.nchunks, fi.nchunks);
		bad++;
	}
	ckpt_meta_free(fresh);
	return bad;
}

static int tool_verify(const struct tool_args *a)
{
	struct verify_job j = { 0 };
	struct ckpt_meta_info mi;
	struct ckpt_chunk_info c;
	pthread_t th[64];
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint64_t total = 0;
	uint32_t i, n = 0, jobs = a->jobs;
	bool tty = isatty(STDERR_FILENO);
	struct timespec t0, t1;
	long index_bad = 0;
	double secs;

	if (open_view(a, FILES_ALL, &m, &v))
		return 1;
	ckpt_meta_info(m, &mi);
	if (mi.origin == CKPT_ORIGIN_TORCH_INDEX) {
		index_bad = verify_index(m, mi.dir, &a->mo);
		if (index_bad < 0) {
			ckpt_view_free(v);
			ckpt_meta_free(m);
			return 1;
		}
	}
	j.m = m;
	j.dir = mi.dir;
	j.tty = tty;
	j.order = malloc((mi.nchunks ? mi.nchunks : 1) * sizeof(*j.order));
	if (!j.order) {
		fprintf(stderr, "ckptfs: out of memory\n");
		ckpt_view_free(v);
		ckpt_meta_free(m);
		return 1;
	}
	for (i = 0; ckpt_meta_chunk(m, i, &c) == 0; i++) {
		if (!c.has_record)
			continue;
		j.order[n].chunk = i;
		j.order[n].file = c.file;
		j.order[n].foff = c.foff;
		j.order[n++].len = c.len;
		total += c.len;
	}
	qsort(j.order, n, sizeof(*j.order), cmp_record);
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
	       " mismatched, %" PRIu32 " unreadable",
	       n, (double)total / 1e9, secs, secs > 0 ? (double)total / 1e9 / secs : 0,
	       n - j.unchecked, j.unchecked, j.bad, j.unreadable);
	if (mi.origin == CKPT_ORIGIN_TORCH_INDEX)
		printf("; %ld index records differ from the checkpoint's archives",
		       index_bad);
	putchar('\n');
	pthread_mutex_destroy(&j.out);
	free(j.order);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return j.bad || j.unreadable || index_bad ? 1 : 0;
}

/*
 * Write len bytes to path through a temporary file in its directory and a
 * rename, so a reader never sees half an index, and whatever is at path
 * (a symlink planted there included) is replaced, never written through.
 * Returns 0, or -errno.
 */
static int write_atomic(const char *path, const uint8_t *buf, size_t len)
{
	const char *base;
	char *dir = dir_part(path, &base);
	struct out_tmp t = { .fd = -1 };
	size_t done = 0;
	int dfd, rc;

	if (!dir)
		return -ENOMEM;
	if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
		free(dir);
		return -EISDIR;
	}
	dfd = open(*dir ? dir : (*path == '/' ? "/" : "."),
		   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (dfd < 0)
		return -errno;
	rc = out_tmp_create(dfd, &t);
	while (!rc && done < len) {
		ssize_t n = write(t.fd, buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	if (!rc && fsync(t.fd))
		rc = -errno;
	if (!rc)
		rc = out_tmp_publish(dfd, &t, base, true);
	out_tmp_discard(dfd, &t);
	close(dfd);
	return rc;
}

static int tool_index(const struct tool_args *a)
{
	char err[1024], *def = NULL;
	const char *out = a->out;
	struct ckpt_meta_info mi;
	struct ckpt_meta *m;
	uint8_t *img;
	size_t len;
	int rc = 1, wrc;

	if (!out && ckpt_root_is_remote(a->pos[0])) {
		fprintf(stderr, "ckptfs index: %s: an object store is not written to; give --index FILE (a local file, for mount --index FILE)\n",
			a->pos[0]);
		return 1;
	}
	if (ckpt_meta_build_index_opts(a->pos[0], &a->mo, &img, &len, &m, err,
				       sizeof(err))) {
		fprintf(stderr, "ckptfs: %s\n", err);
		return 1;
	}
	if (!out) {
		if (asprintf(&def, "%s/%s", a->pos[0], ".ckptfs-index") < 0)
			goto out_meta;
		out = def;
	}
	if (!strcmp(out, "-")) {
		if (fwrite(img, 1, len, stdout) != len || fflush(stdout)) {
			fprintf(stderr, "ckptfs: writing stdout: %s\n",
				strerror(errno));
			goto out_def;
		}
	} else if ((wrc = write_atomic(out, img, len))) {
		fprintf(stderr, "ckptfs: cannot write %s: %s\n", out,
			strerror(-wrc));
		goto out_def;
	}
	ckpt_meta_info(m, &mi);
	fprintf(strcmp(out, "-") ? stdout : stderr,
		"%s: %" PRIu32 " keys, %" PRIu32 " chunks, %" PRIu32
		" data files, %zu bytes\n", out, mi.nkeys, mi.nchunks,
		mi.nfiles, len);
	rc = 0;
out_def:
	free(def);
out_meta:
	ckpt_meta_free(m);
	free(img);
	return rc;
}

static const struct tool tools[] = {
	{ "info", 1, 1, false, 0,
	  "usage: ckptfs info CKPT\n"
	  "  format, version, keys, dtypes, total bytes, data files and the saved tiling\n",
	  tool_info },
	{ "ls", 1, 1, false, 0,
	  "usage: ckptfs ls CKPT [--world W --rank R] [--prefix P]\n"
	  "  one tab-separated line per key, after a header: path, dtype, global shape,\n"
	  "  chunks; with W and R also the local shape, offset and byte size ('-' for\n"
	  "  0-d shapes and for bytes entries)\n",
	  tool_ls },
	{ "plan", 1, 2, true, 0,
	  "usage: ckptfs plan CKPT --world W --rank R [--prefix P] [KEY]\n"
	  "  per key: the saved chunks and the byte ranges of data files that serve the\n"
	  "  view, and how many separate reads it takes\n",
	  tool_plan },
	{ "cat", 2, 2, true, 0,
	  "usage: ckptfs cat CKPT KEY --world W --rank R\n"
	  "  the view's bytes on stdout, identical to the mounted file (KEY: FQN or path)\n",
	  tool_cat },
	{ "extract", 2, 2, true, TOOL_FORCE,
	  "usage: ckptfs extract CKPT OUTDIR --world W --rank R [--prefix P] [--format raw|npy] [--jobs N] [--force]\n"
	  "  write the whole view as real files, the same tree as the mount; with npy,\n"
	  "  tensors become NAME.npy (bfloat16/float8 as same-size unsigned types).\n"
	  "  N threads read straight from the data files (default: CPUs).  Nothing is\n"
	  "  written through a symlink inside OUTDIR; an existing file is an error\n"
	  "  unless --force (which replaces it); each file appears whole or not at all\n",
	  tool_extract },
	{ "stats", 1, 16, false, 0,
	  "usage: ckptfs stats CKPT [--world W --rank R] [--prefix P] [KEY...]\n"
	  "  per tensor (all, or the KEYs given): dtype, shape, min, max, mean, absmax\n"
	  "  (over the non-NaN values), and counts of NaN, Inf and zeros; every dtype,\n"
	  "  bfloat16, float16 and float8 included\n",
	  tool_stats },
	{ "index", 1, 1, false, TOOL_O_FILE,
	  "usage: ckptfs index CKPT [-o FILE | --index FILE]\n"
	  "  for a PyTorch distributed checkpoint (pickled .metadata, or rank-local\n"
	  "  __R.metadata files; .distcp files):\n"
	  "  locate every record's raw bytes inside the .distcp files and write the\n"
	  "  result in the native format (default FILE: CKPT/.ckptfs-index; '-' for\n"
	  "  stdout).  Its stamp covers .metadata, each data file's size and version\n"
	  "  and its own records: mounts use it while all match, and refuse it once\n"
	  "  stale or edited (run this again).  Optional: mounts index by\n"
	  "  themselves when there is none.  For an s3:// CKPT, FILE is required\n"
	  "  (a local file; mount with --index FILE)\n",
	  tool_index },
	{ "verify", 1, 1, false, 0,
	  "usage: ckptfs verify CKPT [--jobs N]\n"
	  "  check every record's xxh3 (or, for PyTorch checkpoints, the zip's CRC-32,\n"
	  "  and every record of its .ckptfs-index against the archives themselves);\n"
	  "  one line per mismatch (file, offset, key), a\n"
	  "  count of records without a checksum; exit 1 on any mismatch.  A progress\n"
	  "  bar goes to stderr when it is a terminal.  N threads (default: CPUs)\n",
	  tool_verify },
};

const char *cli_tool_name(size_t i)
{
	return i < sizeof(tools) / sizeof(tools[0]) ? tools[i].name : NULL;
}

int cli_tool_run(int argc, char **argv)
{
	struct tool_args a;
	size_t i;
	int rc;

	for (i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
		if (strcmp(tools[i].name, argv[0]))
			continue;
		if (parse_args(&tools[i], argc, argv, &a)) {
			s3_cli_destroy(&a.s3);
			return 2;
		}
		if (a.help) {
			fputs(tools[i].usage, stdout);
			fputs("  --index-cache DIR: a PyTorch checkpoint without an index is indexed\n"
			      "  once per node and kept in DIR (as mount -o index_cache=DIR)\n"
			      "  CKPT may be s3://BUCKET/PREFIX: its settings in 'ckptfs help s3'\n",
			      stdout);
			s3_cli_destroy(&a.s3);
			return 0;
		}
		rc = tools[i].run(&a);
		s3_cli_destroy(&a.s3);
		return rc;
	}
	return -1;
}
