/* SPDX-License-Identifier: MIT */
/* The S3 store's HTTP engine over libcurl: see s3_http.h. */
#include "io/s3_http.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/forksafe.h"
#include "common/grow.h"
#include "io/s3_url.h"
#include "io/s3_xml.h"
#include "io/store_impl.h"

/* Backoff before try k+1 (k >= 1): a uniform random time in
 * [0, min(CAP, BASE * 2^(k-1))] ("full jitter"). */
#define BACKOFF_BASE_MS 100
#define BACKOFF_CAP_MS 5000
#define RECV_BUFFER (64 * 1024)	/* libcurl's buffer, per request */
#define POLL_MAX_MS 1000
#define IDLE_CONNS_PER_SLOT 2	/* see worker_put() */
/* Connections open over all workers, busy or idle, are kept to about
 * CONNS_PER_SLOT x `parallel`: `parallel` in flight, the rest idle
 * (trimmed once over it, so a busy moment can pass it briefly). */
#define CONNS_PER_SLOT (IDLE_CONNS_PER_SLOT + 1)

enum { ST_WAIT, ST_ACTIVE, ST_DONE };

/* Verdict on one finished try. */
enum { TRY_OK, TRY_AGAIN, TRY_FAIL };

struct s3_worker;

struct s3_easy {
	CURL *curl;
	struct ckpt_s3_http *h;
	struct s3_worker *w;	/* whose handle it is, for good */
	curl_socket_t fd;	/* the current request's socket, or -1 */
	char errbuf[CURL_ERROR_SIZE];
};

/* A socket of a worker's connections, and its local port once known. */
struct s3_sock {
	curl_socket_t fd;
	unsigned port;		/* 0: not looked up yet */
};

/* A multi handle, its easy handles and its connection cache: used by one
 * call at a time. */
struct s3_worker {
	CURLM *multi;
	long maxconn;		/* its CURLMOPT_MAXCONNECTS now */
	struct s3_easy *easy;	/* cap of them, the first nmade made */
	unsigned cap;
	unsigned nmade;
	unsigned *idle;		/* stack of easy handles not in use */
	unsigned nidle;
	struct s3_sock *socks;	/* every socket its connections opened */
	size_t nsocks, capsocks;
	struct ckpt_s3_http *h;	/* whose it is */
	struct s3_worker *next;	/* on the pool's list */
	size_t pool_socks;	/* nsocks when it was pooled */
	struct s3_worker *bprev, *bnext;	/* on the busy list */
};

