/* SPDX-License-Identifier: MIT */
/* Parsing mount options: see mount_opts.h. */
#include "mount_opts.h"

#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fuse_opt.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"

/* Keys that fstab and mount(8) add and that mean nothing to a read-only
 * view: accepted and ignored. */
static const char *const ignored[] = {
	"rw", "ro", "nodev", "dev", "nosuid", "suid", "noexec", "exec",
	"noauto", "auto", "user", "nouser", "users", "owner", "group",
	"_netdev", "defaults", "nofail", "async", "sync", "atime", "noatime",
	"relatime", "norelatime", "strictatime", "lazytime", "nolazytime",
	"diratime", "nodiratime", "silent", "loud", NULL,
};

static bool is_ignored(const char *kv)
{
	int i;

	if (strncmp(kv, "x-", 2) == 0 || strncmp(kv, "comment=", 8) == 0)
		return true;
	for (i = 0; ignored[i]; i++) {
		if (strcmp(kv, ignored[i]) == 0)
			return true;
	}
	return false;
}

int mount_parse_u32(const char *s, uint32_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || !*s || *s < '0' || *s > '9')
		return -EINVAL;
	s += strspn(s, "0");	/* 0000000000004 is 4, not too long */
	if (strspn(s, "0123456789") != strlen(s))
		return -EINVAL;
	if (strlen(s) > 10)
		return -ERANGE;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	if (v > UINT32_MAX)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

int mount_num_arg(const char *what, const char *s, uint32_t *out, char *err,
		  size_t errlen)
{
	int rc = mount_parse_u32(s, out);

	if (rc == -ERANGE)
		snprintf(err, errlen, "%s must be at most %u, got '%s'", what,
			 UINT32_MAX, s);
	else if (rc)
		snprintf(err, errlen, "%s must be a whole number, got '%s'",
			 what, s ? s : "");
	return rc ? -1 : 0;
}

/* Keep an option for FUSE, with ',' and '\\' escaped again: fuse_opt
 * unescaped them, and the list is parsed once more by libfuse. */
static int append_fuse_opt(struct mount_opts *o, const char *kv)
{
	size_t old = o->fuse_opts ? strlen(o->fuse_opts) : 0;
	char *p = realloc(o->fuse_opts, old + 2 * strlen(kv) + 2);

	if (!p)
		return -1;
	if (old)
		p[old++] = ',';
	for (; *kv; kv++) {
		if (*kv == ',' || *kv == '\\')
			p[old++] = '\\';
		p[old++] = *kv;
	}
	p[old] = '\0';
	o->fuse_opts = p;
	return 0;
}

static int set_num(const char *what, const char *val, uint32_t *slot,
		   bool *has, char *err, size_t errlen)
{
	if (mount_num_arg(what, val, slot, err, errlen))
		return -1;
	*has = true;
	return 0;
}

