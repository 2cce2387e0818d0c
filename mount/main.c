/* SPDX-License-Identifier: MIT */
/*
 * The ckptfs command: `ckptfs mount`, `ckptfs umount`, and the bare
 * `ckptfs SRC MNT -o ...` form used by mount.fuse3 and /etc/fstab.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptfs.h"
#include "cli_tools.h"
#include "mount_opts.h"
#include "mount_run.h"
#include "mountpoint.h"
#include "s3_opts.h"


/* Every mount option: `ckptfs help options` (and the man page). */
static void options_help(FILE *f)
{
	fprintf(f,
"usage: ckptfs mount CKPT MNT [--world W (--rank R | --ranks LIST)] [--prefix KEY]\n"
"                    [--layout FILE] [--dtype T] [-f] [-d] [-s] [-o OPTS]\n"
"       ckptfs CKPT MNT [-o world=W,rank=R,prefix=KEY,...]   (mount.fuse3 / fstab form)\n"
"       ckptfs umount MNT\n"
"       ckptfs info|ls|plan|cat|extract|stats|verify|index CKPT ...   (no mount needed; --help each)\n"
"       ckptfs help [COMMAND | s3] | --version | --help\n"
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
"  -o prefetch              read the view through the mount into the page cache\n"
"                           after mounting (a helper process; never blocks a kill)\n"
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
"CKPT may be s3://BUCKET/PREFIX (S3, Ceph radosgw, MinIO, ...): its settings\n"
"(endpoint, region, profile, ...) in 'ckptfs help s3'.\n");
}

/* `ckptfs --help`, `ckptfs mount --help`: short; the rest is in
 * `ckptfs help options`, `ckptfs help s3` and the man page. */
static void usage(FILE *f)
{
	fprintf(f,
"usage: ckptfs mount CKPT MNT [--world W (--rank R | --ranks LIST)] [OPTIONS]\n"
"       ckptfs CKPT MNT [-o world=W,rank=R,...]   (mount.fuse3 / fstab form)\n"
"       ckptfs umount MNT\n"
"       ckptfs info|ls|plan|cat|extract|stats|verify|index CKPT ...   (no mount; --help each)\n"
"       ckptfs help [COMMAND | options | s3] | --version | --help\n"
"\n"
"Mounts a distributed-training checkpoint read-only, one file per state key,\n"
"each holding rank R's slice of a world of W ranks (torch.chunk(t, W, 0)[R];\n"
"one-element tensors and bytes entries whole; no --world: the whole view).\n"
"\n"
"  --world W --rank R       the new world size and this rank (-o world=,rank=)\n"
"  --prefix KEY             only keys under KEY      -f  stay in the foreground\n"
"  -o OPTS                  prefetch, cache_mb=N, nonempty, allow_other, ...\n"
"\n"
"Every option: 'ckptfs help options' (or man ckptfs).  CKPT may be\n"
"s3://BUCKET/PREFIX: its settings in 'ckptfs help s3'.\n");
}

/* A bare `ckptfs`: the forms, and where the rest is. */
static void short_usage(FILE *f)
{
	fprintf(f,
"usage: ckptfs mount CKPT MNT [--world W --rank R] [OPTIONS]\n"
"       ckptfs umount MNT\n"
"       ckptfs info|ls|plan|cat|extract|stats|verify|index CKPT ...\n"
"       ckptfs help [COMMAND | s3]   ckptfs --version\n");
}

static void s3_help(FILE *f)
{
	fprintf(f,
"S3 settings of ckptfs mount and of every subcommand, for CKPT =\n"
"s3://BUCKET/PREFIX (S3, Ceph radosgw, MinIO, ...); each is an option\n"
"--s3-NAME V and an -o key s3_NAME=V (fstab lines).  Given for a checkpoint\n"
"that is not s3://, they are refused.\n" S3_CLI_HELP
"\n"
"Azure Blob Storage, CKPT = az://ACCOUNT/CONTAINER/PREFIX or a blob URL\n"
"(https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX[?SAS]): the\n"
"settings above but region, profile, files and addressing style, and\n"
"  --az-endpoint URL        the account's blob endpoint (-o az_endpoint=;\n"
"                           else AZURE_STORAGE_BLOB_ENDPOINT)\n"
"  --az-anonymous           unsigned requests (-o az_anonymous)\n"
"Credentials: a SAS on the URL, AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY,\n"
"AZURE_STORAGE_CONNECTION_STRING (docs/azure.md).\n");
}

/* The subcommands main() dispatches to: the tools, then these. */
static const char *const own_commands[] = { "mount", "umount", "unmount",
					    "help", NULL };

static const char *command_name(size_t i)
{
	size_t n = 0;

	while (own_commands[n])
		n++;
	return i < n ? own_commands[i] : cli_tool_name(i - n);
}

static bool is_command(const char *s)
{
	const char *c;
	size_t i;

	for (i = 0; (c = command_name(i)); i++)
		if (!strcmp(s, c))
			return true;
	return false;
}