struct ckpt_s3_http {
	const struct ckpt_s3_cfg *cfg;
	struct ckpt_store *ctr;
	char sigv4[96];		/* "aws:amz:REGION:s3" */
	struct curl_slist *connect_to;	/* CKPT_S3_CONNECT_TO's entries, or
					 * NULL; read-only once made */
	pthread_mutex_t lock;
	pthread_cond_t slot_freed;
	unsigned slots;		/* requests that may still start; guarded
				 * by lock */
	struct s3_worker *pool;	/* idle workers; guarded by lock */
	unsigned npool;		/* guarded by lock */
	size_t pool_socks;	/* connections the idle workers hold;
				 * guarded by lock */
	pid_t pid;		/* whose connections the pool holds;
				 * guarded by lock */
	struct s3_worker *busy;	/* workers in use; guarded by lock */
	_Atomic bool cancelled;	/* see ckpt_s3_http_cancel() */
	/* DNS answers and TLS sessions, shared by every worker's handles
	 * (a new connection resumes a TLS session, no full handshake);
	 * locks[d] guards what libcurl keeps of kind d. */
	CURLSH *share;
	pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
	_Atomic long nconns;	/* connections open, all workers */
	struct ckpt_fork_hook fork;	/* fork_prepare() and the rest */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A per-thread xorshift generator for the jitter; quality is no concern. */
static uint64_t jitter_rand(void)
{
	static __thread uint64_t x;

	if (!x)
		x = now_ns() ^ (uint64_t)(uintptr_t)&x ^ 0x9E3779B97F4A7C15ull;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return x;
}

static uint64_t backoff_ns(unsigned tries)
{
	uint64_t cap = BACKOFF_BASE_MS;
	unsigned k;

	for (k = 1; k < tries && cap < BACKOFF_CAP_MS; k++)
		cap *= 2;
	if (cap > BACKOFF_CAP_MS)
		cap = BACKOFF_CAP_MS;
	return jitter_rand() % (cap * 1000000u + 1);
}

/* Is the header line p (len bytes) "name: value"?  Sets the value,
 * trimmed. */
static bool header_is(const char *p, size_t len, const char *name,
		      const char **val, size_t *vlen)
{
	size_t nl = strlen(name);

	if (len <= nl || p[nl] != ':' || strncasecmp(p, name, nl) != 0)
		return false;
	p += nl + 1;
	len -= nl + 1;
	while (len && (*p == ' ' || *p == '\t'))
		p++, len--;
	while (len && (p[len - 1] == '\r' || p[len - 1] == '\n' ||
		       p[len - 1] == ' ' || p[len - 1] == '\t'))
		len--;
	*val = p;
	*vlen = len;
	return true;
}

/* Parse a decimal number from *p (advanced past it). */
static bool parse_num(const char **p, const char *end, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;

	if (s == end || *s < '0' || *s > '9')
		return false;
	for (; s < end && *s >= '0' && *s <= '9'; s++)
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return false;
	*p = s;
	*out = v;
	return true;
}

/* "bytes FIRST-LAST/TOTAL" (TOTAL may be "*"). */
static void parse_content_range(struct ckpt_s3_req *q, const char *v,
				size_t len)
{
	const char *end = v + len;

	q->has_cr = false;
	if (len < 6 || strncasecmp(v, "bytes ", 6) != 0)
		return;
	v += 6;
	if (!parse_num(&v, end, &q->cr_first) || v == end || *v++ != '-' ||
	    !parse_num(&v, end, &q->cr_last) || v == end || *v++ != '/')
		return;
	q->cr_total = UINT64_MAX;
	if (!(v + 1 == end && *v == '*') &&
	    (!parse_num(&v, end, &q->cr_total) || v != end))
		return;
	q->has_cr = true;
}

/*
 * radosgw (16.2's beast front end) writes an answer's headers and body
 * apart without TCP_NODELAY, so a small body waits for the ACK of the
 * headers, which Linux delays by 40 ms on a connection it sees as
 * request/response: every small GET then takes 40 ms.  Asking for a quick
 * ACK as the headers arrive sends that ACK at once (measured here: 50
 * sequential 4 KiB GETs 2.2 s -> 0.1 s).  The socket is found through the
 * worker's table of its sockets (see on_prereq).
 */
static void quick_ack(const struct s3_easy *e)
{
	int one = 1;

	if (e->fd != CURL_SOCKET_BAD)
		setsockopt(e->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

static bool etag_byte_ok(unsigned char c)
{
	return c >= 0x20 && c < 0x7f;
}

bool ckpt_s3_etag_is_clean(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!etag_byte_ok((unsigned char)s[i]))
			return false;
	return i < CKPT_STORE_VERSION_MAX;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct ckpt_s3_req *q = ud;
	size_t len = size * n, vl, i;
	const char *v;

	if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {	/* a new answer */
		quick_ack(q->easy);
		q->has_cr = false;
		q->has_length = false;
		q->etag[0] = '\0';
		q->etag_bad = false;
		q->code[0] = '\0';
		q->answered = true;
	} else if (header_is(p, len, "content-range", &v, &vl)) {
		parse_content_range(q, v, vl);
	} else if (header_is(p, len, "content-length", &v, &vl)) {
		const char *ve = v + vl;

		q->has_length = parse_num(&v, ve, &q->length) && v == ve;
	} else if (header_is(p, len, "x-ms-error-code", &v, &vl)) {
		/* Azure's error code (a HEAD's answer has no body) */
		q->code[0] = '\0';
		if (vl < sizeof(q->code)) {
			for (i = 0; i < vl; i++)
				if (!etag_byte_ok((unsigned char)v[i]))
					return len;
			memcpy(q->code, v, vl);
			q->code[vl] = '\0';
		}
	} else if (header_is(p, len, "etag", &v, &vl)) {
		q->etag[0] = '\0';
		q->etag_bad = true;
		if (vl >= sizeof(q->etag))
			return len;
		for (i = 0; i < vl; i++)	/* it goes into If-Match */
			if (!etag_byte_ok((unsigned char)v[i]))
				return len;
		memcpy(q->etag, v, vl);
		q->etag[vl] = '\0';
		q->etag_bad = false;
	}
	return len;
}

/* Is the answer's range the one asked?  A 200 answer is the whole
 * object, right only when that is exactly what was asked. */
static bool range_ok(const struct ckpt_s3_req *q, long status)
{
	uint64_t first = q->off + q->done, last = q->off + q->len - 1;

	if (!q->ranged)
		return true;
	if (status == 206)
		return q->has_cr && q->cr_first == first &&
		       q->cr_last == last;
	return status == 200 && first == 0 && q->has_length &&
	       q->length == q->len;
}

/*
 * Is the answer of the version asked for?  A server that honours If-Match
 * answers 412 instead.  One that ignores it must still name the version
 * it sends: a 2xx answer to a GET with If-Match shows the pinned ETag, or
 * it is refused (the size alone cannot tell two versions of one size
 * apart).  The size (Content-Range's total, or Content-Length of a 200)
 * must match too.  Sets the reason when not.
 */
static bool version_ok(struct ckpt_s3_req *q, long status)
{
	uint64_t size = UINT64_MAX;

	if (!q->if_match)
		return true;
	if (!q->etag[0]) {
		snprintf(q->reason, sizeof(q->reason),
			 "replaced or unpinned: the server sent no ETag, "
			 "pinned %.100s (it ignored If-Match)", q->if_match);
		return false;
	}
	if (strcmp(q->etag, q->if_match) != 0) {
		snprintf(q->reason, sizeof(q->reason),
			 "replaced or unpinned: the server sent ETag %.100s, "
			 "pinned %.100s (it ignored If-Match)", q->etag,
			 q->if_match);
		return false;
	}
	if (status == 206 && q->has_cr)
		size = q->cr_total;
	else if (status == 200 && q->has_length)
		size = q->length;
	if (q->obj_size && size != UINT64_MAX && size != q->obj_size) {
		snprintf(q->reason, sizeof(q->reason),
			 "replaced or unpinned: it has %" PRIu64 " bytes now, "
			 "not the %" PRIu64 " fixed at open (the server "
			 "ignored If-Match)", size, q->obj_size);
		return false;
	}
	return true;
}

static int buf_append(struct ckpt_s3_req *q, const char *p, size_t n,
		      size_t max)
{
	size_t want = q->buflen + n;
	char *nb;

	if (want > max)
		return -EFBIG;
	/* Doubling: a body arrives in curl's 16 KiB pieces, and a realloc
	 * to the exact size each time copied a 16 MiB listing page
	 * a thousand times over where the allocator cannot grow in place. */
	if (want + 1 > q->bufcap) {
		size_t cap = q->bufcap ? q->bufcap : 4096;

		while (cap < want + 1)
			cap = cap > SIZE_MAX / 2 ? want + 1 : cap * 2;
		if (cap > max + 1)
			cap = max + 1;
		nb = realloc(q->buf, cap);
		if (!nb)
			return -ENOMEM;
		q->buf = nb;
		q->bufcap = cap;
	}
	memcpy(q->buf + q->buflen, p, n);
	q->buflen = want;
	q->buf[want] = '\0';
	return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct ckpt_s3_req *q = ud;
	struct s3_easy *e = q->easy;
	long status = 0;
	int rc;

	n *= size;
	curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status > 299) {	/* keep the error's start */
		size_t room = CKPT_S3_ERRBODY_MAX - q->buflen;

		if (q->buflen < CKPT_S3_ERRBODY_MAX)
			buf_append(q, p, n < room ? n : room,
				   CKPT_S3_ERRBODY_MAX);
		return n;
	}
	if (q->got == 0 && q->etag_bad) {
		snprintf(q->reason, sizeof(q->reason), "the answer's ETag "
			 "holds a control character or is too long: refused");
		q->bad_body = true;
		q->bad_final = true;
		q->bad_rc = -EIO;
		return 0;
	}
	if (q->got == 0 && !version_ok(q, status)) {
		q->replaced = true;
		q->bad_body = true;
		q->bad_final = true;
		q->bad_rc = -EIO;
		return 0;
	}
	if (q->got == 0 && !range_ok(q, status)) {
		if (q->has_cr)
			snprintf(q->reason, sizeof(q->reason),
				 "HTTP %ld with Content-Range bytes "
				 "%" PRIu64 "-%" PRIu64 " for bytes "
				 "%" PRIu64 "-%" PRIu64 " asked", status,
				 q->cr_first, q->cr_last, q->off + q->done,
				 q->off + q->len - 1);
		else
			snprintf(q->reason, sizeof(q->reason),
				 "HTTP %ld without a matching Content-Range "
				 "for bytes %" PRIu64 "-%" PRIu64 " asked",
				 status, q->off + q->done, q->off + q->len - 1);
		q->bad_body = true;
		if (status == 200) {
			/* The whole object for a range: the server ignores
			 * Range, and every try would be the same. */
			snprintf(q->reason, sizeof(q->reason),
				 "HTTP 200 (the whole object) for bytes "
				 "%" PRIu64 "-%" PRIu64 " asked: the server "
				 "ignored Range", q->off + q->done,
				 q->off + q->len - 1);
			q->bad_final = true;
			q->bad_rc = -EIO;
		}
		return 0;
	}
	if (q->ranged && q->got + n > q->len - q->done) {
		snprintf(q->reason, sizeof(q->reason),
			 "the server sent more than the %" PRIu64
			 " bytes asked", q->len - q->done);
		q->bad_body = true;
		return 0;
	}
	if (q->sink) {
		rc = q->sink(q->ctx, q->done + q->got, p, n);
		atomic_fetch_add(&e->h->ctr->bytes_fetched, n);
	} else {
		rc = buf_append(q, p, n, q->max_body);
	}
	if (rc) {
		snprintf(q->reason, sizeof(q->reason),
			 rc == -EFBIG ? "answer longer than %zu bytes" :
			 "out of memory (%zu)", q->max_body);
		q->bad_body = true;
		q->bad_final = true;
		q->bad_rc = rc == -ENOMEM ? -ENOMEM : -EIO;
		return 0;
	}
	q->got += n;
	return n;
}

/* curl made a socket for one of w's connections: note it. */
static int on_sockopt(void *ud, curl_socket_t fd, curlsocktype purpose)
{
	struct s3_worker *w = ud;
	size_t i;

	if (purpose != CURLSOCKTYPE_IPCXN)
		return CURL_SOCKOPT_OK;
	for (i = 0; i < w->nsocks && w->socks[i].fd != fd; i++)
		;
	if (i == w->nsocks) {
		void *arr = w->socks;

		/* out of memory: neither quick ACKs nor counted */
		if (ckpt_grow(&arr, &w->capsocks, w->nsocks + 1,
			      sizeof(*w->socks)))
			return CURL_SOCKOPT_OK;	/* no quick ACKs on it */
		w->socks = arr;
		w->nsocks++;
		atomic_fetch_add(&w->h->nconns, 1);
	}
	w->socks[i] = (struct s3_sock){ fd, 0 };
	return CURL_SOCKOPT_OK;
}

static int on_close(void *ud, curl_socket_t fd)
{
	struct s3_worker *w = ud;
	size_t i;

	for (i = 0; i < w->nsocks; i++)
		if (w->socks[i].fd == fd) {
			w->socks[i] = w->socks[--w->nsocks];
			atomic_fetch_sub(&w->h->nconns, 1);
			break;
		}
	return close(fd);
}

/* Just before a request is sent: find the socket of its connection by
 * the connection's local port. */
static int on_prereq(void *ud, char *ip, char *lip, int port, int lport)
{
	struct s3_easy *e = ud;
	struct s3_worker *w = e->w;
	size_t i;

	(void)ip;
	(void)lip;
	(void)port;
	e->fd = CURL_SOCKET_BAD;
	for (i = 0; i < w->nsocks; i++) {
		struct s3_sock *k = &w->socks[i];

		if (!k->port) {
			struct sockaddr_storage a;
			socklen_t al = sizeof(a);

			if (getsockname(k->fd, (struct sockaddr *)&a, &al))
				continue;
			if (a.ss_family == AF_INET)
				k->port = ntohs(((struct sockaddr_in *)&a)
						->sin_port);
			else if (a.ss_family == AF_INET6)
				k->port = ntohs(((struct sockaddr_in6 *)&a)
						->sin6_port);
		}
		if (k->port && k->port == (unsigned)lport) {
			e->fd = k->fd;
			break;
		}
	}
	return CURL_PREREQFUNC_OK;
}

/* The reason of a request stopped at its deadline: its own, or the
 * whole open's. */
static void deadline_reason(struct ckpt_s3_req *q)
{
	if (q->open_bound)
		snprintf(q->reason, sizeof(q->reason), "no complete answer "
			 "within the open's deadline of %u ms "
			 "(s3_open_deadline_ms bounds the whole open; try %u)",
			 q->open_ms, q->tries);
	else
		snprintf(q->reason, sizeof(q->reason), "no complete answer "
			 "within the deadline of %u ms (try %u)",
			 q->deadline_ms, q->tries);
}

/* Settings that stay the same for every request of an easy handle. */
/*
 * libcurl calls this about once a second, and as data moves: end a try
 * that has had no byte of an answer for the first-byte bound, one past
 * its request's deadline, and every one once the engine is cancelled.
 */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow,
		       curl_off_t ultotal, curl_off_t ulnow)
{
	struct ckpt_s3_req *q = ud;
	struct s3_easy *e = q->easy;
	uint64_t now = now_ns();

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	if (atomic_load(&e->h->cancelled)) {
		snprintf(q->reason, sizeof(q->reason), "cancelled");
		q->bad_body = true;
		q->bad_final = true;
		q->bad_rc = -EINTR;
		return 1;
	}
	if (q->deadline_ns && now >= q->deadline_ns) {
		deadline_reason(q);
		q->bad_body = true;
		q->bad_final = true;
		q->bad_rc = -EIO;
		return 1;
	}
	if (!q->answered &&
	    now - q->started_ns >= (uint64_t)e->h->cfg->timeout_ms * 1000000u) {
		snprintf(q->reason, sizeof(q->reason), "no answer within %u ms "
			 "of the request (the first-byte bound)",
			 e->h->cfg->timeout_ms);
		q->bad_body = true;
		return 1;
	}
	return 0;
}

