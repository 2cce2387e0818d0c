/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of credential refresh (s3_creds.c), no server: a
 * credential_process script hands out sets that expire within seconds,
 * and its refresh call can be held (until a file appears) or fail.
 * Callers never wait for a refresh of a set still valid, a failed refresh
 * keeps the old set, freeing ends a stuck command at once, and a forked
 * child refreshes on its own.  The command inherits no descriptor but
 * stdin, stdout and stderr.  Run under TSan too (tests/tsan-stress.sh).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/s3_creds.h"
#include "io/s3_ini.h"
#include "testhelp.h"

/* The first set's life (refreshed after half of it), and the liveness
 * bound of a call that must not wait; both times CKPTFS_TIME_SCALE. */
static int LIFE_S = 8, BOUND_S = 10;

static char dir[64];

/* The script: call 1 lives $2 s; with mode "hold", call 2 touches
 * blocked (its pid in pid) and waits for release; with mode "fail", every
 * later call fails; with mode "short", every call lives $2 s; the others
 * live an hour. */
static const char script[] =
	"#!/bin/sh\n"
	"d=$1\n"
	"echo call >>\"$d/runs\"\n"
	"n=$(wc -l <\"$d/runs\")\n"
	"life=3600\n"
	"[ \"$n\" -eq 1 ] || [ \"$3\" = short ] && life=$2\n"
	"[ \"$n\" -gt 1 ] && [ \"$3\" = fail ] && exit 3\n"
	"if [ \"$n\" -eq 2 ] && [ \"$3\" = hold ]; then\n"
	"	echo $$ >\"$d/pid.tmp\" && mv \"$d/pid.tmp\" \"$d/pid\"\n"
	"	touch \"$d/blocked\"\n"
	"	i=0\n"
	"	while [ ! -e \"$d/release\" ] && [ $i -lt 2400 ]; do\n"
	"		sleep 0.05; i=$((i + 1))\n"
	"	done\n"
	"fi\n"
	"exp=$(date -u -d \"@$(($(date +%s) + life))\" +%Y-%m-%dT%H:%M:%SZ)\n"
	"printf '{\"Version\": 1, \"AccessKeyId\": \"AKID%s\", "
	"\"SecretAccessKey\": \"sk\", \"Expiration\": \"%s\"}\\n' \"$n\" "
	"\"$exp\"\n"
	"echo done >>\"$d/served\"\n";

static void path_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

static bool exists(const char *name)
{
	char p[128];

	path_of(p, sizeof(p), name);
	return access(p, F_OK) == 0;
}

static void touch(const char *name)
{
	char p[128];
	FILE *f;

	path_of(p, sizeof(p), name);
	f = fopen(p, "w");
	if (f)
		fclose(f);
}

static unsigned lines(const char *name)
{
	char p[128];
	unsigned n = 0;
	FILE *f;
	int ch;

	path_of(p, sizeof(p), name);
	f = fopen(p, "r");
	if (!f)
		return 0;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

static void msleep(unsigned ms)
{
	nanosleep(&(struct timespec){ ms / 1000, (ms % 1000) * 1000000L },
		  NULL);
}

/* A fresh directory state and credentials from the script in mode. */
static struct ckpt_s3_creds *creds_new(const char *mode)
{
	static const char *names[] = { "runs", "served", "blocked",
					"release", "pid", "child-refreshed" };
	struct ckpt_ini cred = { 0 }, conf = { 0 };
	struct ckpt_s3_creds_env e = {
		.region = "us-east-1", .profile = "default",
		.cred = &cred, .conf = &conf, .timeout_ms = 5000,
	};
	struct ckpt_s3_creds *c = NULL;
	char text[512], err[400], p[128];
	size_t i;
	int rc;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		path_of(p, sizeof(p), names[i]);
		unlink(p);
	}
	snprintf(text, sizeof(text), "[default]\ncredential_process = "
		 "%s/creds.sh %s %d %s\n", dir, dir, LIFE_S, mode);
	CHECK(ckpt_ini_parse(text, true, &conf) == 0);
	rc = ckpt_s3_creds_new(NULL, &e, &c, err, sizeof(err));
	if (rc)
		fprintf(stderr, "  creds: %s\n", err);
	CHECK(rc == 0 && c);
	ckpt_ini_destroy(&cred);
	ckpt_ini_destroy(&conf);
	return c;
}

/* The expiry of the current set (a caller's view), 0 when none. */
static int64_t cur_expires(struct ckpt_s3_creds *c)
{
	struct ckpt_s3_credset *cs;
	int64_t e;

	(void)ckpt_s3_creds_get(c, NULL, NULL, 0, &cs);
	e = cs ? cs->expires : 0;
	ckpt_s3_credset_put(cs);
	return e;
}

/* A call on another thread, waited for BOUND_S at most. */
struct call {
	struct ckpt_s3_creds *c;
	bool do_free;
	int64_t expires;
	_Atomic bool done;
};

static void *call_main(void *arg)
{
	struct call *k = arg;

	if (k->do_free)
		ckpt_s3_creds_free(k->c);
	else
		k->expires = cur_expires(k->c);
	atomic_store(&k->done, true);
	return NULL;
}

