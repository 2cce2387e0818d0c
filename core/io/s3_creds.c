/* SPDX-License-Identifier: MIT */
/* S3 credentials: the SDKs' chain, credential_process and refresh (see
 * s3_creds.h). */
#include "io/s3_creds.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/forksafe.h"
#include "io/s3_credhttp.h"

#define REFRESH_AHEAD_S 300	/* refresh this long before expiry... */
#define PROCESS_OUT_MAX (64u << 10)
#define PROCESS_TIMEOUT_MS 60000
#define CANCEL_POLL_MS 100	/* a stopping refresher notices this fast */
#define TOKEN_FILE_MAX (64u << 10)
#define CHAIN_DEPTH_MAX 8
#define IMDS_DEFAULT "http://169.254.169.254"
#define CONTAINER_HOST "http://169.254.170.2"
#define IMDS_TIMEOUT_MS 1000	/* botocore's metadata_service_timeout */

extern char **environ;

enum kind {
	K_STATIC, K_PROCESS, K_ASSUME, K_WEBID, K_CONTAINER, K_IMDS,
	K_SOURCE,
};

/* How to fetch a set, again and again. */
struct recipe {
	enum kind kind;
	struct ckpt_s3_credset *fixed;	/* K_STATIC */
	char *command;			/* K_PROCESS */
	char *role_arn;			/* K_ASSUME, K_WEBID */
	char *session_name;
	char *external_id;
	uint32_t duration_s;
	char *token_file;		/* K_WEBID */
	char *sts_endpoint;		/* K_ASSUME, K_WEBID */
	char *region;
	struct recipe *source;		/* K_ASSUME's signer */
	char *url;			/* K_CONTAINER; K_IMDS's endpoint */
	char *auth;			/* K_CONTAINER */
	char *auth_file;
	struct ckpt_s3_creds_source src;	/* K_SOURCE */
	char *what;			/* for messages, no secret */
};

struct ckpt_s3_creds {
	pthread_mutex_t lock;
	pthread_cond_t refreshed;	/* a refresh ended */
	pthread_cond_t wake;		/* for the refresher: want or stop */
	struct recipe *r;		/* NULL: unsigned requests */
	char *source;
	uint32_t timeout_ms;
	char *ca_bundle;		/* or NULL: the system's CAs */
	struct ckpt_s3_credset *cur;	/* guarded by lock */
	int64_t fetched_at;		/* of cur; guarded by lock */
	bool refreshing;		/* a refresh asked for or running;
					 * guarded by lock */
	bool want;			/* the refresher should fetch;
					 * guarded by lock */
	bool stop;			/* the refresher should end; guarded
					 * by lock */
	_Atomic bool cancel;		/* a running fetch should give up
					 * (set with stop) */
	bool has_thread;		/* the refresher runs; guarded by
					 * lock */
	pthread_t thread;		/* guarded by lock */
	pid_t pid;			/* the process that has_thread and
					 * refreshing speak for (a forked
					 * child has no refresher); guarded
					 * by lock */
	int64_t next_try;		/* after a failed refresh; guarded by
					 * lock */
	char last_err[320];		/* guarded by lock */
	_Atomic unsigned fetches;
	struct ckpt_fork_hook fork;	/* creds_fork_prepare() and the
					 * rest */
};

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static struct ckpt_s3_credset *credset_ref(struct ckpt_s3_credset *c)
{
	if (c)
		atomic_fetch_add(&c->refs, 1);
	return c;
}

/* ------------------------------------------------------------------ */
/* Recipes */