static int easy_setup(struct ckpt_s3_http *h, struct s3_worker *w,
		      struct s3_easy *e)
{
	const struct ckpt_s3_cfg *c = h->cfg;
	CURL *k;
	CURLcode rc = CURLE_OK;
	const char *ua_pid = getenv("CKPTFS_TEST_UA_PID");
	char ua[64];

	/* A test's setting (tests/s3_counts_check.py): the process in the
	 * User-Agent too, so that a test proxy's log tells the requests of
	 * processes sharing it apart.  Servers see the version alone. */
	if (ua_pid && !strcmp(ua_pid, "1"))
		snprintf(ua, sizeof(ua), "ckptfs/%s (pid %ld)",
			 CKPT_LIB_VERSION, (long)getpid());
	else
		snprintf(ua, sizeof(ua), "ckptfs/%s", CKPT_LIB_VERSION);
	e->h = h;
	e->w = w;
	e->fd = CURL_SOCKET_BAD;
	e->curl = k = curl_easy_init();
	if (!k)
		return -ENOMEM;
#define SET(opt, val) \
	do { if (rc == CURLE_OK) rc = curl_easy_setopt(k, opt, val); } while (0)
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_ERRORBUFFER, e->errbuf);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_FOLLOWLOCATION, 0L);
	SET(CURLOPT_BUFFERSIZE, (long)RECV_BUFFER);
	SET(CURLOPT_TCP_KEEPALIVE, 1L);
	/* No bound on a try's total time: one that makes progress never
	 * fails for its length.  Connecting, the first byte (on_progress)
	 * and stalls (below LOW_SPEED_LIMIT bytes/s for LOW_SPEED_TIME s)
	 * are bounded apart, and each request's deadline on top. */
	SET(CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
	SET(CURLOPT_LOW_SPEED_LIMIT, (long)c->low_speed_limit);
	SET(CURLOPT_LOW_SPEED_TIME, (long)c->low_speed_time);
	SET(CURLOPT_NOPROGRESS, 0L);
	SET(CURLOPT_XFERINFOFUNCTION, on_progress);
	SET(CURLOPT_USERAGENT, ua);	/* copied */
	/* Verification stays on (libcurl's default): against the CA bundle
	 * the settings name, else the system's store. */
	if (c->ca_bundle)
		SET(CURLOPT_CAINFO, c->ca_bundle);
	SET(CURLOPT_SOCKOPTFUNCTION, on_sockopt);
	SET(CURLOPT_SOCKOPTDATA, w);
	SET(CURLOPT_CLOSESOCKETFUNCTION, on_close);
	SET(CURLOPT_CLOSESOCKETDATA, w);
	SET(CURLOPT_PREREQFUNCTION, on_prereq);
	SET(CURLOPT_PREREQDATA, e);
	SET(CURLOPT_SHARE, h->share);
	if (h->connect_to)
		SET(CURLOPT_CONNECT_TO, h->connect_to);
#undef SET
	if (rc != CURLE_OK) {
		curl_easy_cleanup(k);
		e->curl = NULL;
		return rc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
	}
	return 0;
}

