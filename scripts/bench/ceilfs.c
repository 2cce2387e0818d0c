/* SPDX-License-Identifier: MIT */
/*
 * ceilfs: the FUSE ceiling for `make bench`.  The least any FUSE view can
 * do: one read-only file, "data", served straight from a backing file by
 * pread into a reply buffer, with the same settings as ckptfs (low-level
 * API, multi-threaded loop, 1 MiB requests, keep_cache, long timeouts).
 *
 *     ceilfs BACKING MNT [-f] [-s]
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
		st->st_size = backing_size;
	}
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

	if (parent != 1 || strcmp(name, "data") != 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = 2;
	e.attr_timeout = e.entry_timeout = 86400;
	fill(2, &e.attr);
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
	char buf[512];
	size_t n = 0;
	struct stat st;

	(void)fi;
	(void)ino;
	if (off == 0) {
		fill(2, &st);
		n = fuse_add_direntry(req, buf, sizeof(buf) < size ? sizeof(buf) : size,
				      "data", &st, 1);
	}
	fuse_reply_buf(req, buf, n);
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

	(void)ino;
	(void)fi;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = pread(backing, buf, size, off);
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
	struct stat st;

	if (argc < 3) {
		fprintf(stderr, "usage: ceilfs BACKING MNT [-f] [-s]\n");
		return 2;
	}
	for (i = 3; i < argc; i++) {
		fg |= strcmp(argv[i], "-f") == 0;
		single |= strcmp(argv[i], "-s") == 0;
	}
	backing = open(argv[1], O_RDONLY);
	if (backing < 0 || fstat(backing, &st) < 0) {
		perror(argv[1]);
		return 1;
	}
	backing_size = st.st_size;
	backing_mtime = st.st_mtim;
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
