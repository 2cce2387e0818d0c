/* SPDX-License-Identifier: MIT */
/*
 * The mount lifecycle.  Everything that can fail on input (metadata, data
 * files, options, the view tree) is checked before fuse_session_mount(),
 * so errors reach the terminal and no mount is left behind.  In the
 * background form the parent returns only after the mount exists.
 */
#include "mount_run.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "ckptfs.h"
#include "../fs/ops.h"
#include "../fs/prefetch.h"
#include "mountpoint.h"
#include "shutdown.h"

#define ATTR_TIMEOUT 86400.0

/* fsname=... with ',' and '\' escaped for fuse_opt. */
static char *fsname_opt(const char *src)
{
	size_t n = strlen(src), i, o = 0;
	char *s = malloc(2 * n + sizeof("fsname=ckptfs:"));

	if (!s)
		return NULL;
	o = (size_t)sprintf(s, "fsname=ckptfs:");
	for (i = 0; i < n; i++) {
		if (src[i] == ',' || src[i] == '\\')
			s[o++] = '\\';
		s[o++] = src[i];
	}
	s[o] = '\0';
	return s;
}

static int build_args(const struct mount_opts *o, const char *argv0,
		      const char *src, struct fuse_args *args)
{
	char *fsname = fsname_opt(src);
	int rc = -1;

	if (!fsname)
		return -1;
	if (fuse_opt_add_arg(args, argv0) ||
	    fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, "ro,subtype=ckptfs"))
		goto out_free;
	if (fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, fsname))
		goto out_free;
	if (o->allow_other && (fuse_opt_add_arg(args, "-o") ||
			       fuse_opt_add_arg(args, "default_permissions")))
		goto out_free;
	if (o->fuse_opts && (fuse_opt_add_arg(args, "-o") ||
			     fuse_opt_add_arg(args, o->fuse_opts)))
		goto out_free;
	if (o->debug && fuse_opt_add_arg(args, "-d"))
		goto out_free;
	rc = 0;
out_free:
	free(fsname);
	return rc;
}

/* The mount's device (major:minor of its st_dev), from
 * /proc/self/mountinfo: not by stat(), which would be a request to this
 * very daemon, not serving yet.  Returns true when found. */
static bool find_mount_dev(const char *mnt_abs, unsigned *maj, unsigned *min)
{
	char line[8192], point[PATH_MAX];
	unsigned a, b;
	bool found = false;
	FILE *f;

	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		/* id parent major:minor root mountpoint ... */
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, point) == 3 &&
		    strcmp(point, mnt_abs) == 0 && strstr(line, "fuse.ckptfs")) {
			*maj = a;
			*min = b;
			found = true;
		}
	}
	fclose(f);
	return found;
}

/*
 * The kernel caps a FUSE mount's readahead at 128 KiB, so sequential reads
 * and mmap faults arrive as 128 KiB requests whatever max_pages allows.
 * Root may raise it through the mount's backing device.  The kernel
 * resets it while handling INIT, so fs/ writes it at the first request
 * after that.  Best effort: without root the default stays.
 */
static void set_readahead_knob(unsigned maj, unsigned min, unsigned kb,
			       struct ckfs *fs)
{
	if (kb == 0)
		return;
	snprintf(fs->readahead_path, sizeof(fs->readahead_path),
		 "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
	fs->readahead_kb = kb;
}

static void warn_unmatched(void *ctx, const char *msg)
{
	char safe[1536];

	(void)ctx;
	fprintf(stderr, "ckptfs: warning: %s\n",
		ckpt_line_for_msg(msg, safe, sizeof(safe)));
}

static int serve(struct fuse_session *se, const struct mount_opts *o)
{
	struct fuse_loop_config *cfg;
	int rc;

	if (o->single_thread)
		return fuse_session_loop(se);
	cfg = fuse_loop_cfg_create();
	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_idle_threads(cfg, o->max_idle_threads);
	fuse_loop_cfg_set_max_threads(cfg, o->max_threads);
	rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
}

int mount_run(const struct mount_opts *o, const char *argv0)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct ckpt_view_opts vo = { 0 };
	struct ckpt_meta *meta = NULL;
	struct ckpt_view *view = NULL;
	struct ckpt_layout *layout = NULL;
	struct fuse_session *se;
	char src[PATH_MAX], mnt_abs[PATH_MAX];
	char err[1024];
	struct ckpt_open_opts mo = { 0 };
	struct ckpt_s3_opts s3o;
	struct ckpt_meta_info mi;
	struct shutdown sd = { 0 };
	unsigned maj = 0, min = 0;
	bool dev_known;
	struct ckfs fs;
	int rc, status = 1;