static int set_str(char **slot, const char *what, const char *val, char *err,
		   size_t errlen)
{
	if (!val || !*val) {
		snprintf(err, errlen, "%s needs a value", what);
		return -1;
	}
	free(*slot);
	*slot = strdup(val);
	if (!*slot) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* Ranks one range a-b of a ranks list may hold, so a typo (0-99999999)
 * cannot ask for gigabytes of view. */
#define RANKS_PER_RANGE 65536u

/* A range of ranks as given; at: its place in the list. */
struct rank_range {
	uint64_t a, b;
	size_t at;
};

static int cmp_range(const void *x, const void *y)
{
	const struct rank_range *p = x, *q = y;

	return p->a < q->a ? -1 : p->a > q->a;
}

/*
 * "0-7" or "0,2,4-6": into o->ranks in the order given, refusing
 * duplicates (checked against the world later).  The ranges are sorted
 * and each compared with the ones before it, so a long list costs
 * O(n log n), not a comparison of every rank with every other.
 */
static int parse_ranks(struct mount_opts *o, char *err, size_t errlen)
{
	const char *s = o->ranks_spec;
	struct rank_range *rg = NULL, *sorted = NULL;
	size_t n = 0, cap = 0, i;
	uint64_t total = 0, last = 0, r;
	int rc = -1;

	free(o->ranks);
	o->ranks = NULL;
	o->nranks = 0;
	while (*s) {
		unsigned long long a, b;
		char *end;

		if (*s < '0' || *s > '9')
			goto bad;
		a = strtoull(s, &end, 10);
		b = a;
		if (*end == '-') {
			if (end[1] < '0' || end[1] > '9')
				goto bad;
			b = strtoull(end + 1, &end, 10);
		}
		if ((*end && *end != ',') || b < a)
			goto bad;
		if (b >= UINT32_MAX) {
			snprintf(err, errlen,
				 "ranks '%s': rank %llu is more than the largest rank, %u",
				 o->ranks_spec, b, UINT32_MAX - 1);
			goto out_free;
		}
		if (b - a >= RANKS_PER_RANGE) {
			snprintf(err, errlen,
				 "ranks '%s': the range %llu-%llu holds %llu ranks; a range may hold at most %u",
				 o->ranks_spec, a, b, b - a + 1, RANKS_PER_RANGE);
			goto out_free;
		}
		if (n == cap) {
			struct rank_range *p;

			cap = cap ? cap * 2 : 16;
			p = realloc(rg, cap * sizeof(*p));
			if (!p)
				goto oom;
			rg = p;
		}
		rg[n] = (struct rank_range){ a, b, n };
		n++;
		total += b - a + 1;
		s = *end ? end + 1 : end;
		if (*end == ',' && !*s)
			goto bad;
	}
	if (!n || total > UINT32_MAX)
		goto bad;
	sorted = malloc(n * sizeof(*sorted));
	if (!sorted)
		goto oom;
	memcpy(sorted, rg, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_range);
	for (i = 0; i < n; i++) {
		/* Sorted by start: a range overlaps one before it exactly
		 * when it starts at or below the highest rank so far. */
		if (i && sorted[i].a <= last) {
			snprintf(err, errlen,
				 "ranks '%s': rank %llu is listed twice",
				 o->ranks_spec, (unsigned long long)sorted[i].a);
			goto out_free;
		}
		if (!i || sorted[i].b > last)
			last = sorted[i].b;
	}
	o->ranks = malloc(total * sizeof(*o->ranks));
	if (!o->ranks)
		goto oom;
	for (i = 0; i < n; i++)
		for (r = rg[i].a; r <= rg[i].b; r++)
			o->ranks[o->nranks++] = (uint32_t)r;
	rc = 0;
	goto out_free;
bad:
	snprintf(err, errlen,
		 "ranks must be a list such as 0-7 or 0,2,4-6, got '%s'",
		 o->ranks_spec);
	goto out_free;
oom:
	snprintf(err, errlen, "out of memory");
out_free:
	free(rg);
	free(sorted);
	return rc;
}

static int set_format(struct mount_opts *o, const char *val, char *err,
		      size_t errlen)
{
	if (!val || (strcmp(val, "raw") && strcmp(val, "npy"))) {
		snprintf(err, errlen, "format must be raw or npy, got '%s'",
			 val ? val : "");
		return -1;
	}
	o->npy = !strcmp(val, "npy");
	return 0;
}

static int set_prefix(struct mount_opts *o, const char *val, char *err,
		      size_t errlen)
{
	if (!val || !*val) {
		snprintf(err, errlen, "prefix must not be empty");
		return -1;
	}
	free(o->prefix);
	o->prefix = strdup(val);
	if (!o->prefix) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* Our -o keys, parsed by libfuse's fuse_opt (which splits lists on
 * unescaped commas and turns "\," into ","); each becomes a key for
 * take_o().  Unknown keys come as FUSE_OPT_KEY_OPT. */
enum {
	K_WORLD, K_RANK, K_READAHEAD, K_PREFIX, K_LAYOUT, K_INDEX, K_RANKS,
	K_DTYPE, K_FORMAT, K_VERIFY, K_PREFETCH, K_FOLLOW, K_DEBUG,
	K_MAX_THREADS, K_MAX_IDLE, K_CACHE_MB, K_AHEAD, K_INDEX_CACHE,
	K_NONEMPTY,
};

static const struct fuse_opt o_spec[] = {
	FUSE_OPT_KEY("world=", K_WORLD),
	FUSE_OPT_KEY("rank=", K_RANK),
	FUSE_OPT_KEY("readahead_kb=", K_READAHEAD),
	FUSE_OPT_KEY("prefix=", K_PREFIX),
	FUSE_OPT_KEY("layout=", K_LAYOUT),
	FUSE_OPT_KEY("index=", K_INDEX),
	FUSE_OPT_KEY("index_cache=", K_INDEX_CACHE),
	FUSE_OPT_KEY("ranks=", K_RANKS),
	FUSE_OPT_KEY("dtype=", K_DTYPE),
	FUSE_OPT_KEY("format=", K_FORMAT),
	FUSE_OPT_KEY("verify", K_VERIFY),
	FUSE_OPT_KEY("prefetch", K_PREFETCH),
	FUSE_OPT_KEY("follow_symlinks", K_FOLLOW),
	FUSE_OPT_KEY("debug", K_DEBUG),
	FUSE_OPT_KEY("max_threads=", K_MAX_THREADS),
	FUSE_OPT_KEY("max_idle_threads=", K_MAX_IDLE),
	FUSE_OPT_KEY("cache_mb=", K_CACHE_MB),
	FUSE_OPT_KEY("ahead_kb=", K_AHEAD),
	FUSE_OPT_KEY("nonempty", K_NONEMPTY),
	FUSE_OPT_END
};

struct o_ctx {
	struct mount_opts *o;
	bool in_ranks;		/* the last key was ranks= */
	char *err;
	size_t errlen;
};

/* "4" or "4-6": a further item of a ranks= list, whose commas -o splits. */
static bool is_rank_item(const char *s)
{
	if (*s < '0' || *s > '9')
		return false;
	s += strspn(s, "0123456789");
	if (*s == '-' && s[1] >= '0' && s[1] <= '9')
		s += 1 + strspn(s + 1, "0123456789");
	return *s == '\0';
}

static int add_rank_item(struct o_ctx *c, const char *item)
{
	size_t n = strlen(c->o->ranks_spec);
	char *p = realloc(c->o->ranks_spec, n + strlen(item) + 2);

	if (!p) {
		snprintf(c->err, c->errlen, "out of memory");
		return -1;
	}
	p[n] = ',';
	strcpy(p + n + 1, item);
	c->o->ranks_spec = p;
	return 0;
}

#define NO_CREDENTIALS \
	"S3 credentials are never taken from options (a command line shows in ps); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use a profile of the AWS files (s3_profile, s3_credentials_file)"

/* -o names that ckptfs itself takes although they look like credentials. */
static const char *const credential_like_ok[] = { "s3_credentials_file", NULL };

/* Does the name of -o option arg ("name" or "name=value") look like it
 * carries a credential: secret, token, password, passwd, credential or
 * access_key anywhere in it, or aws_...key, in any case? */
static bool is_credential_name(const char *arg)
{
	static const char *const words[] = {
		"secret", "token", "password", "passwd", "credential",
		"access_key", "accesskey", NULL,
	};
	size_t n = strcspn(arg, "="), i;
	char name[256];

	if (n >= sizeof(name))
		n = sizeof(name) - 1;
	for (i = 0; i < n; i++)
		name[i] = (char)(arg[i] >= 'A' && arg[i] <= 'Z' ?
				 arg[i] - 'A' + 'a' : arg[i]);
	name[n] = '\0';
	for (i = 0; credential_like_ok[i]; i++)
		if (!strcmp(name, credential_like_ok[i]))
			return false;
	for (i = 0; words[i]; i++)
		if (strstr(name, words[i]))
			return true;
	return !strncmp(name, "aws_", 4) && strstr(name + 4, "key");
}

/* The one line refusing credential-like option arg: its name, printable
 * and cut short, only when a value follows it (without one, the "name"
 * may be the secret itself); never the value. */
static void refuse_credential(const char *arg, char *err, size_t errlen)
{
	size_t n = strcspn(arg, "="), i;
	char name[65];

	if (!arg[n]) {
		snprintf(err, errlen, "an -o option looks like a credential: " NO_CREDENTIALS);
		return;
	}
	if (n >= sizeof(name))
		n = sizeof(name) - 1;
	for (i = 0; i < n; i++)
		name[i] = arg[i] > ' ' && arg[i] < 0x7f ? arg[i] : '?';
	name[n] = '\0';
	snprintf(err, errlen, "-o %s%s: looks like a credential: " NO_CREDENTIALS,
		 name, arg[n] && n == sizeof(name) - 1 ? "..." : "");
}

/* An S3 key of an -o list ("s3_endpoint=URL"): 1 taken, 0 not one,
 * -1 with err. */
static int take_s3_o(struct mount_opts *o, const char *arg, char *err,
		     size_t errlen)
{
	const char *eq = strchr(arg, '=');
	char name[64];
	size_t n = eq ? (size_t)(eq - arg) : strlen(arg);

	if (n >= sizeof(name))
		return 0;
	memcpy(name, arg, n);
	name[n] = '\0';
	return s3_cli_take(&o->s3, name, eq ? eq + 1 : NULL, err, errlen);
}

/* fuse_opt's callback: one option of an -o list.  Returns 0 (taken,
 * dropped from the list) or -1 (error in c->err). */
static int take_o(void *data, const char *arg, int key,
		  struct fuse_args *outargs)
{
	struct o_ctx *c = data;
	struct mount_opts *o = c->o;
	const char *val = strchr(arg, '=');
	bool was_ranks = c->in_ranks, has;
	int s3;

	(void)outargs;
	val = val ? val + 1 : NULL;
	c->in_ranks = key == K_RANKS;
	switch (key) {
	case K_WORLD:
		return set_num("world", val, &o->world, &o->has_world, c->err,
			       c->errlen);
	case K_RANK:
		return set_num("rank", val, &o->rank, &o->has_rank, c->err,
			       c->errlen);
	case K_READAHEAD:
		return set_num("readahead_kb", val, &o->readahead_kb, &has,
			       c->err, c->errlen);
	case K_MAX_THREADS:
		return set_num("max_threads", val, &o->max_threads, &has,
			       c->err, c->errlen);
	case K_AHEAD:
		return set_num("ahead_kb", val, &o->ahead_kb, &has, c->err,
			       c->errlen);
	case K_CACHE_MB:
		return set_num("cache_mb", val, &o->cache_mb, &has, c->err,
			       c->errlen);
	case K_MAX_IDLE:
		return set_num("max_idle_threads", val, &o->max_idle_threads,
			       &has, c->err, c->errlen);
	case K_PREFIX:
		return set_prefix(o, val, c->err, c->errlen);
	case K_LAYOUT:
		return set_str(&o->layout, "layout", val, c->err, c->errlen);
	case K_INDEX:
		return set_str(&o->index, "index", val, c->err, c->errlen);
	case K_INDEX_CACHE:
		return set_str(&o->index_cache, "index_cache", val, c->err,
			       c->errlen);
	case K_RANKS:
		return set_str(&o->ranks_spec, "ranks", val, c->err,
			       c->errlen);
	case K_DTYPE:
		return set_str(&o->dtype, "dtype", val, c->err, c->errlen);
	case K_FORMAT:
		return set_format(o, val, c->err, c->errlen);
	case K_VERIFY:
		o->verify = true;
		return 0;
	case K_PREFETCH:
		o->prefetch = true;
		return 0;
	case K_FOLLOW:
		o->follow_symlinks = true;
		return 0;
	case K_DEBUG:
		o->debug = true;
		return 0;
	case K_NONEMPTY:	/* libfuse 2's key: ours now (mountpoint.h) */
		o->nonempty = true;
		return 0;
	case FUSE_OPT_KEY_OPT:
		break;
	default:	/* FUSE_OPT_KEY_NONOPT: not from an -o list */
		return 0;
	}
	/* Before anything else sees it: libfuse would echo the value in
	 * its error. */
	if (is_credential_name(arg)) {
		refuse_credential(arg, c->err, c->errlen);
		return -1;
	}
	if (was_ranks && is_rank_item(arg)) {
		c->in_ranks = true;
		return add_rank_item(c, arg);
	}
	s3 = take_s3_o(o, arg, c->err, c->errlen);
	if (s3)
		return s3 < 0 ? -1 : 0;
	if (strcmp(arg, "allow_other") == 0)
		o->allow_other = true;
	if (is_ignored(arg) || !*arg)
		return 0;
	if (append_fuse_opt(o, arg)) {
		snprintf(c->err, c->errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* Parse one -o list with fuse_opt. */
static int take_o_list(struct mount_opts *o, const char *list, char *err,
		       size_t errlen)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct o_ctx c = { .o = o, .err = err, .errlen = errlen };
	int rc = -1;

	err[0] = '\0';
	if (fuse_opt_add_arg(&args, "ckptfs") || fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, list)) {
		snprintf(err, errlen, "out of memory");
		goto out_args;
	}
	rc = fuse_opt_parse(&args, &c, o_spec, take_o);
	if (rc && !err[0])
		snprintf(err, errlen, "cannot parse the -o options (not shown: they may hold a value that is not to be printed)");
out_args:
	fuse_opt_free_args(&args);
	return rc ? -1 : 0;
}

enum {
	L_WORLD = 256, L_RANK, L_PREFIX, L_INDEX, L_LAYOUT, L_RANKS, L_FORMAT,
	L_DTYPE, L_INDEX_CACHE,
};

static const struct option long_opts[] = {
	{ "help", no_argument, NULL, 'h' },
	{ "world", required_argument, NULL, L_WORLD },
	{ "rank", required_argument, NULL, L_RANK },
	{ "prefix", required_argument, NULL, L_PREFIX },
	{ "index", required_argument, NULL, L_INDEX },
	{ "index-cache", required_argument, NULL, L_INDEX_CACHE },
	{ "layout", required_argument, NULL, L_LAYOUT },
	{ "ranks", required_argument, NULL, L_RANKS },
	{ "format", required_argument, NULL, L_FORMAT },
	{ "dtype", required_argument, NULL, L_DTYPE },
	S3_CLI_LONG_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

/* One option (getopt_long's c, its value in optarg): 0, or -1 with err. */
static int take_arg(struct mount_opts *o, int c, char **argv, char *err,
		    size_t errlen)
{
	int s3 = s3_cli_take_opt(&o->s3, c, optarg, err, errlen);

	if (s3)
		return s3 < 0 ? -1 : 0;
	switch (c) {
	case 'h':
		o->help = true;
		return 0;
	case 'f':
		o->foreground = true;
		return 0;
	case 'd':
		o->debug = true;
		return 0;
	case 's':
		o->single_thread = true;
		return 0;
	case 'o':
		return take_o_list(o, optarg, err, errlen);
	case L_WORLD:
		return set_num("world", optarg, &o->world, &o->has_world,
			       err, errlen);
	case L_RANK:
		return set_num("rank", optarg, &o->rank, &o->has_rank, err,
			       errlen);
	case L_PREFIX:
		return set_prefix(o, optarg, err, errlen);
	case L_INDEX:
		return set_str(&o->index, "index", optarg, err, errlen);
	case L_INDEX_CACHE:
		return set_str(&o->index_cache, "index_cache", optarg, err,
			       errlen);
	case L_LAYOUT:
		return set_str(&o->layout, "layout", optarg, err, errlen);
	case L_RANKS:
		return set_str(&o->ranks_spec, "ranks", optarg, err, errlen);
	case L_FORMAT:
		return set_format(o, optarg, err, errlen);
	case L_DTYPE:
		return set_str(&o->dtype, "dtype", optarg, err, errlen);
	case ':':
		if (optopt == 'o')
			snprintf(err, errlen, "-o needs a list of options");
		else
			snprintf(err, errlen, "%s needs a value",
				 argv[optind - 1]);
		return -1;
	default:
		if (optopt && optopt < 256)
			snprintf(err, errlen, "unknown option '-%c' (see --help)",
				 optopt);
		else
			snprintf(err, errlen, "unknown option '%s' (see --help)",
				 argv[optind - 1]);
		return -1;
	}
}

int mount_opts_parse(struct mount_opts *o, int argc, char **argv, char *err,
		     size_t errlen)
{
	int c, i;

	memset(o, 0, sizeof(*o));
	o->readahead_kb = 1024;
	o->ahead_kb = 8192;
	o->max_threads = 64;
	o->max_idle_threads = 16;
	o->cache_mb = CKPT_CACHE_MB;
	optind = 0;	/* a fresh scan */
	opterr = 0;	/* our messages */
	while ((c = getopt_long(argc, argv, ":hfdso:", long_opts, NULL)) != -1) {
		if (take_arg(o, c, argv, err, errlen))
			return -1;
		if (o->help)
			return 0;
	}
	for (; optind < argc; optind++) {
		if (!o->src) {
			o->src = argv[optind];
		} else if (!o->mnt) {
			o->mnt = argv[optind];
		} else {
			snprintf(err, errlen, "unexpected argument '%s'",
				 argv[optind]);
			return -1;
		}
	}
	if (!o->src || !o->mnt) {
		snprintf(err, errlen, "need a checkpoint directory and a mount point (see --help)");
		return -1;
	}
	if (o->has_world && o->world < 1) {
		snprintf(err, errlen, "world must be at least 1, got 0");
		return -1;
	}
	if (o->ranks_spec) {
		if (o->has_rank) {
			snprintf(err, errlen, "give either rank or ranks, not both");
			return -1;
		}
		if (!o->has_world) {
			snprintf(err, errlen, "world is required with ranks");
			return -1;
		}
		if (parse_ranks(o, err, errlen))
			return -1;
		for (i = 0; i < (int)o->nranks; i++) {
			if (o->ranks[i] >= o->world) {
				snprintf(err, errlen,
					 "ranks '%s': rank %u is out of range: need 0 <= rank < world (%u)",
					 o->ranks_spec, o->ranks[i], o->world);
				return -1;
			}
		}
		o->has_rank = true;
		o->rank = o->ranks[0];
	}
	if (o->dtype && strcmp(o->dtype, "float32") != 0 &&
	    strcmp(o->dtype, "bfloat16") != 0) {
		snprintf(err, errlen, "dtype must be float32 or bfloat16, got '%s'",
			 o->dtype);
		return -1;
	}
	if (o->has_world && !o->has_rank && o->world == 1) {
		/* rank 0, the only one there is: accepted, as ckptfs.load
		 * accepts world=1 without a rank */
		o->has_rank = true;
		o->rank = 0;
	}
	if (o->has_world && !o->has_rank) {
		snprintf(err, errlen, "rank is required with world");
		return -1;
	}
	if (!o->has_world) {
		if (o->has_rank) {
			snprintf(err, errlen, "world is required with rank");
			return -1;
		}
		o->world = 1;
		o->rank = 0;
	}
	if (o->rank >= o->world) {
		snprintf(err, errlen, "rank %u is out of range: need 0 <= rank < world (%u)",
			 o->rank, o->world);
		return -1;
	}
	if (o->cache_mb < 1 || o->cache_mb > (1u << 20)) {
		snprintf(err, errlen, "cache_mb must be between 1 and 1048576 (MiB), got %u",
			 o->cache_mb);
		return -1;
	}
	if (o->max_threads < 1 || o->max_idle_threads < 1) {
		snprintf(err, errlen, "max_threads and max_idle_threads must be at least 1");
		return -1;
	}
	if (o->debug)
		o->foreground = true;
	return 0;
}

void mount_opts_destroy(struct mount_opts *o)
{
	free(o->prefix);
	free(o->fuse_opts);
	free(o->layout);
	free(o->index);
	free(o->index_cache);
	free(o->ranks);
	free(o->ranks_spec);
	free(o->dtype);
	s3_cli_destroy(&o->s3);
	memset(o, 0, sizeof(*o));
}