static void worker_free(struct s3_worker *w)
{
	unsigned i;

	if (!w)
		return;
	for (i = 0; i < w->nmade; i++)
		curl_easy_cleanup(w->easy[i].curl);
	if (w->multi)
		curl_multi_cleanup(w->multi);
	free(w->easy);
	free(w->idle);
	free(w->socks);
	free(w);
}

/* Under h->lock: w is in use (ckpt_s3_http_cancel wakes it). */
static void busy_add(struct ckpt_s3_http *h, struct s3_worker *w)
{
	w->bprev = NULL;
	w->bnext = h->busy;
	if (h->busy)
		h->busy->bprev = w;
	h->busy = w;
}

/* In a forked child (under h->lock, or its only thread): the workers in
 * use and pooled are the parent's, with its connections; leave them to
 * it, unfreed, and start with none. */
static void forget_workers(struct ckpt_s3_http *h)
{
	h->busy = NULL;
	h->pool = NULL;
	h->npool = 0;
	h->pool_socks = 0;
	h->slots = h->cfg->parallel;
	h->pid = getpid();
	atomic_store(&h->nconns, 0);
}

static struct s3_worker *worker_get(struct ckpt_s3_http *h)
{
	struct s3_worker *w;

	pthread_mutex_lock(&h->lock);
	if (h->pid != getpid()) {
		/* A forked child (fork_child() does this at the fork; a
		 * clone() without fork handlers comes here): the pooled
		 * connections are the parent's too.  Leave them to it
		 * (closing one could end a TLS session the parent still
		 * uses) and start afresh. */
		forget_workers(h);
	}
	w = h->pool;
	if (w) {
		h->pool = w->next;
		h->npool--;
		h->pool_socks -= w->pool_socks;
		busy_add(h, w);
	}
	pthread_mutex_unlock(&h->lock);
	if (w)
		return w;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->h = h;
	w->cap = h->cfg->parallel;
	w->maxconn = (long)w->cap;
	w->easy = calloc(w->cap, sizeof(*w->easy));
	w->idle = calloc(w->cap, sizeof(*w->idle));
	w->multi = curl_multi_init();
	if (!w->easy || !w->idle || !w->multi ||
	    curl_multi_setopt(w->multi, CURLMOPT_MAXCONNECTS,
			      w->maxconn) != CURLM_OK ||
	    curl_multi_setopt(w->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
			      (long)w->cap) != CURLM_OK) {
		worker_free(w);
		return NULL;
	}
	pthread_mutex_lock(&h->lock);
	busy_add(h, w);
	pthread_mutex_unlock(&h->lock);
	return w;
}

/*
 * Keep up to `parallel` idle workers while the store's connections, busy
 * workers' included, number at most IDLE_CONNS_PER_SLOT x `parallel`; a
 * worker returned past that is freed with its connections.  Each worker
 * caches up to `parallel` connections, so without the bound many threads
 * would keep parallel^2 (65536 at 256).  Busy workers shed idle
 * connections too (trim()).  DNS and TLS sessions are shared by all
 * workers (h->share), connections are not: libcurl's shared connection
 * cache (CURL_LOCK_DATA_CONNECT) is not supported across concurrent
 * threads, which the workers are (libcurl 7.88's CURLSHOPT_SHARE(3)).
 */
static void worker_put(struct ckpt_s3_http *h, struct s3_worker *w)
{
	pthread_mutex_lock(&h->lock);
	if (w->bprev)
		w->bprev->bnext = w->bnext;
	else if (h->busy == w)
		h->busy = w->bnext;
	if (w->bnext)
		w->bnext->bprev = w->bprev;
	w->bprev = w->bnext = NULL;
	if (h->npool < h->cfg->parallel &&
	    atomic_load(&h->nconns) <=
	    (long)IDLE_CONNS_PER_SLOT * h->cfg->parallel) {
		w->pool_socks = w->nsocks;
		h->pool_socks += w->nsocks;
		w->next = h->pool;
		h->pool = w;
		h->npool++;
		w = NULL;
	}
	pthread_mutex_unlock(&h->lock);
	worker_free(w);
}

/*
 * While the store's connections are over CONNS_PER_SLOT x `parallel`, w
 * keeps no more connections than requests in flight: libcurl closes an
 * idle one each time a transfer ends over the cache's size.  Else w's
 * cache holds up to `parallel`.
 */
static void trim(struct ckpt_s3_http *h, struct s3_worker *w, unsigned held)
{
	long want = (long)w->cap;

	if (atomic_load(&h->nconns) > (long)CONNS_PER_SLOT * h->cfg->parallel)
		want = held ? (long)held : 1;
	if (want != w->maxconn &&
	    curl_multi_setopt(w->multi, CURLMOPT_MAXCONNECTS, want) ==
	    CURLM_OK)
		w->maxconn = want;
}

/* An easy handle of w not in use, made when needed; NULL: out of
 * memory or all in use. */
static struct s3_easy *easy_take(struct ckpt_s3_http *h, struct s3_worker *w)
{
	if (w->nidle > 0)
		return &w->easy[w->idle[--w->nidle]];
	if (w->nmade == w->cap || easy_setup(h, w, &w->easy[w->nmade]))
		return NULL;
	return &w->easy[w->nmade++];
}

static void easy_give(struct s3_worker *w, struct s3_easy *e)
{
	w->idle[w->nidle++] = (unsigned)(e - w->easy);
}

/* Take one of the store-wide request slots: wait for one when block
 * (polling the call's cancel flag cf, when it has one). */
static bool slot_take(struct ckpt_s3_http *h, bool block,
		      const volatile int *cf)
{
	struct timespec ts;
	bool ok;

	pthread_mutex_lock(&h->lock);
	while (block && h->slots == 0 && !atomic_load(&h->cancelled) &&
	       !ckpt_is_flag_set(cf)) {
		if (!cf) {
			pthread_cond_wait(&h->slot_freed, &h->lock);
			continue;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += CKPT_CANCEL_POLL_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&h->slot_freed, &h->lock, &ts);
	}
	ok = h->slots > 0 && !atomic_load(&h->cancelled) &&
	     !ckpt_is_flag_set(cf);
	if (ok)
		h->slots--;
	pthread_mutex_unlock(&h->lock);
	return ok;
}

