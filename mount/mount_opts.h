/* SPDX-License-Identifier: MIT */
/*
 * Mount options: the `ckptfs mount SRC MNT --world W --rank R` form and
 * the `ckptfs SRC MNT -o world=W,rank=R` form that mount.fuse3 and fstab
 * use.  -o lists are parsed by libfuse's fuse_opt ("\," keeps a comma in
 * a value).  Our own keys are taken out; generic fstab keys are dropped;
 * the rest goes to FUSE.
 */
#ifndef CKFS_MOUNT_OPTS_H
#define CKFS_MOUNT_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3_opts.h"

struct mount_opts {
	const char *src;	/* borrowed from argv */
	const char *mnt;	/* borrowed from argv */
	uint32_t world, rank;
	bool has_world, has_rank;
	char *prefix;		/* owned, or NULL */
	bool foreground, debug, single_thread, allow_other, help;
	bool follow_symlinks;	/* -o follow_symlinks */
	bool nonempty;		/* -o nonempty: mount over a directory's files */
	uint32_t readahead_kb;	/* -o readahead_kb=N; 0 keeps the kernel's */
	uint32_t ahead_kb;	/* -o ahead_kb=N: read-ahead windows for
				 * in-order readers of strided files (8192;
				 * all windows: 4x that) */
	uint32_t max_threads;	/* -o max_threads=N (64) */
	uint32_t max_idle_threads;	/* -o max_idle_threads=N (16) */
	uint32_t cache_mb;	/* -o cache_mb=N: decoded (zstd) records
				 * kept in memory (1024) */
	bool prefetch;		/* -o prefetch */
	bool verify;		/* -o verify */
	bool npy;		/* --format npy, -o format=npy */
	char *layout;		/* --layout FILE, owned */
	char *index;		/* --index FILE, -o index=FILE, owned */
	char *index_cache;	/* --index-cache DIR, -o index_cache=DIR,
				 * owned; NULL: no cache */
	uint32_t *ranks;	/* --ranks LIST, owned */
	uint32_t nranks;
	char *ranks_spec;	/* as given, for messages; owned */
	char *dtype;		/* --dtype NAME, owned */
	char *fuse_opts;	/* owned: comma-separated, or NULL */
	struct s3_cli s3;	/* -o s3_NAME=V, --s3-NAME V */
};

/*
 * Parse argv[1..argc) (argv[0] is the subcommand or program name) with
 * getopt_long: options anywhere, "--" ends them.  argv may be reordered.
 * Returns 0, or -1 with a one-line reason in err.  Release with
 * mount_opts_destroy() in either case.
 */
int mount_opts_parse(struct mount_opts *o, int argc, char **argv, char *err,
		     size_t errlen);

void mount_opts_destroy(struct mount_opts *o);

/* Shared with the subcommands' parser (cli_tools.c). */

/* A whole decimal number that fits 32 bits: 0, -EINVAL (not a whole
 * number) or -ERANGE (more than UINT32_MAX). */
int mount_parse_u32(const char *s, uint32_t *out);

/* mount_parse_u32() of option what's value s: 0, or -1 with "WHAT must be
 * a whole number, got 'S'" or "WHAT must be at most 4294967295, got 'S'"
 * in err. */
int mount_num_arg(const char *what, const char *s, uint32_t *out, char *err,
		  size_t errlen);

#endif