/* Run k on a thread; true when it ended within BOUND_S.  When not, the
 * held command is released and k waited for, and false returned. */
static bool bounded(struct call *k)
{
	pthread_t t;
	int i;

	atomic_store(&k->done, false);
	if (pthread_create(&t, NULL, call_main, k) != 0)
		return false;
	for (i = 0; i < BOUND_S * 100 && !atomic_load(&k->done); i++)
		msleep(10);
	if (!atomic_load(&k->done))
		touch("release");
	pthread_join(t, NULL);
	return i < BOUND_S * 100;
}

/* Many readers at once, for TSan. */
struct readers {
	struct ckpt_s3_creds *c;
	_Atomic bool stop;
	_Atomic unsigned calls;
};

static void *reader_main(void *arg)
{
	struct readers *r = arg;

	while (!atomic_load(&r->stop)) {
		struct ckpt_s3_credset *cs;

		(void)ckpt_s3_creds_get(r->c, NULL, NULL, 0, &cs);
		if (cs && cs->access_key[0])
			atomic_fetch_add(&r->calls, 1);
		ckpt_s3_credset_put(cs);
		msleep(1);
	}
	return NULL;
}

/* The refresh runs in the background: while it is held, callers get the
 * current set at once; released, its set becomes current. */
static void test_background(void)
{
	struct ckpt_s3_creds *c = creds_new("hold");
	struct readers rd = { .c = c };
	struct call k = { .c = c };
	pthread_t t[4];
	int64_t first;
	int i;

	if (!c)
		return;
	first = cur_expires(c);
	CHECK(first > 0 && ckpt_s3_creds_fetches(c) == 1);
	msleep((LIFE_S / 2 + 1) * 1000);	/* due */
	CHECK(bounded(&k));		/* this call notices: no wait */
	CHECK(k.expires == first);
	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, reader_main, &rd);
	for (i = 0; i < 500 && !exists("blocked"); i++)
		msleep(10);
	CHECK(exists("blocked") && lines("served") == 1);
	CHECK(bounded(&k));		/* still held: still no wait */
	CHECK(k.expires == first);
	touch("release");
	for (i = 0; i < 500 && ckpt_s3_creds_fetches(c) < 2; i++)
		msleep(10);
	CHECK(ckpt_s3_creds_fetches(c) == 2);
	CHECK(cur_expires(c) > first + 600);
	atomic_store(&rd.stop, true);
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(atomic_load(&rd.calls) > 0);
	CHECK(lines("runs") == 2);
	ckpt_s3_creds_free(c);
}

/* A failed refresh keeps the old set (until and after its expiry, when
 * the server's refusal says so) and is tried at most once a second. */
static void test_refresh_fails(void)
{
	struct ckpt_s3_creds *c = creds_new("fail");
	char err[320];
	int64_t first, t0;
	unsigned f;

	if (!c)
		return;
	first = cur_expires(c);
	msleep((LIFE_S / 2 + 1) * 1000);
	t0 = time(NULL);
	while (time(NULL) < t0 + 2) {
		CHECK(cur_expires(c) == first);
		msleep(20);
	}
	msleep(300);		/* the last refresh it started has ended */
	f = ckpt_s3_creds_fetches(c);
	/* call 1, then one a second over ~2 s (3 at most; 4 on a second's
	 * edge) */
	CHECK(f >= 2 && f <= 5);
	ckpt_s3_creds_last_error(c, err, sizeof(err));
	CHECK(strstr(err, "exited with status 3") != NULL);
	CHECK(strchr(err, '\n') == NULL);
	ckpt_s3_creds_free(c);
}

/* Freeing while the refresh's command is held ends it at once (not after
 * its 60 s), and the command is gone. */
static void test_free_while_stuck(void)
{
	struct ckpt_s3_creds *c = creds_new("hold");
	struct call k = { .c = c }, fr = { .c = c, .do_free = true };
	char p[128];
	FILE *f;
	int pid = 0, i;

	if (!c)
		return;
	msleep((LIFE_S / 2 + 1) * 1000);
	CHECK(bounded(&k));
	for (i = 0; i < 500 && !exists("pid"); i++)
		msleep(10);
	path_of(p, sizeof(p), "pid");
	f = fopen(p, "r");
	CHECK(f && fscanf(f, "%d", &pid) == 1);
	if (f)
		fclose(f);
	CHECK(pid > 0 && kill(pid, 0) == 0);
	CHECK(bounded(&fr));
	/* killed, and reaped by the refresher */
	CHECK(pid > 0 && kill(pid, 0) != 0 && errno == ESRCH);
	CHECK(lines("served") == 1);
}

/* credential_process inherits no descriptor of its host but stdin,
 * stdout and stderr: the host holds a socket and a file open without
 * close-on-exec (as curl's connections and a mount's /dev/fuse are),
 * and a command that lists its descriptors (ls: 0, 1, 2 and its own
 * listing's 3) refuses to hand out keys when it sees more. */
