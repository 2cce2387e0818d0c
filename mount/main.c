/* SPDX-License-Identifier: MIT */
/*
 * The ckptfs command: `ckptfs mount`, `ckptfs umount`, and the bare
 * `ckptfs SRC MNT -o ...` form used by mount.fuse3 and /etc/fstab.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptfs.h"
#include "cli_tools.h"
#include "mount_opts.h"
#include "mount_run.h"
#include "s3_opts.h"


static void usage(FILE *f)
{
	fprintf(f,
"usage: ckptfs mount CKPT MNT [--world W (--rank R | --ranks LIST)] [--prefix KEY]\n"
"                    [--layout FILE] [--dtype T] [-f] [-d] [-s] [-o OPTS]\n"
"       ckptfs CKPT MNT [-o world=W,rank=R,prefix=KEY,...]   (mount.fuse3 / fstab form)\n"
"       ckptfs umount MNT\n"
"       ckptfs info|ls|plan|cat|extract|stats|verify|index CKPT ...   (no mount needed; --help each)\n"
"       ckptfs --version | --help\n"
"\n"
"Mounts a distributed-training checkpoint as a read-only tree with one file\n"
"per state key, each holding rank R's slice of a world of W ranks (dim-0\n"
"split as torch.chunk(t, W, 0)[R]; one-element tensors and bytes entries\n"
"whole).  Without --world the view is the whole checkpoint (W=1, R=0).\n"
"CKPT is a ckptfs (msgpack) checkpoint or a PyTorch distributed checkpoint\n"
"(pickled .metadata, .distcp files), read directly.\n"
"\n"
"  --world W, -o world=W    new world size (>= 1)\n"
"  --rank R, -o rank=R      this rank (0 <= R < W)\n"
"  --ranks LIST, -o ranks=LIST  several ranks in one mount (0-7, 0,2,4-6):\n"
"                           the root holds rank0/ ... rankN/\n"
"  --prefix KEY, -o prefix=KEY  only keys whose first path component is KEY\n"
"  --layout FILE, -o layout=FILE  2-D (TP x DP) layout: 'PARAM OFFSETS SIZES' lines\n"
"  --index FILE, -o index=FILE  PyTorch checkpoints: a 'ckptfs index' output to use\n"
"  --index-cache DIR, -o index_cache=DIR  PyTorch checkpoints without an index:\n"
"                           index once per node, kept in DIR (created 0700;\n"
"                           at most 64 indexes) for the next open\n"
"  --dtype T, -o dtype=T    show floating tensors as float32 or bfloat16\n"
"  --format npy, -o format=npy  tensors as NAME.npy files (numpy v1.0)\n"
"  -o prefetch              push the view into the page cache after mounting\n"
"  -o cache_mb=N            memory for decoded zstd records (default 1024): each is\n"
"                           decoded once, kept LRU; none may decode to more\n"
"  -o verify                check each record's xxh3 when first read; EIO if bad\n"
"  -o follow_symlinks       allow data-file symlinks leading outside CKPT\n"
"  -o nonempty              mount over a directory that holds files\n"
"  -o readahead_kb=N        the mount's readahead (default 1024; needs root)\n"
"  -o ahead_kb=N            in-order readers of strided (e.g. transposed) records\n"
"                           or of an s3:// checkpoint:\n"
"                           windows of up to N KiB read ahead (default 8192; 0 off)\n"
"  -f                       stay in the foreground\n"
"  -d                       FUSE debug output (implies -f)\n"
"  -s                       single-threaded\n"
"  -o OPTS                  FUSE options (allow_other adds default_permissions);\n"
"                           fstab's rw,ro,nodev,nosuid,noauto,user,_netdev,x-* are ignored\n"
"\n"
"CKPT may be s3://BUCKET/PREFIX (S3, Ceph radosgw, MinIO, ...).\n"
S3_CLI_HELP);
}

static int do_umount(int argc, char **argv)
{
	pid_t pid;
	int st;

	if (argc == 2 && !strcmp(argv[0], "--")) {
		argc--;
		argv++;
	}
	if (argc != 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: ckptfs umount MNT\n");
		return 2;
	}
	pid = fork();
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", argv[0], (char *)NULL);
		_exit(127);
	}
	if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
	    WEXITSTATUS(st) == 0)
		return 0;
	if (umount2(argv[0], 0) == 0)
		return 0;
	fprintf(stderr, "ckptfs: cannot unmount %s\n", argv[0]);
	return 1;
}

static int do_mount(int argc, char **argv, const char *argv0)
{
	struct mount_opts o;
	char err[512];
	int rc;

	if (mount_opts_parse(&o, argc, argv, err, sizeof(err))) {
		fprintf(stderr, "ckptfs: %s\n", err);
		mount_opts_destroy(&o);
		return 2;
	}
	if (o.help) {
		usage(stdout);
		mount_opts_destroy(&o);
		return 0;
	}
	if (s3_cli_first(&o.s3) && strncmp(o.src, "s3://", 5)) {
		fprintf(stderr, "ckptfs: %s is only for s3:// checkpoints, not '%s'\n",
			s3_cli_first(&o.s3), o.src);
		mount_opts_destroy(&o);
		return 2;
	}
	rc = mount_run(&o, argv0);
	mount_opts_destroy(&o);
	return rc;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("ckptfs %s\n", ckpt_version());
		return 0;
	}
	rc = cli_tool_run(argc - 1, argv + 1);
	if (rc >= 0)
		return rc;
	if (strcmp(argv[1], "mount") == 0)
		return do_mount(argc - 1, argv + 1, argv[0]);
	if (strcmp(argv[1], "umount") == 0 || strcmp(argv[1], "unmount") == 0)
		return do_umount(argc - 2, argv + 2);
	return do_mount(argc, argv, argv[0]);
}