static void recipe_free(struct recipe *r)
{
	if (!r)
		return;
	ckpt_s3_credset_put(r->fixed);
	free(r->command);
	free(r->role_arn);
	free(r->session_name);
	free(r->external_id);
	free(r->token_file);
	free(r->sts_endpoint);
	free(r->region);
	recipe_free(r->source);
	free(r->url);
	wipe_free(r->auth);
	free(r->auth_file);
	if (r->src.free)
		r->src.free(r->src.ctx);
	free(r->what);
	free(r);
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

/*
 * The time that credentials' expiry is compared with: the wall clock,
 * plus, for tests only, the whole seconds written in the file that
 * CKPTFS_TEST_CLOCK_FILE names (docs/testing.md), so that a test moves
 * past a set's half-life or expiry at once instead of sleeping through
 * it.  Signing uses the wall clock alone.
 */
static int64_t creds_now(void)
{
	const char *f = env("CKPTFS_TEST_CLOCK_FILE");
	int64_t now = time(NULL);
	char buf[32];
	ssize_t n;
	int fd;

	if (!f)
		return now;
	fd = open(f, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return now;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		char *end;
		long long off;

		buf[n] = '\0';
		errno = 0;
		off = strtoll(buf, &end, 10);
		if (!errno && end != buf && off >= 0 && off < (1LL << 32))
			now += off;
	}
	return now;
}

static bool is_clean(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* Read a small file (a token) into a new string, trailing whitespace
 * cut.  NULL with err. */
static char *read_small(const char *path, const char *what, char *err,
			size_t errlen)
{
	char *buf;
	ssize_t n;
	size_t got = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		ckpt_errf(err, errlen, -errno, "%s: %s: %s", what, path,
			  strerror(errno));
		return NULL;
	}
	buf = malloc(TOKEN_FILE_MAX + 1);
	if (!buf) {
		close(fd);
		ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	while (got < TOKEN_FILE_MAX &&
	       (n = read(fd, buf + got, TOKEN_FILE_MAX - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	while (got && (buf[got - 1] == '\n' || buf[got - 1] == '\r' ||
		       buf[got - 1] == ' ' || buf[got - 1] == '\t'))
		got--;
	buf[got] = '\0';
	if (!got || got >= TOKEN_FILE_MAX || !is_clean(buf)) {
		explicit_bzero(buf, got);
		free(buf);
		ckpt_errf(err, errlen, -EINVAL, "%s: %s is empty, larger than "
			  "%u bytes or holds a control character", what, path,
			  TOKEN_FILE_MAX);
		return NULL;
	}
	return buf;
}

/* Split a command line as a POSIX shell would split words (quotes and
 * backslashes; no expansion), as botocore does with shlex.  A new
 * NULL-terminated vector (free with free_argv) or NULL. */
static char **split_words(const char *s)
{
	size_t n = 0, cap = 8, len = strlen(s);
	char **v = calloc(cap, sizeof(*v)), *w = NULL;
	size_t wl = 0;
	char q = 0;

	if (!v)
		return NULL;
	for (;; s++) {
		char ch = *s;

		if (!w && ch && (q || (ch != ' ' && ch != '\t' && ch != '\n'))) {
			w = malloc(len + 1);
			if (!w)
				goto out_fail;
			wl = 0;
		}
		if (!ch) {
			if (q)
				goto out_fail;
		} else if (q == '\'') {
			if (ch == '\'')
				q = 0;
			else
				w[wl++] = ch;
			continue;
		} else if (q == '"') {
			if (ch == '"')
				q = 0;
			else if (ch == '\\' && (s[1] == '"' || s[1] == '\\' ||
					       s[1] == '$' || s[1] == '`'))
				w[wl++] = *++s;
			else
				w[wl++] = ch;
			continue;
		} else if (ch == '\'' || ch == '"') {
			q = ch;
			continue;
		} else if (ch == '\\' && s[1]) {
			w[wl++] = *++s;
			continue;
		} else if (ch != ' ' && ch != '\t' && ch != '\n') {
			w[wl++] = ch;
			continue;
		}
		if (w) {
			w[wl] = '\0';
			if (n + 2 > cap) {
				char **nv = realloc(v, 2 * cap * sizeof(*v));

				if (!nv)
					goto out_fail;
				v = nv;
				cap *= 2;
			}
			v[n++] = w;
			v[n] = NULL;
			w = NULL;
		}
		if (!ch)
			break;
	}
	if (!n)
		goto out_fail;
	return v;

out_fail:
	free(w);
	while (n)
		free(v[--n]);
	free(v);
	return NULL;
}

static void free_argv(char **v)
{
	size_t i;

	for (i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Run a credential_process command and parse its output.  A command
 * that runs past PROCESS_TIMEOUT_MS, or while *cancel (may be NULL)
 * becomes true, is killed: polled every CANCEL_POLL_MS. */
static int run_process(const struct recipe *r, const _Atomic bool *cancel,
		       struct ckpt_s3_credset **out, char *err, size_t errlen)
{
	posix_spawn_file_actions_t fa;
	char **argv, *buf = NULL;
	size_t got = 0;
	int pfd[2], rc, status = 0;
	int64_t deadline = now_ms() + PROCESS_TIMEOUT_MS;
	bool timed_out = false, cancelled = false;
	pid_t pid;

	*out = NULL;
	argv = split_words(r->command);
	if (!argv)
		return ckpt_errf(err, errlen, -EINVAL, "%s: the command is empty "
				 "or has an unclosed quote", r->what);
	buf = malloc(PROCESS_OUT_MAX + 1);
	if (!buf || pipe2(pfd, O_CLOEXEC) != 0) {
		free(buf);
		free_argv(argv);
		return ckpt_errf(err, errlen, -ENOMEM, "%s: %s", r->what,
				 strerror(errno ? errno : ENOMEM));
	}
	/* The command gets stdin, its output pipe and stderr, nothing else:
	 * the host's descriptors (curl's sockets, a mount's /dev/fuse, a
	 * caller's files) are rarely close-on-exec, and a command that
	 * outlives its deadline would hold them open. */
	rc = posix_spawn_file_actions_init(&fa);
	if (!rc)
		rc = posix_spawn_file_actions_adddup2(&fa, pfd[1],
						      STDOUT_FILENO);
	if (!rc)
		rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO,
						      "/dev/null", O_RDONLY,
						      0);
	if (!rc)
		rc = posix_spawn_file_actions_addclosefrom_np(&fa,
							      STDERR_FILENO +
							      1);
	if (!rc)
		rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc) {
		close(pfd[0]);
		free(buf);
		rc = ckpt_errf(err, errlen, -rc, "%s: cannot run '%s': %s",
			       r->what, argv[0], strerror(rc));
		free_argv(argv);
		return rc;
	}
	for (;;) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		int64_t left = deadline - now_ms();
		ssize_t n;

		if (left <= 0) {
			timed_out = true;
			kill(pid, SIGKILL);
			break;
		}
		if (cancel && atomic_load(cancel)) {
			cancelled = true;
			kill(pid, SIGKILL);
			break;
		}
		if (left > CANCEL_POLL_MS)
			left = CANCEL_POLL_MS;
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
			break;
		if (!p.revents)
			continue;
		n = read(pfd[0], buf + got, PROCESS_OUT_MAX - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == PROCESS_OUT_MAX) {
			kill(pid, SIGKILL);
			break;
		}
	}
	close(pfd[0]);
	/* A child that closed its output but goes on is given the rest of
	 * the deadline, then killed: never an unbounded wait. */
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid || (w < 0 && errno != EINTR))
			break;
		if (w == 0 && now_ms() >= deadline)
			timed_out = true;
		else if (w == 0 && cancel && atomic_load(cancel))
			cancelled = true;
		if (w == 0 && (timed_out || cancelled)) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			break;
		}
		if (w == 0)
			nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
	}
	buf[got] = '\0';
	if (cancelled)
		rc = ckpt_errf(err, errlen, -ECANCELED, "%s: '%s' stopped: the "
			       "credentials are being freed", r->what,
			       argv[0]);
	else if (timed_out)
		rc = ckpt_errf(err, errlen, -ETIMEDOUT, "%s: '%s' did not end "
			       "within %d s", r->what, argv[0],
			       PROCESS_TIMEOUT_MS / 1000);
	else if (got == PROCESS_OUT_MAX)
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: '%s' wrote more than "
			       "%u bytes", r->what, argv[0], PROCESS_OUT_MAX);
	else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		rc = ckpt_errf(err, errlen, -EIO, "%s: '%s' %s %d", r->what,
			       argv[0], WIFEXITED(status) ? "exited with status"
			       : "was killed by signal", WIFEXITED(status) ?
			       WEXITSTATUS(status) : WTERMSIG(status));
	else
		rc = ckpt_s3_json_creds(buf, got, r->what, out, err, errlen);
	/* The format's Version must be 1. */
	if (rc == 0 && !strstr(buf, "\"Version\"")) {
		ckpt_s3_credset_put(*out);
		*out = NULL;
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: the output has no "
			       "\"Version\": 1", r->what);
	}
	explicit_bzero(buf, got);
	free(buf);
	free_argv(argv);
	return rc;
}