static void slot_give(struct ckpt_s3_http *h)
{
	pthread_mutex_lock(&h->lock);
	h->slots++;
	pthread_cond_signal(&h->slot_freed);
	pthread_mutex_unlock(&h->lock);
}

/* What a signer's add() appends to. */
struct hdr_add {
	struct curl_slist **hd;
	bool ok;
};

static int hdr_add(void *actx, const char *line)
{
	struct hdr_add *ha = actx;
	struct curl_slist *t;

	if (!ha->ok)
		return -ENOMEM;
	t = curl_slist_append(*ha->hd, line);
	if (!t) {
		ha->ok = false;
		return -ENOMEM;
	}
	*ha->hd = t;
	return 0;
}

static int req_start(struct ckpt_s3_http *h, struct s3_worker *w,
		     struct ckpt_s3_req *q, struct s3_easy *e)
{
	struct curl_slist *hd = NULL, *t;
	char range[48] = "", im[CKPT_STORE_VERSION_MAX + 16];
	CURL *k = e->curl;
	CURLcode rc = CURLE_OK;
	struct ckpt_s3_credset *cs;
	int crc;

	if (q->tries == 0) {
		q->deadline_ns = now_ns() +
				 (uint64_t)q->deadline_ms * 1000000u;
		if (q->open_end_ns && q->open_end_ns < q->deadline_ns) {
			q->deadline_ns = q->open_end_ns;
			q->open_bound = true;
		}
	}
	/* This request's reference to the current credentials (a refresh
	 * may swap them meanwhile); libcurl copies what it keeps.  An
	 * expired set's refresh is waited for within the request's
	 * deadline, and only while neither its call nor the store is
	 * cancelled. */
	crc = ckpt_s3_creds_get(h->cfg->creds, ckpt_cancel_flag(),
				&h->cancelled, q->deadline_ns, &cs);
	if (crc == -ETIMEDOUT) {
		snprintf(q->reason, sizeof(q->reason), "the credentials "
			 "expired and their refresh did not end within the "
			 "request's deadline of %u ms", q->open_bound ?
			 q->open_ms : q->deadline_ms);
		q->curl_code = CURLE_OPERATION_TIMEDOUT;
		return -EIO;
	}
	if (crc) {
		snprintf(q->reason, sizeof(q->reason), "cancelled");
		return crc;
	}

	q->got = 0;
	q->buflen = 0;
	q->status = 0;
	q->has_cr = false;
	q->has_length = false;
	q->bad_body = false;
	q->replaced = false;
	q->tls_failed = false;
	q->etag[0] = '\0';
	q->etag_bad = false;
	q->code[0] = '\0';
	e->errbuf[0] = '\0';
	if (q->if_match && !ckpt_s3_etag_is_clean(q->if_match)) {
		/* Never sent: it would add headers of the server's choice. */
		snprintf(q->reason, sizeof(q->reason), "the pinned ETag holds "
			 "a control character: refused");
		ckpt_s3_credset_put(cs);
		return -EINVAL;
	}
	if (q->ranged)
		snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64,
			 q->off + q->done, q->off + q->len - 1);
	/* hd grows one node at a time, so a failed append frees them all */
	if (h->cfg->signer) {
		char xr[sizeof(range) + 8];
		struct hdr_add ha = { &hd, true };

		snprintf(xr, sizeof(xr), "bytes=%s", range);
		crc = h->cfg->signer->sign(h->cfg->signer->ctx,
					   q->head ? "HEAD" : "GET", q->url,
					   q->ranged ? xr : NULL, q->if_match,
					   hdr_add, &ha);
		t = crc == 0 && ha.ok ? hd : NULL;
		if (crc == 0 && !ha.ok)
			crc = -ENOMEM;
		if (crc) {
			snprintf(q->reason, sizeof(q->reason), "signing the "
				 "request: %s", strerror(-crc));
			curl_slist_free_all(hd);
			ckpt_s3_credset_put(cs);
			return crc;
		}
	} else {
		t = curl_slist_append(hd,
				      "x-amz-content-sha256: UNSIGNED-PAYLOAD");
		if (t)
			hd = t;
	}
	if (t && cs && cs->token_hdr) {
		t = curl_slist_append(hd, cs->token_hdr);
		if (t)
			hd = t;
	}
	if (t && q->if_match) {
		snprintf(im, sizeof(im), "If-Match: %s", q->if_match);
		t = curl_slist_append(hd, im);
		if (t)
			hd = t;
	}
	if (!t) {
		curl_slist_free_all(hd);
		ckpt_s3_credset_put(cs);
		return -ENOMEM;
	}
#define SET(opt, val) \
	do { if (rc == CURLE_OK) rc = curl_easy_setopt(k, opt, val); } while (0)
	if (cs && !h->cfg->signer) {
		SET(CURLOPT_AWS_SIGV4, h->sigv4);
		SET(CURLOPT_USERNAME, cs->access_key);
		SET(CURLOPT_PASSWORD, cs->secret_key);
	}
	ckpt_s3_credset_put(cs);
	SET(CURLOPT_URL, q->url);
	/* Only a path with a "." or ".." segment needs it: libcurl 8
	 * refuses it together with SigV4 (the request then fails, naming
	 * the reason), and libcurl would otherwise remove those segments. */
	SET(CURLOPT_PATH_AS_IS, ckpt_s3_url_has_dot_segment(q->url) ? 1L : 0L);
	if (q->head) {
		SET(CURLOPT_NOBODY, 1L);
	} else {
		SET(CURLOPT_HTTPGET, 1L);
	}
	SET(CURLOPT_FILETIME, q->head ? 1L : 0L);
	if (q->ranged && !h->cfg->signer) {
		SET(CURLOPT_RANGE, range);
	} else {
		SET(CURLOPT_RANGE, (char *)NULL);
	}
	SET(CURLOPT_HTTPHEADER, hd);
	SET(CURLOPT_WRITEDATA, q);
	SET(CURLOPT_HEADERDATA, q);
	SET(CURLOPT_XFERINFODATA, q);
	SET(CURLOPT_PRIVATE, q);
#undef SET
	if (rc != CURLE_OK) {
		curl_slist_free_all(hd);
		return rc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
	}
	if (curl_multi_add_handle(w->multi, k) != CURLM_OK) {
		curl_easy_setopt(k, CURLOPT_HTTPHEADER, (void *)NULL);
		curl_slist_free_all(hd);
		return -ENOMEM;
	}
	q->headers = hd;
	q->easy = e;
	q->answered = false;
	q->started_ns = now_ns();
	q->tries++;
	q->state = ST_ACTIVE;
	atomic_fetch_add(&h->ctr->requests, 1);
	atomic_fetch_add(q->head ? &h->ctr->heads :
			 q->list ? &h->ctr->lists : &h->ctr->gets, 1);
	return 0;
}

/* libcurl errors that a later try may not meet. */
static bool is_transient_curl(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_AGAIN:
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_HTTP3:
	case CURLE_QUIC_CONNECT_ERROR:
		return true;
	default:
		return false;
	}
}

