/* SPDX-License-Identifier: MIT */
/*
 * ceilfs: the FUSE ceiling for `make bench`.  The least any FUSE view can
 * do: one read-only file, "data", served straight from a backing file by
 * pread into a reply buffer, with the same settings as ckptfs (low-level
 * API, multi-threaded loop, 1 MiB requests, keep_cache, long timeouts).
 *
 *     ceilfs BACKING MNT [-f] [-s] [--sizes FILE]
 *
 * With --sizes (one decimal size per line), it serves that many files
 * instead, f0000000, f0000001, ..., consecutive slices of the backing file:
 * the ceiling for a tree with as many files as a view.
 */
#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int backing = -1;
static off_t backing_size;
static struct timespec backing_mtime;
static size_t nfiles;		/* 0: the single file "data" */
static off_t *fsize, *fstart;	/* per file with --sizes */

static off_t size_of(fuse_ino_t ino)
{
	return nfiles ? fsize[ino - 2] : backing_size;
}

static off_t start_of(fuse_ino_t ino)
{
	return nfiles ? fstart[ino - 2] : 0;
}

static void fill(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mtim = backing_mtime;
	if (ino == 1) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = size_of(ino);
	}
}

static int read_sizes(const char *path)
{
	FILE *f = fopen(path, "r");
	long long v;
	size_t cap = 0;
	off_t at = 0;

	if (!f)
		return -1;
	while (fscanf(f, "%lld", &v) == 1) {
		if (nfiles == cap) {
			cap = cap ? 2 * cap : 256;
			fsize = realloc(fsize, cap * sizeof(*fsize));
			fstart = realloc(fstart, cap * sizeof(*fstart));
			if (!fsize || !fstart)
				return -1;
		}
		fsize[nfiles] = v;
		fstart[nfiles++] = at;
		at += v;
	}
	fclose(f);
	return at <= backing_size && nfiles ? 0 : -1;
}

/* "data", or f%07zu with --sizes; ino of a name, 0 if none. */
static fuse_ino_t ino_of(const char *name)
{
	char *end;
	unsigned long i;

	if (!nfiles)
		return strcmp(name, "data") == 0 ? 2 : 0;
	if (name[0] != 'f')
		return 0;
	i = strtoul(name + 1, &end, 10);
	return *end || i >= nfiles ? 0 : (fuse_ino_t)i + 2;
}

static void c_init(void *ud, struct fuse_conn_info *conn)
{
	(void)ud;
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
				  FUSE_CAP_SPLICE_MOVE);
	conn->max_background = 64;
	conn->congestion_threshold = 48;
}

static void c_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	fuse_ino_t ino = parent == 1 ? ino_of(name) : 0;

	if (!ino) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = ino;
	e.attr_timeout = e.entry_timeout = 86400;
	fill(ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void c_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	fill(ino, &st);
	fuse_reply_attr(req, &st, 86400);
}

static void c_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	size_t n = 0, count = nfiles ? nfiles : 1, cap = size < 65536 ? size : 65536;
	char *buf = malloc(cap), name[32];
	struct stat st;

	(void)fi;
	(void)ino;
	while (buf && (size_t)off < count) {
		size_t e;

		if (nfiles)
			snprintf(name, sizeof(name), "f%07lld", (long long)off);
		else
			strcpy(name, "data");
		fill((fuse_ino_t)off + 2, &st);
		e = fuse_add_direntry(req, buf + n, cap - n, name, &st, off + 1);
		if (e > cap - n)
			break;
		n += e;
		off++;
	}
	fuse_reply_buf(req, buf, n);
	free(buf);
}

static void c_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void c_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	char *buf = malloc(size ? size : 1);
	ssize_t n;

	(void)fi;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (off >= size_of(ino))
		size = 0;
	else if ((off_t)size > size_of(ino) - off)
		size = (size_t)(size_of(ino) - off);
	n = size ? pread(backing, buf, size, start_of(ino) + off) : 0;
	if (n < 0)
		fuse_reply_err(req, EIO);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	free(buf);
}

static const struct fuse_lowlevel_ops ops = {
	.init = c_init,
	.lookup = c_lookup,
	.getattr = c_getattr,
	.readdir = c_readdir,
	.open = c_open,
	.read = c_read,
};

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg;
	struct fuse_session *se;
	int fg = 0, single = 0, i, rc;
	const char *sizes = NULL;
	struct stat st;

	if (argc < 3) {
		fprintf(stderr, "usage: ceilfs BACKING MNT [-f] [-s] [--sizes FILE]\n");
		return 2;
	}
	for (i = 3; i < argc; i++) {
		fg |= strcmp(argv[i], "-f") == 0;
		single |= strcmp(argv[i], "-s") == 0;
		if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
			sizes = argv[++i];
	}
	backing = open(argv[1], O_RDONLY);
	if (backing < 0 || fstat(backing, &st) < 0) {
		perror(argv[1]);
		return 1;
	}
	backing_size = st.st_size;
	backing_mtime = st.st_mtim;
	if (sizes && read_sizes(sizes)) {
		fprintf(stderr, "ceilfs: %s: bad sizes (more than the backing file?)\n",
			sizes);
		return 1;
	}
	fuse_opt_add_arg(&args, argv[0]);
	fuse_opt_add_arg(&args, "-o");
	fuse_opt_add_arg(&args, "ro,fsname=ceilfs,subtype=ceilfs");
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		return 1;
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	fuse_set_signal_handlers(se);
	if (fuse_session_mount(se, argv[2]))
		return 1;
	fuse_daemonize(fg);
	if (single) {
		rc = fuse_session_loop(se);
	} else {
		cfg = fuse_loop_cfg_create();
		fuse_loop_cfg_set_idle_threads(cfg, 16);
		fuse_loop_cfg_set_max_threads(cfg, 64);
		rc = fuse_session_loop_mt(se, cfg);
		fuse_loop_cfg_destroy(cfg);
	}
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	return rc ? 1 : 0;
}
