/* SPDX-License-Identifier: MIT */
/* Parsing mount options: see mount_opts.h. */
#include "mount_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int append_fuse_opt(struct mount_opts *o, const char *kv)
{
	size_t old = o->fuse_opts ? strlen(o->fuse_opts) : 0;
	char *p = realloc(o->fuse_opts, old + strlen(kv) + 2);

	if (!p)
		return -1;
	if (old)
		p[old++] = ',';
	strcpy(p + old, kv);
	o->fuse_opts = p;
	return 0;
}

static int set_num(const char *what, const char *val, uint32_t *slot,
		   bool *has, char *err, size_t errlen)
{
	if (mount_parse_u32(val, slot)) {
		snprintf(err, errlen, "%s must be a whole number, got '%s'",
			 what, val ? val : "");
		return -1;
	}
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

/* "0-7" or "0,2,4-6": into o->ranks, refusing duplicates (checked against
 * the world later). */
static int parse_ranks(struct mount_opts *o, char *err, size_t errlen)
{
	const char *s = o->ranks_spec;
	size_t cap = 0;

	free(o->ranks);
	o->ranks = NULL;
	o->nranks = 0;
	while (*s) {
		unsigned long long a, b;
		char *end;
		uint32_t i;

		if (*s < '0' || *s > '9')
			goto bad;
		a = strtoull(s, &end, 10);
		b = a;
		if (*end == '-') {
			if (end[1] < '0' || end[1] > '9')
				goto bad;
			b = strtoull(end + 1, &end, 10);
		}
		if ((*end && *end != ',') || b < a || b >= UINT32_MAX ||
		    b - a >= 65536)
			goto bad;
		for (; a <= b; a++) {
			for (i = 0; i < o->nranks; i++) {
				if (o->ranks[i] == a) {
					snprintf(err, errlen,
						 "ranks '%s': rank %llu is listed twice",
						 o->ranks_spec, a);
					return -1;
				}
			}
			if (o->nranks == cap) {
				uint32_t *p;

				cap = cap ? cap * 2 : 16;
				p = realloc(o->ranks, cap * sizeof(*p));
				if (!p) {
					snprintf(err, errlen, "out of memory");
					return -1;
				}
				o->ranks = p;
			}
			o->ranks[o->nranks++] = (uint32_t)a;
		}
		s = *end ? end + 1 : end;
		if (*end == ',' && !*s)
			goto bad;
	}
	if (o->nranks)
		return 0;
bad:
	snprintf(err, errlen,
		 "ranks must be a list such as 0-7 or 0,2,4-6, got '%s'",
		 o->ranks_spec);
	return -1;
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

/* One key or key=value from -o. */
static int take_o(struct mount_opts *o, char *kv, char *err, size_t errlen)
{
	char *eq = strchr(kv, '=');
	const char *val = eq ? eq + 1 : NULL;
	size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);

	if (klen == 5 && strncmp(kv, "world", 5) == 0)
		return set_num("world", val, &o->world, &o->has_world, err,
			       errlen);
	if (klen == 4 && strncmp(kv, "rank", 4) == 0)
		return set_num("rank", val, &o->rank, &o->has_rank, err,
			       errlen);
	if (klen == 12 && strncmp(kv, "readahead_kb", 12) == 0) {
		bool has;

		return set_num("readahead_kb", val, &o->readahead_kb, &has,
			       err, errlen);
	}
	if (klen == 6 && strncmp(kv, "prefix", 6) == 0)
		return set_prefix(o, val, err, errlen);
	if (klen == 6 && strncmp(kv, "layout", 6) == 0)
		return set_str(&o->layout, "layout", val, err, errlen);
	if (klen == 5 && strncmp(kv, "index", 5) == 0)
		return set_str(&o->index, "index", val, err, errlen);
	if (klen == 5 && strncmp(kv, "ranks", 5) == 0)
		return set_str(&o->ranks_spec, "ranks", val, err, errlen);
	if (klen == 5 && strncmp(kv, "dtype", 5) == 0)
		return set_str(&o->dtype, "dtype", val, err, errlen);
	if (klen == 6 && strncmp(kv, "format", 6) == 0)
		return set_format(o, val, err, errlen);
	if (strcmp(kv, "verify") == 0) {
		o->verify = true;
		return 0;
	}
	if (strcmp(kv, "prefetch") == 0) {
		o->prefetch = true;
		return 0;
	}
	if (strcmp(kv, "follow_symlinks") == 0) {
		o->follow_symlinks = true;
		return 0;
	}
	if (strcmp(kv, "debug") == 0) {
		o->debug = true;
		return 0;
	}
	if (strcmp(kv, "allow_other") == 0)
		o->allow_other = true;
	if (is_ignored(kv) || !*kv)
		return 0;
	if (append_fuse_opt(o, kv)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

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

static int take_o_list(struct mount_opts *o, const char *list, char *err,
		       size_t errlen)
{
	char *copy = strdup(list), *save = NULL, *kv;
	bool in_ranks = false;
	int rc = 0;

	if (!copy) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (kv = strtok_r(copy, ",", &save); kv && !rc;
	     kv = strtok_r(NULL, ",", &save)) {
		if (in_ranks && is_rank_item(kv)) {
			size_t n = strlen(o->ranks_spec);
			char *p = realloc(o->ranks_spec, n + strlen(kv) + 2);

			if (!p) {
				snprintf(err, errlen, "out of memory");
				rc = -1;
				break;
			}
			p[n] = ',';
			strcpy(p + n + 1, kv);
			o->ranks_spec = p;
			continue;
		}
		in_ranks = strncmp(kv, "ranks=", 6) == 0;
		rc = take_o(o, kv, err, errlen);
	}
	free(copy);
	return rc;
}

const char *mount_long_value(int argc, char **argv, int *i, const char *name)
{
	size_t n = strlen(name);

	if (strncmp(argv[*i], name, n) != 0)
		return NULL;
	if (argv[*i][n] == '=')
		return argv[*i] + n + 1;
	if (argv[*i][n] == '\0' && *i + 1 < argc)
		return argv[++*i];
	if (argv[*i][n] == '\0')
		return "";
	return NULL;
}

int mount_opts_parse(struct mount_opts *o, int argc, char **argv, char *err,
		     size_t errlen)
{
	const char *v;
	int i;

	memset(o, 0, sizeof(*o));
	o->readahead_kb = 1024;
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			o->help = true;
			return 0;
		}
		if (strcmp(a, "-f") == 0) {
			o->foreground = true;
		} else if (strcmp(a, "-d") == 0) {
			o->debug = true;
		} else if (strcmp(a, "-s") == 0) {
			o->single_thread = true;
		} else if (strcmp(a, "-o") == 0 || strncmp(a, "-o", 2) == 0) {
			const char *list = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);

			if (!list) {
				snprintf(err, errlen, "-o needs a list of options");
				return -1;
			}
			if (take_o_list(o, list, err, errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--world"))) {
			if (set_num("--world", v, &o->world, &o->has_world,
				    err, errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--rank"))) {
			if (set_num("--rank", v, &o->rank, &o->has_rank, err,
				    errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--prefix"))) {
			if (set_prefix(o, v, err, errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--index"))) {
			if (set_str(&o->index, "--index", v, err, errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--layout"))) {
			if (set_str(&o->layout, "--layout", v, err, errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--ranks"))) {
			if (set_str(&o->ranks_spec, "--ranks", v, err, errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--format"))) {
			if (set_format(o, v, err, errlen))
				return -1;
		} else if ((v = mount_long_value(argc, argv, &i, "--dtype"))) {
			if (set_str(&o->dtype, "--dtype", v, err, errlen))
				return -1;
		} else if (a[0] == '-' && a[1]) {
			snprintf(err, errlen, "unknown option '%s' (see --help)", a);
			return -1;
		} else if (!o->src) {
			o->src = a;
		} else if (!o->mnt) {
			o->mnt = a;
		} else {
			snprintf(err, errlen, "unexpected argument '%s'", a);
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
	free(o->ranks);
	free(o->ranks_spec);
	free(o->dtype);
	memset(o, 0, sizeof(*o));
}