static void test_no_inherited_fds(void)
{
	static const char fds_script[] =
		"#!/bin/sh\n"
		"ls /proc/self/fd | tr '\\n' ' ' >\"$1/fds\"\n"
		"[ \"$(cat \"$1/fds\")\" = '0 1 2 3 ' ] || exit 7\n"
		"printf '{\"Version\": 1, \"AccessKeyId\": \"AKIDF\", "
		"\"SecretAccessKey\": \"sk\"}\\n'\n";
	struct ckpt_ini cred = { 0 }, conf = { 0 };
	struct ckpt_s3_creds_env e = {
		.region = "us-east-1", .profile = "default",
		.cred = &cred, .conf = &conf, .timeout_ms = 5000,
	};
	struct ckpt_s3_creds *c = NULL;
	char text[512], err[400], p[128], seen[64] = "";
	int sock, file, rc;
	FILE *f;

	path_of(p, sizeof(p), "fds.sh");
	f = fopen(p, "w");
	CHECK(f && fputs(fds_script, f) >= 0);
	if (f)
		fclose(f);
	chmod(p, 0755);
	sock = socket(AF_INET, SOCK_STREAM, 0);		/* no CLOEXEC */
	file = open("/dev/null", O_RDONLY);		/* no CLOEXEC */
	CHECK(sock >= 0 && file >= 0);
	snprintf(text, sizeof(text), "[default]\ncredential_process = "
		 "%s/fds.sh %s\n", dir, dir);
	CHECK(ckpt_ini_parse(text, true, &conf) == 0);
	rc = ckpt_s3_creds_new(NULL, &e, &c, err, sizeof(err));
	path_of(p, sizeof(p), "fds");
	f = fopen(p, "r");
	if (f) {
		if (!fgets(seen, sizeof(seen), f))
			seen[0] = '\0';
		fclose(f);
	}
	if (rc)
		fprintf(stderr, "  creds: %s; the command saw fds '%s'\n", err,
			seen);
	CHECK(rc == 0 && c);
	CHECK(strcmp(seen, "0 1 2 3 ") == 0);
	ckpt_s3_creds_free(c);
	ckpt_ini_destroy(&cred);
	ckpt_ini_destroy(&conf);
	close(sock);
	close(file);
}

#ifndef __SANITIZE_THREAD__
/* A child forked from a process whose refresher runs refreshes on its own
 * (the refresher did not come along).  Forked while it is idle: forked
 * during a fetch, the child would hold the fetch's buffers, which valgrind
 * counts as leaked.  Not under TSan: it cannot start threads in a child
 * of a threaded process. */
static void test_fork(void)
{
	struct ckpt_s3_creds *c = creds_new("short");
	struct call k = { .c = c };
	int64_t first, second;
	int i, status = 0;
	pid_t pid;

	if (!c)
		return;
	first = cur_expires(c);
	msleep((LIFE_S / 2 + 1) * 1000);
	CHECK(bounded(&k));		/* starts the refresher */
	for (i = 0; i < BOUND_S * 100 && ckpt_s3_creds_fetches(c) < 2; i++)
		msleep(10);
	second = cur_expires(c);
	CHECK(ckpt_s3_creds_fetches(c) == 2 && second > first);
	msleep((LIFE_S / 2 + 1) * 1000);	/* the second set is due */
	pid = fork();
	if (pid == 0) {
		for (i = 0; i < BOUND_S * 100; i++) {
			if (cur_expires(c) > second)
				break;
			msleep(10);
		}
		if (cur_expires(c) > second)
			touch("child-refreshed");
		/* no exit: a forked copy of a threaded process holds its
		 * threads' leftovers, which valgrind's leak check counts */
		kill(getpid(), SIGKILL);
		_exit(1);
	}
	CHECK(pid > 0);
	for (i = 0; pid > 0 && i < (BOUND_S + 2) * 100; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
		msleep(10);
	}
	if (pid > 0 && i == (BOUND_S + 2) * 100) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	CHECK(WIFSIGNALED(status) && exists("child-refreshed"));
	CHECK(lines("runs") == 3);	/* the child's refresh */
	ckpt_s3_creds_free(c);
}
#endif

int main(void)
{
	static const char *vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI",
	};
	const char *scale = getenv("CKPTFS_TIME_SCALE");
	char p[128], cmd[256];
	size_t i;
	FILE *f;
	int rc;

	if (scale && atoi(scale) > 1) {
		LIFE_S *= atoi(scale);
		BOUND_S *= atoi(scale);
	}

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	snprintf(dir, sizeof(dir), "/tmp/ckpt-creds.XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	path_of(p, sizeof(p), "creds.sh");
	f = fopen(p, "w");
	if (!f)
		return 1;
	fputs(script, f);
	fclose(f);
	chmod(p, 0755);
	TEST(test_background);
	TEST(test_refresh_fails);
	TEST(test_free_while_stuck);
	TEST(test_no_inherited_fds);
#ifndef __SANITIZE_THREAD__
	TEST(test_fork);
#endif
	rc = TEST_REPORT();
	touch("release");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return rc;
}