static int fetch(const struct recipe *r, uint32_t timeout_ms,
		 const char *ca, const _Atomic bool *cancel,
		 struct ckpt_s3_credset **out, char *err, size_t errlen);

static int fetch_sts(const struct recipe *r, uint32_t timeout_ms,
		     const char *ca, const _Atomic bool *cancel,
		     struct ckpt_s3_credset **out, char *err, size_t errlen)
{
	struct ckpt_s3_sts_call call = {
		.endpoint = r->sts_endpoint, .region = r->region,
		.role_arn = r->role_arn, .session_name = r->session_name,
		.external_id = r->external_id, .duration_s = r->duration_s,
		.timeout_ms = timeout_ms, .ca_bundle = ca,
	};
	struct ckpt_s3_credset *src = NULL;
	char *token = NULL, sub[400];
	int rc;

	if (r->kind == K_WEBID) {
		token = read_small(r->token_file, r->what, err, errlen);
		if (!token)
			return -EINVAL;
		call.web_token = token;
	} else {
		rc = fetch(r->source, timeout_ms, ca, cancel, &src, sub,
			   sizeof(sub));
		if (rc)
			return ckpt_errf(err, errlen, rc, "%s: %s", r->what,
					 sub);
		call.source = src;
	}
	rc = ckpt_s3_sts_assume(&call, out, sub, sizeof(sub));
	if (rc)
		ckpt_errf(err, errlen, rc, "%s: %s", r->what, sub);
	ckpt_s3_credset_put(src);
	wipe_free(token);
	return rc;
}

/* Fetch a set by r.  A credential_process stops when *cancel (may be
 * NULL) becomes true; the HTTP sources are bounded by timeout_ms. */
static int fetch(const struct recipe *r, uint32_t timeout_ms,
		 const char *ca, const _Atomic bool *cancel,
		 struct ckpt_s3_credset **out, char *err, size_t errlen)
{
	char *auth = NULL, *role = NULL;
	int rc;

	*out = NULL;
	switch (r->kind) {
	case K_STATIC:
		*out = credset_ref(r->fixed);
		return 0;
	case K_PROCESS:
		return run_process(r, cancel, out, err, errlen);
	case K_ASSUME:
	case K_WEBID:
		return fetch_sts(r, timeout_ms, ca, cancel, out, err, errlen);
	case K_CONTAINER:
		if (r->auth_file) {
			auth = read_small(r->auth_file, r->what, err, errlen);
			if (!auth)
				return -EINVAL;
		}
		rc = ckpt_s3_container_fetch(r->url, auth ? auth : r->auth,
					     timeout_ms, ca, out, err, errlen);
		wipe_free(auth);
		return rc;
	case K_IMDS:
		rc = ckpt_s3_imds_fetch(r->url, timeout_ms < IMDS_TIMEOUT_MS ?
					timeout_ms : IMDS_TIMEOUT_MS, out,
					&role, err, errlen);
		free(role);
		return rc;
	case K_SOURCE:
		rc = r->src.fetch(r->src.ctx, timeout_ms, ca, cancel, out,
				  err, errlen);
		if (rc == 0 && !*out)
			rc = ckpt_errf(err, errlen, -EIO, "%s: no "
				       "credentials", r->what);
		return rc;
	}
	return -EINVAL;
}

/* ------------------------------------------------------------------ */
/* The chain */

struct chain {
	const struct ckpt_s3_opts *o;
	const struct ckpt_s3_creds_env *e;
	char tried[768];	/* sources that had nothing, for the message */
};

static void tried(struct chain *ch, const char *what)
{
	size_t l = strlen(ch->tried);

	snprintf(ch->tried + l, sizeof(ch->tried) - l, "%s%s", l ? "; " : "",
		 what);
}

static struct recipe *recipe_new(enum kind k, char *err, size_t errlen)
{
	struct recipe *r = calloc(1, sizeof(*r));

	if (!r)
		ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	else
		r->kind = k;
	return r;
}