/* Levenshtein distance of a and b (short words: a row on the stack). */
static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, row[33], prev, tmp;

	if (la > 32 || lb > 32)
		return 99;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		prev = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			tmp = row[j];
			row[j] = prev + (a[i - 1] != b[j - 1]);
			if (row[j - 1] + 1 < row[j])
				row[j] = row[j - 1] + 1;
			if (tmp + 1 < row[j])
				row[j] = tmp + 1;
			prev = tmp;
		}
	}
	return row[lb];
}

/* An unknown command word: say so, with the closest command when one is
 * within two edits, else the list.  Returns the exit code, 2. */
static int unknown_command(const char *word)
{
	const char *best = NULL, *c;
	size_t i, d, bestd = 3;

	for (i = 0; (c = command_name(i)); i++) {
		d = distance(word, c);
		if (d < bestd) {
			bestd = d;
			best = c;
		}
	}
	if (best) {
		fprintf(stderr, "ckptfs: unknown command '%s'; did you mean '%s'?\n",
			word, best);
		return 2;
	}
	fprintf(stderr, "ckptfs: unknown command '%s' (commands:", word);
	for (i = 0; (c = command_name(i)); i++)
		if (strcmp(c, "unmount"))
			fprintf(stderr, " %s", c);
	fprintf(stderr, "; ckptfs --help)\n");
	return 2;
}

/* Options that stand alone (no value follows them). */
static bool is_flag(const char *s)
{
	static const char *const flags[] = { "-f", "-d", "-s", "-h", "-V",
		"--help", "--force", "--version", NULL };
	size_t i;

	if (!strncmp(s, "--", 2) && strchr(s, '='))
		return true;		/* --name=value */
	if (s[0] == '-' && s[1] == 'o' && s[2])
		return true;		/* -oLIST */
	for (i = 0; flags[i]; i++)
		if (!strcmp(s, flags[i]))
			return true;
	return false;
}

/*
 * `ckptfs --world 2 --rank 0 ls CKPT`: options before the command.  When
 * the first word after them is a command, move it to argv[1], so that the
 * command parses the options as its own (getopt_long takes them anywhere).
 * Returns the index of that first word (1 once moved), or 0 when there is
 * none.
 */
static int command_first(int argc, char **argv)
{
	char *cmd;
	int i = 1;

	while (i < argc && argv[i][0] == '-' && strcmp(argv[i], "--"))
		i += is_flag(argv[i]) ? 1 : 2;
	if (i >= argc || !strcmp(argv[i], "--"))
		return 0;
	if (!is_command(argv[i]))
		return i;
	cmd = argv[i];
	memmove(argv + 2, argv + 1, (size_t)(i - 1) * sizeof(*argv));
	argv[1] = cmd;
	return 1;
}

/* argv[1] of the mount.fuse3/fstab form is CKPT: a path or s3://...  A
 * word with no '/' that names nothing here is a mistyped command. */
static bool is_plain_word(const char *s)
{
	struct stat st;

	return s[0] != '-' && !strchr(s, '/') && strncmp(s, "s3:", 3) &&
	       lstat(s, &st) != 0;
}

static int do_umount(int argc, char **argv)
{
	struct stat sb;
	pid_t pid;
	int st;

	if (argc == 1 && (!strcmp(argv[0], "--help") ||
			  !strcmp(argv[0], "-h"))) {
		printf("usage: ckptfs umount MNT\n"
		       "  unmount a ckptfs mount (fusermount3 -u, else umount(2)); the daemon exits\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[0], "--")) {
		argc--;
		argv++;
	}
	if (argc != 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: ckptfs umount MNT\n");
		return 2;
	}
	if (stat(argv[0], &sb) && errno != ENOTCONN) {
		fprintf(stderr, "ckptfs: umount: %s: %s\n", argv[0],
			strerror(errno));
		return 1;
	}
	if (!mountpoint_is_mounted(argv[0])) {
		fprintf(stderr, "ckptfs: umount: %s is not mounted\n", argv[0]);
		return 1;
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
	if (s3_cli_first(&o.s3) && !ckpt_root_is_remote(o.src)) {
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
		short_usage(stderr);
		fprintf(stderr, "(ckptfs --help for the options)\n");
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		if (argc > 2 && !strcmp(argv[2], "s3")) {
			s3_help(stdout);
			return 0;
		}
		if (argc > 2 && !strcmp(argv[2], "options")) {
			options_help(stdout);
			return 0;
		}
		if (argc > 2 && (!strcmp(argv[2], "umount") ||
				 !strcmp(argv[2], "unmount")))
			return do_umount(1, (char *[]){ (char *)"--help", NULL });
		if (argc > 2 && is_command(argv[2]) && strcmp(argv[2], "help") &&
		    strcmp(argv[2], "mount")) {
			char *sub[] = { argv[2], (char *)"--help", NULL };

			return cli_tool_run(2, sub);
		}
		if (argc > 2 && strcmp(argv[2], "mount"))
			return unknown_command(argv[2]);
		usage(stdout);
		return 0;
	}
	if (argv[1][0] == '-' && strcmp(argv[1], "--version") &&
	    strcmp(argv[1], "-V")) {
		int w = command_first(argc, argv);

		if (w > 1 && is_plain_word(argv[w]))
			return unknown_command(argv[w]);
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
	if (is_plain_word(argv[1]))
		return unknown_command(argv[1]);
	return do_mount(argc, argv, argv[0]);
}