/* libcurl errors of the TLS layer: certificates, handshakes. */
static bool is_tls_curl(CURLcode rc)
{
	switch (rc) {
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_CLIENTCERT:
		return true;
	default:
		return false;
	}
}

/* "HOST:PORT" of url (the port its scheme's default when it names
 * none), or "?" when it does not parse. */
static void url_host_port(const char *url, char *out, size_t len)
{
	CURLU *u = curl_url();
	char *host = NULL, *port = NULL;

	snprintf(out, len, "?");
	if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) ==
	    CURLUE_OK)
		snprintf(out, len, "%s:%s", host, port);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
}

/* Take q's finished try off the multi handle and judge it. */
static int req_finish(struct s3_worker *w, struct ckpt_s3_req *q,
		      CURLcode rc)
{
	struct s3_easy *e = q->easy;
	long st = 0, nconn = 0;

	curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &st);
	if (curl_easy_getinfo(e->curl, CURLINFO_NUM_CONNECTS, &nconn) ==
	    CURLE_OK && nconn > 0)
		atomic_fetch_add(&e->h->ctr->connects, (uint64_t)nconn);
	curl_multi_remove_handle(w->multi, e->curl);
	curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, (void *)NULL);
	curl_slist_free_all(q->headers);
	q->headers = NULL;
	q->easy = NULL;
	easy_give(w, e);
	q->status = st;
	q->curl_code = (int)rc;
	if (rc == CURLE_OK && st >= 200 && st <= 299) {
		curl_off_t ft = -1;

		if (q->etag_bad) {
			snprintf(q->reason, sizeof(q->reason), "the answer's "
				 "ETag holds a control character or is too "
				 "long: refused");
			q->bad_final = true;
			q->bad_rc = -EIO;
			return TRY_FAIL;
		}
		if (q->head &&
		    curl_easy_getinfo(e->curl, CURLINFO_FILETIME_T, &ft) ==
		    CURLE_OK && ft > 0)
			q->mtime = (int64_t)ft;
		if (q->ranged && q->done + q->got != q->len) {
			snprintf(q->reason, sizeof(q->reason),
				 "short body: %" PRIu64 " of %" PRIu64
				 " bytes", q->got, q->len - q->done);
			return TRY_AGAIN;
		}
		return TRY_OK;
	}
	if (rc == CURLE_OK) {
		char bcode[sizeof(q->code)];

		ckpt_s3_xml_error_code(q->buf, q->buflen, bcode,
				       sizeof(bcode));
		if (bcode[0])
			memcpy(q->code, bcode, sizeof(bcode));
		snprintf(q->reason, sizeof(q->reason), "HTTP %ld%s%s", st,
			 q->code[0] ? " " : "", q->code);
		if (st >= 500 || st == 429 || st == 408 ||
		    (st == 400 && strcmp(q->code, "RequestTimeout") == 0))
			return TRY_AGAIN;
		return TRY_FAIL;
	}
	if (q->bad_body)	/* reason set where it was stopped */
		return q->bad_final ? TRY_FAIL : TRY_AGAIN;
	if (is_tls_curl(rc)) {
		char hp[128];

		/* Never retried (but for a broken handshake), never tried
		 * again over http: a certificate not trusted stays so. */
		url_host_port(q->url, hp, sizeof(hp));
		snprintf(q->reason, sizeof(q->reason), "TLS to %.70s: %.240s",
			 hp, e->errbuf[0] ? e->errbuf :
			 curl_easy_strerror(rc));
		q->tls_failed = true;
		return rc == CURLE_SSL_CONNECT_ERROR ? TRY_AGAIN : TRY_FAIL;
	}
	snprintf(q->reason, sizeof(q->reason), "%.240s (curl error %d)",
		 e->errbuf[0] ? e->errbuf : curl_easy_strerror(rc), (int)rc);
	if (rc == CURLE_OUT_OF_MEMORY) {
		q->bad_final = true;
		q->bad_rc = -ENOMEM;
	}
	return is_transient_curl(rc) ? TRY_AGAIN : TRY_FAIL;
}

/* The request to start next: a retry whose time has come, else the next
 * one not yet started; -1 when none. */
static long pick_next(const struct ckpt_s3_req *q, size_t n, size_t *waiting,
		      size_t *nwait, size_t *fresh, uint64_t now)
{
	size_t i;

	for (i = 0; i < *nwait; i++) {
		if (q[waiting[i]].not_before <= now) {
			long pick = (long)waiting[i];

			waiting[i] = waiting[--*nwait];
			return pick;
		}
	}
	if (*fresh < n)
		return (long)(*fresh)++;
	return -1;
}

/* How long to wait in curl_multi_poll: curl's own timers while requests
 * run, and the earliest retry. */
static int poll_ms(CURLM *multi, unsigned held, const struct ckpt_s3_req *q,
		   const size_t *waiting, size_t nwait)
{
	uint64_t wake = UINT64_MAX, t;
	long ms = POLL_MAX_MS;
	size_t j;

	if (held > 0) {
		curl_multi_timeout(multi, &ms);
		if (ms < 0 || ms > POLL_MAX_MS)
			ms = POLL_MAX_MS;
	}
	for (j = 0; j < nwait; j++)
		if (q[waiting[j]].not_before < wake)
			wake = q[waiting[j]].not_before;
	if (wake != UINT64_MAX) {
		t = now_ns();
		if (wake <= t)
			return 0;
		if ((wake - t) / 1000000u + 1 < (uint64_t)ms)
			ms = (long)((wake - t) / 1000000u + 1);
	}
	return (int)ms;
}

/* The first active request of q[0, n) past its deadline (n: none), and
 * in *ms the time until the nearest deadline of the others (at most
 * POLL_MAX_MS). */
static size_t past_deadline(const struct ckpt_s3_req *q, size_t n, int *ms)
{
	uint64_t now = now_ns(), left = (uint64_t)POLL_MAX_MS;
	size_t i;

	*ms = POLL_MAX_MS;

	for (i = 0; i < n; i++) {
		if (q[i].state != ST_ACTIVE || !q[i].deadline_ns)
			continue;
		if (now >= q[i].deadline_ns)
			return i;
		if ((q[i].deadline_ns - now) / 1000000u + 1 < left)
			left = (q[i].deadline_ns - now) / 1000000u + 1;
	}
	*ms = (int)left;
	return n;
}

/* A try of r is over: count it done, schedule it again, or fail it
 * (returns non-zero: the run's result). */