static int set_what(struct recipe *r, char *err, size_t errlen,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int set_what(struct recipe *r, char *err, size_t errlen,
		    const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&r->what, fmt, ap);
	va_end(ap);
	if (n < 0) {
		r->what = NULL;
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	return 0;
}

/* A static set from ak / sk / tok, where names them ("AWS_ACCESS_KEY_ID"
 * ...).  Returns 0, or -EINVAL naming the one missing. */
static int static_recipe(const char *ak, const char *sk, const char *tok,
			 const char *ak_name, const char *sk_name,
			 const char *where, struct recipe **out, char *err,
			 size_t errlen)
{
	struct recipe *r;

	*out = NULL;
	if (!ak || !ak[0] || !sk || !sk[0])
		return ckpt_errf(err, errlen, -EINVAL, "S3 credentials from "
				 "%s: %s is set but %s is not", where,
				 ak && ak[0] ? ak_name : sk_name,
				 ak && ak[0] ? sk_name : ak_name);
	if (!is_clean(ak) || !is_clean(sk) || !is_clean(tok))
		return ckpt_errf(err, errlen, -EINVAL, "S3 credentials from "
				 "%s hold a control character", where);
	r = recipe_new(K_STATIC, err, errlen);
	if (!r)
		return -ENOMEM;
	r->fixed = ckpt_s3_credset_new(ak, sk, tok && tok[0] ? tok : NULL, 0);
	if (!r->fixed || set_what(r, err, errlen, "%s", where)) {
		recipe_free(r);
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	*out = r;
	return 0;
}

/* A key of profile p: the credentials file's value, else the config
 * file's; *file says which file (for messages). */
static const char *pget(const struct chain *ch, const char *p,
			const char *key, const char **file)
{
	const char *v = NULL;

	if (ch->e->cred)
		v = ckpt_ini_get(ch->e->cred, p, key);
	if (v && file)
		*file = ch->e->cred->path;
	if (!v && ch->e->conf) {
		v = ckpt_ini_get(ch->e->conf, p, key);
		if (v && file)
			*file = ch->e->conf->path;
	}
	return v && v[0] ? v : NULL;
}

/* STS's endpoint for profile p: AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL,
 * the profile's services section's "sts" endpoint_url, the profile's
 * endpoint_url, then the regional endpoint. */
static char *sts_endpoint(const struct chain *ch, const char *p)
{
	const char *v = env("AWS_ENDPOINT_URL_STS"), *svc;
	char sec[300], *out;

	if (!v)
		v = env("AWS_ENDPOINT_URL");
	if (!v && p && (svc = pget(ch, p, "services", NULL))) {
		snprintf(sec, sizeof(sec), "services %s", svc);
		if (ch->e->conf)
			v = ckpt_ini_get(ch->e->conf, sec, "sts.endpoint_url");
		if (v && !v[0])
			v = NULL;
	}
	if (!v && p)
		v = pget(ch, p, "endpoint_url", NULL);
	if (v) {
		size_t l = strlen(v);

		while (l && v[l - 1] == '/')
			l--;
		return strndup(v, l);
	}
	if (asprintf(&out, "https://sts.%s.amazonaws.com", ch->e->region) < 0)
		return NULL;
	return out;
}

static char *session_name(void)
{
	char *s;

	if (env("AWS_ROLE_SESSION_NAME"))
		return strdup(env("AWS_ROLE_SESSION_NAME"));
	if (asprintf(&s, "ckptfs-%lld", (long long)time(NULL)) < 0)
		return NULL;
	return s;
}

static int webid_recipe(struct chain *ch, const char *token_file,
			const char *role_arn, const char *sess,
			const char *profile, const char *from,
			struct recipe **out, char *err, size_t errlen)
{
	struct recipe *r = recipe_new(K_WEBID, err, errlen);

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->token_file = strdup(token_file);
	r->role_arn = strdup(role_arn);
	r->session_name = sess ? strdup(sess) : session_name();
	r->sts_endpoint = sts_endpoint(ch, profile);
	r->region = strdup(ch->e->region);
	if (!r->token_file || !r->role_arn || !r->session_name ||
	    !r->sts_endpoint || !r->region ||
	    set_what(r, err, errlen, "web identity (%s), role %s", from,
		     role_arn)) {
		recipe_free(r);
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	*out = r;
	return 0;
}

static int container_recipe(struct chain *ch, struct recipe **out,
			    char *err, size_t errlen);
static int imds_recipe(struct chain *ch, bool asked, struct recipe **out,
		       char *err, size_t errlen);

/* The credentials profile p yields, at depth of a role chain: 0 with
 * *out, 0 with *out NULL when it has none at all (only for depth 0),
 * or -errno. */
static int profile_recipe(struct chain *ch, const char *p, unsigned depth,
			  struct recipe **out, char *err, size_t errlen)
{
	const char *file = NULL, *role, *wif, *srcp, *csrc, *ak, *sk, *proc;
	const char *files;
	char files_buf[600];
	struct recipe *r = NULL, *src = NULL;
	int rc;

	*out = NULL;
	snprintf(files_buf, sizeof(files_buf), "%s%s%s",
		 ch->e->cred && ch->e->cred->path ? ch->e->cred->path : "",
		 ch->e->conf && ch->e->conf->path ? " or " : "",
		 ch->e->conf && ch->e->conf->path ? ch->e->conf->path : "");
	files = files_buf;
	if (depth > CHAIN_DEPTH_MAX)
		return ckpt_errf(err, errlen, -ELOOP, "S3 profile '%s': "
				 "source_profile chain longer than %d (a "
				 "cycle?)", p, CHAIN_DEPTH_MAX);
	if (!(ch->e->cred && ckpt_ini_has_section(ch->e->cred, p)) &&
	    !(ch->e->conf && ckpt_ini_has_section(ch->e->conf, p))) {
		if (depth == 0)
			return 0;
		return ckpt_errf(err, errlen, -ENOENT, "S3 profile '%s' (a "
				 "source_profile) is in neither %s", p,
				 files);
	}
	role = pget(ch, p, "role_arn", &file);
	wif = pget(ch, p, "web_identity_token_file", NULL);
	srcp = pget(ch, p, "source_profile", NULL);
	csrc = pget(ch, p, "credential_source", NULL);
	/* A source profile's own keys win over its role (botocore). */
	if (role && !wif &&
	    !(depth && pget(ch, p, "aws_access_key_id", NULL))) {
		if (srcp && csrc)
			return ckpt_errf(err, errlen, -EINVAL, "S3 profile '%s' "
					 "in %s has both source_profile and "
					 "credential_source", p, file);
		if (!srcp && !csrc)
			return ckpt_errf(err, errlen, -EINVAL, "S3 profile '%s' "
					 "in %s has role_arn but neither "
					 "source_profile nor "
					 "credential_source", p, file);
		if (srcp && !strcmp(srcp, p)) {
			/* The profile's own static keys sign AssumeRole. */
			const char *kf = NULL;

			ak = pget(ch, p, "aws_access_key_id", &kf);
			sk = pget(ch, p, "aws_secret_access_key", NULL);
			if (!ak && !sk)
				return ckpt_errf(err, errlen, -EINVAL, "S3 "
						 "profile '%s' in %s is its "
						 "own source_profile but has "
						 "no aws_access_key_id", p,
						 file);
			{
				char where[600];

				snprintf(where, sizeof(where), "profile '%s' "
					 "in %s", p, kf ? kf : file);
				rc = static_recipe(ak, sk,
					pget(ch, p, "aws_session_token", NULL),
					"aws_access_key_id",
					"aws_secret_access_key", where, &src,
					err, errlen);
			}
		} else if (srcp) {
			rc = profile_recipe(ch, srcp, depth + 1, &src, err,
					    errlen);
			if (rc == 0 && !src)
				rc = ckpt_errf(err, errlen, -EINVAL, "S3 "
					       "profile '%s' (source_profile "
					       "of '%s') has no credentials",
					       srcp, p);
		} else if (!strcasecmp(csrc, "Environment")) {
			rc = static_recipe(env("AWS_ACCESS_KEY_ID"),
					   env("AWS_SECRET_ACCESS_KEY"),
					   env("AWS_SESSION_TOKEN"),
					   "AWS_ACCESS_KEY_ID",
					   "AWS_SECRET_ACCESS_KEY",
					   "the environment (credential_source "
					   "Environment)", &src, err, errlen);
		} else if (!strcasecmp(csrc, "Ec2InstanceMetadata")) {
			rc = imds_recipe(ch, true, &src, err, errlen);
		} else if (!strcasecmp(csrc, "EcsContainer")) {
			rc = container_recipe(ch, &src, err, errlen);
			if (rc == 0 && !src)
				rc = ckpt_errf(err, errlen, -EINVAL, "S3 "
					       "profile '%s': credential_source "
					       "EcsContainer, but neither "
					       "AWS_CONTAINER_CREDENTIALS_"
					       "RELATIVE_URI nor _FULL_URI is "
					       "set", p);
		} else {
			rc = ckpt_errf(err, errlen, -EINVAL, "S3 profile '%s' "
				       "in %s: credential_source '%.40s' is "
				       "none of Environment, "
				       "Ec2InstanceMetadata, EcsContainer",
				       p, file, is_clean(csrc) ? csrc : "?");
		}
		if (rc)
			goto out_fail;
		r = recipe_new(K_ASSUME, err, errlen);
		if (!r) {
			rc = -ENOMEM;
			goto out_fail;
		}
		r->source = src;
		src = NULL;
		r->role_arn = strdup(role);
		r->session_name = pget(ch, p, "role_session_name", NULL) ?
			strdup(pget(ch, p, "role_session_name", NULL)) :
			session_name();
		if (pget(ch, p, "external_id", NULL))
			r->external_id = strdup(pget(ch, p, "external_id",
						     NULL));
		if (pget(ch, p, "duration_seconds", NULL)) {
			const char *d = pget(ch, p, "duration_seconds", NULL);
			char *end;
			unsigned long v;

			errno = 0;
			v = strtoul(d, &end, 10);
			/* STS takes 900 s to 12 h */
			if (errno || end == d || *end || *d == '-' ||
			    v < 900 || v > 43200) {
				rc = ckpt_errf(err, errlen, -EINVAL, "S3 profile "
					       "'%s': duration_seconds must be "
					       "900 to 43200", p);
				goto out_fail;
			}
			r->duration_s = (uint32_t)v;
		}
		r->sts_endpoint = sts_endpoint(ch, p);
		r->region = strdup(ch->e->region);
		if (!r->role_arn || !r->session_name || !r->sts_endpoint ||
		    !r->region || !is_clean(role) ||
		    set_what(r, err, errlen, "profile '%s': assume role %s "
			     "(with %s)", p, role, r->source->what)) {
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_fail;
		}
		*out = r;
		return 0;
	}
	if (wif) {
		char from[400];

		if (!role)
			return ckpt_errf(err, errlen, -EINVAL, "S3 profile '%s' "
					 "has web_identity_token_file but no "
					 "role_arn", p);
		snprintf(from, sizeof(from), "profile '%s'", p);
		return webid_recipe(ch, wif, role,
				    pget(ch, p, "role_session_name", NULL), p,
				    from, out, err, errlen);
	}
	/* Static keys: the credentials file's, then credential_process,
	 * then the config file's (botocore's order). */
	file = NULL;
	ak = ch->e->cred ? ckpt_ini_get(ch->e->cred, p, "aws_access_key_id") :
	     NULL;
	sk = ch->e->cred ? ckpt_ini_get(ch->e->cred, p,
					"aws_secret_access_key") : NULL;
	if ((ak && ak[0]) || (sk && sk[0])) {
		file = ch->e->cred->path;
	} else if ((proc = pget(ch, p, "credential_process", NULL))) {
		r = recipe_new(K_PROCESS, err, errlen);
		if (!r)
			return -ENOMEM;
		r->command = strdup(proc);
		if (!r->command || set_what(r, err, errlen, "credential_process "
					    "of profile '%s'", p)) {
			recipe_free(r);
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		}
		*out = r;
		return 0;
	} else if (ch->e->conf) {
		ak = ckpt_ini_get(ch->e->conf, p, "aws_access_key_id");
		sk = ckpt_ini_get(ch->e->conf, p, "aws_secret_access_key");
		if ((ak && ak[0]) || (sk && sk[0]))
			file = ch->e->conf->path;
	}
	if (file) {
		const struct ckpt_ini *in = ch->e->cred &&
			file == ch->e->cred->path ? ch->e->cred : ch->e->conf;
		char where[600];

		snprintf(where, sizeof(where), "profile '%s' in %s", p, file);
		return static_recipe(ak, sk,
				     ckpt_ini_get(in, p, "aws_session_token"),
				     "aws_access_key_id",
				     "aws_secret_access_key", where, out, err,
				     errlen);
	}
	if (depth == 0 && !ch->e->profile_named)
		return 0;
	return ckpt_errf(err, errlen, -EINVAL, "S3 profile '%s'%s%s%s in %s "
			 "yields no credentials: it has no aws_access_key_id, "
			 "role_arn, web_identity_token_file or "
			 "credential_process", p,
			 depth ? "" : " (from ",
			 depth ? "" : ch->e->profile_from,
			 depth ? "" : ")", files);

out_fail:
	recipe_free(src);
	recipe_free(r);
	return rc;
}

static int container_recipe(struct chain *ch, struct recipe **out,
			    char *err, size_t errlen)
{
	const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *tok = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	const char *tokf = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	struct recipe *r;

	(void)ch;
	*out = NULL;
	if (!rel && !full)
		return 0;
	r = recipe_new(K_CONTAINER, err, errlen);
	if (!r)
		return -ENOMEM;
	if (rel) {
		if (asprintf(&r->url, "%s%s%s", CONTAINER_HOST,
			     rel[0] == '/' ? "" : "/", rel) < 0)
			r->url = NULL;
	} else {
		r->url = strdup(full);
	}
	if (tokf)
		r->auth_file = strdup(tokf);
	else if (tok)
		r->auth = strdup(tok);
	if (!r->url || (tokf && !r->auth_file) || (!tokf && tok && !r->auth) ||
	    set_what(r, err, errlen, "container credentials (%s)",
		     rel ? "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI" :
		     "AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
		recipe_free(r);
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	if (!is_clean(r->url)) {
		recipe_free(r);
		return ckpt_errf(err, errlen, -EINVAL, "container credentials:"
				 " the URI holds a control character");
	}
	*out = r;
	return 0;
}

/* IMDS, unless disabled (then *out NULL; asked: an error). */
static int imds_recipe(struct chain *ch, bool asked, struct recipe **out,
		       char *err, size_t errlen)
{
	const char *dis = env("AWS_EC2_METADATA_DISABLED");
	const char *ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	struct recipe *r;
	size_t l;

	*out = NULL;
	if (dis && !strcasecmp(dis, "true")) {
		if (asked)
			return ckpt_errf(err, errlen, -EINVAL, "S3 "
					 "credential_source Ec2InstanceMetadata,"
					 " but AWS_EC2_METADATA_DISABLED is "
					 "true");
		tried(ch, "EC2 instance metadata (AWS_EC2_METADATA_DISABLED)");
		return 0;
	}
	r = recipe_new(K_IMDS, err, errlen);
	if (!r)
		return -ENOMEM;
	if (!ep)
		ep = IMDS_DEFAULT;
	l = strlen(ep);
	while (l && ep[l - 1] == '/')
		l--;
	r->url = strndup(ep, l);
	if (!r->url || set_what(r, err, errlen, "EC2 instance metadata (%s)",
				r->url)) {
		recipe_free(r);
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	*out = r;
	return 0;
}

/* Walk the chain: 0 with *out (NULL: nothing found, ch->tried says
 * where it looked), or -errno. */
static int resolve(struct chain *ch, struct recipe **out, char *err,
		   size_t errlen)
{
	const struct ckpt_s3_opts *o = ch->o;
	const struct ckpt_s3_creds_env *e = ch->e;
	bool skip_env = o && o->profile && o->profile[0];
	const char *wif, *arn;
	int rc;

	*out = NULL;
	if (o && (o->access_key || o->secret_key))
		return static_recipe(o->access_key, o->secret_key,
				     o->session_token, "access_key",
				     "secret_key", "the access_key option",
				     out, err, errlen);
	if (!skip_env) {
		if (env("AWS_ACCESS_KEY_ID") || env("AWS_SECRET_ACCESS_KEY"))
			return static_recipe(env("AWS_ACCESS_KEY_ID"),
					     env("AWS_SECRET_ACCESS_KEY"),
					     env("AWS_SESSION_TOKEN"),
					     "AWS_ACCESS_KEY_ID",
					     "AWS_SECRET_ACCESS_KEY",
					     "the environment (AWS_ACCESS_KEY_ID)",
					     out, err, errlen);
		tried(ch, "AWS_ACCESS_KEY_ID");
		wif = env("AWS_WEB_IDENTITY_TOKEN_FILE");
		arn = env("AWS_ROLE_ARN");
		if (wif && !arn)
			return ckpt_errf(err, errlen, -EINVAL, "S3 web "
					 "identity: AWS_WEB_IDENTITY_TOKEN_FILE"
					 " is set but AWS_ROLE_ARN is not");
		if (wif)
			return webid_recipe(ch, wif, arn, NULL, e->profile,
					    "AWS_WEB_IDENTITY_TOKEN_FILE", out,
					    err, errlen);
		tried(ch, "AWS_WEB_IDENTITY_TOKEN_FILE");
	}
	rc = profile_recipe(ch, e->profile, 0, out, err, errlen);
	if (rc || *out)
		return rc;
	{
		char what[700];

		snprintf(what, sizeof(what), "profile '%s' in %s%s and %s%s",
			 e->profile,
			 e->cred && e->cred->exists ? "" : "no ",
			 e->cred && e->cred->path ? e->cred->path : "?",
			 e->conf && e->conf->exists ? "" : "no ",
			 e->conf && e->conf->path ? e->conf->path : "?");
		tried(ch, what);
	}
	rc = container_recipe(ch, out, err, errlen);
	if (rc || *out)
		return rc;
	tried(ch, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/_FULL_URI");
	return imds_recipe(ch, false, out, err, errlen);
}

/* ------------------------------------------------------------------ */
/* The object */

/* Before a fork: no other thread holds c->lock across it. */
static void creds_fork_prepare(void *arg)
{
	struct ckpt_s3_creds *c = arg;

	pthread_mutex_lock(&c->lock);
}

static void creds_fork_parent(void *arg)
{
	struct ckpt_s3_creds *c = arg;

	pthread_mutex_unlock(&c->lock);
}

/* In the child: new locks, and no refresher (nor a refresh it runs):
 * the next caller that needs one starts its own. */
static void creds_fork_child(void *arg)
{
	struct ckpt_s3_creds *c = arg;

	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->refreshed, NULL);
	pthread_cond_init(&c->wake, NULL);
	c->pid = getpid();
	c->has_thread = false;
	c->refreshing = false;
	c->want = false;
}

/* A set of credentials with nothing fetched yet: its locks, its fork
 * hook, timeout_ms and a copy of ca_bundle (or NULL).  NULL when out of
 * memory.  The caller owns it (ckpt_s3_creds_free). */
static struct ckpt_s3_creds *creds_alloc(uint32_t timeout_ms,
					 const char *ca_bundle)
{
	struct ckpt_s3_creds *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->refreshed, NULL);
	pthread_cond_init(&c->wake, NULL);
	c->pid = getpid();
	c->fork = (struct ckpt_fork_hook){ creds_fork_prepare,
					   creds_fork_parent, creds_fork_child,
					   c, NULL, NULL };
	ckpt_fork_hook_add(&c->fork);
	c->timeout_ms = timeout_ms;
	if (ca_bundle) {
		c->ca_bundle = strdup(ca_bundle);
		if (!c->ca_bundle) {
			ckpt_s3_creds_free(c);
			return NULL;
		}
	}
	return c;
}

int ckpt_s3_creds_new(const struct ckpt_s3_opts *o,
		      const struct ckpt_s3_creds_env *e,
		      struct ckpt_s3_creds **out, char *err, size_t errlen)
{
	struct chain ch = { .o = o, .e = e };
	struct ckpt_s3_creds *c;
	struct recipe *r = NULL;
	char sub[512];
	int rc;

	*out = NULL;
	c = creds_alloc(e->timeout_ms, e->ca_bundle);
	if (!c)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (o && o->no_sign_request) {
		c->source = strdup("none: unsigned requests "
				   "(no_sign_request)");
		if (!c->source) {
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_fail;
		}
		*out = c;
		return 0;
	}
	rc = resolve(&ch, &r, err, errlen);
	if (rc)
		goto out_fail;
	if (!r) {
		rc = ckpt_errf(err, errlen, -ENOKEY, "no S3 credentials: tried "
			       "%s; for a public bucket, ask for unsigned "
			       "requests (--s3-no-sign-request, -o "
			       "s3_no_sign_request)", ch.tried);
		goto out_fail;
	}
	c->r = r;
	c->fetched_at = creds_now();	/* asked for now (refresh_done) */
	if (r->kind != K_IMDS) {
		rc = fetch(r, c->timeout_ms, c->ca_bundle, NULL, &c->cur, sub,
			   sizeof(sub));
	} else {
		/* Name the instance profile's role, as fetched. */
		char *role = NULL, *w = NULL;

		rc = ckpt_s3_imds_fetch(r->url, c->timeout_ms < IMDS_TIMEOUT_MS
					? c->timeout_ms : IMDS_TIMEOUT_MS,
					&c->cur, &role, sub, sizeof(sub));
		if (rc == 0 && asprintf(&w, "%s, role '%s'", r->what,
					role) > 0) {
			free(r->what);
			r->what = w;
		}
		free(role);
	}
	if (rc) {
		if (r->kind == K_IMDS && !env("AWS_EC2_METADATA_SERVICE_"
					      "ENDPOINT"))
			ckpt_errf(err, errlen, -ENOKEY, "no S3 credentials: "
				  "tried %s; %s; for a public bucket, ask for "
				  "unsigned requests (--s3-no-sign-request, -o"
				  " s3_no_sign_request)", ch.tried, sub);
		else
			ckpt_errf(err, errlen, rc, "S3 credentials: %s", sub);
		rc = r->kind == K_IMDS ? -ENOKEY : rc;
		goto out_fail;
	}
	atomic_store(&c->fetches, 1);
	c->source = strdup(r->what);
	if (!c->source) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_fail;
	}
	*out = c;
	return 0;

out_fail:
	if (!c->r)
		recipe_free(r);
	ckpt_s3_creds_free(c);
	return rc;
}

int ckpt_s3_creds_new_source(const struct ckpt_s3_creds_source *src,
			     uint32_t timeout_ms, const char *ca_bundle,
			     struct ckpt_s3_creds **out, char *err,
			     size_t errlen)
{
	struct ckpt_s3_creds *c;
	struct recipe *r;
	int rc;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r) {
		if (src->free)
			src->free(src->ctx);
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	r->kind = K_SOURCE;
	r->src = *src;
	r->what = strdup(src->what);
	c = r->what ? creds_alloc(timeout_ms, ca_bundle) : NULL;
	if (!c) {
		recipe_free(r);
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	c->r = r;
	c->source = strdup(src->what);
	if (!c->source) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_fail;
	}
	c->fetched_at = creds_now();
	rc = fetch(r, timeout_ms, c->ca_bundle, NULL, &c->cur, err, errlen);
	if (rc)
		goto out_fail;
	atomic_store(&c->fetches, 1);
	*out = c;
	return 0;

out_fail:
	ckpt_s3_creds_free(c);
	return rc;
}

/*
 * The refresher stops: a fetch in progress is cancelled (a
 * credential_process is killed within CANCEL_POLL_MS; an HTTP source ends
 * within timeout_ms) and the thread is joined.  No caller may be in
 * ckpt_s3_creds_get() by now.
 */
void ckpt_s3_creds_free(struct ckpt_s3_creds *c)
{
	bool join;

	if (!c)
		return;
	ckpt_fork_hook_remove(&c->fork);
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	atomic_store(&c->cancel, true);
	pthread_cond_signal(&c->wake);
	join = c->has_thread && c->pid == getpid();
	pthread_mutex_unlock(&c->lock);
	if (join)
		pthread_join(c->thread, NULL);
	ckpt_s3_credset_put(c->cur);
	recipe_free(c->r);
	free(c->source);
	free(c->ca_bundle);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->refreshed);
	pthread_cond_destroy(&c->wake);
	free(c);
}

const char *ckpt_s3_creds_source(const struct ckpt_s3_creds *c)
{
	return c->source;
}

bool ckpt_s3_creds_is_anonymous(const struct ckpt_s3_creds *c)
{
	return !c->r;
}

const char *ckpt_s3_creds_plain_sts(const struct ckpt_s3_creds *c,
				    bool *web_token)
{
	const struct recipe *r;

	for (r = c ? c->r : NULL; r; r = r->source)
		if ((r->kind == K_ASSUME || r->kind == K_WEBID) &&
		    r->sts_endpoint &&
		    !strncasecmp(r->sts_endpoint, "http://", 7)) {
			*web_token = r->kind == K_WEBID;
			return r->sts_endpoint;
		}
	return NULL;
}

/* Under lock: when cur should be fetched again (0: never).  Five
 * minutes ahead, or at half its life when that is shorter: a set that
 * lives 6 s is refreshed after 3 s. */
static int64_t refresh_at(const struct ckpt_s3_creds *c)
{
	int64_t life, ahead;

	if (!c->cur->expires)
		return 0;
	life = c->cur->expires - c->fetched_at;
	ahead = life / 2 < REFRESH_AHEAD_S ? life / 2 : REFRESH_AHEAD_S;
	if (ahead < 0)
		ahead = 0;
	return c->cur->expires - ahead;
}

/* Under lock: a refresh asked for at `asked` ended with rc; fresh (on
 * success) becomes the current set, its life counted from when it was
 * asked for (a slow source shortens it, never lengthens it).  Wakes the
 * callers waiting for it. */
static void refresh_done(struct ckpt_s3_creds *c, int rc, int64_t asked,
			 struct ckpt_s3_credset *fresh, const char *err)
{
	c->refreshing = false;
	atomic_fetch_add(&c->fetches, 1);
	if (rc == 0) {
		ckpt_s3_credset_put(c->cur);
		c->cur = fresh;
		c->fetched_at = asked;
		c->last_err[0] = '\0';
		/* at most one fetch a second, even for a set that comes
		 * already expired (a skewed clock) */
		c->next_try = creds_now() + 1;
	} else {
		snprintf(c->last_err, sizeof(c->last_err), "%s", err);
		c->next_try = creds_now() + 1;
	}
	pthread_cond_broadcast(&c->refreshed);
}

/* The refresher: fetches when asked (want), one fetch at a time, until
 * stop. */
static void *refresher(void *arg)
{
	struct ckpt_s3_creds *c = arg;
	struct ckpt_s3_credset *fresh;
	char err[sizeof(c->last_err)];
	int64_t asked;
	int rc;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->want && !c->stop)
			pthread_cond_wait(&c->wake, &c->lock);
		if (c->stop)
			break;
		c->want = false;
		pthread_mutex_unlock(&c->lock);
		fresh = NULL;
		err[0] = '\0';
		asked = creds_now();
		rc = fetch(c->r, c->timeout_ms, c->ca_bundle, &c->cancel,
			   &fresh, err, sizeof(err));
		pthread_mutex_lock(&c->lock);
		refresh_done(c, rc, asked, fresh, err);
	}
	if (c->refreshing) {
		c->refreshing = false;
		pthread_cond_broadcast(&c->refreshed);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Under lock: is the refresher running in this process?  Started on
 * first need, with every signal blocked (signals are the host's). */
static bool refresher_running(struct ckpt_s3_creds *c)
{
	sigset_t all, old;
	int rc;

	if (c->has_thread)
		return true;
	if (c->stop)
		return false;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&c->thread, NULL, refresher, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return false;
	c->has_thread = true;
	return true;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Under lock: wait for a refresh to end, at most CKPT_CANCEL_POLL_MS or
 * until deadline_ns (0: none), whichever comes first. */
static void refreshed_wait(struct ckpt_s3_creds *c, uint64_t deadline_ns)
{
	uint64_t slice = (uint64_t)CKPT_CANCEL_POLL_MS * 1000000u, now;
	struct timespec ts;

	now = mono_ns();
	if (deadline_ns && deadline_ns > now && deadline_ns - now < slice)
		slice = deadline_ns - now;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(slice / 1000000000u);
	ts.tv_nsec += (long)(slice % 1000000000u);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&c->refreshed, &c->lock, &ts);
}

int ckpt_s3_creds_get(struct ckpt_s3_creds *c, const volatile int *cf,
		      const _Atomic bool *stop, uint64_t deadline_ns,
		      struct ckpt_s3_credset **out)
{
	struct ckpt_s3_credset *fresh = NULL;
	char err[sizeof(c->last_err)];
	int64_t now, due;
	int rc;

	*out = NULL;
	if (!c || !c->r)
		return 0;
	pthread_mutex_lock(&c->lock);
	if (c->pid != getpid()) {
		/* A forked child: the parent's refresher (and any refresh
		 * it was running) did not come along (creds_atfork_child()
		 * says so too, for a fork from any thread). */
		c->pid = getpid();
		c->has_thread = false;
		c->refreshing = false;
		c->want = false;
	}
	for (;;) {
		now = creds_now();
		due = refresh_at(c);
		if (!due || now < due)
			break;
		if (c->refreshing) {
			if (now < c->cur->expires)
				break;	/* still good: no wait */
			/* Expired: wait for the refresh, but no longer than
			 * the request may (a credential_process may run a
			 * minute, a token endpoint may never answer). */
			rc = ckpt_is_flag_set(cf) ? -ECANCELED :
			     stop && atomic_load(stop) ? -EINTR :
			     deadline_ns && mono_ns() >= deadline_ns ?
			     -ETIMEDOUT : 0;
			if (rc) {
				pthread_mutex_unlock(&c->lock);
				return rc;
			}
			refreshed_wait(c, deadline_ns);
			continue;
		}
		if (now < c->next_try)
			break;
		c->refreshing = true;
		if (refresher_running(c)) {
			/* the refresher fetches; this caller goes on with
			 * the current set unless it has expired */
			c->want = true;
			pthread_cond_signal(&c->wake);
			continue;
		}
		/* no thread to be had: fetch here, as one caller */
		pthread_mutex_unlock(&c->lock);
		err[0] = '\0';
		rc = fetch(c->r, c->timeout_ms, c->ca_bundle, &c->cancel,
			   &fresh, err, sizeof(err));
		pthread_mutex_lock(&c->lock);
		refresh_done(c, rc, now, fresh, err);
		break;
	}
	*out = credset_ref(c->cur);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

unsigned ckpt_s3_creds_fetches(struct ckpt_s3_creds *c)
{
	return atomic_load(&c->fetches);
}

void ckpt_s3_creds_last_error(struct ckpt_s3_creds *c, char *buf, size_t len)
{
	pthread_mutex_lock(&c->lock);
	snprintf(buf, len, "%s", c->last_err);
	pthread_mutex_unlock(&c->lock);
}