	/* An object-store root (s3://bucket/prefix) is used as given. */
	if (ckpt_root_is_remote(o->src)) {
		if (strlen(o->src) >= sizeof(src)) {
			fprintf(stderr, "ckptfs: %.64s...: name too long\n",
				o->src);
			return 1;
		}
		strcpy(src, o->src);
	} else if (!realpath(o->src, src)) {
		fprintf(stderr, "ckptfs: %s: %s\n", o->src, strerror(errno));
		return 1;
	}
	if (mountpoint_check(o->mnt, o->nonempty, err, sizeof(err))) {
		fprintf(stderr, "ckptfs: %s\n", err);
		return 1;
	}
	if (!realpath(o->mnt, mnt_abs)) {
		fprintf(stderr, "ckptfs: cannot mount on %s: %s\n", o->mnt,
			strerror(errno));
		return 1;
	}
	memset(&fs, 0, sizeof(fs));	/* ckfs_prefetch_init() below */
	fs.use_syslog = !o->foreground;
	s3_cli_fill(&o->s3, &s3o);
	mo.s3 = &s3o;
	mo.index = o->index;
	mo.index_cache = o->index_cache;
	mo.follow_symlinks = o->follow_symlinks;
	mo.cache_bytes = (uint64_t)o->cache_mb << 20;
	rc = ckpt_meta_open_opts(src, &mo, &meta, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "ckptfs: %s\n", err);
		return 1;
	}
	/* From here on the root as the store shows it: never a SAS token
	 * that a blob URL carries (in the log, the xattrs, /proc/mounts). */
	ckpt_meta_info(meta, &mi);
	snprintf(src, sizeof(src), "%s", mi.dir);
	if (ckpt_meta_warning(meta))
		fprintf(stderr, "ckptfs: warning: %s\n", ckpt_meta_warning(meta));
	if (o->debug && ckpt_meta_credentials(meta))
		fprintf(stderr, "ckptfs: %s: credentials: %s\n", src,
			ckpt_meta_credentials(meta));
	vo.world = o->world;
	vo.rank = o->rank;
	vo.ranks = o->ranks;
	vo.nranks = o->nranks;
	vo.prefix = o->prefix;
	vo.dtype = CKPT_DTYPE_COUNT;
	vo.verify = o->verify;
	vo.report = ckfs_report_corrupt;
	vo.report_ctx = &fs;
	vo.npy = o->npy;
	vo.meta_dir = true;
	vo.source = src;
	vo.layout_path = o->layout;
	if (o->dtype)
		ckpt_dtype_from_name(o->dtype, strlen(o->dtype), &vo.dtype);
	if (o->layout) {
		if (ckpt_layout_load(o->layout, &layout, err, sizeof(err)) ||
		    ckpt_layout_bind(layout, meta, err, sizeof(err))) {
			fprintf(stderr, "ckptfs: %s\n", err);
			goto out_meta;
		}
		ckpt_layout_unmatched(layout, warn_unmatched, NULL);
		vo.layout = layout;
	}
	rc = ckpt_view_new(meta, &vo, &view, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "ckptfs: %s\n", err);
		goto out_meta;
	}
	/* The daemon is its own process: it may use every fd it can get. */
	rc = ckpt_files_open(meta, CKPT_FILES_RAISE_NOFILE |
			     (o->follow_symlinks ? CKPT_FILES_FOLLOW_SYMLINKS : 0),
			     0, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "ckptfs: %s\n", err);
		goto out_view;
	}
	ckfs_prefetch_init(&fs);
	fs.view = view;
	ckpt_view_info(view, &fs.vi);
	ckpt_meta_info(meta, &mi);
	fs.mtime.tv_sec = (time_t)mi.mtime_sec;
	fs.mtime.tv_nsec = mi.mtime_nsec;
	fs.uid = getuid();
	fs.gid = getgid();
	fs.timeout = ATTR_TIMEOUT;
	fs.debug = o->debug;
	if (build_args(o, argv0, src, &args)) {
		fprintf(stderr, "ckptfs: out of memory\n");
		goto out_fs;
	}
	fs.ra = ckpt_readahead_new((uint64_t)o->ahead_kb << 10,
				   (uint64_t)4 * o->ahead_kb << 10);
	se = fuse_session_new(&args, &ckfs_ops, sizeof(ckfs_ops), &fs);
	if (!se) {
		fprintf(stderr, "ckptfs: cannot start FUSE with these options (see above)\n");
		goto out_args;
	}
	/* Before any thread exists: see shutdown.h.  libfuse's own handlers
	 * are not installed. */
	shutdown_block_signals();
	if (fuse_session_mount(se, o->mnt)) {
		fprintf(stderr, "ckptfs: cannot mount on %s\n", o->mnt);
		goto out_session;
	}
	dev_known = find_mount_dev(mnt_abs, &maj, &min);
	if (dev_known)
		set_readahead_knob(maj, min, o->readahead_kb, &fs);
	if (fuse_daemonize(o->foreground)) {
		fprintf(stderr, "ckptfs: cannot go to the background\n");
		goto out_unmount;
	}
	fs.mnt = mnt_abs;
	if (shutdown_start(&sd, se, &fs, meta, mnt_abs, dev_known, maj, min)) {
		fprintf(stderr, "ckptfs: cannot start the control thread\n");
		goto out_unmount;
	}
	if (o->prefetch && ckfs_prefetch_start(&fs))
		fprintf(stderr, "ckptfs: cannot start prefetching; serving without\n");
	rc = serve(se, o);
	shutdown_loop_ended(&sd);
	/* The control thread stops it too (and cancels the store), within
	 * its deadline; when the mount went away, the connection has ended
	 * and the helper's requests fail at once.  Before the unmount. */
	shutdown_stage(&sd, "waiting for the prefetch thread to stop after the loop ended");
	ckfs_prefetch_stop_wait(&fs, NULL);
	ckfs_release_thread_buffer();
	shutdown_stage(&sd, "unmounting");
	status = rc == 0 || shutdown_signal(&sd) ? 0 : 1;
out_unmount:
	fuse_session_unmount(se);
	shutdown_finish(&sd);
out_session:
	fuse_session_destroy(se);
out_args:
	ckpt_readahead_free(fs.ra);
	fuse_opt_free_args(&args);
out_fs:
	ckfs_prefetch_destroy(&fs);
out_view:
	ckpt_view_free(view);
out_meta:
	ckpt_layout_free(layout);
	ckpt_meta_free(meta);
	return status;
}