static int judge(struct ckpt_s3_http *h, struct ckpt_s3_req *r, int verdict,
		 size_t *waiting, size_t *nwait, size_t idx, size_t *left)
{
	uint64_t wait;
	size_t l;

	if (verdict == TRY_OK) {
		r->state = ST_DONE;
		(*left)--;
		return 0;
	}
	wait = backoff_ns(r->tries);
	if (verdict == TRY_AGAIN && r->tries < r->max_tries &&
	    now_ns() + wait >= r->deadline_ns) {
		l = strlen(r->reason);
		if (l < sizeof(r->reason))
			snprintf(r->reason + l, sizeof(r->reason) - l,
				 "; the %sdeadline of %u ms ends the retries "
				 "after %u tries",
				 r->open_bound ? "open's " : "",
				 r->open_bound ? r->open_ms : r->deadline_ms,
				 r->tries);
		return -EIO;
	}
	if (verdict == TRY_AGAIN && r->tries < r->max_tries) {
		/* A body cut short resumes where it broke; one that broke a
		 * check (too long, wrong range) is not trusted at all. */
		if (r->ranged && r->sink && !r->bad_body)
			r->done += r->got;
		else
			r->done = 0;
		if (r->done >= r->len)
			r->done = 0;
		r->state = ST_WAIT;
		r->not_before = now_ns() + wait;
		waiting[(*nwait)++] = idx;
		atomic_fetch_add(&h->ctr->retries, 1);
		return 0;
	}
	l = strlen(r->reason);
	if (verdict == TRY_AGAIN && l < sizeof(r->reason))
		snprintf(r->reason + l, sizeof(r->reason) - l,
			 "; gave up after %u tries", r->tries);
	return r->bad_final && r->bad_rc ? r->bad_rc : -EIO;
}

int ckpt_s3_http_run(struct ckpt_s3_http *h, struct ckpt_s3_req *q, size_t n,
		     size_t *failed)
{
	const volatile int *cf = ckpt_cancel_flag();	/* this call's */
	struct s3_worker *w;
	size_t *waiting, nwait = 0, fresh = 0, left = n, i;
	unsigned held = 0;
	uint32_t open_ms = 0;
	uint64_t open_end;
	int rc = 0;

	*failed = 0;
	if (n == 0)
		return 0;
	open_end = ckpt_open_bound_ns(h->cfg->open_deadline_ms, &open_ms);
	if (open_end && now_ns() >= open_end) {
		q[0].curl_code = 28;	/* CURLE_OPERATION_TIMEDOUT */
		snprintf(q[0].reason, sizeof(q[0].reason), "no complete "
			 "answer within the open's deadline of %u ms "
			 "(s3_open_deadline_ms bounds the whole open; it "
			 "ended before this request)", open_ms);
		return -EIO;
	}
	if (atomic_load(&h->cancelled) || ckpt_is_flag_set(cf)) {
		snprintf(q[0].reason, sizeof(q[0].reason), "cancelled");
		return ckpt_is_flag_set(cf) ? -ECANCELED : -EINTR;
	}
	for (i = 0; i < n; i++) {
		q[i].state = ST_WAIT;
		q[i].tries = 0;
		q[i].done = 0;
		q[i].not_before = 0;
		q[i].bad_final = false;
		q[i].bad_rc = 0;
		q[i].reason[0] = '\0';
		if (!q[i].max_tries)
			q[i].max_tries = 1 + h->cfg->retries;
		if (!q[i].deadline_ms)
			q[i].deadline_ms = q[i].ranged ?
					   h->cfg->read_deadline_ms :
					   h->cfg->open_deadline_ms;
		q[i].deadline_ns = 0;	/* set at its first try */
		q[i].open_end_ns = open_end;
		q[i].open_ms = open_ms;
		q[i].open_bound = false;
	}
	waiting = malloc(n * sizeof(*waiting));
	w = worker_get(h);
	if (!waiting || !w) {
		free(waiting);
		if (w)
			worker_put(h, w);
		snprintf(q[0].reason, sizeof(q[0].reason), "out of memory");
		return -ENOMEM;
	}
	while (left > 0 && rc == 0) {
		uint64_t now = now_ns();
		CURLMsg *m;
		int running, nq, ms;
		bool done_some;

		/* The store's cancel (shutdown) or this call's: what is
		 * in flight is removed below, its connection closed. */
		if (atomic_load(&h->cancelled) || ckpt_is_flag_set(cf)) {
			for (i = 0; i < n && q[i].state == ST_DONE; i++)
				;
			*failed = i < n ? i : 0;
			snprintf(q[*failed].reason, sizeof(q[0].reason),
				 "cancelled");
			rc = ckpt_is_flag_set(cf) ? -ECANCELED : -EINTR;
			break;
		}

		/* Start what may start. */
		while (held < w->cap) {
			long k = pick_next(q, n, waiting, &nwait, &fresh, now);
			struct s3_easy *e;

			if (k < 0)
				break;
			if (!slot_take(h, held == 0, cf)) {
				waiting[nwait++] = (size_t)k;	/* later */
				break;
			}
			e = easy_take(h, w);
			rc = e ? req_start(h, w, &q[k], e) : -ENOMEM;
			if (rc) {
				if (e)
					easy_give(w, e);
				slot_give(h);
				if (rc == -ENOMEM || !q[k].reason[0])
					snprintf(q[k].reason,
						 sizeof(q[k].reason), "%s",
						 rc == -ENOMEM ?
						 "out of memory" :
						 "libcurl refused the "
						 "request");
				*failed = (size_t)k;
				break;
			}
			held++;
		}
		if (rc)
			break;

		if (curl_multi_perform(w->multi, &running) != CURLM_OK) {
			for (i = 0; i < n && q[i].state != ST_ACTIVE; i++)
				;
			*failed = i < n ? i : 0;
			snprintf(q[*failed].reason, sizeof(q[0].reason),
				 "libcurl's multi interface failed");
			rc = -EIO;
			break;
		}
		done_some = false;
		while (rc == 0 && (m = curl_multi_info_read(w->multi, &nq))) {
			struct ckpt_s3_req *r = NULL;
			int v;

			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE,
					  (char **)&r);
			v = req_finish(w, r, m->data.result);
			done_some = true;
			held--;
			slot_give(h);
			rc = judge(h, r, v, waiting, &nwait, (size_t)(r - q),
				   &left);
			if (rc)
				*failed = (size_t)(r - q);
		}
		if (rc || left == 0)
			break;
		if (done_some)
			trim(h, w, held);
		/* A try past its deadline ends here, on time: libcurl calls
		 * on_progress() only about once a second while no byte
		 * comes. */
		i = past_deadline(q, n, &ms);
		if (i < n) {
			deadline_reason(&q[i]);
			q[i].curl_code = CURLE_OPERATION_TIMEDOUT;
			*failed = i;
			rc = -EIO;
			break;
		}
		/* Slots were freed: start more before waiting. */
		if (!done_some) {
			int pm = poll_ms(w->multi, held, q, waiting, nwait);

			ms = pm < ms ? pm : ms;
		} else {
			ms = 0;
		}
		if (cf && ms > CKPT_CANCEL_POLL_MS)
			ms = CKPT_CANCEL_POLL_MS;	/* cf is only polled */
		if (ms > 0)
			curl_multi_poll(w->multi, NULL, 0, ms, NULL);
	}

	/* Stop what still runs (after a failure). */
	for (i = 0; i < n; i++) {
		struct s3_easy *e = q[i].easy;

		if (q[i].state != ST_ACTIVE || !e)
			continue;
		curl_multi_remove_handle(w->multi, e->curl);
		curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, (void *)NULL);
		curl_slist_free_all(q[i].headers);
		q[i].headers = NULL;
		q[i].easy = NULL;
		q[i].state = ST_WAIT;
		easy_give(w, e);
		slot_give(h);
	}
	worker_put(h, w);
	free(waiting);
	return rc;
}

