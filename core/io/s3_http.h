/* SPDX-License-Identifier: MIT */
/*
 * The HTTP engine of the S3 store, over libcurl: requests signed by
 * libcurl (CURLOPT_AWS_SIGV4), many in flight at once through a curl
 * multi handle, retried with exponential backoff and full jitter.
 *
 * Connections are reused across calls and threads: each call borrows a
 * worker (a multi handle with its easy handles and its cache of open
 * connections) from a pool and gives it back, so no two threads ever use
 * one curl handle at once.  Every handle shares one curl share handle
 * (DNS answers, TLS sessions: a new connection resumes a session), and
 * the connections of all workers are bounded (see worker_put(): about
 * 2 x `parallel` idle).  A store-wide bound keeps at most `parallel`
 * requests in flight over all threads; a call that holds none waits for
 * one, a call that holds some only takes more when they are free, so
 * every call makes progress.
 *
 * Memory is a fixed amount per request in flight (libcurl's receive
 * buffer): bodies go straight to the caller's sink.
 */
#ifndef CKPT_S3_HTTP_H
#define CKPT_S3_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/s3_config.h"
#include "io/store.h"

struct ckpt_s3_http;

#define CKPT_S3_REASON_MAX 320
#define CKPT_S3_ERRBODY_MAX 4096	/* of an error answer, kept */
/* Bytes of a name (s3://bucket/key, a root) in a message, escaped and
 * shortened in the middle (ckpt_escape_mid()), so the reason after it
 * always shows. */
#define CKPT_S3_NAME_SHOWN 200

/* One request.  The caller fills the "in" fields (and zeroes the rest);
 * the engine fills the "out" fields. */
struct ckpt_s3_req {
	/* in */
	const char *url;	/* borrowed; path and query already encoded */
	bool head;		/* HEAD, else GET */
	bool list;		/* a GET of a listing (ListObjectsV2): counted
				 * as a LIST, not a GET */
	bool ranged;		/* GET bytes [off, off + len) */
	uint64_t off;
	uint64_t len;
	const char *if_match;	/* an ETag, or NULL */
	uint64_t obj_size;	/* the object's size when known (else 0):
				 * with if_match, checked against each
				 * answer, for servers that ignore If-Match */
	/*
	 * Where a 2xx body goes: sink(ctx, pos, p, n) with pos the body's
	 * byte offset (from off for a ranged GET); returns 0, or -errno to
	 * stop the transfer (then it is retried).  NULL: the engine keeps
	 * the body in buf, up to max_body bytes (more is an error).  A
	 * ranged GET with a sink resumes a broken body where it stopped.
	 */
	int (*sink)(void *ctx, uint64_t pos, const char *p, size_t n);
	void *ctx;
	size_t max_body;
	unsigned max_tries;	/* 0: 1 + the configured retries */
	uint32_t deadline_ms;	/* its tries, backoffs included, end within
				 * this time of its first try; 0: the
				 * configured read deadline for a ranged
				 * GET, else the open deadline */

	/* out */
	long status;		/* last HTTP status (0: none) */
	int curl_code;		/* last CURLcode */
	char etag[CKPT_STORE_VERSION_MAX];	/* ETag header, "" if none
						 * or refused (etag_bad) */
	bool etag_bad;		/* the answer's ETag held a control byte
				 * (or did not fit): the answer is refused */
	uint64_t length;	/* Content-Length, when has_length */
	int64_t mtime;		/* Last-Modified (HEAD), seconds; 0: none */
	bool has_length;
	char *buf;		/* body kept (sink NULL), or the start of an
				 * error answer; owned: free with
				 * ckpt_s3_req_destroy() */
	size_t buflen;
	size_t bufcap;		/* bytes allocated at buf (grows by doubling) */
	char code[64];		/* <Code> of an S3 error answer, or "" */
	char reason[CKPT_S3_REASON_MAX];	/* why the last try failed */
	unsigned tries;		/* requests sent */
	bool replaced;		/* the answer was of another version (an
				 * ETag or size not the one asked for) */
	bool tls_failed;	/* the last try failed in TLS (a
				 * certificate not trusted, a handshake):
				 * the reason says "TLS to HOST:PORT: ..." */

	/* the engine's own */
	uint64_t got;		/* body bytes kept by the current answer,
				 * counted from the resume point */
	uint64_t done;		/* body bytes of earlier tries kept */
	uint64_t not_before;	/* CLOCK_MONOTONIC ns of the next try */
	uint64_t deadline_ns;	/* CLOCK_MONOTONIC ns: see deadline_ms */
	uint64_t open_end_ns;	/* the open's bound (ckpt_open_bound_ns()),
				 * or 0 */
	uint32_t open_ms;	/* ... and its length */
	bool open_bound;	/* deadline_ns is the open's bound */
	uint64_t started_ns;	/* of the current try */
	bool answered;		/* the current try has an answer's status
				 * line */
	uint64_t cr_first, cr_last, cr_total;	/* Content-Range */
	bool has_cr;
	bool bad_body;		/* the sink or a check stopped it */
	bool bad_final;		/* ... and a retry cannot help */
	int bad_rc;		/* -EIO or -ENOMEM, when bad_final */
	int state;
	void *easy;
	void *headers;
};

/*
 * An engine for cfg (borrowed: must outlive it), counting into the
 * store's counters.  Returns 0 (free with ckpt_s3_http_free()) or -errno
 * with err.
 */
int ckpt_s3_http_new(const struct ckpt_s3_cfg *cfg, struct ckpt_store *counters,
		     struct ckpt_s3_http **out, char *err, size_t errlen);

/* Close every connection and free h.  Accepts NULL.  No call may run. */
void ckpt_s3_http_free(struct ckpt_s3_http *h);

/*
 * Run q[0..n): up to the store-wide bound at once, each retried on 5xx,
 * 429, 408, RequestTimeout, timeouts, refused or reset connections and
 * bodies that are short, too long or do not match the range asked, until
 * it succeeds or its tries run out.  Any other answer (403, 404, 412,
 * 416, ...) fails at once.  Returns 0 when every request got a 2xx
 * answer, or -EIO (-ENOMEM) for the first that failed for good, with
 * *failed its index and its status, code and reason filled (the others
 * are stopped).  Thread-safe.
 */
int ckpt_s3_http_run(struct ckpt_s3_http *h, struct ckpt_s3_req *q, size_t n,
		     size_t *failed);

/*
 * Stop: every run in progress ends at once (its waits and transfers
 * broken off) with -EINTR and the reason "cancelled", and so does every
 * later one.  For shutdown, while other threads may still be reading.
 * Thread-safe.
 */
void ckpt_s3_http_cancel(struct ckpt_s3_http *h);

/*
 * Is the ETag s safe to pin and to send back in If-Match: no byte below
 * 0x20, no DEL, nothing above 0x7e, shorter than CKPT_STORE_VERSION_MAX?
 * An ETag from a HEAD, a GET or a listing that is not is refused, so no
 * server can make a later request carry a header of its choosing.
 */
bool ckpt_s3_etag_is_clean(const char *s);

/* Free what the engine left in q (buf).  Accepts a zeroed q. */
void ckpt_s3_req_destroy(struct ckpt_s3_req *q);

#endif