void ckpt_s3_http_cancel(struct ckpt_s3_http *h)
{
	struct s3_worker *w;

	atomic_store(&h->cancelled, true);
	pthread_mutex_lock(&h->lock);
	pthread_cond_broadcast(&h->slot_freed);
	for (w = h->busy; w; w = w->bnext)
		curl_multi_wakeup(w->multi);
	pthread_mutex_unlock(&h->lock);
}

void ckpt_s3_req_destroy(struct ckpt_s3_req *q)
{
	free(q->buf);
	q->buf = NULL;
	q->buflen = 0;
	q->bufcap = 0;
}

static void share_lock(CURL *k, curl_lock_data d, curl_lock_access a,
		       void *ud)
{
	struct ckpt_s3_http *h = ud;

	(void)k;
	(void)a;
	if (d >= 0 && d < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&h->locks[d]);
}

static void share_unlock(CURL *k, curl_lock_data d, void *ud)
{
	struct ckpt_s3_http *h = ud;

	(void)k;
	if (d >= 0 && d < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&h->locks[d]);
}

/* h->share: DNS and TLS sessions, its locks h->locks. */
static int share_new(struct ckpt_s3_http *h)
{
	CURLSHcode rc = CURLSHE_OK;
	CURLSH *sh = curl_share_init();

	if (!sh)
		return -ENOMEM;
#define SET(opt, val) \
	do { if (rc == CURLSHE_OK) rc = curl_share_setopt(sh, opt, val); } \
	while (0)
	SET(CURLSHOPT_LOCKFUNC, share_lock);
	SET(CURLSHOPT_UNLOCKFUNC, share_unlock);
	SET(CURLSHOPT_USERDATA, h);
	SET(CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	SET(CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
#undef SET
	if (rc != CURLSHE_OK) {
		curl_share_cleanup(sh);
		return rc == CURLSHE_NOMEM ? -ENOMEM : -EINVAL;
	}
	h->share = sh;
	return 0;
}

/*
 * CKPT_S3_CONNECT_TO="HOST:PORT:TO_HOST:TO_PORT[,...]": connect there
 * instead, with the URL (so the Host header and the signature) unchanged
 * (libcurl's CURLOPT_CONNECT_TO).  For tests and proxies: it lets a
 * virtual-hosted name reach a server on 127.0.0.1 with no /etc/hosts
 * entry.  Returns 0 (*out NULL when unset) or -EINVAL / -ENOMEM.
 */
static int connect_to_parse(struct curl_slist **out, char *err, size_t errlen)
{
	const char *v = getenv("CKPT_S3_CONNECT_TO"), *p;
	struct curl_slist *l = NULL, *t;
	char ent[512];

	*out = NULL;
	if (!v || !v[0])
		return 0;
	for (p = v; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return ckpt_errf(err, errlen, -EINVAL,
					 "CKPT_S3_CONNECT_TO holds a space or "
					 "control byte");
	for (p = v; *p;) {
		size_t n = strcspn(p, ",");

		if (n == 0 || n >= sizeof(ent)) {
			curl_slist_free_all(l);
			return ckpt_errf(err, errlen, -EINVAL,
					 "CKPT_S3_CONNECT_TO: an entry is "
					 "empty or too long");
		}
		memcpy(ent, p, n);
		ent[n] = '\0';
		t = curl_slist_append(l, ent);
		if (!t) {
			curl_slist_free_all(l);
			return ckpt_errf(err, errlen, -ENOMEM,
					 "out of memory");
		}
		l = t;
		p += n;
		if (*p == ',')
			p++;
	}
	*out = l;
	return 0;
}

/*
 * Before a fork: no other thread may hold h's locks across it, or the
 * child would find them locked for good (a DataLoader starting its
 * workers while a load runs).  The pool lock, then libcurl's share locks
 * in their order (libcurl takes CURL_LOCK_DATA_SHARE before the others);
 * none of them nests in another lock of ours.
 */
static void fork_prepare(void *arg)
{
	struct ckpt_s3_http *h = arg;
	int i;

	pthread_mutex_lock(&h->lock);
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_lock(&h->locks[i]);
}

static void fork_parent(void *arg)
{
	struct ckpt_s3_http *h = arg;
	int i;

	for (i = CURL_LOCK_DATA_LAST - 1; i >= 0; i--)
		pthread_mutex_unlock(&h->locks[i]);
	pthread_mutex_unlock(&h->lock);
}

/*
 * In the child, the only thread: the locks are new, and the workers (in
 * use by the parent's threads, or pooled with the parent's connections)
 * are left to the parent, never freed here: closing a connection could
 * end a TLS session the parent still uses.  The DNS answers and TLS
 * sessions of the share stay (consistent: their locks were held).
 */
static void fork_child(void *arg)
{
	struct ckpt_s3_http *h = arg;
	int i;

	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->slot_freed, NULL);
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&h->locks[i], NULL);
	forget_workers(h);
}

int ckpt_s3_http_new(const struct ckpt_s3_cfg *cfg, struct ckpt_store *counters,
		     struct ckpt_s3_http **out, char *err, size_t errlen)
{
	struct ckpt_s3_http *h;
	int i, rc;

	*out = NULL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return ckpt_errf(err, errlen, -EIO, "libcurl: %s",
				 curl_easy_strerror(curl_init_rc));
	h = calloc(1, sizeof(*h));
	if (!h)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	rc = connect_to_parse(&h->connect_to, err, errlen);
	if (rc) {
		free(h);
		return rc;
	}
	h->cfg = cfg;
	h->ctr = counters;
	h->slots = cfg->parallel;
	h->pid = getpid();
	snprintf(h->sigv4, sizeof(h->sigv4), "aws:amz:%s:s3", cfg->region);
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->slot_freed, NULL);
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&h->locks[i], NULL);
	rc = share_new(h);
	if (rc) {
		ckpt_s3_http_free(h);
		return ckpt_errf(err, errlen, rc, "libcurl: no share handle");
	}
	h->fork = (struct ckpt_fork_hook){ fork_prepare, fork_parent,
					   fork_child, h, NULL, NULL };
	ckpt_fork_hook_add(&h->fork);
	*out = h;
	return 0;
}

void ckpt_s3_http_free(struct ckpt_s3_http *h)
{
	struct s3_worker *w;
	int i;

	if (!h)
		return;
	ckpt_fork_hook_remove(&h->fork);
	while ((w = h->pool)) {
		h->pool = w->next;
		worker_free(w);
	}
	/* after every handle that used it */
	if (h->share)
		curl_share_cleanup(h->share);
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&h->locks[i]);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->slot_freed);
	curl_slist_free_all(h->connect_to);
	free(h);
}
